"""A partition's transaction state (KIP-98), as Kafka's ProducerStateManager keeps it (pure).

Per producer id: the first offset of its open transaction here, the latest producer epoch and
coordinator epoch a transactional batch or marker carried; per partition: the aborted
transactions (producer id, first offset, marker offset). From these come the decisions the
replica acts on — may this transactional batch or this marker be appended, what is the last
stable offset, which aborted transactions a read_committed fetch of a range must name — so they
are tested without a stream, a socket or a clock. The state travels in the partition meta
(``PartitionMeta.transactions``) and is rebuilt from the data stream's tail after a crash by
replaying batches and markers through :meth:`TxnState.on_batch` and :meth:`TxnState.on_marker`,
which are idempotent for a batch or marker seen twice.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Any, Iterable

from metadata_quorum.kernel.errors import ErrorCode, FerryError
from stream_storage.batches import BatchInfo


@dataclass(frozen=True, order=True)
class AbortedTxn:
    """An aborted transaction: its producer's records in [first_offset, last_offset] are skipped
    by read_committed readers (``last_offset`` is the abort marker's offset, as in Kafka)."""

    last_offset: int
    first_offset: int
    producer_id: int


def epoch_error(known_epoch: int | None, producer_id: int, producer_epoch: int, where: str) -> FerryError | None:
    """Kafka's producer epoch check (ProducerAppendInfo.checkProducerEpoch): a batch or marker of
    an epoch older than the producer's latest here is a zombie's. Produce answers
    INVALID_PRODUCER_EPOCH at every version (since KIP-588 the coordinator's APIs say
    PRODUCER_FENCED, a produce does not: the client aborts and goes on)."""
    if known_epoch is not None and producer_epoch < known_epoch:
        return FerryError(ErrorCode.INVALID_PRODUCER_EPOCH,
                          f"producer {producer_id} epoch {producer_epoch} is older than its epoch {known_epoch} "
                          f"in {where}")
    return None


@dataclass
class TxnState:
    open: dict[int, int] = field(default_factory=dict)  # producer id -> first offset of its open transaction
    aborted: list[AbortedTxn] = field(default_factory=list)  # by marker offset
    coordinator_epochs: dict[int, int] = field(default_factory=dict)  # producer id -> the last marker's
    producer_epochs: dict[int, int] = field(default_factory=dict)  # producer id -> latest transactional epoch

    # ------------------------------------------------------------------ decisions
    def known_epoch(self, producer_id: int, idempotent_epoch: int | None) -> int | None:
        """The producer's latest epoch here: of its transactional batches and markers, and of its
        idempotent batches (the producer state's, passed in)."""
        mine = self.producer_epochs.get(producer_id)
        if mine is None:
            return idempotent_epoch
        return mine if idempotent_epoch is None else max(mine, idempotent_epoch)

    def batch_error(self, producer_id: int, producer_epoch: int, transactional: bool,
                    idempotent_epoch: int | None, where: str) -> FerryError | None:
        """Whether a data batch may be appended: not of a fenced epoch, and not a plain batch of a
        producer whose transaction is open here (Kafka: InvalidTxnStateException)."""
        if producer_id < 0:
            return None
        error = epoch_error(self.known_epoch(producer_id, idempotent_epoch), producer_id, producer_epoch, where)
        if error is not None:
            return error
        if not transactional and producer_id in self.open:
            return FerryError(ErrorCode.INVALID_TXN_STATE,
                              f"producer {producer_id} sent a non-transactional batch to {where} while its "
                              f"transaction there is open (from offset {self.open[producer_id]})")
        return None

    def marker_error(self, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                     idempotent_epoch: int | None, where: str) -> FerryError | None:
        """Whether a commit or abort marker may be appended (ProducerAppendInfo.appendEndTxnMarker):
        not of an older producer epoch (INVALID_PRODUCER_EPOCH), not from a coordinator older than
        the last one that wrote a marker for the producer here (TRANSACTION_COORDINATOR_FENCED)."""
        error = epoch_error(self.known_epoch(producer_id, idempotent_epoch), producer_id, producer_epoch, where)
        if error is not None:
            return error
        last = self.coordinator_epochs.get(producer_id)
        if last is not None and coordinator_epoch < last:
            return FerryError(ErrorCode.TRANSACTION_COORDINATOR_FENCED,
                              f"a marker for producer {producer_id} from coordinator epoch {coordinator_epoch}, "
                              f"older than {last} which wrote the last one in {where}")
        return None

    def last_stable_offset(self, high_watermark: int) -> int:
        """Below it every transaction is decided: the first offset of the oldest open one, else
        the high watermark (the caller passes the end of what it has observed, if lower)."""
        return min(min(self.open.values(), default=high_watermark), high_watermark)

    def aborted_between(self, fetch_offset: int, upper_offset: int) -> list[AbortedTxn]:
        """The aborted transactions a fetch of [fetch_offset, upper_offset) must name, as Kafka's
        collectAbortedTxns: those ending at or after the fetch offset and starting before the upper bound."""
        start = bisect.bisect_left(self.aborted, AbortedTxn(fetch_offset, -1, -1))
        return [a for a in self.aborted[start:] if a.first_offset < upper_offset]

    # ------------------------------------------------------------------ what was written
    def on_batch(self, producer_id: int, producer_epoch: int, transactional: bool, base_offset: int) -> None:
        """A data batch was written at ``base_offset``: a transactional one opens its producer's
        transaction here (if not open already)."""
        if not transactional or producer_id < 0:
            return
        self.open.setdefault(producer_id, base_offset)
        self.producer_epochs[producer_id] = max(producer_epoch, self.producer_epochs.get(producer_id, producer_epoch))

    def on_marker(self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                  offset: int) -> AbortedTxn | None:
        """A marker was written at ``offset``: the producer's transaction here ends; an aborted one
        enters the index (once, however often the marker is replayed). Returns that entry."""
        self.producer_epochs[producer_id] = max(producer_epoch, self.producer_epochs.get(producer_id, producer_epoch))
        self.coordinator_epochs[producer_id] = max(coordinator_epoch,
                                                   self.coordinator_epochs.get(producer_id, coordinator_epoch))
        first = self.open.get(producer_id)
        if first is None or first > offset:
            return None
        del self.open[producer_id]
        if commit:
            return None
        entry = AbortedTxn(offset, first, producer_id)
        if entry not in self.aborted:
            bisect.insort(self.aborted, entry)
        return entry

    def trim(self, log_start_offset: int) -> None:
        """Forget aborted transactions wholly below the log start (no reader can reach them)."""
        self.aborted = [a for a in self.aborted if a.last_offset >= log_start_offset]

    # ------------------------------------------------------------------ persistence
    def to_json(self) -> dict[str, Any]:
        return {"open": {str(p): o for p, o in self.open.items()},
                "aborted": [[a.producer_id, a.first_offset, a.last_offset] for a in self.aborted],
                "coordinator_epochs": {str(p): e for p, e in self.coordinator_epochs.items()},
                "producer_epochs": {str(p): e for p, e in self.producer_epochs.items()}}

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> "TxnState":
        if not data:
            return cls()
        return cls(open={int(p): int(o) for p, o in data.get("open", {}).items()},
                   aborted=sorted(AbortedTxn(int(last), int(first), int(pid))
                                  for pid, first, last in data.get("aborted", [])),
                   coordinator_epochs={int(p): int(e) for p, e in data.get("coordinator_epochs", {}).items()},
                   producer_epochs={int(p): int(e) for p, e in data.get("producer_epochs", {}).items()})


def stable_bytes(infos: Iterable[BatchInfo], bound: int) -> int:
    """How many bytes of a fetched buffer (its batches ``infos``, in order) lie wholly below
    ``bound``: a read_committed fetch stops at the last stable offset, always a batch boundary."""
    end = 0
    for info in infos:
        if info.next_offset > bound:
            break
        end = info.position + info.size_bytes
    return end
