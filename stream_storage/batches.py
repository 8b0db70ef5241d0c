"""Kafka v2 RecordBatch helpers: build, walk, validate, and stamp offsets in place.

Layout of the 61-byte header (big-endian): baseOffset i64 | batchLength i32 | partitionLeaderEpoch
i32 | magic i8 | crc u32 | attributes i16 | lastOffsetDelta i32 | baseTimestamp i64 |
maxTimestamp i64 | producerId i64 | producerEpoch i16 | baseSequence i32 | recordsCount i32.
The CRC (crc32c) covers attributes..end, so the base offset and the leader epoch can be set
without recomputing it — which is why the storage layer can assign offsets cheaply.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Iterable, Iterator, Sequence

from crc32c import crc32c
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from metadata_quorum.kernel.errors import ErrorCode, FerryError

HEADER_BYTES = 61
LOG_OVERHEAD = 12  # baseOffset + batchLength
MAGIC_V2 = 2
_BASE_OFFSET = struct.Struct(">q")
_LENGTH = struct.Struct(">i")
_EPOCH = struct.Struct(">i")
_CRC = struct.Struct(">I")
_LAST_DELTA = struct.Struct(">i")
_COUNT = struct.Struct(">i")
_TIMESTAMPS = struct.Struct(">qq")
_PRODUCER = struct.Struct(">qhi")
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
LAST_OFFSET_DELTA_OFFSET = 23
TIMESTAMPS_OFFSET = 27
PRODUCER_OFFSET = 43
RECORDS_COUNT_OFFSET = 57
LEADER_EPOCH_OFFSET = 12
_ATTRIBUTES = struct.Struct(">h")
TRANSACTIONAL_FLAG = 0x10
CONTROL_FLAG = 0x20
#: a control record's key (version 0, type) and value (version 0, coordinator epoch), as Kafka writes them
_CONTROL_KEY = struct.Struct(">hh")
_CONTROL_VALUE = struct.Struct(">hi")
CONTROL_ABORT, CONTROL_COMMIT = 0, 1


@dataclass(frozen=True)
class BatchInfo:
    """Where a batch sits in a buffer and what its header says."""

    position: int
    size_bytes: int
    base_offset: int
    last_offset_delta: int
    records_count: int
    leader_epoch: int
    max_timestamp_ms: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    attributes: int = 0

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_FLAG)

    @property
    def is_control(self) -> bool:
        """A control batch (a transaction's commit or abort marker), written only by a leader."""
        return bool(self.attributes & CONTROL_FLAG)

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def offset_count(self) -> int:
        """How many offsets the batch occupies (lastOffsetDelta + 1)."""
        return self.last_offset_delta + 1


@dataclass(frozen=True)
class Record:
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


def build_batch(records: Iterable[tuple[bytes | None, bytes | None] | Record],
                base_offset: int = 0, timestamp_ms: int | None = None,
                headers: Sequence[tuple[str, bytes | None]] = (), producer_id: int = -1,
                producer_epoch: int = -1, base_sequence: int = -1, transactional: bool = False) -> bytes:
    """A v2 batch (uncompressed) of ``(key, value)`` pairs or :class:`Record`s."""
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=transactional,
                                        producer_id=producer_id, producer_epoch=producer_epoch,
                                        base_sequence=base_sequence, batch_size=2 ** 31 - 1)
    count = 0
    for i, item in enumerate(records):
        if isinstance(item, Record):
            builder.append(i, item.timestamp_ms, item.key, item.value, list(item.headers))
        else:
            key, value = item
            builder.append(i, timestamp_ms, key, value, list(headers))
        count += 1
    if count == 0:
        raise FerryError(ErrorCode.INVALID_RECORD, "a record batch needs at least one record")
    buf = builder.build()
    _BASE_OFFSET.pack_into(buf, 0, base_offset)
    return bytes(buf)


@dataclass(frozen=True)
class ControlMarker:
    """What a control batch says: the end of a producer's transaction here."""

    commit: bool
    coordinator_epoch: int


def build_control_batch(producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                        timestamp_ms: int) -> bytes:
    """Kafka's transaction marker: a transactional control batch of one control record whose key
    is (version 0, type 0 abort / 1 commit) and value (version 0, coordinator epoch)."""
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=True,
                                        producer_id=producer_id, producer_epoch=producer_epoch,
                                        base_sequence=-1, batch_size=2 ** 31 - 1)
    builder.append(0, timestamp_ms, _CONTROL_KEY.pack(0, CONTROL_COMMIT if commit else CONTROL_ABORT),
                   _CONTROL_VALUE.pack(0, coordinator_epoch), [])
    buf = bytearray(builder.build())
    (attributes,) = _ATTRIBUTES.unpack_from(buf, ATTRIBUTES_OFFSET)
    _ATTRIBUTES.pack_into(buf, ATTRIBUTES_OFFSET, attributes | CONTROL_FLAG)
    _CRC.pack_into(buf, CRC_OFFSET, crc32c(bytes(buf[ATTRIBUTES_OFFSET:])))
    return bytes(buf)


def control_marker(buf: bytes | bytearray | memoryview, info: BatchInfo) -> ControlMarker | None:
    """The marker a control batch holds (None for a data batch, or a control record of another
    type, which Kafka's readers skip too)."""
    if not info.is_control:
        return None
    view = memoryview(buf)
    batch = DefaultRecordBatch(bytes(view[info.position: info.position + info.size_bytes]))
    for rec in batch:
        key, value = rec.key, rec.value
        if key is None or len(key) < _CONTROL_KEY.size:
            raise FerryError(ErrorCode.CORRUPT_MESSAGE, f"control batch at offset {info.base_offset} has no key")
        _version, kind = _CONTROL_KEY.unpack_from(key)
        if kind not in (CONTROL_ABORT, CONTROL_COMMIT):
            return None
        epoch = _CONTROL_VALUE.unpack_from(value)[1] if value is not None and len(value) >= _CONTROL_VALUE.size \
            else -1
        return ControlMarker(kind == CONTROL_COMMIT, epoch)
    return None


def header(buf: bytes | bytearray | memoryview, position: int = 0) -> BatchInfo:
    """Parse the header at ``position`` (no CRC check)."""
    view = memoryview(buf)
    if len(view) - position < HEADER_BYTES:
        raise FerryError(ErrorCode.CORRUPT_MESSAGE, f"record batch header truncated at byte {position}")
    (length,) = _LENGTH.unpack_from(view, position + 8)
    if view[position + 16] != MAGIC_V2:
        raise FerryError(ErrorCode.CORRUPT_MESSAGE, f"record batch at byte {position} has magic "
                         f"{view[position + 16]}, only v2 (magic 2) is supported")
    size = length + LOG_OVERHEAD
    if length < HEADER_BYTES - LOG_OVERHEAD or position + size > len(view):
        raise FerryError(ErrorCode.CORRUPT_MESSAGE, f"record batch at byte {position} claims {size} bytes, "
                         f"{len(view) - position} available")
    (base,) = _BASE_OFFSET.unpack_from(view, position)
    (epoch,) = _EPOCH.unpack_from(view, position + LEADER_EPOCH_OFFSET)
    (delta,) = _LAST_DELTA.unpack_from(view, position + LAST_OFFSET_DELTA_OFFSET)
    _first_ts, max_ts = _TIMESTAMPS.unpack_from(view, position + TIMESTAMPS_OFFSET)
    pid, pepoch, seq = _PRODUCER.unpack_from(view, position + PRODUCER_OFFSET)
    (count,) = _COUNT.unpack_from(view, position + RECORDS_COUNT_OFFSET)
    (attributes,) = _ATTRIBUTES.unpack_from(view, position + ATTRIBUTES_OFFSET)
    return BatchInfo(position, size, base, delta, count, epoch, max_ts, pid, pepoch, seq, attributes)


def iter_batches(buf: bytes | bytearray | memoryview) -> Iterator[BatchInfo]:
    """Walk the batches of a buffer of whole batches (raises CORRUPT_MESSAGE on a partial one)."""
    position, total = 0, len(buf)
    while position < total:
        info = header(buf, position)
        yield info
        position += info.size_bytes


def crc_ok(buf: bytes | bytearray | memoryview, info: BatchInfo) -> bool:
    view = memoryview(buf)
    (stored,) = _CRC.unpack_from(view, info.position + CRC_OFFSET)
    return bool(crc32c(view[info.position + ATTRIBUTES_OFFSET: info.position + info.size_bytes]) == stored)


def validate_batches(buf: bytes | bytearray | memoryview, max_batches: int | None = None) -> list[BatchInfo]:
    """Check framing and every CRC; raises CORRUPT_MESSAGE with a message a person understands."""
    infos = []
    for info in iter_batches(buf):
        if info.last_offset_delta < 0 or info.records_count < 0:
            raise FerryError(ErrorCode.CORRUPT_MESSAGE, f"record batch at byte {info.position} has negative counts")
        if not crc_ok(buf, info):
            raise FerryError(ErrorCode.CORRUPT_MESSAGE, f"record batch at byte {info.position} fails its CRC check")
        infos.append(info)
        if max_batches is not None and len(infos) > max_batches:
            raise FerryError(ErrorCode.INVALID_RECORD, f"more than {max_batches} record batches in one request")
    if not infos:
        raise FerryError(ErrorCode.INVALID_RECORD, "no record batch in the request")
    return infos


def offset_count(buf: bytes | bytearray | memoryview) -> int:
    """How many offsets the batches in ``buf`` occupy."""
    return sum(info.offset_count for info in iter_batches(buf))


def set_base_offset(buf: bytearray | memoryview, base_offset: int, position: int = 0) -> None:
    _BASE_OFFSET.pack_into(buf, position, base_offset)


def set_leader_epoch(buf: bytearray | memoryview, leader_epoch: int, position: int = 0) -> None:
    _EPOCH.pack_into(buf, position + LEADER_EPOCH_OFFSET, leader_epoch)


def assign_offsets(buf: bytearray, base_offset: int, leader_epoch: int | None = None) -> int:
    """Stamp consecutive base offsets (and optionally the leader epoch) on every batch; returns the next offset."""
    next_offset = base_offset
    for info in iter_batches(buf):
        set_base_offset(buf, next_offset, info.position)
        if leader_epoch is not None:
            set_leader_epoch(buf, leader_epoch, info.position)
        next_offset += info.offset_count
    return next_offset


def stamp_offsets(buf: bytearray, infos: Sequence[BatchInfo], base_offset: int, leader_epoch: int | None = None) -> int:
    """:func:`assign_offsets` for batches already walked (``infos`` of ``buf``, in order): the
    headers are not parsed again. Returns the next offset."""
    next_offset = base_offset
    for info in infos:
        _BASE_OFFSET.pack_into(buf, info.position, next_offset)
        if leader_epoch is not None:
            _EPOCH.pack_into(buf, info.position + LEADER_EPOCH_OFFSET, leader_epoch)
        next_offset += info.last_offset_delta + 1
    return next_offset


def read_records(buf: bytes | bytearray | memoryview, skip_control: bool = False) -> list[Record]:
    """Decode every record of every batch (tests, the meta stream, console tools); with
    ``skip_control``, those of data batches only (not a transaction's markers)."""
    out: list[Record] = []
    view = memoryview(buf)
    for info in iter_batches(view):
        if skip_control and info.is_control:
            continue
        batch = DefaultRecordBatch(bytes(view[info.position: info.position + info.size_bytes]))
        for rec in batch:
            out.append(Record(rec.offset, rec.timestamp, rec.key, rec.value, tuple(rec.headers)))
    return out


def slice_from(buf: bytes | bytearray | memoryview, start_offset: int, max_bytes: int) -> bytes:
    """Whole batches of ``buf`` from the one holding ``start_offset``, up to ``max_bytes``
    (always at least one batch, as Kafka's fetch does)."""
    view = memoryview(buf)
    first = end = -1
    for info in iter_batches(view):
        if info.next_offset <= start_offset:
            continue
        if first < 0:
            first, end = info.position, info.position + info.size_bytes
            continue
        if info.position + info.size_bytes - first > max_bytes:
            break
        end = info.position + info.size_bytes
    if first < 0:
        return b""
    if first == 0 and end == len(view) and isinstance(buf, bytes):
        return buf
    return bytes(view[first:end])
