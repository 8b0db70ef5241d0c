"""The transactional checker on synthetic histories: each promise broken once, and a clean history."""
from __future__ import annotations

from tools.chaos.txn_checker import LsoSample, Outcome, Txn, TxnRecord, check_transactions


def txn(tid: str, outcome: Outcome, *recs: tuple[str, int]) -> Txn:
    return Txn(tid, outcome, tuple(TxnRecord(p, seq, f"v{seq}".encode()) for p, seq in recs))


COMMITTED = txn("t/0", Outcome.COMMITTED, ("p0", 0), ("p1", 1), ("p0", 2))
ABORTED = txn("t/1", Outcome.ABORTED, ("p0", 3), ("p1", 4))
UNKNOWN = txn("t/2", Outcome.UNKNOWN, ("p0", 5), ("p1", 6))
CLEAN_READ = {"p0": [(0, b"v0"), (2, b"v2"), (7, b"v5")], "p1": [(0, b"v1"), (4, b"v6")]}


def checks(read: dict[str, list[tuple[int, bytes | None]]], samples: list[LsoSample] | None = None) -> list[str]:
    return [v.message for v in check_transactions([COMMITTED, ABORTED, UNKNOWN], read, samples or [])]


def test_a_clean_history_passes_with_an_unknown_transaction_read_whole_or_not_at_all() -> None:
    assert checks(CLEAN_READ, [LsoSample("p0", 7, 8)]) == []
    assert checks({"p0": [(0, b"v0"), (2, b"v2")], "p1": [(0, b"v1")]}) == []


def test_an_aborted_record_read_is_reported() -> None:
    read = {**CLEAN_READ, "p1": [(0, b"v1"), (2, b"v4"), (4, b"v6")]}
    (msg,) = checks(read)
    assert "aborted transaction t/1: 1 of its 2 records read" in msg


def test_a_torn_transaction_is_reported() -> None:
    read = {**CLEAN_READ, "p1": [(0, b"v1")]}
    (msg,) = checks(read)
    assert "t/2" in msg and "torn: 1 of its 2" in msg


def test_a_missing_committed_record_is_reported() -> None:
    read = {**CLEAN_READ, "p0": [(0, b"v0"), (7, b"v5")]}
    (msg,) = checks(read)
    assert "committed transaction t/0: 1 of its 3 records missing (first: p0 #2)" in msg


def test_a_duplicate_and_an_out_of_order_record_are_reported() -> None:
    dup = checks({**CLEAN_READ, "p0": [(0, b"v0"), (2, b"v2"), (3, b"v2"), (7, b"v5")]})
    assert any("p0 #2 read 2 times" in m for m in dup)
    swapped = checks({**CLEAN_READ, "p0": [(0, b"v2"), (2, b"v0"), (7, b"v5")]})
    assert swapped == ["p0: record #2 at offset 0 is before #0 at 2 (out of send order)"]


def test_a_read_at_or_past_the_last_stable_offset_is_reported() -> None:
    (msg,) = checks(CLEAN_READ, [LsoSample("p0", 2, 3), LsoSample("p0", 7, 7)])
    assert "returned offset 7 at or past the last stable offset 7" in msg
