"""Merging the two owners' halves of a move into one six-step timeline."""
from __future__ import annotations

from broker.move_timeline import ROLE_SOURCE, ROLE_TARGET, MoveHalf, merge, merge_all, move_kv_key, step_durations_ms


def source(move_id: int = 1000) -> MoveHalf:
    h = MoveHalf(ROLE_SOURCE, "t", 0, move_id, broker_id=1, leader_epoch=3)
    for name, ts in (("t1", 1002), ("t2", 1003), ("t3", 1006), ("t4", 1020), ("t5", 1024)):
        h.mark(name, ts)
    return h


def target(move_id: int = 1000) -> MoveHalf:
    h = MoveHalf(ROLE_TARGET, "t", 0, move_id, broker_id=2, leader_epoch=5, clean=True)
    h.mark("t5_seen", 1025)
    h.mark("t6", 1040)
    return h


def test_full_merge_steps_add_up() -> None:
    m = merge(source(), target())
    assert m.t_ms == {"t0": 1000, "t1": 1002, "t2": 1003, "t3": 1006, "t4": 1020, "t5": 1024, "t6": 1040}
    assert m.steps_ms == {"1": 2, "2": 1, "3": 3, "4": 14, "5": 4, "6": 16}
    assert m.total_ms == 40 == sum(v for v in m.steps_ms.values() if v is not None)
    assert m.complete and m.clean and m.from_broker == 1 and m.to_broker == 2 and m.leader_epoch == 5


def test_dead_old_owner_uses_new_owner_sighting_for_election() -> None:
    tgt = target()
    tgt.clean = False
    m = merge(None, tgt)
    assert m.t_ms["t1"] is None and m.t_ms["t5"] == 1025 and m.t_ms["t6"] == 1040
    assert m.steps_ms["5"] == 25 and m.steps_ms["1"] is None and m.clean is False
    assert m.total_ms == 40


def test_source_only_is_incomplete() -> None:
    m = merge(source(), None)
    assert not m.complete and m.total_ms is None and m.to_broker is None


def test_mark_keeps_first_time() -> None:
    h = source()
    h.mark("t3", 99999)
    assert h.times_ms["t3"] == 1006


def test_encode_decode_round_trip_and_garbage() -> None:
    h = source()
    assert MoveHalf.decode(h.encode()) == h
    assert MoveHalf.decode("not json") is None
    assert MoveHalf.decode("{}") is None


def test_merge_all_pairs_by_move_and_sorts_newest_first() -> None:
    halves = [source(1000), target(1000), source(2000)]
    out = merge_all(halves)
    assert [m.move_id for m in out] == [2000, 1000]
    assert out[1].complete and not out[0].complete


def test_step_durations_with_gaps() -> None:
    steps = step_durations_ms({"t0": 0, "t1": None, "t2": None, "t3": None, "t4": None, "t5": 50, "t6": 60})
    assert steps == {"1": None, "2": None, "3": None, "4": None, "5": 50, "6": 10}


def test_kv_key() -> None:
    assert move_kv_key("abc", 3, ROLE_SOURCE, 2) == "move/abc/3/source/2"


def test_kv_value_keeps_latest_halves_and_replaces_same_move() -> None:
    from broker.move_timeline import KV_HALVES_KEPT, decode_halves, encode_halves
    raw = None
    for move_id in range(1, KV_HALVES_KEPT + 5):
        raw = encode_halves(raw, source(move_id))
    halves = decode_halves(raw)
    assert [h.move_id for h in halves] == list(range(5, KV_HALVES_KEPT + 5))
    updated = source(KV_HALVES_KEPT + 4)
    updated.mark("t6", 1)
    assert len(decode_halves(encode_halves(raw, updated))) == KV_HALVES_KEPT
    assert decode_halves("garbage") == [] and decode_halves(None) == []
    assert decode_halves(source(7).encode())[0].move_id == 7


def test_an_old_owner_that_handles_its_reply_after_the_new_owner_served_is_clamped_to_t6() -> None:
    """The close and the election are answered to the old owner in one reply, and the new owner
    sees both in the metadata log: it may serve before a busy old owner handled its reply."""
    from broker.move_timeline import ROLE_SOURCE, ROLE_TARGET, MoveHalf, merge
    source = MoveHalf(ROLE_SOURCE, "t", 0, 1000, 1, times_ms={"t1": 1010, "t2": 1011, "t3": 1015, "t4": 1090,
                                                               "t5": 1090})
    target = MoveHalf(ROLE_TARGET, "t", 0, 1000, 2, times_ms={"t5_seen": 1075, "t6": 1085})
    m = merge(source, target)
    assert [m.t_ms[f"t{i}"] for i in range(7)] == [1000, 1010, 1011, 1015, 1085, 1085, 1085]
    assert m.total_ms == 85 and all(v is not None and v >= 0 for v in m.steps_ms.values())
