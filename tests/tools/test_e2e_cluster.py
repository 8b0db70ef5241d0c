"""`ferry cluster up|status|down` as real commands: processes start, answer, and are all gone after down."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tools.cluster import ROOT, _alive

pytestmark = pytest.mark.integration


def ferry(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tools.cli", *args], capture_output=True, text=True, cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=ROOT), timeout=120)


def test_cluster_up_status_down(tmp_path):
    state_dir = str(tmp_path / "state")
    up = ferry("cluster", "up", "--brokers", "2", "--state-dir", state_dir, "--json")
    try:
        assert up.returncode == 0, up.stderr
        state = json.loads(up.stdout)
        pids = [state["s3"]["pid"]] + [c["pid"] for c in state["controllers"]] + [b["pid"] for b in state["brokers"]]
        pids.append(state["balancer"]["pid"])  # on by default; `down` stops it with the rest
        assert len(state["controllers"]) == 3 and len(state["brokers"]) == 2
        assert all(_alive(p) for p in pids)
        status = ferry("cluster", "status", "--state-dir", state_dir)
        assert status.returncode == 0, status.stdout + status.stderr
        assert status.stdout.count(" up") == 7 and "active" in status.stdout and "balancer" in status.stdout
        again = ferry("cluster", "up", "--state-dir", state_dir)
        assert again.returncode == 1 and "already running" in again.stderr
        assert len(again.stderr.strip().splitlines()) == 1 and "Traceback" not in again.stderr
    finally:
        down = ferry("cluster", "down", "--state-dir", state_dir)
    assert down.returncode == 0, down.stderr
    assert not any(_alive(p) for p in pids)
    assert ferry("cluster", "status", "--state-dir", state_dir).returncode == 1


def test_cluster_with_an_external_s3_endpoint_leaves_it_running(tmp_path):
    from stream_storage.s3_server import S3Server

    state_dir = str(tmp_path / "state")
    with S3Server(bucket="elsewhere") as s3:
        up = ferry("cluster", "up", "--brokers", "1", "--controllers", "1", "--s3-endpoint", s3.endpoint_url,
                   "--bucket", "ferry-ext", "--state-dir", state_dir, "--json")
        try:
            assert up.returncode == 0, up.stderr
            state = json.loads(up.stdout)
            assert state["s3"] == {"endpoint_url": s3.endpoint_url, "bucket": "ferry-ext", "pid": None, "log": None,
                                   "s3_profile": "local", "upstream": None}
            status = ferry("cluster", "status", "--state-dir", state_dir)
            assert status.returncode == 0 and status.stdout.count(" up") == 3, status.stdout  # and the balancer
        finally:
            down = ferry("cluster", "down", "--state-dir", state_dir)
        assert down.returncode == 0, down.stderr
        assert s3.process is not None and s3.process.poll() is None  # not ours to stop


def test_down_stops_everything_after_up_was_killed_mid_start(tmp_path):
    """kill -9 of `cluster up` while it waits for the brokers: the processes it spawned are in
    cluster.json already, a new `up` refuses, and `down` stops every one of them."""
    state_dir = str(tmp_path / "state")
    state_file = os.path.join(state_dir, "cluster.json")
    up = subprocess.Popen([sys.executable, "-m", "tools.cli", "cluster", "up", "--brokers", "2", "--state-dir", state_dir],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=ROOT))
    pids: list[int] = []
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # until the brokers are spawned (their pids recorded)
            try:
                with open(state_file, encoding="utf-8") as f:
                    state = json.load(f)
            except (OSError, ValueError):
                state = {}
            if len(state.get("brokers", [])) == 2:
                break
            assert up.poll() is None, "cluster up exited before it started the brokers"
            time.sleep(0.02)
        assert state.get("status") == "starting", state
        pids = [state["s3"]["pid"]] + [c["pid"] for c in state["controllers"]] + [b["pid"] for b in state["brokers"]]
        up.send_signal(signal.SIGKILL)
        up.wait(10)
        assert all(_alive(p) for p in pids)  # the cluster outlives its launcher
        again = ferry("cluster", "up", "--state-dir", state_dir)
        assert again.returncode == 1 and "already running" in again.stderr, again.stderr
    finally:
        if up.poll() is None:
            up.kill()
            up.wait(10)
        down = ferry("cluster", "down", "--state-dir", state_dir)
    assert down.returncode == 0, down.stdout + down.stderr
    assert pids and not any(_alive(p) for p in pids)
    assert not os.path.exists(state_file)
