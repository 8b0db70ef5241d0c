"""The chaos schedule and checker are pure: seeded, replayable, and they catch what they claim to."""
from __future__ import annotations

from typing import Any

import pytest

from tools.chaos.checker import Acked, check_health, check_metadata, check_records
from tools.chaos.schedule import (ALL_FAULTS, PROCESS_FAULTS, S3_FAULTS, ScheduleSpec, make_schedule, overlapping,
                                  parse_faults)


@pytest.mark.parametrize("seed", range(50))
def test_a_schedule_is_replayable_and_keeps_its_rules(seed: int) -> None:
    spec = ScheduleSpec(seed=seed, duration_s=60.0)
    events = make_schedule(spec)
    assert events == make_schedule(ScheduleSpec(seed=seed, duration_s=60.0))
    assert not overlapping(events, PROCESS_FAULTS) and not overlapping(events, S3_FAULTS)
    for e in events:
        assert spec.warmup_s <= e.start_s <= e.end_s <= spec.duration_s - spec.settle_s / 2
        assert e.start_s < spec.duration_s - spec.settle_s
        if e.kind in ("broker_kill", "disk_full", "reassign"):
            assert e.target is not None and 1 <= e.target <= spec.brokers
        if e.kind in ("owner_pause", "reassign"):
            assert e.partition is not None and 0 <= e.partition < spec.partitions
        if e.kind == "s3_errors":
            assert 0.05 <= e.rate <= 0.5
        assert e.describe()


def test_seeds_differ_and_every_fault_kind_shows_up() -> None:
    schedules = [make_schedule(ScheduleSpec(seed=s, duration_s=120.0)) for s in range(20)]
    assert len({tuple(s) for s in schedules}) == 20
    assert {e.kind for s in schedules for e in s} == set(ALL_FAULTS)


def test_faults_can_be_chosen() -> None:
    events = make_schedule(ScheduleSpec(seed=3, duration_s=60.0, faults=parse_faults("broker_kill,s3_latency")))
    assert events and {e.kind for e in events} <= {"broker_kill", "s3_latency"}
    assert parse_faults(None) == frozenset(ALL_FAULTS) == parse_faults("all")
    with pytest.raises(ValueError, match="unknown fault.*kill_everything"):
        parse_faults("broker_kill,kill_everything")
    assert make_schedule(ScheduleSpec(seed=1, duration_s=5.0)) == []  # all warm-up and settling


def acked(*pairs: tuple[int, int]) -> list[Acked]:
    return [Acked(seq, off, f"v{seq}".encode()) for seq, off in pairs]


def test_records_read_back_once_in_order_at_their_offsets() -> None:
    good = {"t-0": acked((0, 0), (1, 1), (2, 3))}
    log: dict[str, list[tuple[int, bytes | None]]] = {"t-0": [(0, b"v0"), (1, b"v1"), (2, b"unacked"), (3, b"v2")]}
    assert check_records(good, log) == []
    cases = {
        "missing": {"t-0": [(0, b"v0"), (1, b"v1")]},
        "2 times": {"t-0": [(0, b"v0"), (1, b"v1"), (2, b"v1"), (3, b"v2")]},
        "not at its acknowledged offset": {"t-0": [(0, b"v0"), (1, b"x"), (2, b"v1"), (3, b"v2")]},
    }
    for words, bad_log in cases.items():
        found = check_records(good, bad_log)
        assert found and any(words in v.message for v in found), (words, found)
    (dup,) = check_records(good, cases["2 times"])
    assert dup.message == ("t-0: acknowledged record #1 is in the log 2 times: offset 1 (after #0), "
                           "offset 2 (after #1); acknowledged at offset 1")
    resent = {"t-0": [(0, b"v0"), (1, b"v1"), (2, b"x"), (3, b"v2"), (4, b"v1")]}
    assert [v.message for v in check_records(good, resent)][0] == (
        "t-0: acknowledged record #1 is in the log 2 times: offset 1 (after #0), offset 4 (after #2); "
        "acknowledged at offset 1")
    first = check_records({"t-0": acked((0, 0))}, {"t-0": [(0, b"v0"), (1, b"y"), (2, b"v0")]})
    assert first[0].message.endswith("offset 0 (after the log start), offset 2 (after an unacknowledged "
                                     "record at 1); acknowledged at offset 0")
    reordered = check_records({"t-0": acked((0, 1), (1, 0))}, {"t-0": [(0, b"v1"), (1, b"v0")]})
    assert any("out of send order" in v.message for v in reordered)
    assert "could not be read back" in check_records(good, {})[0].message
    unknown = {"t-0": [Acked(0, None, b"v0"), Acked(1, None, b"v1")]}  # delivered without an offset
    assert check_records(unknown, {"t-0": [(0, b"v0"), (1, b"v1")]}) == []
    assert any("out of send order" in v.message for v in check_records(unknown, {"t-0": [(0, b"v1"), (1, b"v0")]}))
    assert any("missing" in v.message for v in check_records(unknown, {"t-0": [(0, b"v1")]}))


def rec(kind: str, **fields: Any) -> dict[str, Any]:
    return {"type": kind, "version": 1, "fields": fields}


def stream(sid: int, epoch: int, state: str, owner: int, end: int = 0) -> dict[str, Any]:
    return rec("Stream", stream_id=sid, epoch=epoch, state=state, owner=owner, start_offset=0, end_offset=end,
               owner_epoch=owner * 10)


def obj(key: str, sid: int, start: int, end: int, epoch: int) -> dict[str, Any]:
    return rec("StreamObject", object_key=key, stream_id=sid, start_offset=start, end_offset=end, size=1, epoch=epoch)


def test_a_clean_metadata_log_passes() -> None:
    log = [stream(1, 0, "OPENED", 1), obj("a", 1, 0, 10, 0), obj("b", 1, 10, 20, 0), stream(1, 0, "CLOSED", 1, 20),
           stream(1, 1, "OPENED", 2, 20), obj("c", 1, 20, 25, 1), rec("RemoveStreamObject", object_key="a", stream_id=1),
           rec("KV", key="k", value="v")]
    assert check_metadata(list(enumerate(log))) == []


def test_a_compacted_object_replacing_its_predecessors_passes_and_a_stray_one_does_not() -> None:
    head = [stream(1, 0, "OPENED", 1), obj("a", 1, 0, 10, 0), obj("b", 1, 10, 20, 0), obj("c", 1, 20, 25, 0)]
    compacted = [rec("RemoveStreamObject", object_key="a", stream_id=1),
                 rec("RemoveStreamObject", object_key="b", stream_id=1), obj("ab", 1, 0, 20, 0), obj("d", 1, 25, 30, 0)]
    assert check_metadata(list(enumerate(head + compacted))) == []
    stray = head + [rec("RemoveStreamObject", object_key="a", stream_id=1), obj("ab", 1, 0, 20, 0)]
    assert any("overlap" in v.message for v in check_metadata(list(enumerate(stray))))  # b still holds [10, 20)


@pytest.mark.parametrize("log, words", [
    ([stream(1, 0, "OPENED", 1), stream(1, 0, "OPENED", 2)], "two owners in one epoch"),
    ([stream(1, 2, "OPENED", 1), stream(1, 1, "OPENED", 2)], "went back from epoch 2 to 1"),
    ([stream(1, 1, "OPENED", 1), obj("a", 1, 0, 10, 0)], "committed at epoch 0 while the stream is at epoch 1"),
    ([stream(1, 0, "OPENED", 1), obj("a", 1, 0, 10, 0), obj("b", 1, 5, 15, 0)], "overlap"),
    ([stream(1, 0, "OPENED", 1), obj("a", 1, 0, 10, 0), obj("b", 1, 12, 15, 0)], "a gap or an overlap"),
])
def test_metadata_violations_are_found(log: list[dict[str, Any]], words: str) -> None:
    found = check_metadata(list(enumerate(log)))
    assert any(words in v.message for v in found), found


def test_health_at_the_end() -> None:
    ok_c = {1: {"ready": True, "active": True, "high_watermark": 9}, 2: {"ready": True, "high_watermark": 9}}
    ok_b = {1: {"state": "RUNNING", "fenced": False}}
    assert check_health(ok_c, ok_b) == []
    bad = check_health({1: {"ready": True, "high_watermark": 9}, 2: None}, {1: {"state": "RUNNING", "fenced": True}},
                       ["the S3 fault proxy"])
    text = " | ".join(v.message for v in bad)
    for words in ("controller 2 does not answer", "0 active controllers", "broker 1 is RUNNING and fenced",
                  "fault proxy is not running"):
        assert words in text
    lagging = check_health({1: {"ready": True, "active": True, "high_watermark": 9},
                            2: {"ready": True, "high_watermark": 7}}, ok_b)
    assert any("differ" in v.message for v in lagging)
