"""A broker's WAL lock as proof that its process is gone: real processes, kill -9 and SIGSTOP."""
from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from broker.peer_liveness import PeerDeathWatcher, ProcessLock, lock_is_free
from metadata_quorum.kernel.controller_api import ControllerWrites, WriteFunction
from metadata_quorum.kernel.errors import ErrorCode, FerryError
from tests.quorum.quorum_helpers import controller, epoch_of

ROOT = Path(__file__).resolve().parents[2]


def holder(wal_dir: Path) -> subprocess.Popen[bytes]:
    """A process that takes the lock as a broker does, says so, and sleeps."""
    code = ("import sys, time; from broker.peer_liveness import ProcessLock; "
            "ProcessLock.acquire(sys.argv[1]); print('held', flush=True); time.sleep(60)")
    proc = subprocess.Popen([sys.executable, "-c", code, str(wal_dir)], cwd=ROOT, stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline() == b"held\n"
    return proc


def test_the_lock_is_free_only_once_its_process_is_gone(tmp_path: Path) -> None:
    wal = tmp_path / "broker-3"
    assert not lock_is_free(str(wal))  # never ran here: nothing can be told
    proc = holder(wal)
    try:
        assert not lock_is_free(str(wal))
        os.kill(proc.pid, signal.SIGSTOP)  # paused: its lease may still run, and it keeps the lock
        time.sleep(0.1)
        assert not lock_is_free(str(wal))
        os.kill(proc.pid, signal.SIGCONT)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        assert lock_is_free(str(wal))
        again = ProcessLock.acquire(str(wal), timeout_s=2)  # a new incarnation takes it over
        assert not lock_is_free(str(wal))
        again.release()
        assert lock_is_free(str(wal))
    finally:
        proc.kill()
        proc.wait(10)


def test_two_processes_cannot_hold_one_brokers_lock(tmp_path: Path) -> None:
    proc = holder(tmp_path / "broker-1")
    try:
        with pytest.raises(TimeoutError):
            ProcessLock.acquire(str(tmp_path / "broker-1"), timeout_s=0.2)
    finally:
        proc.kill()
        proc.wait(10)


def test_the_watcher_reports_each_dead_incarnation_once_through_the_controller(tmp_path: Path) -> None:
    c = controller(3)
    c.write("create_topics", {"topics": [{"name": "t", "num_partitions": 3}]})
    live, gone = holder(tmp_path / "broker-1"), holder(tmp_path / "broker-2")
    reports: list[dict[str, Any]] = []

    async def write(op: str, args: dict[str, Any]) -> dict[str, Any]:
        reports.append(dict(args))
        return c.write(op, args)

    watcher = PeerDeathWatcher(0, lambda: c.image, lambda b: str(tmp_path / f"broker-{b}"), ControllerWrites(WriteFunction(write)),
                               lambda: epoch_of(c.image, 0), interval_ms=10)
    try:
        assert asyncio.run(watcher.probe_once()) == []
        gone.kill()
        gone.wait(10)
        dead_epoch = epoch_of(c.image, 2)
        assert asyncio.run(watcher.probe_once()) == [(2, dead_epoch)]
        assert c.image.cluster.brokers[2].fenced and not c.image.cluster.brokers[1].fenced
        assert asyncio.run(watcher.probe_once()) == []  # fenced now: not probed or reported again
        assert reports == [{"broker_id": 2, "broker_epoch": dead_epoch, "reporter_id": 0,
                            "reporter_epoch": epoch_of(c.image, 0)}]
    finally:
        for p in (live, gone):
            p.kill()
            p.wait(10)


def test_a_report_the_controller_refuses_is_tried_again(tmp_path: Path) -> None:
    c = controller(2)
    attempts: list[int] = []

    async def write(op: str, args: dict[str, Any]) -> dict[str, Any]:
        attempts.append(1)
        if len(attempts) == 1:
            raise FerryError(ErrorCode.NOT_CONTROLLER, "electing")
        return c.write(op, args)

    gone = holder(tmp_path / "broker-1")
    gone.kill()
    gone.wait(10)
    watcher = PeerDeathWatcher(0, lambda: c.image, lambda b: str(tmp_path / f"broker-{b}"), ControllerWrites(WriteFunction(write)),
                               lambda: epoch_of(c.image, 0), interval_ms=10)
    assert asyncio.run(watcher.probe_once()) == [(1, epoch_of(c.image, 1))]
    assert not c.image.cluster.brokers[1].fenced  # refused: not marked reported
    asyncio.run(watcher.probe_once())
    assert c.image.cluster.brokers[1].fenced and len(attempts) == 2
