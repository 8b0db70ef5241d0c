"""The processes of a local cluster seen from its state dir: `ferry cluster down|status`.

`ferry cluster up` records every process it spawns in `cluster.json` (see tools/cluster.py); these
helpers read that file, find what still runs (also a process `up` spawned but did not get to
record, by where its output goes), and stop it in process groups, brokers first. They need no
running cluster object, only the state dir, so `down` works after `up` itself was killed.
"""
from __future__ import annotations

import json
import os
import signal
import sys
import time
from typing import Any

from tools.proc import http_get_json

STATE_FILE = "cluster.json"


def load_state(state_dir: str) -> dict[str, Any] | None:
    try:
        with open(os.path.join(state_dir, STATE_FILE), encoding="utf-8") as f:
            state: dict[str, Any] = json.load(f)
            return state
    except (OSError, ValueError):
        return None


def alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is not alive
        with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


def is_ferry_process(pid: int) -> bool:
    """Whether `pid` is still a Ferry process (a pid from an old state file may have been reused)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return b"tools.cli" in f.read()
    except OSError:
        return False


def signal_group(pid: int | None, sig: int) -> bool:
    """Signal the process group led by `pid` if it is still a live Ferry process; whether it was."""
    if not alive(pid) or not is_ferry_process(pid or 0):
        return False
    assert pid is not None
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        return False
    return True


def stop_groups(pids: list[int], timeout_s: float = 10.0) -> None:
    """SIGTERM the groups together (brokers shut down in parallel), then SIGKILL whatever is left."""
    signalled = [p for p in pids if signal_group(p, signal.SIGCONT) and signal_group(p, signal.SIGTERM)]
    deadline = time.monotonic() + timeout_s
    while any(alive(p) for p in signalled) and time.monotonic() < deadline:
        time.sleep(0.05)
    for p in signalled:
        if alive(p):
            try:
                os.killpg(p, signal.SIGKILL)
            except ProcessLookupError:
                pass


def state_pids(state: dict[str, Any]) -> list[tuple[str, int]]:
    """(name, pid) of every process a state file records, brokers first (the order `down` stops them)."""
    out = [(f"broker {b['id']}", int(b["pid"])) for b in state.get("brokers", []) if b.get("pid")]
    out += [(f"controller {c['id']}", int(c["pid"])) for c in state.get("controllers", []) if c.get("pid")]
    if (state.get("s3") or {}).get("pid"):
        out.append(("s3", int(state["s3"]["pid"])))
    if (state.get("console") or {}).get("pid"):
        out.append(("console", int(state["console"]["pid"])))
    if (state.get("balancer") or {}).get("pid"):
        out.append(("balancer", int(state["balancer"]["pid"])))
    return out


def unrecorded_processes(state_dir: str, known: set[int]) -> list[int]:
    """Ferry processes that write their output to a log in `state_dir` but are not in its state file.

    `up` records each pid right after spawning it; a process spawned just before `up` was killed
    (the embedded S3 while it starts) is found this way instead, by where its stdout goes."""
    prefix = os.path.join(state_dir, "")
    found = []
    try:
        pids = [int(d) for d in os.listdir("/proc") if d.isdigit()]
    except OSError:
        return []
    for pid in pids:
        if pid in known or pid == os.getpid() or not is_ferry_process(pid):
            continue
        try:
            outputs = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in (1, 2)]
        except OSError:
            continue
        if any(o.startswith(prefix) for o in outputs) and alive(pid):
            found.append(pid)
    return found


def running_processes(state_dir: str) -> list[str]:
    """Names of the processes of the cluster in `state_dir` that still run."""
    state = load_state(state_dir) or {}
    recorded = state_pids(state)
    names = [name for name, pid in recorded if alive(pid) and is_ferry_process(pid)]
    names += [f"pid {pid}" for pid in unrecorded_processes(state_dir, {pid for _n, pid in recorded})]
    return names


def cmd_down(state_dir: str) -> int:
    state = load_state(state_dir)
    strays = unrecorded_processes(state_dir, {pid for _n, pid in state_pids(state or {})})
    if state is None and not strays:
        print(f"Error: no cluster state in {state_dir} (nothing to stop; `ferry cluster up --state-dir DIR` "
              f"records its processes there)", file=sys.stderr)
        return 1
    procs = state_pids(state or {}) + [(f"process {pid} (logging to {state_dir})", pid) for pid in strays]
    brokers = [(n, p) for n, p in procs if n.startswith("broker")]
    others = [(n, p) for n, p in procs if not n.startswith("broker")]
    for group in (brokers, others):  # brokers first: their controlled shutdown needs the controllers
        running = [(n, p) for n, p in group if alive(p) and is_ferry_process(p)]
        stop_groups([p for _n, p in running])
        for name, pid in group:
            print(f"{name} (pid {pid}) {'stopped' if (name, pid) in running else 'was not running'}")
    left = [n for n, p in procs if alive(p) and is_ferry_process(p)]
    if left:
        print(f"Error: still running: {', '.join(left)}", file=sys.stderr)
        return 1
    if state is not None:
        os.remove(os.path.join(state_dir, STATE_FILE))
    return 0


def cmd_status(state_dir: str) -> int:
    state = load_state(state_dir)
    if state is None:
        print(f"Error: no cluster state in {state_dir} (is a cluster up? `ferry cluster up --state-dir DIR`)",
              file=sys.stderr)
        return 1
    ok = True
    rows = []
    if state.get("s3", {}).get("pid"):
        rows.append(("s3", "", state["s3"]["endpoint_url"], alive(state["s3"]["pid"]), ""))
    for c in state.get("controllers", []):
        health: Any = None
        if alive(c["pid"]):
            try:
                health = http_get_json(f"{c['url']}/v1/health", 1.0)
            except (OSError, ValueError):
                health = None
        extra = "active" if isinstance(health, dict) and health.get("active") else ""
        rows.append(("controller", c["id"], c["url"], alive(c["pid"]) and health is not None, extra))
    for b in state.get("brokers", []):
        health = None
        if alive(b["pid"]):
            try:
                health = http_get_json(f"{b['url']}/v1/health", 1.0)
            except (OSError, ValueError):
                health = None
        extra = ""
        if isinstance(health, dict):
            extra = str(health.get("state", "")) + (" fenced" if health.get("fenced") else "")
        rows.append(("broker", b["id"], b["url"], alive(b["pid"]) and health is not None, extra))
    if (state.get("balancer") or {}).get("pid"):
        b = state["balancer"]
        rows.append(("balancer", "", b["metrics_url"], alive(b["pid"]), "dry run" if b.get("dry_run") else ""))
    if state.get("status") == "starting":
        print(f"The cluster in {state_dir} did not finish starting (`ferry cluster up` stopped or is still running)")
        ok = False
    for kind, nid, url, up, extra in rows:
        ok = ok and up
        print(f"{kind:<10} {str(nid):>3}  {url:<28} {'up' if up else 'DOWN'} {extra}".rstrip())
    if state.get("bootstrap_server"):
        print(f"--bootstrap-server {state['bootstrap_server']}")
    if state.get("bootstrap_controller"):
        print(f"--bootstrap-controller {state['bootstrap_controller']}")
    return 0 if ok else 1
