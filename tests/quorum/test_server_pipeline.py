"""The replicated log and the leader's write pipeline, driven without Raft (deterministic, fast).

A fake node applies submitted commands on the event loop in order, as Raft would once they commit;
tests can hold commands back, reorder the leader's fate, or inject a foreign command.
"""
from __future__ import annotations

import asyncio
from typing import Any, Callable

import pytest

from metadata_quorum.config import ControllerConfig, PeerAddress
from metadata_quorum.controller_result import ControllerResult, OpContext
from metadata_quorum.kernel.errors import ErrorCode, FerryError
from metadata_quorum.quorum_controller import QuorumController
from metadata_quorum.raft import Command, CommittedLog
from metadata_quorum.delta import MetadataDelta
from metadata_quorum.image import EMPTY_IMAGE
from metadata_quorum.records import KVRecord, NoOpRecord, decode_record


def put(image: Any, args: dict[str, Any], ctx: OpContext) -> ControllerResult:
    if not args.get("key"):
        raise FerryError(ErrorCode.INVALID_REQUEST, "key is required")
    return ControllerResult((KVRecord(key=args["key"], value=args.get("value")),), {"next_offset": ctx.next_offset})


def get_nothing(image: Any, args: dict[str, Any], ctx: OpContext) -> ControllerResult:
    return ControllerResult((), {"value": image.kv.get(args["key"])})


def two(image: Any, args: dict[str, Any], ctx: OpContext) -> ControllerResult:
    """Two records that must commit together, the second depending on the first being visible."""
    n = int(image.kv.get("counter", "0"))
    return ControllerResult((KVRecord("counter", str(n + 1)), KVRecord(f"seen-{n}", "1")), {"n": n})


OPS: dict[str, Callable[..., ControllerResult]] = {"put": put, "get": get_nothing, "two": two}


class FakeNode:
    """Stands in for RaftNode: leadership is set by the test; commands apply when released."""

    def __init__(self, state: CommittedLog, loop: asyncio.AbstractEventLoop) -> None:
        self.state = state
        self.loop = loop
        self.is_leader = False
        self.term = 0
        self.held: list[Command] = []
        self.hold = False
        self.submitted: list[Command] = []

    def submit(self, command: Command, callback: Any) -> None:
        self.submitted.append(command)
        if self.hold:
            self.held.append(command)
        else:
            self.loop.call_soon(self.apply, command)

    def apply(self, command: Command) -> None:
        self.state.apply_committed(command)  # what pysyncobj does once the entry commits

    def release(self) -> None:
        held, self.held = self.held, []
        for command in held:
            self.apply(command)

    def leader_id(self) -> int | None:
        return 1 if self.is_leader else None

    def status(self) -> dict[str, Any]:
        return {}

    def last_response_monotonic(self) -> dict[str, float]:
        return {}


def make(loop: asyncio.AbstractEventLoop, **overrides: Any) -> tuple[QuorumController, FakeNode, CommittedLog]:
    config = ControllerConfig(node_id=1, controllers={1: PeerAddress("127.0.0.1:1", "127.0.0.1:2")},
                              data_dir="/nonexistent", **overrides)
    holder: dict[str, QuorumController] = {}
    state = CommittedLog(1000, on_applied=lambda a: holder["c"].on_applied_threadsafe(a))
    controller = QuorumController(config, state, OPS, loop)
    holder["c"] = controller
    node = FakeNode(state, loop)
    controller.start(node)  # type: ignore[arg-type]
    return controller, node, state


async def become_leader(controller: QuorumController, node: FakeNode) -> None:
    node.is_leader, node.term = True, node.term + 1
    controller.on_state_changed_threadsafe(1, 2)
    for _ in range(200):
        if controller.active:
            return
        await asyncio.sleep(0.001)
    raise AssertionError("never became active")


def kv_log(state: CommittedLog) -> list[Any]:
    return [decode_record(r) for r in (rec for _o, rec in state.read(0, 10_000).records)]


async def test_not_leader_answers_not_controller() -> None:
    controller, _node, _state = make(asyncio.get_running_loop())
    with pytest.raises(FerryError) as err:
        await controller.write("put", {"key": "a"}, 1.0)
    assert err.value.error is ErrorCode.NOT_CONTROLLER
    assert err.value.details == {"leader_id": -1, "leader_url": None}
    await controller.stop()


async def test_new_leader_commits_a_noop_first_and_the_term_is_the_epoch() -> None:
    controller, node, state = make(asyncio.get_running_loop())
    await become_leader(controller, node)
    reply, offset = await controller.write("put", {"key": "a", "value": "1"}, 1.0)
    assert offset == 1 and reply == {"next_offset": 1}
    assert kv_log(state) == [NoOpRecord(term=1, leader_id=1), KVRecord("a", "1")]
    assert state.image.epoch == 1
    await controller.stop()


async def test_ops_run_one_at_a_time_against_uncommitted_records_and_group_into_one_command() -> None:
    controller, node, state = make(asyncio.get_running_loop())
    await become_leader(controller, node)
    node.hold = True
    before = len(node.submitted)
    writes = [asyncio.ensure_future(controller.write("two", {}, 2.0)) for _ in range(5)]
    await asyncio.sleep(0.01)
    assert not any(w.done() for w in writes)  # nothing is answered before it commits
    assert len(node.submitted) == before + 1  # five operations, one Raft command
    node.release()
    replies = [await w for w in writes]
    assert [r[0]["n"] for r in replies] == [0, 1, 2, 3, 4]  # each saw the previous, uncommitted ones
    assert [r[1] for r in replies] == [2, 4, 6, 8, 10]  # each op's last offset
    assert state.image.kv["counter"] == "5"
    await controller.stop()


async def test_bad_input_fails_alone_and_writes_nothing() -> None:
    controller, node, state = make(asyncio.get_running_loop())
    await become_leader(controller, node)
    hw = state.high_watermark
    with pytest.raises(FerryError) as err:
        await controller.write("put", {"value": "x"}, 1.0)
    assert err.value.error is ErrorCode.INVALID_REQUEST
    with pytest.raises(FerryError):
        await controller.write("nope", {}, 1.0)
    assert state.high_watermark == hw
    await controller.stop()


async def test_an_op_without_records_waits_for_earlier_writes_to_commit() -> None:
    controller, node, state = make(asyncio.get_running_loop())
    await become_leader(controller, node)
    node.hold = True
    w = asyncio.ensure_future(controller.write("put", {"key": "k", "value": "v"}, 2.0))
    r = asyncio.ensure_future(controller.write("get", {"key": "k"}, 2.0))
    await asyncio.sleep(0.01)
    assert not r.done()
    node.release()
    assert (await r)[0] == {"value": "v"}
    await w
    await controller.stop()


async def test_a_foreign_command_rejects_the_leaders_view_which_is_rebuilt() -> None:
    loop = asyncio.get_running_loop()
    controller, node, state = make(loop)
    await become_leader(controller, node)
    node.hold = True
    w = asyncio.ensure_future(controller.write("put", {"key": "mine", "value": "1"}, 2.0))
    await asyncio.sleep(0.01)
    # Another leader's command commits first at the same position: ours must be rejected.
    node.apply(Command.of("other.9.0", state.last_command_id, 9, ((KVRecord("theirs", "1"),),)))
    node.release()
    with pytest.raises(FerryError) as err:
        await w
    assert err.value.error is ErrorCode.NOT_CONTROLLER and err.value.retriable
    assert "mine" not in state.image.kv and state.image.kv["theirs"] == "1"
    node.hold = False
    _reply, offset = await controller.write("put", {"key": "mine", "value": "2"}, 2.0)  # view rebuilt
    assert kv_log(state)[offset] == KVRecord("mine", "2")
    await controller.stop()


async def test_losing_leadership_fails_pending_writes_and_refuses_new_ones() -> None:
    controller, node, state = make(asyncio.get_running_loop())
    await become_leader(controller, node)
    node.hold = True
    w = asyncio.ensure_future(controller.write("put", {"key": "k", "value": "v"}, 2.0))
    await asyncio.sleep(0.01)
    node.is_leader = False
    controller.on_state_changed_threadsafe(2, 0)
    with pytest.raises(FerryError) as err:
        await w
    assert err.value.error is ErrorCode.NOT_CONTROLLER
    with pytest.raises(FerryError):
        await controller.write("put", {"key": "k2"}, 1.0)
    await controller.stop()


async def test_commands_that_never_commit_time_out_and_reset_the_view() -> None:
    controller, node, state = make(asyncio.get_running_loop(), commit_timeout_ms=1)
    await become_leader(controller, node)
    node.hold = True
    w = asyncio.ensure_future(controller.write("put", {"key": "lost", "value": "1"}, 2.0))
    await asyncio.sleep(0.01)
    controller.expire_inflight()
    with pytest.raises(FerryError) as err:
        await w
    assert err.value.error is ErrorCode.REQUEST_TIMED_OUT
    node.held.clear()  # the command never commits
    node.hold = False
    _reply, offset = await controller.write("put", {"key": "next", "value": "1"}, 2.0)
    assert "lost" not in state.image.kv and kv_log(state)[offset] == KVRecord("next", "1")
    await controller.stop()


def test_an_expected_image_is_used_only_for_an_accepted_command_at_that_offset() -> None:
    from metadata_quorum.delta import MetadataDelta
    from metadata_quorum.image import EMPTY_IMAGE

    log = CommittedLog(1000)
    stale = MetadataDelta(EMPTY_IMAGE).replay_all([KVRecord("wrong", "1")]).apply()
    log.expect("a", stale)  # offset 0 and epoch -1: does not match the command below, so it is replayed
    log.apply_committed(Command.of("a", "", 1, ((KVRecord("x", "1"),),)))
    assert dict(log.image.kv) == {"x": "1"}
    log.expect("b", stale)
    assert log.apply_committed(Command.of("b", "zzz", 1, ((KVRecord("y", "1"),),))).accepted is False
    assert dict(log.image.kv) == {"x": "1"} and log._expected == {}


def test_log_rejects_stale_and_duplicate_commands_the_same_way_everywhere() -> None:
    logs = [CommittedLog(1000) for _ in range(3)]
    commands = [
        Command.of("a", "", 1, ((KVRecord("x", "1"),),)),
        Command.of("b", "a", 1, ((KVRecord("y", "1"), KVRecord("z", "1")), (KVRecord("w", "1"),))),
        Command.of("b", "a", 1, ((KVRecord("y", "2"),),)),  # duplicate id, stale prev
        Command.of("c", "zzz", 2, ((KVRecord("q", "1"),),)),  # computed against another view
        Command.of("e", "b", 2, ((KVRecord("x", "2"),),)),
    ]
    for log in logs:
        results = [log.apply_committed(c) for c in commands]
        assert [r.accepted for r in results] == [True, True, False, False, True]
        assert log.high_watermark == 5
        assert dict(log.image.kv) == {"x": "2", "y": "1", "z": "1", "w": "1"}
        assert (log.image.offset, log.image.epoch) == (4, 2)
    assert logs[0].read(0, 100) == logs[1].read(0, 100) == logs[2].read(0, 100)
    piece = logs[0].read(1, 1)
    assert [o for o, _ in piece.records] == [1, 2]  # whole batches, even past max_records


def test_log_keeps_recent_batches_and_snapshots_older_offsets_and_survives_a_dump() -> None:
    from metadata_quorum.raft import LogCore, encode_snapshot

    log = CommittedLog(10)
    raft_side = LogCore()  # what the Raft process keeps: the same log, compacted when the controller says
    log.on_compacted = lambda keep, offset, epoch, image: raft_side.drop_before(keep, offset, epoch,
                                                                                encode_snapshot(image))
    prev = ""
    for i in range(30):
        command = Command.of(f"c{i}", prev, 1, ((KVRecord(f"k{i % 4}", str(i)),),))
        raft_side.apply(command)
        log.apply_committed(command)
        prev = f"c{i}"
        if i % 3 == 0:
            log.materialize()  # as a follower's controller loop does, off the Raft thread
    assert log.log_start_offset > 0
    old = log.read(0, 100)
    assert old.snapshot_offset == 29 and old.records == []
    assert {r["fields"]["key"] for r in old.snapshot_records or []} == {"k0", "k1", "k2", "k3"}
    recent = log.read(log.log_start_offset, 100)
    assert [o for o, _ in recent.records] == list(range(log.log_start_offset, 30))
    assert raft_side.log_start_offset == log.log_start_offset and raft_side.snapshot_offset > 0
    restored = CommittedLog(10)
    restored.reset(raft_side.to_dict())  # the Raft process's dump after a restart
    assert dict(restored.image.kv) == dict(log.image.kv) and restored.image.offset == 29
    assert restored.read(log.log_start_offset, 100) == recent
    restored.apply_committed(Command.of("c30", "c29", 1, ((KVRecord("k9", "x"),),)))
    assert restored.image.kv["k9"] == "x" and restored.high_watermark == 31


def test_a_reader_behind_the_log_reuses_the_last_snapshot_while_the_log_covers_what_follows() -> None:
    log = CommittedLog(10)
    prev = ""

    def commit(i: int) -> None:
        nonlocal prev
        log.apply_committed(Command.of(f"c{i}", prev, 1, ((KVRecord(f"k{i % 4}", str(i)),),)))
        log.materialize()
        prev = f"c{i}"

    for i in range(12):
        commit(i)
    assert log.log_start_offset > 0
    first = log.read(0, 100)
    assert first.snapshot_offset == 11
    commit(12)
    again = log.read(0, 100)
    assert again.snapshot_offset == 11 and again.snapshot_records is first.snapshot_records  # not rebuilt
    rest = log.read(12, 100)  # the reader goes on from the snapshot with the log
    assert [o for o, _ in rest.records] == [12]
    assert log.snapshot()[0] == 12  # GET /v1/snapshot: the latest
    for i in range(13, 40):
        commit(i)
    assert log.log_start_offset > 13
    later = log.read(0, 100)
    assert later.snapshot_offset is not None and later.snapshot_offset + 1 >= log.log_start_offset
    image = MetadataDelta(EMPTY_IMAGE).replay_all([decode_record(r) for r in later.snapshot_records or []]).apply()
    follow = log.read(later.snapshot_offset + 1, 100)
    for _o, r in follow.records:
        image = MetadataDelta(image).replay_all([decode_record(r)]).apply()
    assert dict(image.kv) == dict(log.image.kv)


async def test_a_new_leader_fences_a_broker_that_stops_heartbeating_after_failover() -> None:
    from metadata_quorum.operations import WRITE_OPERATIONS

    loop = asyncio.get_running_loop()
    controller, node, state = make(loop, session_timeout_ms=50)
    controller.operations = dict(WRITE_OPERATIONS)
    await become_leader(controller, node)
    reply, offset = await controller.write("register_broker", {
        "broker_id": 4, "incarnation_id": "i4", "endpoints": ["http://127.0.0.1:1"],
        "log_dirs": [{"dir_id": "d", "path": "/tmp/ferry-d"}]}, 2.0)
    hb, _ = await controller.write("broker_heartbeat", {"broker_id": 4, "broker_epoch": reply["broker_epoch"],
                                                        "metadata_offset": offset}, 2.0)
    assert hb["is_fenced"] is False
    node.is_leader = False
    controller.on_state_changed_threadsafe(2, 0)
    await asyncio.sleep(0.01)
    assert controller.last_heartbeat_ms == {}  # heartbeats are the active controller's memory only
    await become_leader(controller, node)
    assert 4 in controller.last_heartbeat_ms  # a fresh session, not "never heard of"
    await asyncio.sleep(0.1)
    controller.enqueue_internal("tick")
    for _ in range(200):
        if state.image.cluster.brokers[4].fenced:
            break
        await asyncio.sleep(0.005)
    assert state.image.cluster.brokers[4].fenced
    await controller.stop()


async def test_a_group_mixing_operations_sees_each_others_records() -> None:
    """Operations of every kind, queued together, run one after another on the same view."""
    from metadata_quorum.operations import WRITE_OPERATIONS

    controller, node, state = make(asyncio.get_running_loop())
    controller.operations = dict(WRITE_OPERATIONS)
    await become_leader(controller, node)
    node.hold = True
    before = len(node.submitted)
    ops: list[tuple[str, dict[str, Any]]] = [
        ("put_kv", {"key": "a", "value": "1"}),
        ("register_broker", {"broker_id": 1, "incarnation_id": "i1", "endpoints": ["http://127.0.0.1:1"],
                             "log_dirs": [{"dir_id": "d", "path": "/tmp/ferry-d"}]}),
        ("put_kv", {"key": "b", "value": "2"}),
        ("create_stream", {}),
        ("create_stream", {}),
        ("put_kv", {"key": "a", "value": None}),
    ]
    writes = [asyncio.ensure_future(controller.write(op, args, 2.0)) for op, args in ops]
    await asyncio.sleep(0.01)
    assert len(node.submitted) == before + 1
    node.release()
    replies = [await w for w in writes]
    assert replies[3][0]["stream_id"] != replies[4][0]["stream_id"]  # the second saw the first
    assert dict(state.image.kv).get("b") == "2" and "a" not in state.image.kv
    assert 1 in state.image.cluster.brokers
    # The leader's log took the images it had computed; a node replaying the same commands agrees.
    replayed = CommittedLog(1000)
    for command in node.submitted:
        replayed.apply_committed(command)
    assert replayed.image.same_content(state.image)
    assert (replayed.image.offset, replayed.image.epoch) == (state.image.offset, state.image.epoch)
    assert replayed.read(0, 1000) == state.read(0, 1000)
    await controller.stop()


async def test_only_accepted_heartbeats_extend_a_broker_session() -> None:
    from metadata_quorum.operations import WRITE_OPERATIONS

    controller, node, state = make(asyncio.get_running_loop())
    controller.operations = dict(WRITE_OPERATIONS)
    await become_leader(controller, node)
    reply, offset = await controller.write("register_broker", {
        "broker_id": 5, "incarnation_id": "i5", "endpoints": ["http://127.0.0.1:1"],
        "log_dirs": [{"dir_id": "d", "path": "/tmp/ferry-d"}]}, 2.0)
    with pytest.raises(FerryError) as err:
        await controller.write("broker_heartbeat", {"broker_id": 5, "broker_epoch": reply["broker_epoch"] + 99,
                                                    "metadata_offset": offset}, 2.0)
    assert err.value.error is ErrorCode.STALE_BROKER_EPOCH
    assert 5 not in controller.last_heartbeat_ms and 5 not in controller.observers
    await controller.write("broker_heartbeat", {"broker_id": 5, "broker_epoch": reply["broker_epoch"],
                                                "metadata_offset": offset}, 2.0)
    assert 5 in controller.last_heartbeat_ms
    assert controller.observers[5].metadata_offset == offset
    await controller.stop()


def test_split_commands_packs_small_batches_and_cuts_large_ones_into_bounded_pieces() -> None:
    from metadata_quorum.raft import split_commands

    a = tuple(KVRecord(f"a{i}", "1") for i in range(2))
    b = tuple(KVRecord(f"b{i}", "1") for i in range(7))
    c = (KVRecord("c", "1"),)
    plans = split_commands([a, b, c], 3)
    assert [[len(x) for x in p.batches] for p in plans] == [[2, 1], [3], [3], [1]]
    assert [(p.continues, p.open_last) for p in plans] == [(False, True), (True, True), (True, False),
                                                            (False, False)]
    assert [r for p in plans for batch in p.batches for r in batch] == list(a + b + c)
    assert [(p.continues, p.open_last) for p in split_commands([a, c], 3)] == [(False, False)]


def _chain(records: tuple[Any, ...], prev: str, size: int, prefix: str) -> list[Command]:
    from metadata_quorum.raft import encode_batch, split_commands

    commands = []
    for i, plan in enumerate(split_commands([records], size)):
        command_id = f"{prefix}{i}"
        commands.append(Command(command_id, prev, 1, tuple(encode_batch(b) for b in plan.batches),
                                continues=plan.continues, open_last=plan.open_last))
        prev = command_id
    return commands


def test_an_operation_split_over_commands_becomes_visible_only_with_its_last_piece() -> None:
    log = CommittedLog(1000)
    log.apply_committed(Command.of("a", "", 1, ((KVRecord("x", "1"),),)))
    records = tuple(KVRecord(f"k{i}", str(i)) for i in range(10))
    chain = _chain(records, "a", 4, "big")
    assert len(chain) == 3
    for command in chain[:-1]:
        assert log.apply_committed(command).accepted is True
        assert log.high_watermark == 1 and "k0" not in log.image.kv  # nothing of it is visible yet
    log.apply_committed(chain[-1])
    assert log.high_watermark == 11 and log.image.kv["k9"] == "9"
    assert [o for o, _ in log.read(1, 1).records] == list(range(1, 11))  # one batch, as the leader computed
    restored = CommittedLog(1000)  # the pieces are part of the replicated state (dump / restore)
    source = CommittedLog(1000)
    source.apply_committed(Command.of("a", "", 1, ((KVRecord("x", "1"),),)))
    source.apply_committed(chain[0])
    restored.reset(source.core.to_dict())
    for command in chain[1:]:
        restored.apply_committed(command)
    assert dict(restored.image.kv) == dict(log.image.kv) and restored.read(0, 100) == log.read(0, 100)


def test_a_split_operation_cut_short_by_a_new_leader_leaves_no_trace() -> None:
    log = CommittedLog(1000)
    log.apply_committed(Command.of("a", "", 1, ((KVRecord("x", "1"),),)))
    chain = _chain(tuple(KVRecord(f"k{i}", "v") for i in range(10)), "a", 4, "big")
    log.apply_committed(chain[0])
    # the leader lost its term; the next leader's first command follows the last applied one
    assert log.apply_committed(Command.of("new.2.0", chain[0].command_id, 2, ((NoOpRecord(2, 2),),))).accepted
    assert log.apply_committed(chain[1]).accepted is False  # the rest of the chain is rejected
    orphan = Command("orphan", "new.2.0", 2, chain[2].batches, continues=True)
    assert log.apply_committed(orphan).accepted is False  # nothing to continue
    assert log.high_watermark == 2 and not any(k.startswith("k") for k in log.image.kv)


async def test_the_leader_splits_a_large_operation_and_answers_after_its_last_piece() -> None:
    def many(image: Any, args: dict[str, Any], ctx: OpContext) -> ControllerResult:
        return ControllerResult(tuple(KVRecord(f"m{i}", "1") for i in range(int(args["n"]))), {"ok": True})

    controller, node, state = make(asyncio.get_running_loop(), max_command_records=3)
    controller.operations = {**OPS, "many": many}
    await become_leader(controller, node)
    before = len(node.submitted)
    w1 = asyncio.ensure_future(controller.write("put", {"key": "p", "value": "1"}, 2.0))
    w2 = asyncio.ensure_future(controller.write("many", {"n": 8}, 2.0))
    (_r1, o1), (r2, o2) = await w1, await w2
    assert r2 == {"ok": True} and (o1, o2) == (1, 9)
    assert len(node.submitted) - before == 3
    assert all(c.record_count <= 3 for c in node.submitted[before:])
    replayed = CommittedLog(1000)
    for command in node.submitted:
        replayed.apply_committed(command)
    assert replayed.image.same_content(state.image) and replayed.read(0, 100) == state.read(0, 100)
    await controller.stop()
