"""The controller's state machine on its own: events in, effects out, no loop, socket or clock."""
from __future__ import annotations

from typing import Any

from metadata_quorum.controller_core import (Answer, ControllerCore, CoreConfig, FixedSlice, NotLeader,
                                             NotLeaderError, PlannedCommand, Refusal, to_command)
from metadata_quorum.controller_result import ControllerResult, OpContext
from metadata_quorum.kernel.errors import ErrorCode, FerryError
from metadata_quorum.operations import WRITE_OPERATIONS
from metadata_quorum.raft import AppliedCommand, CommittedLog
from metadata_quorum.records import KVRecord, NoOpRecord, decode_record

import pytest


def put(image: Any, args: dict[str, Any], ctx: OpContext) -> ControllerResult:
    if not args.get("key"):
        raise FerryError(ErrorCode.INVALID_REQUEST, "key is required")
    return ControllerResult((KVRecord(key=args["key"], value=args.get("value")),), {"at": ctx.next_offset})


def get(image: Any, args: dict[str, Any], ctx: OpContext) -> ControllerResult:
    return ControllerResult((), {"value": image.kv.get(args["key"])})


OPS = dict(WRITE_OPERATIONS, put=put, get=get)


def make(**overrides: Any) -> tuple[ControllerCore, CommittedLog]:
    state = CommittedLog(10_000)
    return ControllerCore(CoreConfig(node_id=1, **overrides), state, OPS), state


def commit(core: ControllerCore, state: CommittedLog, commands: list[PlannedCommand], now_ms: int) -> list[AppliedCommand]:
    applied = []
    for planned in commands:
        a = state.apply_committed(to_command(planned))
        core.committed(a, now_ms)
        applied.append(a)
    return applied


def tick(core: ControllerCore, state: CommittedLog, now_ms: int) -> None:
    """The driver's timer at ``now_ms``: queue ``tick``, run it and commit what it wrote."""
    core.tick(now_ms)
    core.run(FixedSlice(now_ms))
    commit(core, state, core.take_ready().commands, now_ms)


def activate(core: ControllerCore, state: CommittedLog, epoch: int = 1, now_ms: int = 1000) -> None:
    core.became_leader(epoch, now_ms)
    core.run(FixedSlice(now_ms))
    ready = core.take_ready()
    assert len(ready.commands) == 1 and not core.active
    commit(core, state, ready.commands, now_ms)
    assert core.active and core.active_since_ms == now_ms


def kv_log(state: CommittedLog) -> list[Any]:
    return [decode_record(r) for _o, r in state.read(0, 10_000).records]


def test_a_new_leader_commits_a_noop_first_and_only_then_runs_writes() -> None:
    core, state = make()
    with pytest.raises(NotLeaderError):
        core.submit("put", {"key": "a"}, 0)
    core.became_leader(3, 1000)
    token = core.submit("put", {"key": "a", "value": "1"}, 1000)
    core.run(FixedSlice(1000))
    ready = core.take_ready()
    assert [c.plan.batches for c in ready.commands] == [((NoOpRecord(term=3, leader_id=1),),)]
    assert not ready.outcomes and not core.active
    commit(core, state, ready.commands, 1000)
    core.run(FixedSlice(1001))
    ready = core.take_ready()
    assert [c.prev for c in ready.commands] == [state.last_command_id]  # chained after the NoOp
    commit(core, state, ready.commands, 1002)
    assert core.take_ready().outcomes == [Answer(token, {"at": 1}, 1, (KVRecord("a", "1"),))]
    assert kv_log(state) == [NoOpRecord(term=3, leader_id=1), KVRecord("a", "1")]


def test_queued_operations_form_one_command_and_a_read_waits_for_the_writes_before_it() -> None:
    core, state = make()
    activate(core, state)
    a = core.submit("put", {"key": "a", "value": "1"}, 1000)
    r = core.submit("get", {"key": "a"}, 1000)
    bad = core.submit("put", {}, 1000)
    core.run(FixedSlice(1000))
    ready = core.take_ready()
    assert len(ready.commands) == 1
    assert not ready.outcomes  # even a refusal waits for the writes before it
    commit(core, state, ready.commands, 1001)
    outcomes = core.take_ready().outcomes
    assert {o.token for o in outcomes} == {a, r, bad}
    assert [o.reply for o in outcomes if o.token == r] == [{"value": "1"}]  # type: ignore[union-attr]
    assert [type(o) for o in outcomes if o.token == bad] == [Refusal]
    late_bad = core.submit("put", {}, 1002)
    core.run(FixedSlice(1002))
    (refused,) = core.take_ready().outcomes  # nothing uncommitted before it: refused at once
    assert isinstance(refused, Refusal) and refused.token == late_bad
    assert refused.error.error is ErrorCode.INVALID_REQUEST


def fence_ops() -> dict[str, Any]:
    """``fence`` writes a KV marker; ``use`` is refused while it is set (a refusal read off state)."""
    def fence(image: Any, args: dict[str, Any], ctx: OpContext) -> ControllerResult:
        return ControllerResult((KVRecord(key="fenced", value="1"),), {})

    def use(image: Any, args: dict[str, Any], ctx: OpContext) -> ControllerResult:
        if image.kv.get("fenced"):
            raise FerryError(ErrorCode.STREAM_FENCED, "fenced")
        return ControllerResult((), {"ok": True})

    return dict(OPS, fence=fence, use=use)


def test_a_refusal_read_off_uncommitted_records_waits_for_them_and_is_retriable_if_they_are_lost() -> None:
    state = CommittedLog(10_000)
    core = ControllerCore(CoreConfig(node_id=1), state, fence_ops())
    activate(core, state)
    core.submit("fence", {}, 1000)
    core.run(FixedSlice(1000))
    fence_cmd = core.take_ready().commands
    use = core.submit("use", {}, 1000)
    core.run(FixedSlice(1000))
    assert not core.take_ready().outcomes  # the fence it failed on is not committed yet
    commit(core, state, fence_cmd, 1001)
    outcomes = {o.token: o for o in core.take_ready().outcomes}
    assert isinstance(outcomes[use], Refusal) and outcomes[use].error.error is ErrorCode.STREAM_FENCED

    # The same, but the leader is deposed before the fence commits: nothing was decided.
    state2 = CommittedLog(10_000)
    core2 = ControllerCore(CoreConfig(node_id=1), state2, fence_ops())
    activate(core2, state2)
    core2.submit("fence", {}, 1000)
    core2.run(FixedSlice(1000))
    core2.take_ready()
    use2 = core2.submit("use", {}, 1000)
    core2.run(FixedSlice(1000))
    assert not core2.take_ready().outcomes
    core2.lost_leadership("deposed")
    outcomes2 = {o.token: o for o in core2.take_ready().outcomes}
    assert isinstance(outcomes2[use2], NotLeader)


def test_a_rejected_command_fails_its_operations_and_the_view_is_rebuilt() -> None:
    core, state = make()
    activate(core, state)
    core.submit("put", {"key": "mine", "value": "1"}, 1000)
    core.run(FixedSlice(1000))
    mine = core.take_ready().commands
    # Another leader's command commits first: the leader's one no longer follows the log.
    state.apply_committed(to_command(PlannedCommand("x.9.0", state.last_command_id, 9,
                                                     mine[0].plan.__class__(((KVRecord("theirs", "1"),),), False, False))))
    applied = commit(core, state, mine, 1001)
    assert not applied[0].accepted
    assert [type(o) for o in core.take_ready().outcomes] == [NotLeader]
    again = core.submit("put", {"key": "mine", "value": "2"}, 1002)
    core.run(FixedSlice(1002))
    commit(core, state, core.take_ready().commands, 1002)
    assert [o.token for o in core.take_ready().outcomes] == [again]
    assert kv_log(state)[-2:] == [KVRecord("theirs", "1"), KVRecord("mine", "2")]


def test_losing_leadership_fails_everything_and_forgets_sessions() -> None:
    core, state = make(max_inflight_commands=1)
    activate(core, state)
    core.sessions.last_heartbeat_ms[7] = 5
    first = core.submit("put", {"key": "a", "value": "1"}, 1000)
    core.run(FixedSlice(1000))
    core.take_ready()
    queued = core.submit("put", {"key": "b", "value": "1"}, 1000)
    core.run(FixedSlice(1000))  # one command in flight at most: b waits
    assert not core.take_ready()
    core.lost_leadership("deposed")
    outcomes = core.take_ready().outcomes
    assert {o.token for o in outcomes} == {first, queued}
    assert all(isinstance(o, NotLeader) and o.hide_self for o in outcomes)
    assert core.last_heartbeat_ms == {} and not core.is_leader and not core.has_work()


def test_commands_not_committed_in_time_fail_retriably_and_the_noop_is_retried() -> None:
    core, state = make(commit_timeout_ms=100)
    core.became_leader(1, 1000)
    core.run(FixedSlice(1000))
    core.take_ready()  # the NoOp is lost
    core.tick(1050)
    assert core.inflight_commands == 1
    core.tick(1101)
    assert core.inflight_commands == 0 and core.has_work()
    core.run(FixedSlice(1101))
    retry = core.take_ready().commands
    assert len(retry) == 1 and retry[0].plan.batches[0][0] == NoOpRecord(term=1, leader_id=1)
    commit(core, state, retry, 1102)
    assert core.active
    token = core.submit("put", {"key": "a", "value": "1"}, 1200)
    core.run(FixedSlice(1200))
    core.take_ready()
    core.tick(1301)
    (timed_out,) = core.take_ready().outcomes
    assert isinstance(timed_out, Refusal) and timed_out.token == token
    assert timed_out.error.error is ErrorCode.REQUEST_TIMED_OUT


def test_admission_refuses_what_the_queue_would_keep_too_long_but_never_a_heartbeat() -> None:
    core, state = make()
    activate(core, state)
    core.op_cost_ms = 1.0
    tokens = core.submit_many([("put", {"key": f"k{i}", "value": "v"}) for i in range(600)], 1000, 1000)
    refused = [o for o in core.take_ready().outcomes if isinstance(o, Refusal)]
    assert len(tokens) == 600 and len(refused) == 100 and core.shed_ops == 100
    assert refused[0].error.error is ErrorCode.THROTTLING_QUOTA_EXCEEDED
    with pytest.raises(FerryError) as err:
        core.submit("put", {"key": "x"}, 1000, budget_ms=10)
    assert err.value.error is ErrorCode.THROTTLING_QUOTA_EXCEEDED
    core.submit("broker_heartbeat", {"broker_id": 1, "broker_epoch": 0}, 1000, budget_ms=10)  # admitted


def test_a_cancelled_operation_is_never_run() -> None:
    core, state = make()
    activate(core, state)
    token = core.submit("put", {"key": "late", "value": "1"}, 1000)
    core.cancel(token)
    core.run(FixedSlice(1000))
    assert not core.take_ready()


def test_sessions_start_at_activation_renew_on_arrival_and_tick_fences_the_silent() -> None:
    core, state = make(session_timeout_ms=1000)
    activate(core, state, now_ms=0)
    reg = core.submit("register_broker", {"broker_id": 4, "incarnation_id": "i4", "endpoints": ["http://h:1"],
                                          "log_dirs": [{"dir_id": "d", "path": "/d"}]}, 0)
    core.run(FixedSlice(0))
    commit(core, state, core.take_ready().commands, 0)
    epoch = [o for o in core.take_ready().outcomes if o.token == reg][0].reply["broker_epoch"]  # type: ignore[union-attr]
    core.submit("broker_heartbeat", {"broker_id": 4, "broker_epoch": epoch, "metadata_offset": epoch}, 10)
    assert core.last_heartbeat_ms[4] == 10  # counted on arrival, before it runs
    core.run(FixedSlice(20))
    commit(core, state, core.take_ready().commands, 20)
    assert not state.image.cluster.brokers[4].fenced
    # A new term: sessions are forgotten, then every unfenced broker gets a full one at activation.
    core.lost_leadership("deposed")
    core.take_ready()
    activate(core, state, epoch=2, now_ms=500)
    assert core.last_heartbeat_ms == {4: 500}
    tick(core, state, 1400)
    assert not state.image.cluster.brokers[4].fenced
    tick(core, state, 1501)
    assert state.image.cluster.brokers[4].fenced


def test_a_tick_queued_before_the_loop_was_held_judges_sessions_when_it_was_queued() -> None:
    """The driver's loop is held 2 s (a long request, a starved machine) with a tick queued: the
    tick runs right after the hold, before the heartbeats that waited are read and the hold is
    credited to every session. Judged at its run time it would fence a live broker."""
    core, state = make(session_timeout_ms=1500)
    activate(core, state, now_ms=0)
    _registered(core, state, now_ms=100)  # last heard at 100
    core.tick(1000)  # queued; the loop is then held until 3000
    core.run(FixedSlice(3000))
    commit(core, state, core.take_ready().commands, 3000)
    assert not state.image.cluster.brokers[4].fenced
    core.extend_sessions(2000)  # the driver credits the hold, then its next tick
    tick(core, state, 3000)
    assert not state.image.cluster.brokers[4].fenced
    # Silent for a whole session after the credit: fenced.
    tick(core, state, 3601)
    assert state.image.cluster.brokers[4].fenced


def test_reelection_in_a_new_term_drops_the_old_terms_view() -> None:
    core, state = make()
    core.observe_leadership(True, 1, 0)
    core.run(FixedSlice(0))
    core.take_ready()
    core.observe_leadership(True, 2, 0)
    assert core.epoch == 2 and not core.active
    core.run(FixedSlice(0))
    (noop,) = core.take_ready().commands
    assert noop.epoch == 2
    core.observe_leadership(False, 2, 0)
    assert not core.is_leader


def _registered(core: ControllerCore, state: CommittedLog, broker_id: int = 4, now_ms: int = 1000) -> int:
    """Register and unfence ``broker_id`` at ``now_ms``; returns its broker epoch."""
    reg = core.submit("register_broker", {"broker_id": broker_id, "incarnation_id": f"i{broker_id}",
                                          "endpoints": ["http://h:1"], "log_dirs": [{"dir_id": "d", "path": "/d"}]},
                      now_ms)
    core.run(FixedSlice(now_ms))
    commit(core, state, core.take_ready().commands, now_ms)
    epoch = int([o for o in core.take_ready().outcomes if o.token == reg][0].reply["broker_epoch"])  # type: ignore[union-attr]
    core.submit("broker_heartbeat", {"broker_id": broker_id, "broker_epoch": epoch, "metadata_offset": epoch}, now_ms)
    core.run(FixedSlice(now_ms))
    commit(core, state, core.take_ready().commands, now_ms)
    core.take_ready()
    assert not state.image.cluster.brokers[broker_id].fenced
    return epoch


def test_a_heartbeat_is_answered_only_after_a_command_of_this_term_sent_after_it_commits() -> None:
    """Its answer grants a write lease: a leader already deposed (cut off, still believing it
    leads) must not give one off its stale image. The barrier adds no metadata record."""
    core, state = make()
    activate(core, state)
    epoch = _registered(core, state)
    offset = state.high_watermark
    beat = {"broker_id": 4, "broker_epoch": epoch, "metadata_offset": offset - 1}
    token = core.submit("broker_heartbeat", beat, 1010)
    core.run(FixedSlice(1010))
    ready = core.take_ready()
    assert not ready.outcomes and [c.plan.batches for c in ready.commands] == [()]
    (applied,) = commit(core, state, ready.commands, 1011)
    assert applied.accepted and state.high_watermark == offset  # no record, no offset
    (answer,) = core.take_ready().outcomes
    assert isinstance(answer, Answer) and answer.token == token and answer.reply["is_fenced"] is False
    # heartbeats run together share one barrier; one run with a write rides on the write's command
    tokens = [core.submit("broker_heartbeat", beat, 1020) for _ in range(3)]
    core.run(FixedSlice(1020))
    assert len(core.take_ready().commands) == 1
    core.lost_leadership("deposed")  # the barrier never commits: the answers are retriable
    assert {o.token for o in core.take_ready().outcomes if isinstance(o, NotLeader)} == set(tokens)
    activate(core, state, epoch=2, now_ms=1030)
    hb = core.submit("broker_heartbeat", beat, 1030)
    put_token = core.submit("put", {"key": "k", "value": "v"}, 1030)
    core.run(FixedSlice(1030))
    ready = core.take_ready()
    assert len(ready.commands) == 1 and not ready.outcomes
    commit(core, state, ready.commands, 1031)
    assert {o.token for o in core.take_ready().outcomes} == {hb, put_token}


def test_records_in_flight_are_bounded_but_a_heartbeat_barrier_is_not_held_back() -> None:
    core, state = make(max_inflight_records=3, max_group_ops=2)
    activate(core, state)
    epoch = _registered(core, state)
    for i in range(6):
        core.submit("put", {"key": f"k{i}", "value": "v"}, 1000)
    core.run(FixedSlice(1000))
    first = core.take_ready().commands
    # groups of 2 records: the second group leaves (2 < 3 in flight), the third waits
    assert [len(c.plan.batches) for c in first] == [2, 2] and core.inflight_records == 4
    hb = core.submit("broker_heartbeat", {"broker_id": 4, "broker_epoch": epoch, "metadata_offset": 0}, 1001)
    core.run(FixedSlice(1001))
    (barrier,) = core.take_ready().commands  # a heartbeat's barrier carries no records and is not held
    assert barrier.plan.batches == () and core.inflight_records == 4
    commit(core, state, first, 1002)
    core.take_ready()
    core.run(FixedSlice(1002))
    assert [len(c.plan.batches) for c in core.take_ready().commands] == [2]
    assert hb not in {o.token for o in core.take_ready().outcomes}


def test_a_read_may_cut_a_large_batch_and_a_follower_applies_it_only_whole() -> None:
    import asyncio

    from metadata_quorum.client import MetadataLogFollower

    def many(image: Any, args: dict[str, Any], ctx: OpContext) -> ControllerResult:
        return ControllerResult(tuple(KVRecord(f"m{i}", "1") for i in range(int(args["n"]))), {})

    core, state = make()
    core.operations = dict(OPS, many=many)
    activate(core, state)  # offset 0: the NoOp
    for name, args in (("put", {"key": "a", "value": "1"}), ("many", {"n": 10}), ("put", {"key": "b", "value": "1"})):
        core.submit(name, args, 1000)
        core.run(FixedSlice(1000))
        commit(core, state, core.take_ready().commands, 1000)
    # batches: [0] NoOp, [1] a, [2..11] m0..m9, [12] b
    whole = state.read(1, 4)
    assert [o for o, _ in whole.records] == [1] and whole.batch_end
    pieces = []
    offset = 1
    while offset < state.high_watermark:
        piece = state.read(offset, 4, cut_batches=True)
        pieces.append(([o for o, _ in piece.records], piece.batch_end))
        offset = piece.records[-1][0] + 1
    assert pieces == [([1, 2, 3, 4], False), ([5, 6, 7, 8], False), ([9, 10, 11], True), ([12], True)]

    seen: list[tuple[list[int], bool]] = []

    def on_batch(records: list[tuple[int, Any]], delta: Any, image: Any) -> None:
        seen.append(([o for o, _ in records], all(f"m{i}" in image.kv for i in range(10))))

    class Scripted:
        bootstrap = ["http://unused"]

    follower = MetadataLogFollower(Scripted(), on_batch, start_offset=1)  # type: ignore[arg-type]

    async def feed() -> None:
        while follower.fetch_offset < state.high_watermark:
            piece = state.read(follower.fetch_offset, 4, cut_batches=True)
            await follower.handle({"records": [{"offset": o, "record": r} for o, r in piece.records],
                                   "high_watermark": piece.high_watermark, "batch_end": piece.batch_end})
            if not piece.batch_end:  # nothing of the cut batch is visible yet
                assert "m0" not in follower.image.kv and follower.next_offset == 1

    asyncio.run(feed())
    # the big batch arrives in one callback, with all of its records, once its last record came
    assert seen == [([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11], True), ([12], True)]
    assert follower.next_offset == follower.fetch_offset == 13


def test_the_controllers_tick_looks_at_leaderless_partitions_once_a_second() -> None:
    from metadata_quorum.controller_core import LEADERLESS_SCAN_INTERVAL_MS

    core, state = make()
    activate(core, state)
    asked = []
    for now_ms in range(1000, 1000 + 2 * LEADERLESS_SCAN_INTERVAL_MS + 1, 200):
        core.tick(now_ms)
        asked.append(next(p.args["elect_leaderless"] for p in core._queue if p.internal))
        core.run(FixedSlice(now_ms))
        commit(core, state, core.take_ready().commands, now_ms)
    assert asked == [True, False, False, False, False, True, False, False, False, False, True]


def put_many(image: Any, args: dict[str, Any], ctx: OpContext) -> ControllerResult:
    keys = args["items"]
    return ControllerResult(tuple(KVRecord(key=k, value="v") for k in keys),
                            {"responses": [{"key": k, "at": ctx.next_offset} for k in keys]})


class OpsSlice(FixedSlice):
    """Runs out after ``ops`` operations (one ``expired`` check per operation after the first)."""

    def __init__(self, at_ms: int, ops: int) -> None:
        super().__init__(at_ms)
        self.checks = ops

    def expired(self) -> bool:
        self.checks -= 1
        return self.checks < 0


def test_an_operation_over_many_items_runs_as_slices_and_is_answered_once(monkeypatch: pytest.MonkeyPatch) -> None:
    from metadata_quorum import op_slices

    monkeypatch.setitem(op_slices.SLICEABLE, "put_many", op_slices.Sliceable("items", "responses"))
    core, state = make()
    core.operations = dict(OPS, put_many=put_many)
    activate(core, state)
    keys = [f"k{i}" for i in range(2 * op_slices.SLICE_ITEMS + 5)]
    token = core.submit("put_many", {"items": keys}, 1000)
    assert core.queue_depth == 3  # three pieces queued, each its own atomic batch
    # the loop gets control back between pieces: a heartbeat arriving then runs before the rest
    assert core.run(OpsSlice(1000, 1)) is True
    commit(core, state, core.take_ready().commands, 1000)
    assert core.take_ready().outcomes == []  # no answer for a part of the operation
    core.run(FixedSlice(1001))
    commit(core, state, core.take_ready().commands, 1001)
    (answer,) = core.take_ready().outcomes
    assert isinstance(answer, Answer) and answer.token == token
    assert [r["key"] for r in answer.reply["responses"]] == keys
    assert answer.offset == state.high_watermark - 1
    assert [r.key for r in kv_log(state) if isinstance(r, KVRecord)] == keys


def test_a_sliced_operation_its_caller_gave_up_on_runs_no_further_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    from metadata_quorum import op_slices

    monkeypatch.setitem(op_slices.SLICEABLE, "put_many", op_slices.Sliceable("items", "responses"))
    core, state = make()
    core.operations = dict(OPS, put_many=put_many)
    activate(core, state)
    keys = [f"k{i}" for i in range(op_slices.SLICE_ITEMS + 1)]
    token = core.submit("put_many", {"items": keys}, 1000)
    core.run(OpsSlice(1000, 1))
    core.cancel(token)
    commit(core, state, core.take_ready().commands, 1000)
    core.run(FixedSlice(1001))
    commit(core, state, core.take_ready().commands, 1001)
    assert core.take_ready().outcomes == []
    assert len([r for r in kv_log(state) if isinstance(r, KVRecord)]) == op_slices.SLICE_ITEMS
    assert not core._sliced and not core._piece_of and not core._abandoned_pieces
