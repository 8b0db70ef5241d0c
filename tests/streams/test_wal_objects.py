"""The S3 WAL's pure decisions: batching, acknowledgement order, deletion, recovery plans."""
from __future__ import annotations

import pytest

from metadata_quorum.kernel.errors import ErrorCode, FerryError
from stream_storage.wal import KIND_DATA, KIND_VOID, encode_entry
from stream_storage.wal_objects import (
    HEADER_BYTES, SEQ_PER_MS, Resolved, Seal, Wait, WalBatchPlanner, WalBatchPolicy, WalObject,
    ObjectSummary, StreamView, deletable, encode_header, orphan_deletable, object_key, parse_key, parse_object, recovery_plan, summarize, wal_prefix)


def planner(interval_ms: float = 250, max_bytes: int = 1000, max_inflight: int = 2) -> WalBatchPlanner:
    return WalBatchPlanner(WalBatchPolicy(interval_ms, max_bytes, max_inflight))


def test_an_append_waits_for_the_interval_then_is_sealed() -> None:
    p = planner()
    assert p.next_action(0, 1) == Wait(None)
    t = p.add(10, now_ms=100)
    assert p.next_action(100, 1) == Wait(250)
    assert p.next_action(300, 1) == Wait(50)
    action = p.next_action(350, 1)
    assert isinstance(action, Seal) and action.tickets == (t,) and action.size_bytes == 10
    assert p.next_action(351, 1) == Wait(None)


def test_size_threshold_seals_at_once_and_caps_the_object() -> None:
    p = planner(max_bytes=100)
    tickets = [p.add(40, now_ms=0) for _ in range(3)]
    first = p.next_action(0, 1)
    assert isinstance(first, Seal) and first.tickets == tuple(tickets[:2]) and first.size_bytes == 80
    # 40 bytes left, younger than the interval: they wait (the clock restarted at the seal)
    assert p.next_action(1, 1) == Wait(249)
    big = p.add(500, now_ms=2)  # one append above max_bytes still goes, alone after the others
    second = p.next_action(2, 1)
    assert isinstance(second, Seal) and second.tickets == (tickets[2],)
    assert p.next_action(2, 1) == Wait(None)  # two PUTs in flight: the next object waits
    p.on_stored(first.seq)
    third = p.next_action(3, 1)
    assert isinstance(third, Seal) and third.tickets == (big,)


def test_flush_seals_without_waiting() -> None:
    p = planner()
    p.add(1, now_ms=0)
    assert isinstance(p.next_action(0, 1, flush=True), Seal)


def test_seq_grows_and_follows_the_wall_clock() -> None:
    p = WalBatchPlanner(WalBatchPolicy(0, 10, 8), last_seq=5)
    p.add(1, 0)
    a = p.next_action(0, wall_ms=0)
    p.add(1, 0)
    b = p.next_action(0, wall_ms=0)
    p.add(1, 0)
    c = p.next_action(0, wall_ms=1000)
    assert isinstance(a, Seal) and isinstance(b, Seal) and isinstance(c, Seal)
    assert (a.seq, b.seq, c.seq) == (6, 7, 1000 * SEQ_PER_MS)


def test_acknowledged_in_seq_order_only() -> None:
    p = WalBatchPlanner(WalBatchPolicy(0, 10, 4))
    seals = []
    for i in range(3):
        p.add(1, i)
        action = p.next_action(i, 1)
        assert isinstance(action, Seal)
        seals.append(action)
    assert p.on_stored(seals[2].seq) == []  # stored, but an earlier object may still fail
    assert p.on_stored(seals[1].seq) == []
    assert p.on_failed(seals[0].seq) == [Resolved(seals[0].seq, seals[0].tickets, False),
                                         Resolved(seals[1].seq, seals[1].tickets, True),
                                         Resolved(seals[2].seq, seals[2].tickets, True)]
    assert p.idle
    with pytest.raises(ValueError):
        p.on_stored(seals[0].seq)


def test_policy_rejects_nonsense() -> None:
    with pytest.raises(ValueError):
        WalBatchPolicy(interval_ms=-1)
    with pytest.raises(ValueError):
        WalBatchPolicy(max_bytes=0)


def _obj(seq: int, *entries: tuple[int, int, int, int, int], prefix: str = "wal/broker-1/main/") -> WalObject:
    """entries: (kind, stream, epoch, start, end)"""
    data = encode_header(1, 7, seq) + b"".join(
        encode_entry(sid, epoch, start, end, b"" if kind == KIND_VOID else f"{sid}:{start}".encode(), kind)
        for kind, sid, epoch, start, end in entries)
    return parse_object(object_key(prefix, seq, "ab"), data)


def test_object_round_trip_and_strict_parse() -> None:
    obj = _obj(42, (KIND_DATA, 3, 1, 0, 5), (KIND_VOID, 4, 2, 9, 9))
    assert (obj.broker_id, obj.broker_epoch, obj.seq) == (1, 7, 42)
    assert [(e.stream_id, e.start_offset, e.end_offset, e.kind) for e in obj.entries] == \
        [(3, 0, 5, KIND_DATA), (4, 9, 9, KIND_VOID)]
    assert all(e.position >> 32 == 42 for e in obj.entries)
    key = object_key("wal/broker-1/main/", 42, "ab")
    assert parse_key(key) is not None and parse_key(key).wal == "wal/broker-1/main"  # type: ignore[union-attr]
    assert parse_key("streams/1/0001-abc") is None
    good = encode_header(1, 7, 42) + encode_entry(3, 1, 0, 5, b"payload")
    for bad in (good[:-1], b"NOTAWAL!" + good[8:], good[:HEADER_BYTES - 1], good + b"\x00"):
        with pytest.raises(FerryError) as err:
            parse_object(key, bad)
        assert err.value.error == ErrorCode.KAFKA_STORAGE_ERROR
    with pytest.raises(FerryError):
        parse_object(object_key("wal/broker-1/main/", 43, "ab"), good)  # seq of the key and body differ
    with pytest.raises(ValueError):
        wal_prefix("wal", 1, "a/b")


def test_deletable_needs_every_range_committed() -> None:
    a = summarize("a", 1, 10, _obj(1, (KIND_DATA, 1, 1, 0, 10), (KIND_DATA, 2, 1, 0, 5)).entries)
    b = summarize("b", 2, 10, _obj(2, (KIND_DATA, 1, 1, 10, 20)).entries)
    committed = {1: 10, 2: 4}
    assert deletable([a, b], lambda s: committed.get(s, -1)) == []
    committed[2] = 5
    assert deletable([b, a], lambda s: committed.get(s, -1)) == ["a"]
    committed[1] = 20
    assert deletable([a, b], lambda s: committed.get(s, -1)) == ["a", "b"]


def test_a_void_marker_stays_while_the_stale_entries_it_hides_stay() -> None:
    stale = ObjectSummary("stale", 1, 10, {7: 30, 8: 5})  # stream 8 keeps this object alive
    void = ObjectSummary("void", 2, 10, {}, frozenset({7}))
    committed = {7: 2 ** 63 - 1, 8: 0}  # 7 was released (another owner had it), 8 is not uploaded
    assert deletable([stale, void], lambda s: committed[s]) == []
    committed[8] = 5
    assert deletable([stale, void], lambda s: committed[s]) == ["stale", "void"]


def test_recovery_is_fenced_by_the_owner_epoch_and_by_void_markers() -> None:
    objects = [
        _obj(1, (KIND_DATA, 5, 3, 0, 10)),
        _obj(2, (KIND_DATA, 5, 3, 10, 20), (KIND_DATA, 6, 1, 0, 1)),
        _obj(3, (KIND_DATA, 5, 4, 20, 30)),  # written at an epoch the controller never gave this broker
    ]
    run = recovery_plan([(objects, 3)], 5, 0)
    assert [(e.start_offset, e.end_offset) for e in run] == [(0, 10), (10, 20)]
    run = recovery_plan([(objects, 4)], 5, 10)
    assert [(e.start_offset, e.end_offset) for e in run] == [(10, 20), (20, 30)]
    assert recovery_plan([(objects, 4)], 5, 30) == []
    # the broker lost stream 5 at offset 10 and took it back at epoch 6: its void marker hides
    # the late epoch-3 object a stopped-and-resumed process of it stored (sealed before the void)
    later = objects[:2] + [_obj(4, (KIND_VOID, 5, 6, 10, 10)), _obj(5, (KIND_DATA, 5, 6, 10, 12))]
    run = recovery_plan([(later, 6)], 5, 10)
    assert [(e.epoch, e.start_offset, e.end_offset) for e in run] == [(6, 10, 12)]
    # read under its earlier ownership (epoch 3), the void marker of the later one does not count
    run = recovery_plan([(later, 3)], 5, 10)
    assert [(e.epoch, e.start_offset, e.end_offset) for e in run] == [(3, 10, 20)]


def test_recovery_continues_across_the_wals_of_several_log_dirs() -> None:
    objects = [_obj(9, (KIND_DATA, 5, 2, 10, 20), prefix="wal/broker-1/a/"),
               _obj(3, (KIND_DATA, 5, 2, 0, 10), prefix="wal/broker-1/b/")]
    run = recovery_plan([(objects, 2)], 5, 0)
    assert [(e.start_offset, e.end_offset) for e in run] == [(0, 10), (10, 20)]


def test_recovery_continues_across_the_wals_of_owners_that_died_one_after_another() -> None:
    """Broker 1 acknowledged [0, 30) at epoch 3 and died; broker 2 took the stream over at epoch 4,
    copied [0, 10) of it into its own WAL and died too: the tail is read from both."""
    first = [_obj(1, (KIND_DATA, 5, 3, 0, 10), (KIND_DATA, 5, 3, 10, 20), prefix="wal/broker-1/main/"),
             _obj(2, (KIND_DATA, 5, 3, 20, 30), prefix="wal/broker-1/main/")]
    second = [_obj(7, (KIND_DATA, 5, 4, 0, 10), prefix="wal/broker-2/main/"),
              _obj(8, (KIND_DATA, 5, 5, 10, 40), prefix="wal/broker-2/main/")]  # epoch 5: never its own
    run = recovery_plan([(first, 3), (second, 4)], 5, 0)
    assert [(e.epoch, e.start_offset, e.end_offset) for e in run] == [(4, 0, 10), (3, 10, 20), (3, 20, 30)]
    assert recovery_plan([(second, 4)], 5, 0)[-1].end_offset == 10  # the predecessor's WAL alone: a loss



def test_orphan_objects_go_only_once_no_recovery_can_need_them() -> None:
    def summary(seq: int, *entries: tuple[int, int, int, int, int]) -> ObjectSummary:
        obj = _obj(seq, *entries)
        return summarize(obj.key, obj.seq, 0, obj.entries)

    objs = [summary(1, (KIND_DATA, 5, 3, 0, 10)), summary(2, (KIND_DATA, 5, 3, 10, 20), (KIND_DATA, 6, 1, 0, 4))]
    FIRST = objs[0].key
    views = {5: StreamView(epoch=3, end_offset=10, owner=1, opened=True, wal_owners=frozenset()),
             6: StreamView(epoch=1, end_offset=4, owner=1, opened=True, wal_owners=frozenset())}
    assert orphan_deletable(objs, 1, views.get) == [FIRST]  # [10, 20) of 5 is not committed
    views[5] = StreamView(epoch=4, end_offset=10, owner=2, opened=True, wal_owners=frozenset({1}))
    assert orphan_deletable(objs, 1, views.get) == [FIRST]  # taken over, not yet recovered
    views[5] = StreamView(epoch=4, end_offset=12, owner=2, opened=True, wal_owners=frozenset())
    assert len(orphan_deletable(objs, 1, views.get)) == 2  # recovered (and said so), or closed cleanly
    views.pop(6)
    views[5] = StreamView(epoch=3, end_offset=12, owner=1, opened=False, wal_owners=frozenset())
    assert orphan_deletable(objs, 1, views.get) == [FIRST]  # same epoch: its own tail
    # a void marker stays while an earlier object with data of its stream stays
    voided = [summary(1, (KIND_DATA, 7, 2, 0, 10)), summary(2, (KIND_VOID, 7, 4, 0, 0))]
    views[7] = StreamView(epoch=4, end_offset=0, owner=1, opened=True, wal_owners=frozenset())
    assert orphan_deletable(voided, 1, views.get) == []
