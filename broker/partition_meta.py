"""What a partition keeps in its meta stream, and the small indexes behind it (pure).

The old owner writes it at step 3 of a move (clean shutdown flag, offsets, leader-epoch
checkpoint, producer state, a sparse time index); the new owner reads it at step 6. A partition
that was not shut down cleanly has a meta written at an earlier open; the new owner then replays
the WAL tail and rebuilds these indexes from the replayed batches (``observe_batch``).
"""
from __future__ import annotations

import bisect
import json
from dataclasses import dataclass, field
from typing import Any

from metadata_quorum.kernel.errors import ErrorCode, FerryError

PRODUCER_BATCHES_KEPT = 5  # Kafka keeps the last 5 batches per producer for duplicate detection
SEQUENCE_MAX = 2 ** 31 - 1  # a producer's sequence is an int32 that wraps to 0 after this
TIME_INDEX_MAX_ENTRIES = 4096


def sequence_after(sequence: int, count: int = 1) -> int:
    """The sequence ``count`` records after ``sequence`` (Kafka's wrap at Int32.MAX_VALUE)."""
    return (sequence + count) % (SEQUENCE_MAX + 1)


def sequence_error(known: tuple[int, int] | None, producer_id: int, producer_epoch: int, base_sequence: int,
                   where: str) -> FerryError | None:
    """Kafka's sequence check of an idempotent batch that is not a duplicate (pure).

    ``known`` is (epoch, last sequence) of the producer's latest batch in this partition, written
    or in flight, or None when the partition knows nothing of the producer (then any sequence is
    accepted, as Kafka does after a producer's state expired). A batch must follow the last one
    exactly: a client that pipelines requests takes a later batch's success to mean that every
    earlier one was written (librdkafka then reports the earlier records delivered without an
    offset), so accepting a batch after a gap would acknowledge records that are not there.
    """
    if producer_id < 0 or base_sequence < 0 or known is None:
        return None
    known_epoch, last_sequence = known
    if producer_epoch < known_epoch:
        return FerryError(ErrorCode.INVALID_PRODUCER_EPOCH,
                          f"producer {producer_id} epoch {producer_epoch} is older than its epoch {known_epoch} "
                          f"in {where}")
    if producer_epoch > known_epoch:
        if base_sequence != 0:
            return FerryError(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                              f"producer {producer_id}'s new epoch {producer_epoch} starts at sequence "
                              f"{base_sequence} in {where}, not at 0")
        return None
    expected = sequence_after(last_sequence)
    if base_sequence != expected:
        return FerryError(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                          f"producer {producer_id} epoch {producer_epoch} sent sequence {base_sequence} to {where}; "
                          f"the next expected is {expected}")
    return None


@dataclass
class ProducerEntry:
    producer_epoch: int
    batches: list[tuple[int, int, int, int]] = field(default_factory=list)  # base_seq, last_seq, base_off, last_off


class ProducerState:
    """Idempotent-producer state: the last batches of each producer id, for duplicate detection
    and the sequence check."""

    def __init__(self) -> None:
        self.producers: dict[int, ProducerEntry] = {}

    def duplicate_of(self, producer_id: int, producer_epoch: int, base_sequence: int) -> tuple[int, int] | None:
        """The (base, last) offsets of an earlier identical batch, if this one repeats it."""
        if producer_id < 0 or base_sequence < 0:
            return None
        entry = self.producers.get(producer_id)
        if entry is None or entry.producer_epoch != producer_epoch:
            return None
        for base_seq, _last_seq, base_off, last_off in entry.batches:
            if base_seq == base_sequence:
                return base_off, last_off
        return None

    def epoch_of(self, producer_id: int) -> int | None:
        """The producer's latest epoch of its batches here, if it wrote any."""
        entry = self.producers.get(producer_id)
        return entry.producer_epoch if entry is not None else None

    def last_sequence(self, producer_id: int) -> tuple[int, int] | None:
        """(epoch, last sequence) of the producer's latest written batch here, if any is known."""
        entry = self.producers.get(producer_id)
        if entry is None or not entry.batches:
            return None
        latest = max(entry.batches, key=lambda b: b[2])
        return entry.producer_epoch, latest[1]

    def record(self, producer_id: int, producer_epoch: int, base_sequence: int, count: int,
               base_offset: int, last_offset: int) -> None:
        """Note a written batch. Recording the same batch twice (a rebuild that re-reads batches
        a checkpoint already held) changes nothing."""
        if producer_id < 0 or base_sequence < 0:
            return
        entry = self.producers.get(producer_id)
        if entry is None or producer_epoch > entry.producer_epoch:
            entry = self.producers[producer_id] = ProducerEntry(producer_epoch)
        elif producer_epoch < entry.producer_epoch:
            return
        if any(b[2] == base_offset for b in entry.batches):
            return
        entry.batches.append((base_sequence, sequence_after(base_sequence, max(0, count - 1)), base_offset,
                              last_offset))
        entry.batches.sort(key=lambda b: b[2])
        del entry.batches[:-PRODUCER_BATCHES_KEPT]

    def to_json(self) -> dict[str, Any]:
        return {str(pid): {"epoch": e.producer_epoch, "batches": [list(b) for b in e.batches]}
                for pid, e in self.producers.items()}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "ProducerState":
        st = cls()
        for pid, e in data.items():
            st.producers[int(pid)] = ProducerEntry(int(e["epoch"]), [tuple(int(x) for x in b) for b in e["batches"]])  # type: ignore[misc]
        return st


class TimeIndex:
    """Sparse (max timestamp so far, batch base offset) entries for ListOffsets by timestamp.

    Entries keep the running maximum so that a binary search finds the first batch that may hold
    a record at or after a timestamp; the caller then reads that batch to find the exact record.
    When full, every other entry is dropped (the index stays bounded; lookups read a bit more).
    """

    def __init__(self, entries: list[tuple[int, int]] | None = None) -> None:
        self.entries: list[tuple[int, int]] = list(entries or [])
        self._stride = 1
        self._seen = 0

    def observe(self, max_timestamp_ms: int, base_offset: int) -> None:
        running = max(max_timestamp_ms, self.entries[-1][0] if self.entries else -1)
        self._seen += 1
        if self.entries and running == self.entries[-1][0]:
            return  # no new maximum: the previous entry already answers for these timestamps
        if self._seen % self._stride and self.entries:
            return
        self.entries.append((running, base_offset))
        if len(self.entries) > TIME_INDEX_MAX_ENTRIES:
            self.entries = self.entries[::2]
            self._stride *= 2

    def lookup(self, timestamp_ms: int) -> int | None:
        """The base offset from which to scan for the first record with timestamp ≥ ``timestamp_ms``;
        None when no indexed batch reaches it."""
        keys = [ts for ts, _ in self.entries]
        i = bisect.bisect_left(keys, timestamp_ms)
        if i >= len(self.entries):
            return None
        return self.entries[i - 1][1] if i > 0 else self.entries[0][1]


@dataclass
class PartitionMeta:
    """The partition meta of the meta stream (AutoMQ's ElasticPartitionMeta and checkpoints)."""

    clean_shutdown: bool = False
    start_offset: int = 0
    end_offset: int = 0
    size_bytes: int = 0
    leader_epochs: list[tuple[int, int]] = field(default_factory=list)  # (leader_epoch, start_offset)
    producers: dict[str, Any] = field(default_factory=dict)
    time_index: list[tuple[int, int]] = field(default_factory=list)
    # the max-timestamp index (broker/max_timestamp.py); None: written before it was kept
    max_timestamps: list[list[int]] | None = None
    data_stream_id: int = -1
    meta_stream_id: int = -1
    closed_by_broker: int = -1
    stream_epoch: int = -1
    # open and aborted transactions, coordinator epochs (broker/txn_state.py); None: none kept
    transactions: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return {"clean_shutdown": self.clean_shutdown, "start_offset": self.start_offset,
                "end_offset": self.end_offset, "size_bytes": self.size_bytes,
                "leader_epochs": [list(e) for e in self.leader_epochs], "producers": self.producers,
                "time_index": [list(e) for e in self.time_index], "data_stream_id": self.data_stream_id,
                **({} if self.max_timestamps is None else {"max_timestamps": self.max_timestamps}),
                "meta_stream_id": self.meta_stream_id, "closed_by_broker": self.closed_by_broker,
                "stream_epoch": self.stream_epoch,
                **({} if self.transactions is None else {"transactions": self.transactions})}

    def encode(self) -> bytes:
        return json.dumps(self.to_json(), separators=(",", ":")).encode()

    @classmethod
    def decode(cls, raw: bytes | str | None) -> "PartitionMeta":
        if not raw:
            return cls()
        d = json.loads(raw)
        return cls(clean_shutdown=bool(d.get("clean_shutdown", False)), start_offset=int(d.get("start_offset", 0)),
                   end_offset=int(d.get("end_offset", 0)), size_bytes=int(d.get("size_bytes", 0)),
                   leader_epochs=[(int(a), int(b)) for a, b in d.get("leader_epochs", [])],
                   producers=dict(d.get("producers", {})),
                   time_index=[(int(a), int(b)) for a, b in d.get("time_index", [])],
                   max_timestamps=[[int(x) for x in e] for e in d["max_timestamps"]] if "max_timestamps" in d else None,
                   data_stream_id=int(d.get("data_stream_id", -1)), meta_stream_id=int(d.get("meta_stream_id", -1)),
                   closed_by_broker=int(d.get("closed_by_broker", -1)), stream_epoch=int(d.get("stream_epoch", -1)),
                   transactions=dict(d["transactions"]) if d.get("transactions") is not None else None)


def add_leader_epoch(entries: list[tuple[int, int]], leader_epoch: int, start_offset: int) -> list[tuple[int, int]]:
    """Kafka's leader-epoch cache: a new epoch starts at the log end; a repeated one is ignored."""
    if entries and entries[-1][0] >= leader_epoch:
        return entries
    return entries + [(leader_epoch, start_offset)]
