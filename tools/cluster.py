"""A local Ferry cluster on loopback: the embedded S3 (moto server), a controller quorum, brokers.

`ferry cluster up|down|status [--controllers 3 --brokers 3 --s3-endpoint URL --state-dir DIR]`
starts real processes (each in its own session, so they outlive `up` and are stopped as groups by
`down`) and records each one's pid in `cluster.json` in the state dir as soon as it is spawned, so
that `down` stops everything even when `up` itself was killed half-way. `up` holds a lock on the
state dir while it starts, refuses to start a second cluster there, and starts a fresh one (the
previous cluster's metadata and WALs refer to objects the embedded S3 did not keep). `LocalCluster`
is the same thing as a Python API for tests, the demo and the benchmarks, with the fault injections
they need (kill -9, SIGSTOP/SIGCONT, SIGTERM, restart). `down` and `status`, which work from the
state dir alone, live in tools/cluster_procs.py.
"""
from __future__ import annotations

import argparse
import dataclasses
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from typing import Any, cast

from stream_storage.s3_profile import LOCAL, parse_profile
from metadata_quorum.kernel.auth import ControllerSecurity, generate_secrets
from metadata_quorum.kernel.messages import DESCRIBE_CLUSTER, Operation, ReplyT, RequestT
from metadata_quorum.kernel.messages.cluster import DescribeClusterRequest
from stream_storage.s3_server import S3Server
from tools.cluster_procs import STATE_FILE, cmd_down, cmd_status, load_state, running_processes
from tools.cluster_procs import alive as _alive  # noqa: F401 - imported from here by callers
from tools.cluster_procs import is_ferry_process as _is_ferry_process  # noqa: F401 - imported from here by callers
from tools.proc import (Placement, Quorum, free_ports, http_get_json, kill_process, start_quorum, stop_process,
                        write_private)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOCK_FILE = "cluster.lock"

# Failure detection a little quicker than Kafka's defaults (2 s / 9 s) so that local runs and tests
# see a dead broker fenced in seconds; every value can be overridden.
LOCAL_BROKER_DEFAULTS: dict[str, Any] = {"heartbeat_interval_ms": 500, "session_timeout_ms": 4000}
LOCAL_CONTROLLER_DEFAULTS: dict[str, Any] = {"session_timeout_ms": 4000}  # the controllers fence on their own setting
WAL_MODES = ("local", "s3")


def _spawn(args: list[str], log_path: str, prefix: tuple[str, ...] = ()) -> subprocess.Popen[bytes]:
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    with open(log_path, "ab") as log:
        return subprocess.Popen([*prefix, sys.executable, "-m", "tools.cli", *args], stdout=log, stderr=log,
                                stdin=subprocess.DEVNULL, cwd=ROOT, env=env, start_new_session=True)


def http_post_json(url: str, body: Any, timeout_s: float = 5.0, token: str | None = None) -> Any:
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})}
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST", headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return json.loads(e.read() or b"{}")


class LocalCluster:
    """Processes of one local cluster; `start()` returns when every broker is registered and unfenced."""

    def __init__(self, state_dir: str | None = None, controllers: int = 3, brokers: int = 3,
                 s3_endpoint: str | None = None, bucket: str = "ferry", log_dirs_per_broker: int = 1,
                 broker_overrides: dict[str, Any] | None = None,
                 controller_overrides: dict[str, Any] | None = None, s3_profile: str = "local",
                 s3_seed: int = 1, secure: bool = False, wal_mode: str = "local",
                 placements: dict[str, Placement] | None = None) -> None:
        """``placements`` puts nodes elsewhere than loopback, by name (``c1``… controllers, ``b1``…
        brokers): each binds its own address and starts through its prefix (a chaos run's network
        namespaces, tools/chaos/net.py). ``s3_profile`` (``local``, ``aws-standard``, ``fixed:MS``, ``latency:P50,P99[,RATE]``) puts
        the latency proxy in front of the S3 endpoint, embedded or external. ``wal_mode``: every
        broker's ``storage.wal.mode`` (``local``: a WAL file per log dir; ``s3``: WAL objects in the
        bucket, so a broker's disk holds nothing a failover needs)."""
        if wal_mode not in WAL_MODES:
            raise ValueError(f"WAL mode must be one of {', '.join(WAL_MODES)}, got {wal_mode!r}")
        self.wal_mode = wal_mode
        self.placements = dict(placements or {})
        self._own_dir = state_dir is None
        self.s3_profile = s3_profile
        self.s3_seed = s3_seed
        self.s3_upstream: str | None = None
        self.state_dir = os.path.abspath(state_dir or tempfile.mkdtemp(prefix="ferry-cluster-"))
        self.num_controllers = controllers
        self.num_brokers = brokers
        self.s3_endpoint = s3_endpoint
        self.bucket = bucket
        self.log_dirs_per_broker = log_dirs_per_broker
        self.broker_overrides = dict(LOCAL_BROKER_DEFAULTS, **(broker_overrides or {}))
        self.controller_overrides = dict(LOCAL_CONTROLLER_DEFAULTS, **(controller_overrides or {}))
        self.s3: S3Server | None = None
        self.quorum: Quorum | None = None
        self.broker_procs: dict[int, subprocess.Popen[bytes]] = {}
        self.broker_ports: dict[int, int] = {}
        self.kafka_ports: dict[int, int] = {}
        self.stopped_brokers: set[int] = set()
        self.console: subprocess.Popen[bytes] | None = None  # `ferry console`, once start_console ran
        self.console_url: str | None = None
        self.balancer: subprocess.Popen[bytes] | None = None  # `ferry balancer run`, once start_balancer ran
        self.balancer_metrics_url: str | None = None
        self.balancer_dry_run = False
        # --secure: fresh secrets; Raft is encrypted, every API but /v1/health needs a bearer token.
        self.security: ControllerSecurity | None = generate_secrets() if secure else None

    @property
    def admin_token(self) -> str | None:
        """The token operators and clients use (None: an open cluster)."""
        return self.security.admin_token if self.security is not None else None

    @property
    def admin_token_path(self) -> str:
        return os.path.join(self.state_dir, "admin.token")

    # -- addresses
    @property
    def controller_bootstrap(self) -> list[str]:
        assert self.quorum is not None
        return [f"http://{a}" for a in self.quorum.bootstrap]

    @property
    def bootstrap_servers(self) -> list[str]:
        return [self.broker_url(b) for b in sorted(self.broker_ports)]

    @property
    def kafka_bootstrap(self) -> str:
        """Kafka clients' ``bootstrap.servers``: every broker's Kafka listener."""
        return ",".join(f"{self.broker_host(b)}:{self.kafka_ports[b]}" for b in sorted(self.kafka_ports))

    def broker_host(self, broker_id: int) -> str:
        return self.placements.get(f"b{broker_id}", Placement()).host

    def broker_url(self, broker_id: int) -> str:
        return f"http://{self.broker_host(broker_id)}:{self.broker_ports[broker_id]}"

    def broker_config_path(self, broker_id: int) -> str:
        return os.path.join(self.state_dir, f"broker-{broker_id}.json")

    def broker_log_path(self, broker_id: int) -> str:
        return os.path.join(self.state_dir, f"broker-{broker_id}.log")

    def broker_log_dirs(self, broker_id: int) -> list[str]:
        return [os.path.join(self.state_dir, f"broker-{broker_id}", f"d{i}") for i in range(self.log_dirs_per_broker)]

    # -- lifecycle
    def start(self, timeout_s: float = 60.0) -> "LocalCluster":
        """Start every process, then wait: the controllers boot and elect while the S3 server comes
        up, and the brokers start as soon as the S3 endpoint is known (a broker retries its
        registration until a controller leads), so their start-ups overlap instead of adding up."""
        os.makedirs(self.state_dir, exist_ok=True)
        try:
            overrides = dict(self.controller_overrides)
            if self.security is not None:
                overrides["security"] = dataclasses.asdict(self.security)
                write_private(self.admin_token_path, self.security.admin_token + "\n")
            controller_places = {int(k[1:]): p for k, p in self.placements.items() if k.startswith("c")}
            self.quorum = start_quorum(os.path.join(self.state_dir, "controllers"), self.num_controllers,
                                       wait=False, placements=controller_places, **overrides)
            self.write_state("starting")  # every pid is on disk before anything is waited for
            s3_log = os.path.join(self.state_dir, "s3.log")
            if self.s3_endpoint is None:
                self.s3 = S3Server(bucket=self.bucket, log_path=s3_log, s3_profile=self.s3_profile,
                                   seed=self.s3_seed).start()
                self.s3_endpoint = self.s3.endpoint_url
            else:
                self._ensure_bucket()
                if parse_profile(self.s3_profile) is not LOCAL:  # the proxy in front of the external endpoint
                    self.s3_upstream = self.s3_endpoint
                    self.s3 = S3Server(bucket=self.bucket, log_path=s3_log, s3_profile=self.s3_profile,
                                       seed=self.s3_seed, upstream=self.s3_upstream).start()
                    self.s3_endpoint = self.s3.endpoint_url
            ports = free_ports(2 * self.num_brokers)
            for i in range(self.num_brokers):
                bid = i + 1
                self.broker_ports[bid] = ports[2 * i]
                self.kafka_ports[bid] = ports[2 * i + 1]
                self._write_broker_config(bid)
                self.start_broker(bid, wait=False)
            self.write_state("starting")
            self.quorum.wait_leader()
            self.wait_brokers(timeout_s=timeout_s)
            self.write_state()
        except BaseException:
            self.stop()
            raise
        return self

    def _ensure_bucket(self) -> None:
        """With an external S3 endpoint, create the bucket unless it is there already."""
        from stream_storage.config import S3Config
        from stream_storage.s3_store import make_s3_client

        assert self.s3_endpoint is not None
        client = make_s3_client(S3Config(endpoint_url=self.s3_endpoint, bucket=self.bucket))
        try:
            client.head_bucket(Bucket=self.bucket)
        except Exception:  # noqa: BLE001 - botocore's ClientError: absent (or not ours); try to create it
            client.create_bucket(Bucket=self.bucket)

    def _write_broker_config(self, bid: int) -> None:
        dirs = self.broker_log_dirs(bid)
        for d in dirs:
            os.makedirs(d, exist_ok=True)
        cfg = {"broker_id": bid, "host": self.broker_host(bid), "port": self.broker_ports[bid], "kafka_port": self.kafka_ports[bid],
               "controllers": self.controller_bootstrap, "log_dirs": dirs,
               "wal_root": os.path.join(self.state_dir, "wal"),
               "s3": {"endpoint_url": self.s3_endpoint, "bucket": self.bucket}, **self.broker_overrides}
        if self.wal_mode != "local":
            storage = dict(cfg.get("storage") or {})
            storage["wal"] = {**dict(storage.get("wal") or {}), "mode": self.wal_mode}
            cfg["storage"] = storage
        if self.security is not None:
            cfg["security"] = {"admin_token": self.security.admin_token,
                               "internal_token": self.security.internal_token}
        write_private(self.broker_config_path(bid), json.dumps(cfg, indent=2))

    def start_broker(self, broker_id: int, wait: bool = True, timeout_s: float = 30.0) -> None:
        self.broker_procs[broker_id] = _spawn(["broker", "--id", str(broker_id), "--config",
                                               self.broker_config_path(broker_id)], self.broker_log_path(broker_id),
                                               self.placements.get(f"b{broker_id}", Placement()).prefix)
        self.stopped_brokers.discard(broker_id)
        if wait:
            self.wait_brokers([broker_id], timeout_s)

    def start_console(self, port: int | None = None, run_dir: str | None = None) -> str:
        """Start the web console on this cluster (tools/console/process.py); returns its URL."""
        from tools.console.process import spawn_console

        token_file = self.admin_token_path if self.security is not None else None
        self.console, self.console_url = spawn_console(self.controller_bootstrap, os.path.join(
            self.state_dir, "console.log"), token_file, port, run_dir=run_dir)
        self.write_state()
        return self.console_url

    def start_balancer(self, dry_run: bool = False, extra_args: list[str] | None = None) -> str:
        """Start `ferry balancer run` on this cluster (tools/balancer/process.py); returns its metrics URL."""
        from tools.balancer.process import spawn_balancer

        token_file = self.admin_token_path if self.security is not None else None
        assert self.s3_endpoint is not None, "start the cluster first"
        self.balancer, self.balancer_metrics_url = spawn_balancer(
            self.controller_bootstrap, self.s3_endpoint, self.bucket, os.path.join(self.state_dir, "balancer.log"),
            os.path.join(self.state_dir, "balancer-events.jsonl"), token_file, dry_run, extra_args)
        self.balancer_dry_run = dry_run
        self.write_state()
        return self.balancer_metrics_url

    def broker_health(self, broker_id: int) -> dict[str, Any] | None:
        try:
            body = http_get_json(f"{self.broker_url(broker_id)}/v1/health", 1.0)
        except (OSError, ValueError):
            return None
        return body if isinstance(body, dict) else None

    def controller_call(self, op: Operation[RequestT, ReplyT], request: RequestT) -> ReplyT:
        """:meth:`controller_read`, typed: ``op`` is a read of ``metadata_quorum.kernel.messages``."""
        assert op.kind == "read", f"{op.name} is not a read"
        return cast(ReplyT, self.controller_read(op.name, dict(request)))

    def controller_read(self, op: str, args: dict[str, Any] | None = None) -> Any:
        """A read on any live controller (its committed image)."""
        assert self.quorum is not None
        last: Exception | None = None
        for nid in self.quorum.running():
            try:
                answer = http_post_json(f"{self.quorum.url(nid)}/v1/read/{op}", args or {}, token=self.admin_token)
                if isinstance(answer, dict) and "reply" in answer:
                    return answer["reply"]
                last = RuntimeError(str(answer))
            except (OSError, ValueError) as exc:
                last = exc
        raise RuntimeError(f"no controller answered {op}: {last}")

    def wait_brokers(self, broker_ids: list[int] | None = None, timeout_s: float = 60.0) -> None:
        """Until each broker's own /v1/health says RUNNING and unfenced, and the controllers list it unfenced.

        The broker's view matters after a restart: the controllers may still list the previous
        incarnation as unfenced until its session expires."""
        ids = broker_ids if broker_ids is not None else sorted(self.broker_procs)
        deadline = time.monotonic() + timeout_s
        pending = set(ids)
        everything: DescribeClusterRequest = {}
        while pending:
            for bid in sorted(pending):
                proc = self.broker_procs[bid]
                if proc.poll() is not None:
                    raise RuntimeError(f"broker {bid} exited with {proc.returncode}; log:\n{self.tail(self.broker_log_path(bid))}")
            try:
                described = self.controller_call(DESCRIBE_CLUSTER, everything)
                brokers = {int(b["broker_id"]): b for b in described.get("brokers", [])}
            except RuntimeError:
                brokers = {}
            for bid in sorted(pending):
                b = brokers.get(bid)
                health = self.broker_health(bid) if b is not None and not b.get("fenced", True) else None
                if health is not None and health.get("state", "RUNNING") == "RUNNING" and not health.get("fenced"):
                    pending.discard(bid)
            if pending and time.monotonic() > deadline:
                raise TimeoutError(f"brokers {sorted(pending)} not ready within {timeout_s} s; logs in {self.state_dir}")
            if pending:
                time.sleep(0.05)

    @staticmethod
    def tail(path: str, size: int = 3000) -> str:
        try:
            with open(path, "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - size))
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def stop(self, graceful: bool = True) -> None:
        """Stop everything, brokers first: SIGTERM (a controlled shutdown) or, not graceful, SIGKILL."""
        if self.console is not None:
            stop_process(self.console, signal.SIGTERM, timeout_s=5)
            self.console = None
        if self.balancer is not None:
            stop_process(self.balancer, signal.SIGTERM, timeout_s=5)
            self.balancer = None
        procs = list(self.broker_procs.items())
        for bid, proc in procs:  # signal all first so that they shut down in parallel
            if proc.poll() is None:
                if bid in self.stopped_brokers:
                    self._signal(proc, signal.SIGCONT)
                self._signal(proc, signal.SIGTERM if graceful and bid not in self.stopped_brokers else signal.SIGKILL)
        for _bid, proc in procs:
            stop_process(proc, signal.SIGTERM, timeout_s=10)
        self.broker_procs.clear()
        if self.quorum is not None:
            if graceful:
                self.quorum.stop_all()
            else:
                for nid in list(self.quorum.procs):
                    self.quorum.kill(nid)
        if self.s3 is not None:
            self.s3.stop()
            self.s3 = None

    def cleanup(self) -> None:
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.state_dir, ignore_errors=True)

    def __enter__(self) -> "LocalCluster":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.cleanup()

    # -- faults
    @staticmethod
    def _signal(proc: subprocess.Popen[bytes], sig: int) -> None:
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass

    def kill_broker(self, broker_id: int) -> None:
        """kill -9 (a crash): no controlled shutdown, the WAL keeps what was not uploaded."""
        proc = self.broker_procs.pop(broker_id)
        kill_process(proc)
        self.stopped_brokers.discard(broker_id)

    def terminate_broker(self, broker_id: int, timeout_s: float = 30.0) -> int:
        """SIGTERM (controlled shutdown) and wait for the exit; returns the exit code."""
        proc = self.broker_procs.pop(broker_id)
        stop_process(proc, signal.SIGTERM, timeout_s=timeout_s)
        return int(proc.returncode or 0)

    def pause_broker(self, broker_id: int) -> None:
        self._signal(self.broker_procs[broker_id], signal.SIGSTOP)
        self.stopped_brokers.add(broker_id)

    def resume_broker(self, broker_id: int) -> None:
        self._signal(self.broker_procs[broker_id], signal.SIGCONT)
        self.stopped_brokers.discard(broker_id)

    def restart_broker(self, broker_id: int, timeout_s: float = 30.0) -> None:
        if broker_id in self.broker_procs:
            self.kill_broker(broker_id)
        self.start_broker(broker_id, wait=True, timeout_s=timeout_s)

    def add_broker(self, broker_id: int | None = None, wait: bool = True, timeout_s: float = 30.0) -> int:
        """Scale out: configure and start one more broker (the next free id by default)."""
        bid = broker_id if broker_id is not None else max(self.broker_ports, default=0) + 1
        if bid in self.broker_procs:
            raise ValueError(f"broker {bid} is already running")
        if bid not in self.broker_ports:
            self.broker_ports[bid], self.kafka_ports[bid] = free_ports(2)
            self._write_broker_config(bid)
        self.start_broker(bid, wait=wait, timeout_s=timeout_s)
        self.write_state()
        return bid

    def broker_pid(self, broker_id: int) -> int:
        return self.broker_procs[broker_id].pid

    def _controller_proc(self, node_id: int) -> subprocess.Popen[bytes]:
        assert self.quorum is not None
        return self.quorum.procs[node_id]

    def pause_controller(self, node_id: int) -> None:
        self._signal(self._controller_proc(node_id), signal.SIGSTOP)

    def resume_controller(self, node_id: int) -> None:
        self._signal(self._controller_proc(node_id), signal.SIGCONT)

    def terminate_controller(self, node_id: int) -> None:
        assert self.quorum is not None
        self.quorum.stop(node_id)

    def start_controller(self, node_id: int) -> None:
        assert self.quorum is not None
        self.quorum.start(node_id)

    def controller_leader(self, timeout_s: float = 20.0, exclude: set[int] | None = None) -> int:
        assert self.quorum is not None
        return self.quorum.wait_leader(timeout_s, exclude)

    def kill_controller(self, node_id: int) -> None:
        assert self.quorum is not None
        self.quorum.kill(node_id)

    def restart_controller(self, node_id: int) -> None:
        assert self.quorum is not None
        self.quorum.kill(node_id)
        self.quorum.start(node_id)

    # -- state file for `ferry cluster down|status`
    def describe(self, status: str = "running") -> dict[str, Any]:
        """The cluster as `cluster.json` records it (also while it is starting: what runs so far)."""
        quorum_procs = self.quorum.procs if self.quorum is not None else {}
        return {
            "status": status,
            "state_dir": self.state_dir,
            # The path of the admin token, never a secret itself (cluster.json is world-readable).
            "secure": self.security is not None,
            "wal_mode": self.wal_mode,
            "admin_token_file": self.admin_token_path if self.security is not None else None,
            "s3": {"endpoint_url": self.s3_endpoint, "bucket": self.bucket,
                   "pid": self.s3.process.pid if self.s3 and self.s3.process else None,
                   "log": os.path.join(self.state_dir, "s3.log") if self.s3 else None,
                   "s3_profile": self.s3_profile, "upstream": self.s3_upstream},
            "controllers": [{"id": nid, "url": self.quorum.url(nid), "pid": quorum_procs[nid].pid,
                             "log": self.quorum.log_path(nid)}
                            for nid in sorted(quorum_procs) if self.quorum is not None],
            "brokers": [{"id": bid, "url": self.broker_url(bid), "kafka": f"{self.broker_host(bid)}:{self.kafka_ports[bid]}",
                         "pid": proc.pid, "log": self.broker_log_path(bid),
                         "config": self.broker_config_path(bid), "log_dirs": self.broker_log_dirs(bid)}
                        for bid, proc in sorted(self.broker_procs.items())],
            "console": {"url": self.console_url, "pid": self.console.pid, "log": os.path.join(self.state_dir, "console.log")}
            if self.console is not None else None,
            "balancer": {"metrics_url": self.balancer_metrics_url, "pid": self.balancer.pid,
                         "dry_run": self.balancer_dry_run, "log": os.path.join(self.state_dir, "balancer.log"),
                         "events": os.path.join(self.state_dir, "balancer-events.jsonl")}
            if self.balancer is not None else None,
            "bootstrap_server": ",".join(u.removeprefix("http://") for u in self.bootstrap_servers),
            "bootstrap.servers": self.kafka_bootstrap,
            "bootstrap_controller": ",".join(u.removeprefix("http://") for u in self.controller_bootstrap)
            if self.quorum is not None else "",
        }

    def write_state(self, status: str = "running") -> None:
        """Write `cluster.json` atomically (a reader never sees half a file)."""
        path = os.path.join(self.state_dir, STATE_FILE)
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            json.dump(self.describe(status), f, indent=2)
        os.replace(path + ".tmp", path)


# ---------------------------------------------------------------- CLI


# What `up` creates in a state dir; a new `up` removes it first (see the module docstring).
_CLUSTER_DATA = ("controllers", "wal", "s3.log", "admin.token", "console.log", "balancer.log",
                 "balancer-events.jsonl")


def _remove_previous_data(state_dir: str) -> bool:
    removed = False
    for name in sorted(os.listdir(state_dir)):
        path = os.path.join(state_dir, name)
        if name in _CLUSTER_DATA or (name.startswith("broker-") and
                                     (os.path.isdir(path) or name.endswith((".json", ".log")))):
            shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
            removed = True
    return removed


def summary(state: dict[str, Any], elapsed_s: float) -> str:
    """What `up` prints: where everything runs, its logs, and how to use and stop it."""
    lines = [f"Ferry cluster up in {elapsed_s:.1f} s; state and logs in {state['state_dir']}"]
    s3 = state.get("s3") or {}
    profile = s3.get("s3_profile") or "local"
    if profile != "local":
        lines.append(f"  s3 profile    {profile} (latency proxy in front of "
                     f"{s3.get('upstream') or 'the embedded moto server'})")
    if state.get("wal_mode", "local") != "local":
        lines.append(f"  wal           {state['wal_mode']} (brokers acknowledge produce once the WAL object is in S3)")
    if s3.get("pid"):
        lines.append(f"  s3            {s3['endpoint_url']:<24}  pid {s3['pid']:<7}  log {s3['log']}")
    else:
        lines.append(f"  s3            {s3.get('endpoint_url')} (external, bucket {s3.get('bucket')})")
    for c in state.get("controllers", []):
        lines.append(f"  controller {c['id']:<2} {c['url']:<24}  pid {c['pid']:<7}  log {c['log']}")
    for b in state.get("brokers", []):
        lines.append(f"  broker {b['id']:<6} {b['url']:<24}  kafka {b.get('kafka')}  pid {b['pid']:<7}  log {b['log']}")
    if state.get("console"):
        c = state["console"]
        lines.append(f"  console       {c['url']:<24}  pid {c['pid']:<7}  log {c['log']}  (open it in a browser)")
    if state.get("balancer"):
        b = state["balancer"]
        lines.append(f"  balancer      {b['metrics_url']:<24}  pid {b['pid']:<7}  log {b['log']}"
                     + ("  (dry run)" if b.get("dry_run") else "  (turn it off with --no-balancer)"))
    d = state["state_dir"]
    lines += ["", f"  --bootstrap-server {state['bootstrap_server']}",
              f"  bootstrap.servers={state.get('bootstrap.servers', '')}  (Kafka clients)",
              f"  --bootstrap-controller {state['bootstrap_controller']}", ""]
    if state.get("secure"):
        lines += ["Secure: Raft is encrypted and every API but /v1/health needs a bearer token; Ferry's tools",
                  f"read the admin token from the file FERRY_TOKEN_FILE names: export FERRY_TOKEN_FILE={state['admin_token_file']}",
                  ""]
    lines += [f"Try: ferry topics --bootstrap-server {state['bootstrap_server'].split(',')[0]} --create --topic t --partitions 3",
              f"Stop it with: ferry cluster down --state-dir {d}"]
    return "\n".join(lines)


def broker_overrides_of(items: list[str]) -> dict[str, Any]:
    """``--broker-config KEY=VALUE`` settings: VALUE is JSON (``true``, ``4``, ``["User:admin"]``) or
    else a string; KEY must be a broker setting (broker/config.py), which every broker then checks."""
    from dataclasses import fields

    from broker.config import BrokerConfig

    known = {f.name for f in fields(BrokerConfig)}
    out: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or key not in known:
            raise ValueError(f"--broker-config {item!r}: expected KEY=VALUE with KEY a broker setting "
                             "(e.g. authorizer_enabled=true)")
        try:
            out[key] = json.loads(text)
        except ValueError:
            out[key] = text
    return out


def cmd_up(args: argparse.Namespace, state_dir: str) -> int:
    if args.controllers < 1 or args.brokers < 1:
        print("Error: --controllers and --brokers must be at least 1 (INVALID_REQUEST)", file=sys.stderr)
        return 2
    os.makedirs(state_dir, exist_ok=True)
    lock = open(os.path.join(state_dir, LOCK_FILE), "a+", encoding="utf-8")  # held until exit
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        print(f"Error: another `ferry cluster up` is starting a cluster in {state_dir}; wait for it or run "
              f"`ferry cluster down --state-dir {state_dir}`", file=sys.stderr)
        return 1
    running = running_processes(state_dir)
    if running:
        print(f"Error: a cluster is already running from {state_dir} ({', '.join(running)}); "
              f"stop it with `ferry cluster down --state-dir {state_dir}` or use another --state-dir", file=sys.stderr)
        return 1
    if load_state(state_dir) is not None:
        os.remove(os.path.join(state_dir, STATE_FILE))  # a cluster that is gone: its pids mean nothing now
    if _remove_previous_data(state_dir):
        print(f"Starting a fresh cluster: removed the previous cluster's data in {state_dir}", file=sys.stderr)
    started = time.monotonic()
    try:
        parse_profile(args.s3_profile)
    except ValueError as exc:
        print(f"Error: {exc} (INVALID_REQUEST)", file=sys.stderr)
        return 2
    try:
        overrides = broker_overrides_of(args.broker_config)
    except ValueError as exc:
        print(f"Error: {exc} (INVALID_REQUEST)", file=sys.stderr)
        return 2
    cluster = LocalCluster(state_dir, args.controllers, args.brokers, args.s3_endpoint, bucket=args.bucket,
                           log_dirs_per_broker=args.log_dirs_per_broker, s3_profile=args.s3_profile,
                           secure=args.secure, wal_mode=args.wal, broker_overrides=overrides)
    try:
        cluster.start()
        if args.console:
            cluster.start_console(args.console_port or None)
        if not args.no_balancer:
            cluster.start_balancer(dry_run=args.balancer_dry_run)
    except (RuntimeError, TimeoutError, OSError) as exc:
        cluster.stop()
        os.remove(os.path.join(state_dir, STATE_FILE)) if load_state(state_dir) is not None else None
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        print(f"Error: the cluster did not start: {first} (logs in {state_dir})", file=sys.stderr)
        return 1
    state = cluster.describe()
    print(json.dumps(state, indent=2) if args.json else summary(state, time.monotonic() - started))
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="ferry cluster", description="Start, stop or inspect a local cluster: the embedded S3 (moto server), "
        "a controller quorum and brokers, each a process on 127.0.0.1.")
    parser.add_argument("action", choices=["up", "down", "status"],
                        help="up: start a fresh cluster and return once every broker serves; down: stop every "
                             "process recorded in the state dir; status: which of them answer")
    parser.add_argument("--controllers", type=int, default=3, help="controllers in the quorum (up; default 3)")
    parser.add_argument("--brokers", type=int, default=3, help="brokers (up; default 3)")
    parser.add_argument("--log-dirs-per-broker", type=int, default=1, help="log dirs per broker (up; default 1)")
    parser.add_argument("--s3-endpoint", help="use this S3 endpoint instead of starting the embedded moto server")
    parser.add_argument("--bucket", default="ferry", help="S3 bucket (created when absent)")
    parser.add_argument("--wal", choices=WAL_MODES, default="local",
                        help="where brokers make produce durable before acknowledging (up): local = a WAL file per "
                             "log dir (default), s3 = WAL objects in the bucket (a lost broker disk loses nothing)")
    parser.add_argument("--s3-profile", default="local",
                        help="latency and errors added in front of S3: local (none), aws-standard, fixed:MS, "
                             "latency:P50,P99[,ERROR_RATE] (up; default local)")
    parser.add_argument("--state-dir", default=os.path.join(os.getcwd(), ".ferry", "cluster"),
                        help="where pids, configs, data and logs live (default ./.ferry/cluster)")
    parser.add_argument("--json", action="store_true", help="up: print the cluster as JSON (as cluster.json holds it)")
    parser.add_argument("--secure", action="store_true",
                        help="up: generate secrets; Raft traffic is encrypted and authenticated, the controller and "
                             "broker APIs require a bearer token (the admin token goes to <state dir>/admin.token)")
    parser.add_argument("--console", action="store_true",
                        help="up: also serve the web console on loopback (docs/console.md); `down` stops it")
    parser.add_argument("--console-port", type=int, default=0, help="up --console: its port (default: a free one)")
    parser.add_argument("--no-balancer", action="store_true",
                        help="up: do not start the balancer (`ferry balancer run`, on by default; `down` stops it)")
    parser.add_argument("--balancer-dry-run", action="store_true",
                        help="up: start the balancer in dry-run mode (it logs proposals, moves nothing)")
    parser.add_argument("--broker-config", action="append", default=[], metavar="KEY=VALUE",
                        help="up: a broker setting for every broker (VALUE is JSON or a string; repeatable), e.g. "
                             "--broker-config authorizer_enabled=true --broker-config 'super_users=[\"User:admin\"]'")
    args = parser.parse_args(argv)
    state_dir = os.path.abspath(args.state_dir)
    if args.action == "down":
        return cmd_down(state_dir)
    if args.action == "status":
        return cmd_status(state_dir)
    return cmd_up(args, state_dir)
