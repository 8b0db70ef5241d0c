"""The verdict on transactional producers, read back with ``isolation.level=read_committed``
(pure: plain data in, violations out).

What Kafka promises a read_committed reader of a transactional producer's partitions:

- **no aborted record** is ever returned;
- **no torn transaction**: of a transaction whose outcome the client never learned (its commit
  was in flight when the client or a broker died), either every record is read or none is;
- **no committed record missing**: a transaction the client saw commit is read in full,
  each record exactly once, and a producer's records in a partition in the order it sent them;
- **never past the LSO**: no record is returned at or above the last stable offset the broker
  reported for that fetch (the read_committed high watermark).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from enum import Enum
from itertools import pairwise
from typing import Mapping, Sequence

from tools.chaos.checker import Violation


class Outcome(Enum):
    COMMITTED = "committed"  # commit_transaction returned
    ABORTED = "aborted"  # abort_transaction returned, or the transaction was fenced/abandoned before commit
    UNKNOWN = "unknown"  # commit_transaction was called and did not return (client or broker died)


@dataclass(frozen=True)
class TxnRecord:
    """One record a transaction sent: its partition, its producer-wide send order, its value
    (unique across the run)."""

    partition: str
    send_seq: int
    value: bytes


@dataclass(frozen=True)
class Txn:
    txn_id: str  # unique per transaction, e.g. "<transactional.id>/<n>"
    outcome: Outcome
    records: tuple[TxnRecord, ...]


@dataclass(frozen=True)
class LsoSample:
    """One fetch of a read_committed reader: the highest offset it returned and the last stable
    offset the broker reported with it."""

    partition: str
    max_offset_returned: int
    last_stable_offset: int


def check_transactions(txns: Sequence[Txn], read: Mapping[str, Sequence[tuple[int, bytes | None]]],
                       lso_samples: Sequence[LsoSample] = (), max_examples: int = 20) -> list[Violation]:
    """``txns`` as the producers saw them against ``read[partition]``: every (offset, value) a
    read_committed consumer returned from the log start, in the order returned."""
    out: list[Violation] = []

    def add(message: str) -> None:
        if len(out) < max_examples:
            out.append(Violation("transactions", message))
        elif len(out) == max_examples:
            out.append(Violation("transactions", "… more transaction violations not listed"))

    counts: dict[str, Counter[bytes]] = {p: Counter(v for _o, v in log if v is not None) for p, log in read.items()}
    offset_of: dict[str, dict[bytes, int]] = {p: {v: o for o, v in log if v is not None} for p, log in read.items()}
    for partition, log in sorted(read.items()):
        if any(b <= a for (a, _x), (b, _y) in pairwise(log)):
            add(f"{partition}: read_committed returned offsets out of order")

    def times_read(r: TxnRecord) -> int:
        return counts.get(r.partition, Counter()).get(r.value, 0)

    for txn in txns:
        seen = [times_read(r) for r in txn.records]
        if txn.outcome is Outcome.ABORTED:
            read_back = [r for r, n in zip(txn.records, seen, strict=True) if n]
            if read_back:
                add(f"aborted transaction {txn.txn_id}: {len(read_back)} of its {len(txn.records)} records read "
                    f"(first: {read_back[0].partition} #{read_back[0].send_seq})")
            continue
        for r, n in zip(txn.records, seen, strict=True):
            if n > 1:
                add(f"transaction {txn.txn_id}: record {r.partition} #{r.send_seq} read {n} times")
        got = sum(1 for n in seen if n)
        if txn.outcome is Outcome.COMMITTED and got < len(txn.records):
            missing = next(r for r, n in zip(txn.records, seen, strict=True) if not n)
            add(f"committed transaction {txn.txn_id}: {len(txn.records) - got} of its {len(txn.records)} records "
                f"missing (first: {missing.partition} #{missing.send_seq})")
        elif txn.outcome is Outcome.UNKNOWN and 0 < got < len(txn.records):
            add(f"transaction {txn.txn_id} (outcome unknown to its client) is torn: {got} of its "
                f"{len(txn.records)} records read")

    # In order: per partition, the read records of non-aborted transactions sit in send order.
    by_partition: dict[str, list[TxnRecord]] = {}
    for txn in txns:
        if txn.outcome is not Outcome.ABORTED:
            for r in txn.records:
                if times_read(r) == 1:
                    by_partition.setdefault(r.partition, []).append(r)
    for partition, records in sorted(by_partition.items()):
        placed = sorted(records, key=lambda r: r.send_seq)
        for x, y in pairwise(placed):
            ox, oy = offset_of[partition][x.value], offset_of[partition][y.value]
            if oy <= ox:
                add(f"{partition}: record #{y.send_seq} at offset {oy} is before #{x.send_seq} at {ox} (out of send order)")
                break

    for s in lso_samples:
        if s.max_offset_returned >= s.last_stable_offset:
            add(f"{s.partition}: read_committed returned offset {s.max_offset_returned} at or past the "
                f"last stable offset {s.last_stable_offset}")
    return out
