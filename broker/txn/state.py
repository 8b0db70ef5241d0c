"""The transaction coordinator of one ``__transaction_state`` partition, as a state machine.

It decides what Kafka's TransactionCoordinator decides (KIP-98) and nothing else: no sockets, no
appends, no clock. Each call takes the transactional id's current metadata and ``now_ms`` and
returns a :class:`Decision`: the error to answer, the metadata to persist (written to the
partition as one TransactionLog record, and only then made current by :meth:`Coordinator.apply`),
and the markers to send once it is durable. So a call changes nothing until its record is
durable, and the same code runs under the Kafka listener, in tests with a manual clock and when a
new owner replays the partition (:meth:`Coordinator.load`).

States (Kafka's TransactionState): Empty -> Ongoing (AddPartitionsToTxn / AddOffsetsToTxn) ->
PrepareCommit / PrepareAbort (EndTxn, or a timeout) -> CompleteCommit / CompleteAbort once every
partition has its marker -> Ongoing again with the next transaction. InitProducerId bumps the
producer epoch (KIP-98's zombie fencing; KIP-360: a new producer id once the epoch is exhausted)
and, when a transaction is open, first aborts it under the bumped epoch (so its producer, if it is
still alive, is fenced). A transaction past its timeout is aborted the same way (``expired``).
A coordinator that loads a transaction in PrepareCommit / PrepareAbort sends its markers again
and completes it (:meth:`Coordinator.pending_markers`).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum

from metadata_quorum.kernel.errors import ErrorCode

#: Kafka's transaction.max.timeout.ms default
MAX_TRANSACTION_TIMEOUT_MS = 900_000
#: Kafka bumps to a new producer id rather than reach Short.MAX_VALUE
MAX_PRODUCER_EPOCH = 32766
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1


class TxnState(Enum):
    """Kafka's transaction states, valued as TransactionLogValue's ``transaction_status``."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        """The name DescribeTransactions and ListTransactions use (Kafka's ``TransactionState.name``)."""
        return "".join(part.capitalize() for part in self.name.split("_"))


ENDED = (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)
PREPARING = (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)

TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class TxnMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[TopicPartition]
    last_update_ms: int
    start_ms: int = -1  # when the open transaction began (-1: none open)


@dataclass(frozen=True)
class MarkerJob:
    """Write a commit or abort marker for this producer on each partition, then complete."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    commit: bool
    partitions: frozenset[TopicPartition]


@dataclass(frozen=True)
class Decision:
    error: ErrorCode = ErrorCode.NONE
    persist: TxnMetadata | None = None
    markers: MarkerJob | None = None

    @property
    def ok(self) -> bool:
        return self.error is ErrorCode.NONE


def _fence_check(meta: TxnMetadata, producer_id: int, producer_epoch: int) -> ErrorCode:
    """A request from this transactional id's producer at its current epoch passes."""
    if producer_id != meta.producer_id:
        return ErrorCode.INVALID_PRODUCER_ID_MAPPING
    if producer_epoch < meta.producer_epoch:
        return ErrorCode.PRODUCER_FENCED
    if producer_epoch > meta.producer_epoch:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return ErrorCode.NONE


def needs_new_producer_id(meta: TxnMetadata | None) -> bool:
    """InitProducerId must be given a fresh producer id first (a new transactional id, or an
    epoch that cannot be bumped again)."""
    return meta is None or meta.producer_epoch >= MAX_PRODUCER_EPOCH


def init_producer_id(meta: TxnMetadata | None, transactional_id: str, timeout_ms: int, producer_id: int,
                     producer_epoch: int, now_ms: int, fresh_producer_id: int) -> Decision:
    """InitProducerId with a transactional id. ``fresh_producer_id`` is used when
    :func:`needs_new_producer_id` said so (else it may be -1)."""
    if not 0 < timeout_ms <= MAX_TRANSACTION_TIMEOUT_MS:
        return Decision(ErrorCode.INVALID_TRANSACTION_TIMEOUT)
    if meta is None:
        return Decision(persist=TxnMetadata(transactional_id, fresh_producer_id, 0, timeout_ms, TxnState.EMPTY,
                                            frozenset(), now_ms))
    if producer_id != NO_PRODUCER_ID and (producer_id != meta.producer_id or
                                         producer_epoch not in (meta.producer_epoch, meta.producer_epoch - 1)):
        # KIP-360: a producer re-initialising names its id and epoch (the one before the bump
        # of an abort this coordinator made for it, when it retries); anyone else is fenced
        return Decision(ErrorCode.PRODUCER_FENCED)
    if meta.state in PREPARING or meta.state is TxnState.PREPARE_EPOCH_FENCE:
        return Decision(ErrorCode.CONCURRENT_TRANSACTIONS)
    if meta.state is TxnState.ONGOING:
        # abort the open transaction under a bumped epoch, which fences its producer; the client
        # retries on CONCURRENT_TRANSACTIONS and gets its new epoch once the abort completed
        aborting = _bumped(meta, fresh_producer_id, TxnState.PREPARE_ABORT, now_ms, meta.timeout_ms)
        return Decision(ErrorCode.CONCURRENT_TRANSACTIONS, aborting,
                        MarkerJob(transactional_id, aborting.producer_id, aborting.producer_epoch, False,
                                  meta.partitions))
    return Decision(persist=replace(_bumped(meta, fresh_producer_id, TxnState.EMPTY, now_ms, timeout_ms),
                                    partitions=frozenset(), start_ms=-1))


def _bumped(meta: TxnMetadata, fresh_producer_id: int, state: TxnState, now_ms: int, timeout_ms: int) -> TxnMetadata:
    if meta.producer_epoch >= MAX_PRODUCER_EPOCH:
        return replace(meta, producer_id=fresh_producer_id, producer_epoch=0, state=state, last_update_ms=now_ms,
                       timeout_ms=timeout_ms)
    return replace(meta, producer_epoch=meta.producer_epoch + 1, state=state, last_update_ms=now_ms,
                   timeout_ms=timeout_ms)


def add_partitions(meta: TxnMetadata | None, producer_id: int, producer_epoch: int,
                   partitions: frozenset[TopicPartition], now_ms: int) -> Decision:
    """AddPartitionsToTxn (and AddOffsetsToTxn's offsets partition): the transaction includes them."""
    if meta is None:
        return Decision(ErrorCode.INVALID_PRODUCER_ID_MAPPING)
    error = _fence_check(meta, producer_id, producer_epoch)
    if error is not ErrorCode.NONE:
        return Decision(error)
    if meta.state in PREPARING or meta.state is TxnState.PREPARE_EPOCH_FENCE:
        return Decision(ErrorCode.CONCURRENT_TRANSACTIONS)
    if meta.state is TxnState.DEAD:
        return Decision(ErrorCode.INVALID_TXN_STATE)
    if meta.state is TxnState.ONGOING and partitions <= meta.partitions:
        return Decision()  # nothing new: nothing to write
    start_ms = meta.start_ms if meta.state is TxnState.ONGOING else now_ms
    base = meta.partitions if meta.state is TxnState.ONGOING else frozenset()
    return Decision(persist=replace(meta, state=TxnState.ONGOING, partitions=base | partitions,
                                    last_update_ms=now_ms, start_ms=start_ms))


def end_txn(meta: TxnMetadata | None, producer_id: int, producer_epoch: int, commit: bool, now_ms: int) -> Decision:
    """EndTxn: prepare, then (the shell) markers on every partition, then :func:`complete`."""
    if meta is None:
        return Decision(ErrorCode.INVALID_PRODUCER_ID_MAPPING)
    error = _fence_check(meta, producer_id, producer_epoch)
    if error is not ErrorCode.NONE:
        return Decision(error)
    wanted = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
    done = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
    if meta.state is TxnState.ONGOING:
        prepared = replace(meta, state=wanted, last_update_ms=now_ms)
        return Decision(persist=prepared, markers=MarkerJob(meta.transactional_id, meta.producer_id,
                                                            meta.producer_epoch, commit, meta.partitions))
    if meta.state is done:
        return Decision()  # a retry of an EndTxn that completed
    if meta.state is wanted:
        return Decision(ErrorCode.CONCURRENT_TRANSACTIONS)  # still writing its markers
    if meta.state is TxnState.EMPTY and not commit:
        return Decision()  # an abort with nothing added: nothing to do (as Kafka's client-side no-op)
    return Decision(ErrorCode.INVALID_TXN_STATE)


def complete(meta: TxnMetadata, job: MarkerJob, now_ms: int) -> Decision:
    """Every marker of ``job`` is written: the transaction is complete."""
    if meta.state not in PREPARING or meta.producer_id != job.producer_id or \
            meta.producer_epoch != job.producer_epoch:
        return Decision()  # already completed (or superseded): nothing to write
    done = TxnState.COMPLETE_COMMIT if meta.state is TxnState.PREPARE_COMMIT else TxnState.COMPLETE_ABORT
    return Decision(persist=replace(meta, state=done, partitions=frozenset(), last_update_ms=now_ms, start_ms=-1))


def expired(meta: TxnMetadata, now_ms: int) -> Decision:
    """A transaction open past its timeout is aborted under a bumped epoch (fencing its producer)."""
    if meta.state is not TxnState.ONGOING or meta.start_ms < 0 or now_ms < meta.start_ms + meta.timeout_ms:
        return Decision()
    if meta.producer_epoch >= MAX_PRODUCER_EPOCH:
        aborting = replace(meta, state=TxnState.PREPARE_ABORT, last_update_ms=now_ms)
    else:
        aborting = replace(meta, producer_epoch=meta.producer_epoch + 1, state=TxnState.PREPARE_ABORT,
                           last_update_ms=now_ms)
    return Decision(persist=aborting, markers=MarkerJob(meta.transactional_id, aborting.producer_id,
                                                        aborting.producer_epoch, False, meta.partitions))


class Coordinator:
    """The transactional ids of one ``__transaction_state`` partition, as its durable records say."""

    def __init__(self) -> None:
        self.txns: dict[str, TxnMetadata] = {}

    @classmethod
    def load(cls, records: list[tuple[str, TxnMetadata | None]]) -> "Coordinator":
        c = cls()
        for txn_id, meta in records:
            c.apply_record(txn_id, meta)
        return c

    def apply_record(self, transactional_id: str, meta: TxnMetadata | None) -> None:
        if meta is None:
            self.txns.pop(transactional_id, None)
        else:
            self.txns[transactional_id] = meta

    def apply(self, meta: TxnMetadata) -> None:
        """``meta`` is durable: it is current."""
        self.txns[meta.transactional_id] = meta

    def get(self, transactional_id: str) -> TxnMetadata | None:
        return self.txns.get(transactional_id)

    def pending_markers(self) -> list[MarkerJob]:
        """Transactions a previous owner prepared but did not complete: their markers, again."""
        return [MarkerJob(m.transactional_id, m.producer_id, m.producer_epoch, m.state is TxnState.PREPARE_COMMIT,
                          m.partitions) for m in self.txns.values() if m.state in PREPARING]

    def expired(self, now_ms: int) -> list[str]:
        return sorted(t for t, m in self.txns.items() if expired(m, now_ms).persist is not None)

    def next_deadline_ms(self) -> int | None:
        deadlines = [m.start_ms + m.timeout_ms for m in self.txns.values()
                     if m.state is TxnState.ONGOING and m.start_ms >= 0]
        return min(deadlines, default=None)


__all__ = ["ENDED", "MAX_PRODUCER_EPOCH", "MAX_TRANSACTION_TIMEOUT_MS", "PREPARING", "Coordinator", "Decision",
           "MarkerJob", "TxnMetadata", "TxnState", "add_partitions", "complete", "end_txn", "expired",
           "init_producer_id", "needs_new_producer_id"]
