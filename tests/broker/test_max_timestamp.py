"""The max-timestamp index behind ListOffsets -3 (pure): against a brute-force answer over random
appends (ties, LogAppendTime batches, falling timestamps, appends finishing out of order), log
start moves and reloads from the partition meta."""
from __future__ import annotations

import random

import pytest

from broker import max_timestamp as mt
from broker.max_timestamp import Candidate, MaxTimestampIndex, first_at, largest_first


def answer(index: MaxTimestampIndex, records: list[tuple[int, int]], start: int, end: int) -> tuple[int, int] | None:
    """What the replica answers, with ``records`` standing in for reading the log."""
    plan = index.plan(start, end)
    if plan is None:
        return None
    target: tuple[int, int] | Candidate | None = plan.front
    if plan.scan_from is not None:
        assert plan.scan_to is not None
        target = plan.after_scan(largest_first(records, plan.scan_from, plan.scan_to))
    if isinstance(target, Candidate):
        return first_at(records, target, start)
    return target


def expected(records: list[tuple[int, int]], start: int) -> tuple[int, int] | None:
    return largest_first(records, start, 1 << 62)


def test_the_first_record_with_the_largest_timestamp_and_after_the_log_start_moves() -> None:
    index = MaxTimestampIndex()
    records: list[tuple[int, int]] = []
    # one batch of three records (librdkafka's 0081 case): the middle one has the largest timestamp
    for offset, ts in enumerate((10_000_100, 10_000_400, 10_000_250)):
        records.append((offset, ts))
    index.observe(10_000_400, 0, 3)
    assert answer(index, records, 0, 3) == (1, 10_000_400)
    # a later batch ties: the first record still answers; an older timestamp changes nothing
    records += [(3, 10_000_400), (4, 10_000_000)]
    index.observe(10_000_400, 3, 4)
    index.observe(10_000_000, 4, 5)
    assert answer(index, records, 0, 5) == (1, 10_000_400)
    # DeleteRecords inside the first batch, then past it: the largest of what remains
    assert answer(index, records, 2, 5) == (3, 10_000_400)
    index.trim(4)
    assert answer(index, records, 4, 5) == (4, 10_000_000)
    index.trim(5)
    assert answer(index, records, 5, 5) is None


@pytest.mark.parametrize("seed", range(40))
@pytest.mark.parametrize("max_candidates", [3, mt.MAX_CANDIDATES])
def test_random_logs_match_a_full_scan(seed: int, max_candidates: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mt, "MAX_CANDIDATES", max_candidates)
    rng = random.Random(seed)
    index = MaxTimestampIndex()
    records: list[tuple[int, int]] = []
    start = end = 0
    trend = rng.choice((-1, 0, 1))
    clock = 1_000_000
    held: list[tuple[int, int, int]] = []  # appends whose observation is late
    for _ in range(250):
        roll = rng.random()
        if roll < 0.7:
            count = rng.randint(1, 4)
            clock += trend * rng.randint(0, 20)
            if rng.random() < 0.2:  # LogAppendTime: every record carries the batch's time
                stamps = [clock] * count
            else:
                stamps = [clock + rng.randint(-30, 30) for _ in range(count)]
            batch = (max(stamps), end, end + count)
            records += [(end + i, ts) for i, ts in enumerate(stamps)]
            end += count
            if rng.random() < 0.3:
                held.append(batch)
            else:
                index.observe(*batch)
                for late in held:
                    index.observe(*late)
                held.clear()
                index.observe(*batch)  # observed twice (a rebuild re-reading it): no change
        elif roll < 0.85 and not held:
            start = rng.randint(start, end)
            index.trim(start)
        elif not held:
            index = MaxTimestampIndex.from_json(index.to_json())  # a new owner reads the meta
        if not held:
            assert answer(index, records, start, end) == expected(records, start)
            assert len(index.candidates) <= max(max_candidates, 2) + 1


def test_a_meta_without_the_index_is_seeded_from_the_time_index() -> None:
    records = [(0, 5), (1, 9), (2, 7), (3, 3)]
    index = MaxTimestampIndex.seeded([(5, 0), (9, 1)], 4)
    assert answer(index, records, 0, 4) == (1, 9)
    index.trim(2)
    assert answer(index, records, 2, 4) == (2, 7)  # the seeded range is read past its start
    assert MaxTimestampIndex.seeded([], 4).plan(0, 4) is None
