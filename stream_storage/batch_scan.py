"""Walking stored batches when one of them may be bad: report it and move past it, never raise.

The produce path refuses bad batches (:mod:`stream_storage.record_validator`), but a partition may
already hold one (written before the validator existed, or damaged since). Kafka's consumers then
get CORRUPT_MESSAGE for that batch's offsets and the choice to seek past them; a reader that raised
on the first bad byte would instead wedge every consumer of the partition at that offset.
:func:`scan_batches` yields each batch as a :class:`DecodedBatch` or a :class:`CorruptBatch`
naming the offsets to skip, so a fetch or a tool can report the one and carry on with the rest.

The checks are a stored batch's integrity, not a producer's manners: framing, magic 2, CRC, a
known codec that decodes, the declared records present and well formed with increasing offset
deltas. Control, transactional and LogAppendTime batches are fine here. Pure: bytes in.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Iterator

from crc32c import crc32c

from metadata_quorum.kernel.errors import ErrorCode, FerryError
from stream_storage import batches
from stream_storage.batches import BatchInfo, Record
from stream_storage.compression import Codec, decompress
from stream_storage.record_format import MIN_RECORD_BYTES, RawRecord, walk_records
from stream_storage.record_validator import (
    CODEC_MASK, DEFAULT_MAX_UNCOMPRESSED_BYTES, MAGIC_OFFSET, TIMESTAMP_TYPE_FLAG,
)

_HEADER = struct.Struct(">qiibIhiqqqhii")
_BASE_AND_LENGTH = struct.Struct(">qi")


@dataclass(frozen=True)
class DecodedBatch:
    """A sound batch: its header and, when asked for, its records (absolute offsets, timestamps)."""

    info: BatchInfo
    records: tuple[Record, ...] | None


@dataclass(frozen=True)
class CorruptBatch:
    """A batch that cannot be read: the offsets ``[base_offset, next_offset)`` it stood for, why, and
    where its bytes are. ``base_offset`` is -1 when not even that could be read."""

    base_offset: int
    next_offset: int
    reason: str
    position: int
    size_bytes: int

    def error(self) -> FerryError:
        """CORRUPT_MESSAGE naming the offsets, for a fetch response or a consumer to report."""
        return FerryError(ErrorCode.CORRUPT_MESSAGE, f"the batch at offsets {self.base_offset}..{self.next_offset - 1} "
                          f"(byte {self.position}) is corrupt: {self.reason}",
                          {"base_offset": self.base_offset, "next_offset": self.next_offset})


def scan_batches(buf: bytes | bytearray | memoryview, *, end_offset: int | None = None,
                 decode_records: bool = True,
                 max_uncompressed_bytes: int = DEFAULT_MAX_UNCOMPRESSED_BYTES) -> Iterator[DecodedBatch | CorruptBatch]:
    """Each batch of ``buf`` in order, sound or corrupt. A batch whose length field cannot be trusted
    ends the walk (the next batch's start is unknown) with one CorruptBatch covering the rest of the
    bytes; ``end_offset``, the offset just past ``buf`` when the caller knows it (a storage chunk
    does), tells that CorruptBatch where to resume."""
    data = bytes(buf)
    total = len(data)
    position = 0
    expected = -1
    while position < total:
        size = _framed_size(data, position)
        if size is None:
            base = expected if expected >= 0 else _base_offset(data, position)
            yield CorruptBatch(base, _resume_offset(data, position, base, end_offset),
                               _framing_problem(data, position), position, total - position)
            return
        info_or_reason = _check(data, position, size, decode_records, max_uncompressed_bytes)
        if isinstance(info_or_reason, str):
            base = _base_offset(data, position)
            following = position + size
            if following < total and _framed_size(data, following) is not None:
                next_offset = _base_offset(data, following)
            else:
                next_offset = end_offset if following >= total and end_offset is not None else -1
            if next_offset <= base:
                next_offset = _declared_next(data, position, base)
            yield CorruptBatch(base, next_offset, info_or_reason, position, size)
            expected = next_offset
        else:
            yield info_or_reason
            expected = info_or_reason.info.next_offset
        position += size


def _framed_size(data: bytes, position: int) -> int | None:
    """The batch's size if its length field places its end within ``data``, else None."""
    if len(data) - position < batches.HEADER_BYTES:
        return None
    size = int(struct.unpack_from(">i", data, position + 8)[0]) + batches.LOG_OVERHEAD
    if size < batches.HEADER_BYTES or position + size > len(data):
        return None
    return size


def _framing_problem(data: bytes, position: int) -> str:
    remaining = len(data) - position
    if remaining < batches.HEADER_BYTES:
        return f"only {remaining} bytes remain, fewer than a batch header's {batches.HEADER_BYTES}"
    (length,) = struct.unpack_from(">i", data, position + 8)
    return f"its length field says {length + batches.LOG_OVERHEAD} bytes, {remaining} remain"


def _base_offset(data: bytes, position: int) -> int:
    if len(data) - position < 8:
        return -1
    return int(struct.unpack_from(">q", data, position)[0])


def _declared_next(data: bytes, position: int, base: int) -> int:
    """The next offset by the batch's own (possibly damaged) lastOffsetDelta, at least base + 1."""
    if len(data) - position < batches.LAST_OFFSET_DELTA_OFFSET + 4:
        return base + 1
    delta = int(struct.unpack_from(">i", data, position + batches.LAST_OFFSET_DELTA_OFFSET)[0])
    return base + max(delta, 0) + 1


def _resume_offset(data: bytes, position: int, base: int, end_offset: int | None) -> int:
    if end_offset is not None and end_offset > base:
        return end_offset
    return _declared_next(data, position, base)


def _check(data: bytes, position: int, size: int, decode_records: bool,
           max_uncompressed_bytes: int) -> DecodedBatch | str:
    """The batch at ``position`` decoded, or why it cannot be."""
    magic = data[position + MAGIC_OFFSET]
    if magic != batches.MAGIC_V2:
        return f"magic {magic}, not 2"
    (base, _length, _epoch, _magic, stored_crc, attributes, last_delta, first_ts, max_ts, _pid, _pepoch,
     _seq, count) = _HEADER.unpack_from(data, position)
    computed = crc32c(memoryview(data)[position + batches.ATTRIBUTES_OFFSET:position + size])
    if computed != stored_crc:
        return f"stored CRC {stored_crc}, computed {computed}"
    if attributes & CODEC_MASK > Codec.ZSTD:
        return f"unknown compression codec {attributes & CODEC_MASK}"
    if last_delta < 0 or not 0 <= count <= last_delta + 1:
        return f"record count {count} does not fit lastOffsetDelta {last_delta}"
    codec = Codec(attributes & CODEC_MASK)
    payload_start = position + batches.HEADER_BYTES
    sink: list[RawRecord] | None = [] if decode_records else None
    try:
        if codec is Codec.NONE:
            if count > (size - batches.HEADER_BYTES) // MIN_RECORD_BYTES:
                return f"{count} records cannot fit {size - batches.HEADER_BYTES} bytes"
            walk_records(data, payload_start, position + size, count, last_offset_delta=last_delta,
                         consecutive_offsets=False, sink=sink)
        else:
            records = decompress(codec, memoryview(data)[payload_start:position + size], max_uncompressed_bytes)
            walk_records(records, 0, len(records), count, last_offset_delta=last_delta, consecutive_offsets=False,
                         where=f" of the decompressed {codec.name.lower()} payload", sink=sink)
    except FerryError as exc:
        return exc.message
    info = batches.header(data, position)
    if sink is None:
        return DecodedBatch(info, None)
    log_append_time = attributes & TIMESTAMP_TYPE_FLAG
    return DecodedBatch(info, tuple(
        Record(base + raw.offset_delta, max_ts if log_append_time else first_ts + raw.timestamp_delta,
               raw.key, raw.value, raw.headers)
        for raw in sink))
