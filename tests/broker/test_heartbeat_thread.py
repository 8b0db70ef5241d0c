"""The heartbeat on its own thread: it keeps renewing the lease while the broker's loop is blocked."""
from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from broker.heartbeat_thread import HeartbeatClient, ThreadedHeartbeater


class CountingController:
    """Answers every write at once, noting the thread each one ran on."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.closed = False

    async def write(self, op: str, args: dict[str, Any]) -> dict[str, Any]:
        self.calls.append((op, threading.current_thread().name))
        if op == "register_broker":
            return {"broker_epoch": 9}
        return {"is_fenced": False, "is_caught_up": True, "should_shut_down": False}

    async def close(self) -> None:
        self.closed = True


async def test_heartbeats_go_on_while_the_broker_loop_is_blocked() -> None:
    ctrl = CountingController()
    epochs: list[tuple[int, str]] = []
    hb = ThreadedHeartbeater(lambda: HeartbeatClient(ctrl.write, ctrl.close), broker_id=2, interval_ms=20,
                             session_timeout_ms=1000, registration=lambda: {"endpoints": [], "log_dirs": []},
                             metadata_offset=lambda: 7, dir_states=lambda: ([], []))
    hb.on_registered = lambda epoch: epochs.append((epoch, threading.current_thread().name))
    assert await hb.register(timeout_s=5) == 9
    hb.start()
    # the broker's loop does not run: a heartbeat sent from it could not go out
    time.sleep(0.3)  # noqa: ASYNC251 - blocking the loop is the point
    beats = [name for op, name in ctrl.calls if op == "broker_heartbeat"]
    assert len(beats) >= 3 and set(beats) == {"heartbeat-2"}
    assert hb.lease.valid(time.monotonic())
    await asyncio.sleep(0)  # the new epoch is handed to the broker's own loop
    assert epochs == [(9, threading.current_thread().name)]
    await hb.stop()
    assert ctrl.closed and not hb._thread.is_alive()
