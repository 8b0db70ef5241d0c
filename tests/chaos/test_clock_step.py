"""Clock steps: the injected wall clock, the chaos fault that steps it, the check that judges it,
and the controller's rules on a stepped wall clock (all fast, no cluster)."""
from __future__ import annotations

import os
import signal
import time
from typing import Any, Iterator

import pytest

from metadata_quorum.controller_result import OpContext
from metadata_quorum.kernel import clock
from metadata_quorum.ops.cluster import (heartbeat_expired, reelection_pending, session_end_wall_ms,
                                         unregistered_lease_live)
from tools.chaos.clock_faults import STEPS_MS, StepSpan, check_clock_steps, step, write_offset
from tools.chaos.schedule import ALL_FAULTS, NET_FAULTS, ScheduleSpec, make_schedule


@pytest.fixture
def chaos_clock(tmp_path: Any) -> Iterator[str]:
    previous = signal.getsignal(clock.STEP_SIGNAL)
    directory = str(tmp_path)
    assert clock.install_chaos_clock({clock.CHAOS_CLOCK_ENV: directory}) == clock.offset_path(directory, os.getpid())
    try:
        yield directory
    finally:
        signal.signal(clock.STEP_SIGNAL, previous)
        clock.set_offset_ms(0)


def test_without_the_variable_nothing_is_installed() -> None:
    assert clock.install_chaos_clock({}) is None
    assert clock.wall_offset_ms() == 0 and abs(clock.wall_ms() - time.time() * 1000) < 50


def test_a_step_moves_the_wall_clock_and_not_the_monotonic_one(chaos_clock: str) -> None:
    for offset_ms in (300_000, -30_000, 0):
        mono_before = clock.mono_ms()
        step(chaos_clock, os.getpid(), offset_ms)  # the file, then SIGUSR2 to this process
        deadline = time.monotonic() + 2
        while clock.wall_offset_ms() != offset_ms and time.monotonic() < deadline:
            time.sleep(0.001)  # the handler runs between bytecodes of the main thread
        assert clock.wall_offset_ms() == offset_ms
        assert abs(clock.wall_ms() - (time.time() * 1000 + offset_ms)) < 50
        assert clock.mono_ms() - mono_before < 1000  # the monotonic clock did not jump
    assert abs(clock.mono_to_wall_ms(clock.mono_ms()) - clock.wall_ms()) < 50


def test_a_bad_offset_file_changes_nothing(chaos_clock: str) -> None:
    path = write_offset(chaos_clock, os.getpid(), 30_000)
    assert clock.reload_offset(path) == 30_000
    for bad in ("", "12.5", "soon", "1e3"):
        with open(path, "w", encoding="ascii") as f:
            f.write(bad)
        assert clock.reload_offset(path) == 30_000
        with pytest.raises(ValueError):
            clock.parse_offset(bad)
    os.remove(path)
    assert clock.reload_offset(path) == 30_000
    assert clock.parse_offset(" -300000\n") == -300_000


def test_net_schedules_hold_clock_steps_and_others_do_not() -> None:
    steps = [e for seed in range(1, 21)
             for e in make_schedule(ScheduleSpec(seed=seed, duration_s=300.0,
                                                 faults=frozenset(ALL_FAULTS + NET_FAULTS)))
             if e.kind == "clock_step"]
    assert len(steps) >= 20
    assert {e.step_ms for e in steps} == set(STEPS_MS)
    assert {e.node for e in steps} >= {"leader", "b1", "b2", "b3"}
    assert {e.peer for e in steps} == {"", "controllers"} and all(e.node != "leader" for e in steps if e.peer)
    assert all("and back" in e.describe() for e in steps)
    plain = [e for seed in range(1, 21) for e in make_schedule(ScheduleSpec(seed=seed, duration_s=300.0))]
    assert not [e for e in plain if e.kind == "clock_step"]


def _record(kind: str, **fields: Any) -> dict[str, Any]:
    return {"type": kind, "version": 0, "fields": fields}


def test_the_clock_check_blames_a_fence_or_a_new_controller_inside_a_step_only() -> None:
    log = [(10, _record("BrokerRegistrationChange", broker_id=2, fenced=True)),
           (20, _record("Partition", topic_id="t", partition=0)),
           (30, _record("NoOp", term=4, leader_id=2)),
           (40, _record("BrokerRegistrationChange", broker_id=3, fenced=False))]
    quiet = StepSpan("step b1", 11, 30)  # high watermarks: the fence at 10 came before, the NoOp at 30 after
    assert check_clock_steps([quiet], log, 0) == ([], 1)
    found, judged = check_clock_steps([StepSpan("step b2", 10, 12), StepSpan("step c1", 25, 31)], log, 0)
    assert judged == 2 and [v.check for v in found] == ["clock", "clock"]
    assert "[2] fenced" in found[0].message and "new active controller ([2])" in found[1].message
    assert check_clock_steps([StepSpan("step b2", 10, 12)], log, 11) == ([], 0)  # older than the log read


def _ctx(now_ms: int, wall_ms: int, **kw: Any) -> OpContext:
    return OpContext(now_ms=now_ms, next_offset=1, wall_ms=wall_ms, session_timeout_ms=4000,
                     reelection_timeout_ms=2000, **kw)


@pytest.mark.parametrize("step_ms", STEPS_MS)
def test_a_wall_clock_step_neither_fences_nor_revives(step_ms: int) -> None:
    wall = 1_700_000_000_000
    live = _ctx(50_000, wall + step_ms, last_heartbeat_ms={1: 49_000}, active_since_ms=10_000)
    dead = _ctx(50_000, wall + step_ms, last_heartbeat_ms={1: 45_000}, active_since_ms=10_000)
    assert not heartbeat_expired(live, 1) and heartbeat_expired(dead, 1)


def test_an_unregistered_lease_outlives_a_forward_step_while_the_session_clock_says_so() -> None:
    wall = 1_700_000_000_000
    at_unregister = _ctx(50_000, wall, last_heartbeat_ms={1: 49_000})
    end = session_end_wall_ms(at_unregister, 1)
    assert end == wall + 3000  # heard 1 s ago, a 4 s session
    forward = _ctx(51_000, wall + 1000 + 300_000, last_heartbeat_ms={1: 49_000})
    assert unregistered_lease_live(forward, 1, str(end))  # the wall says over, the session clock does not
    later = _ctx(54_000, wall + 4000 + 300_000, last_heartbeat_ms={1: 49_000})
    assert not unregistered_lease_live(later, 1, str(end))
    # another controller (no heartbeats of it) judges the log's wall deadline
    assert unregistered_lease_live(_ctx(0, wall + 2000), 1, str(end))
    assert not unregistered_lease_live(_ctx(0, wall + 3001), 1, str(end))
    assert not unregistered_lease_live(forward, 1, None)


def test_a_reelection_deadline_never_waits_out_a_step() -> None:
    wall = 1_700_000_000_000
    deadline = wall + 2000  # set now, 2 s ahead
    assert reelection_pending(deadline, _ctx(0, wall))
    assert reelection_pending(deadline, _ctx(0, wall + 1999))
    assert not reelection_pending(deadline, _ctx(0, wall + 2000))
    assert not reelection_pending(deadline, _ctx(0, wall + 30_000))  # forward: passed early
    assert not reelection_pending(deadline, _ctx(0, wall - 300_000))  # backward: not 5 min offline
    assert not reelection_pending(0, _ctx(0, wall))  # no deadline
