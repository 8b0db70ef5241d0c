"""Start and stop Ferry processes on loopback: controllers and a 3-controller quorum.

Used by tests, benchmarks and the local-cluster launcher. Every process runs in its own session
(``start_new_session=True``) so that stopping it kills its whole process group; ports are picked
by binding port 0 on 127.0.0.1.
"""
from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Iterator

from metadata_quorum.config import PeerAddress, quorum_config_json
from tools.credentials import TOKEN_FILE_ENV

LOOPBACK = "127.0.0.1"


def _ephemeral_range() -> tuple[int, int]:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range", encoding="ascii") as f:
            low, high = (int(x) for x in f.read().split())
        return low, high
    except (OSError, ValueError):
        return 32768, 60999


def free_ports(count: int) -> list[int]:
    """``count`` distinct free TCP ports on 127.0.0.1 for servers, outside the kernel's ephemeral range.

    A server restarted on the port it had (a controller or broker after kill -9) must find it free;
    a port from the ephemeral range can meanwhile become the local end of some outgoing connection.
    """
    low, high = _ephemeral_range()
    candidates = [p for p in range(10_000, 65_000) if not low <= p <= high]
    rng = random.Random(os.getpid() ^ time.monotonic_ns())
    chosen: list[int] = []
    socks: list[socket.socket] = []
    try:
        while len(chosen) < count:
            port = rng.choice(candidates) if candidates else 0
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                s.bind((LOOPBACK, port))
            except OSError:
                s.close()
                continue
            socks.append(s)
            chosen.append(s.getsockname()[1])
        return chosen
    finally:
        for s in socks:
            s.close()


def http_get_json(url: str, timeout_s: float = 2.0, token: str | None = None) -> Any:
    """GET a JSON document; error bodies (4xx/5xx) are returned too, as Ferry sends them."""
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return json.loads(e.read() or b"{}")


def stop_process(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM, timeout_s: float = 5.0) -> None:
    """Stop a process started by this module (its whole group); SIGKILL if it does not exit in time."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=timeout_s)


def kill_process(proc: subprocess.Popen[bytes]) -> None:
    """kill -9 the process group (a crash, for failover tests)."""
    stop_process(proc, signal.SIGKILL)


def spawn_tool(cli_args: list[str], log_path: str, ready_url: str, what: str, token_file: str | None = None,
               timeout_s: float = 20.0) -> subprocess.Popen[bytes]:
    """Start ``ferry <cli_args>`` (a tool beside a cluster: the console, the balancer) and return
    once ``ready_url`` answers 200.

    It runs in its own session with its output appended to ``log_path`` (in the cluster's state
    dir), so ``ferry cluster down`` finds and stops it with the cluster; on a secure cluster it gets
    the admin token through ``FERRY_TOKEN_FILE``, never on its command line, where ``ps`` would
    show it. A tool that exits or does not answer within ``timeout_s`` is killed and reported
    (RuntimeError naming ``what`` and its log)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    if token_file:
        env[TOKEN_FILE_ENV] = token_file
    with open(log_path, "ab") as log:
        proc = subprocess.Popen([sys.executable, "-m", "tools.cli", *cli_args], stdout=log, stderr=log,
                                stdin=subprocess.DEVNULL, cwd=root, env=env, start_new_session=True)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(ready_url, timeout=1.0) as r:
                if r.status == 200:
                    return proc
        except (OSError, urllib.error.URLError):
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            if proc.poll() is None:
                proc.kill()
                proc.wait(5)
            raise RuntimeError(f"the {what} did not start (see {log_path})")
        time.sleep(0.1)


@dataclass(frozen=True)
class Placement:
    """Where one node runs: the address it binds and the command prefix that starts it there
    (``ip netns exec NAME`` for a chaos run's network namespaces; nothing on loopback)."""

    host: str = LOOPBACK
    prefix: tuple[str, ...] = ()


def write_quorum_config(directory: str, size: int = 3, hosts: dict[int, str] | None = None,
                        **overrides: Any) -> tuple[str, dict[int, PeerAddress]]:
    """Write a quorum config with fresh ports (on loopback unless ``hosts`` places a node); returns
    its path and the addresses."""
    os.makedirs(directory, exist_ok=True)
    ports = free_ports(2 * size)
    where = hosts or {}
    peers = {i + 1: PeerAddress(raft=f"{where.get(i + 1, LOOPBACK)}:{ports[2 * i]}",
                                http=f"{where.get(i + 1, LOOPBACK)}:{ports[2 * i + 1]}")
             for i in range(size)}
    path = os.path.join(directory, "controllers.json")
    body = quorum_config_json(peers, os.path.join(directory, "data"), **overrides)
    write_private(path, json.dumps(body, indent=2))  # it may hold the quorum's secrets
    return path, peers


def write_private(path: str, text: str) -> None:
    """Write a file only its owner may read (configs holding secrets, token files)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # also when the file existed with wider permissions
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)


def start_controller(config_path: str, node_id: int, log_path: str | None = None,
                     extra_env: dict[str, str] | None = None,
                     prefix: tuple[str, ...] = ()) -> subprocess.Popen[bytes]:
    """Start ``ferry controller --id N --config FILE`` as a real process (stderr to ``log_path``)."""
    env = dict(os.environ)
    env.update(extra_env or {})
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    out = open(log_path, "ab") if log_path else subprocess.DEVNULL
    try:
        return subprocess.Popen(
            [*prefix, sys.executable, "-m", "tools.cli", "controller", "--id", str(node_id), "--config", config_path],
            stdout=out, stderr=out, stdin=subprocess.DEVNULL, cwd=root, env=env, start_new_session=True)
    finally:
        if log_path:
            out.close()  # type: ignore[union-attr]


@dataclass
class Quorum:
    """A running quorum of controller processes on loopback."""

    directory: str
    config_path: str
    peers: dict[int, PeerAddress]
    procs: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict)
    prefixes: dict[int, tuple[str, ...]] = field(default_factory=dict)

    @property
    def bootstrap(self) -> list[str]:
        return [p.http for _nid, p in sorted(self.peers.items())]

    def url(self, node_id: int) -> str:
        return self.peers[node_id].url

    def log_path(self, node_id: int) -> str:
        return os.path.join(self.directory, f"controller-{node_id}.log")

    def start(self, node_id: int) -> None:
        self.procs[node_id] = start_controller(self.config_path, node_id, self.log_path(node_id),
                                               prefix=self.prefixes.get(node_id, ()))

    def start_all(self) -> None:
        for nid in sorted(self.peers):
            self.start(nid)

    def kill(self, node_id: int) -> None:
        proc = self.procs.pop(node_id, None)
        if proc is not None:
            kill_process(proc)

    def stop(self, node_id: int) -> None:
        proc = self.procs.pop(node_id, None)
        if proc is not None:
            stop_process(proc)

    def stop_all(self, timeout_s: float = 5.0) -> None:
        """SIGTERM every controller at once, then wait (SIGKILL whoever is still there after ``timeout_s``)."""
        procs = [self.procs.pop(nid) for nid in list(self.procs)]
        for proc in procs:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + timeout_s
        for proc in procs:
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                kill_process(proc)

    def running(self) -> list[int]:
        return sorted(n for n, p in self.procs.items() if p.poll() is None)

    def health(self, node_id: int, timeout_s: float = 1.0) -> dict[str, Any] | None:
        try:
            body = http_get_json(f"{self.url(node_id)}/v1/health", timeout_s)
        except (OSError, ValueError):
            return None
        return body if isinstance(body, dict) else None

    def wait_leader(self, timeout_s: float = 20.0, exclude: set[int] | None = None) -> int:
        """Wait until a running controller is active (its NoOp committed) and ready; return its id."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for nid in self.running():
                if exclude and nid in exclude:
                    continue
                h = self.health(nid)
                if h and h.get("active") and h.get("ready"):
                    return nid
            self._check_alive()
            time.sleep(0.02)
        raise TimeoutError(f"no active controller within {timeout_s} s; logs in {self.directory}")

    def wait_ready(self, node_id: int, timeout_s: float = 20.0, min_high_watermark: int = 0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            h = self.health(node_id)
            if h and h.get("ready") and int(h.get("high_watermark", -1)) >= min_high_watermark:
                return h
            self._check_alive()
            time.sleep(0.02)
        raise TimeoutError(f"controller {node_id} not ready within {timeout_s} s; log {self.log_path(node_id)}")

    def wait_image(self, node_id: int, offset: int, timeout_s: float = 60.0) -> None:
        """Wait until a controller has replayed its image up to ``offset``: a hot standby.

        A controller restarted seconds ago has the log but may still be replaying it; were it to
        win an election then, its first commit would wait for that replay.
        """
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            h = self.health(node_id)
            if h and int(h.get("image_offset", -1)) >= offset:
                return
            self._check_alive()
            time.sleep(0.02)
        raise TimeoutError(f"controller {node_id} did not replay to offset {offset} within {timeout_s} s")

    def _check_alive(self) -> None:
        for nid, proc in self.procs.items():
            if proc.poll() is not None and proc.returncode not in (0, -signal.SIGKILL, -signal.SIGTERM):
                tail = ""
                try:
                    with open(self.log_path(nid), "rb") as f:
                        tail = f.read()[-2000:].decode(errors="replace")
                except OSError:
                    pass
                raise RuntimeError(f"controller {nid} exited with {proc.returncode}:\n{tail}")

    def __enter__(self) -> "Quorum":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop_all()


def start_quorum(directory: str, size: int = 3, wait: bool = True,
                 placements: dict[int, Placement] | None = None, **overrides: Any) -> Quorum:
    """Write a config, start ``size`` controllers and (by default) wait for an active leader;
    ``placements`` puts controllers elsewhere than loopback (by node id)."""
    where = placements or {}
    config_path, peers = write_quorum_config(directory, size, {n: p.host for n, p in where.items()}, **overrides)
    quorum = Quorum(directory, config_path, peers, prefixes={n: p.prefix for n, p in where.items()})
    try:
        quorum.start_all()
        if wait:
            quorum.wait_leader()
    except BaseException:
        quorum.stop_all()
        raise
    return quorum


def iter_logs(quorum: Quorum) -> Iterator[tuple[int, str]]:
    for nid in sorted(quorum.peers):
        try:
            with open(quorum.log_path(nid), encoding="utf-8", errors="replace") as f:
                yield nid, f.read()
        except OSError:
            continue
