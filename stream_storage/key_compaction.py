"""Key compaction for ``cleanup.policy=compact`` (Kafka's log cleaner semantics), pure.

Over the cleaned range of a stream (its committed objects), a keyed record survives only if it is
the latest record of its key there; a tombstone (null value) that is the latest of its key
survives until its timestamp is older than ``delete.retention.ms`` — except the very last record
of the range, kept whatever it is, so that the range never ends in an offset no batch covers.
Records without a key are kept (Kafka refuses them on compacted topics at produce time). Offsets
never change: a batch that loses records keeps its base offset and last offset delta (the next
batch still follows it), a batch that loses them all is dropped, and readers skip the gap.

Rebuilt batches are uncompressed; a batch nothing was removed from keeps its bytes as they are.
Control batches (transaction markers) are kept whole and their keys (a control record's type) are
not record keys; a rebuilt batch keeps its transactional bit, so that read_committed readers
still know its producer's transaction. As Kafka's cleaner, the records of aborted transactions
(``aborted``: producer id, first offset, marker offset) neither count as the latest of their key
nor stay, and the caller cleans only below the partition's last stable offset.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Iterable, Sequence

from crc32c import crc32c
from kafka.record.default_records import DefaultRecordBatchBuilder

from stream_storage.batches import (
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    LAST_OFFSET_DELTA_OFFSET,
    BatchInfo,
    Record,
    iter_batches,
    read_records,
    set_base_offset,
    set_leader_epoch,
)

_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")


@dataclass(frozen=True)
class CleanRule:
    latest: dict[bytes, int]  # key -> offset of its latest record in the cleaned range
    last_offset: int  # the last offset of the cleaned range (its record is always kept)
    tombstone_cutoff_ms: int  # tombstones older than this (and not latest-last) go
    aborted: Aborted = ()  # aborted transactions: their batches go (but one holding ``last_offset``)

    def keeps(self, record: Record) -> bool:
        if record.key is None or record.offset == self.last_offset:
            return True
        if self.latest.get(record.key) != record.offset:
            return False
        return record.value is not None or record.timestamp_ms >= self.tombstone_cutoff_ms


Aborted = Sequence[tuple[int, int, int]]  # (producer id, first offset, marker offset) of aborted transactions


def in_aborted(info: BatchInfo, aborted: Aborted) -> bool:
    """Whether a transactional batch belongs to an aborted transaction."""
    return info.is_transactional and not info.is_control and any(
        pid == info.producer_id and first <= info.base_offset <= last for pid, first, last in aborted)


def data_records(data: bytes | bytearray | memoryview, aborted: Aborted = ()) -> list[Record]:
    """The records compaction keys: those of data batches (not markers) outside aborted transactions."""
    view = memoryview(data)
    out: list[Record] = []
    for info in iter_batches(view):
        if not info.is_control and not in_aborted(info, aborted):
            out += read_records(view[info.position: info.position + info.size_bytes])
    return out


def latest_offsets(records: Iterable[Record], into: dict[bytes, int] | None = None) -> dict[bytes, int]:
    latest = {} if into is None else into
    for record in records:
        if record.key is not None:
            latest[record.key] = max(record.offset, latest.get(record.key, -1))
    return latest


def rebuild_batch(data: bytes | memoryview, info: BatchInfo, kept: list[Record]) -> bytes:
    """``kept`` (a non-empty subset of the batch's records) as a batch with the same base offset,
    last offset delta, leader epoch and producer fields."""
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=info.is_transactional,
                                        producer_id=info.producer_id, producer_epoch=info.producer_epoch,
                                        base_sequence=info.base_sequence, batch_size=2 ** 31 - 1)
    for rec in kept:
        builder.append(rec.offset - info.base_offset, rec.timestamp_ms, rec.key, rec.value, list(rec.headers))
    buf = builder.build()
    set_base_offset(buf, info.base_offset)
    set_leader_epoch(buf, info.leader_epoch)
    _I32.pack_into(buf, LAST_OFFSET_DELTA_OFFSET, info.last_offset_delta)
    _U32.pack_into(buf, CRC_OFFSET, crc32c(bytes(buf[ATTRIBUTES_OFFSET:])))
    return bytes(buf)


def clean(data: bytes, rule: CleanRule) -> tuple[bytes, int]:
    """``data`` (whole batches) with the records ``rule`` does not keep removed; and how many went."""
    out: list[bytes] = []
    removed = 0
    view = memoryview(data)
    for info in iter_batches(view):
        raw = view[info.position: info.position + info.size_bytes]
        if info.is_control:  # a transaction's marker: its readers need it whatever came after
            out.append(bytes(raw))
            continue
        if rule.aborted and info.next_offset <= rule.last_offset and in_aborted(info, rule.aborted):
            removed += info.records_count
            continue
        records = read_records(raw)
        kept = [r for r in records if rule.keeps(r)]
        removed += len(records) - len(kept)
        if len(kept) == len(records):
            out.append(bytes(raw))
        elif kept:
            out.append(rebuild_batch(raw, info, kept))
    return b"".join(out), removed
