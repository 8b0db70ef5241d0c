"""A --bootstrap-controller that nothing listens on: the admin tools fail early, exit 1 and name it."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from tools.cluster import ROOT
from tools.proc import free_ports

COMMANDS = [
    ["topics", "--list"],
    ["reassign-partitions", "--list"],
    ["leader-election", "--election-type", "preferred", "--all-topic-partitions"],
    ["log-dirs", "--describe"],
    ["metadata-quorum", "describe", "--status"],
]


@pytest.mark.integration
@pytest.mark.parametrize("args", COMMANDS, ids=[a[0] for a in COMMANDS])
def test_unreachable_bootstrap_controller_fails_early_and_names_it(args: list[str]) -> None:
    ports = free_ports(2)
    addresses = ",".join(f"127.0.0.1:{p}" for p in ports)
    argv = [args[0], "--bootstrap-controller", addresses, *args[1:]]
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "tools.cli", *argv], capture_output=True, text=True, cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=ROOT), timeout=60)
    elapsed_s = time.monotonic() - started
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert "cannot connect to any bootstrap controller" in line and "REQUEST_TIMED_OUT" in line
    for port in ports:
        assert f"127.0.0.1:{port} (connection refused)" in line
    assert "Traceback" not in proc.stderr and "Unclosed" not in proc.stderr
    assert elapsed_s < 10, f"took {elapsed_s:.1f} s; the client's own timeout is 15 s"
