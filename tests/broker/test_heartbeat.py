"""Registration and heartbeats against a scripted controller (no processes)."""
from __future__ import annotations

import asyncio
from itertools import pairwise
from typing import Any

from broker.heartbeat import Heartbeater
from metadata_quorum.kernel.controller_api import ControllerWrites, WriteFunction
from metadata_quorum.kernel.errors import ErrorCode, FerryError


class ScriptedController:
    def __init__(self, answers: dict[str, list[Any]]) -> None:
        self.answers = answers
        self.calls: list[tuple[str, dict[str, Any]]] = []

    async def write(self, op: str, args: dict[str, Any]) -> dict[str, Any]:
        self.calls.append((op, dict(args)))
        script = self.answers[op]
        answer = script.pop(0) if len(script) > 1 else script[0]
        if isinstance(answer, FerryError):
            raise answer
        return dict(answer)


def heartbeater(ctrl: ScriptedController, registered: list[int] | None = None) -> Heartbeater:
    hb = Heartbeater(ControllerWrites(ctrl), broker_id=3, interval_ms=10, session_timeout_ms=1000,
                     registration=lambda: {"endpoints": ["http://x"], "rack": None, "log_dirs": []},
                     metadata_offset=lambda: 42, dir_states=lambda: (["d1"], []),
                     on_registered=(registered.append if registered is not None else None))
    return hb


async def test_register_waits_out_a_live_old_incarnation() -> None:
    dup = FerryError(ErrorCode.DUPLICATE_BROKER_REGISTRATION, "still alive")
    ctrl = ScriptedController({"register_broker": [dup, dup, {"broker_epoch": 17}]})
    seen: list[int] = []
    hb = heartbeater(ctrl, seen)
    assert await hb.register(timeout_s=5) == 17
    assert seen == [17] and len(ctrl.calls) == 3
    assert len({c[1]["incarnation_id"] for c in ctrl.calls}) == 1  # one incarnation, retried


async def test_heartbeats_carry_offset_and_dirs_and_grant_shutdown() -> None:
    ctrl = ScriptedController({
        "register_broker": [{"broker_epoch": 5}],
        "broker_heartbeat": [{"is_fenced": True, "is_caught_up": False, "should_shut_down": False},
                             {"is_fenced": False, "is_caught_up": True, "should_shut_down": False},
                             {"is_fenced": False, "is_caught_up": True, "should_shut_down": True}],
    })
    hb = heartbeater(ctrl)
    await hb.register()
    await hb.beat_once()
    assert hb.state.fenced and not hb.lease.valid(0.0) and hb.lease.sent_mono_s < 0  # fenced: no lease
    await hb.beat_once()
    assert not hb.state.fenced and hb.lease.valid(hb.lease.sent_mono_s + 0.5)
    hb.request_shutdown()
    await hb.beat_once()
    assert hb.shutdown_granted.is_set()
    op, args = ctrl.calls[-1]
    assert op == "broker_heartbeat" and args["want_shutdown"] is True
    assert args["metadata_offset"] == 42 and args["saturated_log_dirs"] == ["d1"] and args["broker_epoch"] == 5


async def test_stale_epoch_registers_again() -> None:
    stale = FerryError(ErrorCode.STALE_BROKER_EPOCH, "old epoch")
    ctrl = ScriptedController({
        "register_broker": [{"broker_epoch": 5}, {"broker_epoch": 9}],
        "broker_heartbeat": [stale, {"is_fenced": False, "is_caught_up": True, "should_shut_down": False}],
    })
    seen: list[int] = []
    hb = heartbeater(ctrl, seen)
    await hb.register()
    hb.start()
    for _ in range(200):
        if hb.state.broker_epoch == 9:
            break
        await asyncio.sleep(0.01)
    await hb.stop()
    assert hb.state.broker_epoch == 9 and seen == [5, 9]


async def test_lease_never_outlasts_the_controllers_session_timeout() -> None:
    """A broker configured with a longer session than the controllers' would hold its lease past
    the moment the controller may fence it; a stated controller session bounds the lease."""
    ctrl = ScriptedController({
        "register_broker": [{"broker_epoch": 5}],
        "broker_heartbeat": [{"is_fenced": False, "is_caught_up": True, "should_shut_down": False},
                             {"is_fenced": False, "is_caught_up": True, "should_shut_down": False,
                              "session_timeout_ms": 400},
                             {"is_fenced": False, "is_caught_up": True, "should_shut_down": False,
                              "session_timeout_ms": 60_000}],
    })
    hb = heartbeater(ctrl)
    configured = hb.lease.session_timeout_s
    await hb.register()
    await hb.beat_once()
    assert hb.lease.session_timeout_s == configured  # nothing stated: the broker's own setting
    await hb.beat_once()
    sent = hb.lease.sent_mono_s
    assert hb.lease.session_timeout_s == 0.4 < configured
    assert hb.lease.valid(sent + 0.39) and not hb.lease.valid(sent + 0.4)
    await hb.beat_once()
    assert hb.lease.session_timeout_s == 0.4  # a longer controller session never lengthens it


class SlowController(ScriptedController):
    """Answers each heartbeat after ``delay_s``; answers may be scripted per call."""

    def __init__(self, answers: dict[str, list[Any]], delay_s: float) -> None:
        super().__init__(answers)
        self.delay_s = delay_s
        self.sent_at: list[float] = []

    async def write(self, op: str, args: dict[str, Any]) -> dict[str, Any]:
        if op == "broker_heartbeat":
            self.sent_at.append(asyncio.get_running_loop().time())
            await asyncio.sleep(self.delay_s)
        return await super().write(op, args)


async def test_heartbeats_leave_every_interval_while_answers_are_slow() -> None:
    # answers take 8 intervals: sent one after another, they would arrive 8 intervals apart
    ok = {"is_fenced": False, "is_caught_up": True, "should_shut_down": False}
    ctrl = SlowController({"register_broker": [{"broker_epoch": 5}], "broker_heartbeat": [ok]}, delay_s=0.08)
    hb = heartbeater(ctrl)
    await hb.register()
    hb.start()
    await asyncio.sleep(0.3)
    await hb.stop()
    gaps = [b - a for a, b in pairwise(ctrl.sent_at)]
    assert len(ctrl.sent_at) >= 10 and max(gaps) < 0.06, gaps
    assert not hb.state.fenced and hb.lease.sent_mono_s > 0


async def test_an_older_answer_never_overrides_a_newer_one() -> None:
    from broker.heartbeat import AnswerOrder, max_in_flight
    order = AnswerOrder()
    assert order.admit(2.0) and not order.admit(1.0) and order.admit(2.0) and order.admit(3.5)
    assert max_in_flight(250, 1500) == 6 and max_in_flight(2000, 1000) == 1

    release: dict[str, asyncio.Event] = {"old": asyncio.Event(), "new": asyncio.Event()}
    replies = {"old": {"is_fenced": False, "is_caught_up": True}, "new": {"is_fenced": True, "is_caught_up": True}}
    which = iter(["old", "new"])

    async def write(op: str, args: dict[str, Any]) -> dict[str, Any]:
        name = next(which)
        await release[name].wait()
        return dict(replies[name])

    hb = Heartbeater(ControllerWrites(WriteFunction(write)), broker_id=3, interval_ms=10, session_timeout_ms=1000,
                     registration=lambda: {}, metadata_offset=lambda: 0, dir_states=lambda: ([], []))
    old = asyncio.create_task(hb.beat_once())
    await asyncio.sleep(0.01)
    new = asyncio.create_task(hb.beat_once())
    await asyncio.sleep(0.01)
    release["new"].set()
    await new
    assert hb.state.fenced
    release["old"].set()
    await old  # sent first, answered last: "not fenced" is stale and changes nothing
    assert hb.state.fenced and hb.lease.sent_mono_s < 0


async def test_an_answer_about_an_incarnation_registered_over_changes_nothing() -> None:
    release = asyncio.Event()

    async def write(op: str, args: dict[str, Any]) -> dict[str, Any]:
        await release.wait()
        return {"is_fenced": False, "is_caught_up": True}

    hb = Heartbeater(ControllerWrites(WriteFunction(write)), broker_id=3, interval_ms=10, session_timeout_ms=1000,
                     registration=lambda: {}, metadata_offset=lambda: 0, dir_states=lambda: ([], []))
    hb.state.broker_epoch = 5
    late = asyncio.create_task(hb.beat_once())
    await asyncio.sleep(0.01)
    hb.state.broker_epoch, hb.state.fenced = 9, True  # registered again meanwhile: fenced until told otherwise
    release.set()
    await late
    assert hb.state.fenced and hb.lease.sent_mono_s < 0


async def test_the_controllers_own_answers_bound_the_lease() -> None:
    """Against the real operations (an in-process controller fencing on a 3 s session), a broker
    configured with 9 s holds a lease of 3 s from its registration on."""
    from metadata_quorum.local_controller import LocalController, LocalTransport
    from tests.quorum.quorum_helpers import ManualClock

    c = LocalController(ManualClock(), session_timeout_ms=3000)
    hb = Heartbeater(ControllerWrites(LocalTransport(c)), broker_id=0, interval_ms=10, session_timeout_ms=9000,
                     registration=lambda: {"endpoints": ["http://127.0.0.1:1"], "rack": None, "log_dirs": []},
                     metadata_offset=lambda: c.image.offset, dir_states=lambda: ([], []))
    await hb.register()
    assert hb.lease.session_timeout_s == 3.0
    await hb.beat_once()
    assert hb.lease.session_timeout_s == 3.0
