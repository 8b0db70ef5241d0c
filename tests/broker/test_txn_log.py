"""Loading ``__consumer_offsets`` with transactions in it (groups.txn_log.replay): plain records
where they stand, a transaction's at its commit marker, none of an aborted one, the rest pending."""
from __future__ import annotations

from broker.groups.txn_log import LoggedBatch, replay


def test_a_transactions_records_apply_at_its_commit_marker_and_never_after_an_abort() -> None:
    log = [LoggedBatch(-1, False, ["a"]), LoggedBatch(7, True, ["t7-1"]), LoggedBatch(8, True, ["t8"]),
           LoggedBatch(-1, False, ["b"]), LoggedBatch(7, True, ["t7-2"]), LoggedBatch(7, True, commit=True),
           LoggedBatch(8, True, commit=False), LoggedBatch(9, True, ["t9"])]
    out = replay(log)
    assert out.applied == ["a", "b", "t7-1", "t7-2"]  # t7 at its marker, after b; t8 aborted
    assert out.pending == {9: ["t9"]}  # still open at the end: pending at the new owner


def test_a_marker_without_records_and_an_idempotent_batch_change_nothing_else() -> None:
    out = replay([LoggedBatch(3, True, commit=True), LoggedBatch(4, False, ["idempotent"])])
    assert out.applied == ["idempotent"] and out.pending == {}
