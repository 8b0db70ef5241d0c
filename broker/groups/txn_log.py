"""How a group coordinator reads its ``__consumer_offsets`` partition when transactions wrote to it.

A TxnOffsetCommit is written as Kafka writes it: the offset commit records in a transactional
batch under the producer's id and epoch, decided later by the transaction's marker on the same
partition. So the records a coordinator loads are not simply the partition's records in offset
order, as Kafka's GroupMetadataManager loads them: a plain batch's records apply where they
stand; a transactional batch's records wait for their producer's next marker, and apply there if
it commits and never if it aborts; those still waiting at the end of the log are the pending
transactional offsets the coordinator must keep (and an OffsetFetch with ``require_stable``
waits on). Pure: batches in, records out.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

R = TypeVar("R")


@dataclass(frozen=True)
class LoggedBatch(Generic[R]):
    """One batch of the partition as the loader read it: who wrote it, and its records (a
    marker's ``commit`` is True or False, None for a data batch)."""

    producer_id: int
    transactional: bool
    records: Sequence[R] = ()
    commit: bool | None = None


@dataclass
class Replayed(Generic[R]):
    applied: list[R] = field(default_factory=list)  # in the order the coordinator applies them
    pending: dict[int, list[R]] = field(default_factory=dict)  # producer id -> records awaiting its marker


def replay(log: Iterable[LoggedBatch[R]]) -> Replayed[R]:
    out: Replayed[R] = Replayed()
    for batch in log:
        if batch.commit is not None:
            held = out.pending.pop(batch.producer_id, [])
            if batch.commit:
                out.applied.extend(held)
        elif batch.transactional and batch.producer_id >= 0:
            out.pending.setdefault(batch.producer_id, []).extend(batch.records)
        else:
            out.applied.extend(batch.records)
    return out


__all__ = ["LoggedBatch", "Replayed", "replay"]
