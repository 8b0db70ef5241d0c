"""`ferry cluster up|status|down` as real commands: processes start, answer, and are all gone after down."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tools.cluster import ROOT, _alive

pytestmark = pytest.mark.integration


def ferry(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tools.cli", *args], capture_output=True, text=True, cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=ROOT), timeout=120)


def test_cluster_up_status_down(tmp_path):
    state_dir = str(tmp_path / "state")
    up = ferry("cluster", "up", "--brokers", "2", "--state-dir", state_dir)
    try:
        assert up.returncode == 0, up.stderr
        state = json.loads(up.stdout)
        pids = [state["s3"]["pid"]] + [c["pid"] for c in state["controllers"]] + [b["pid"] for b in state["brokers"]]
        assert len(state["controllers"]) == 3 and len(state["brokers"]) == 2
        assert all(_alive(p) for p in pids)
        status = ferry("cluster", "status", "--state-dir", state_dir)
        assert status.returncode == 0, status.stdout + status.stderr
        assert status.stdout.count(" up") == 6 and "active" in status.stdout
        again = ferry("cluster", "up", "--state-dir", state_dir)
        assert again.returncode == 1 and "already running" in again.stderr
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
                   "--bucket", "ferry-ext", "--state-dir", state_dir)
        try:
            assert up.returncode == 0, up.stderr
            state = json.loads(up.stdout)
            assert state["s3"] == {"endpoint_url": s3.endpoint_url, "bucket": "ferry-ext", "pid": None, "log": None}
            status = ferry("cluster", "status", "--state-dir", state_dir)
            assert status.returncode == 0 and status.stdout.count(" up") == 2, status.stdout
        finally:
            down = ferry("cluster", "down", "--state-dir", state_dir)
        assert down.returncode == 0, down.stderr
        assert s3.process is not None and s3.process.poll() is None  # not ours to stop
