"""Stored record batches of one stream to Arrow columns (the Kafka source's schema). Pure.

The batches were validated when they were produced and their bytes are CRC-checked here again
(the batch CRC, or the object block CRC that covers the same bytes), so
the walk over uncompressed records can be lean: one pass of inline varint arithmetic appending
to column lists, several times faster than building a record object each (Spark's Python
workers spend their time here). Compressed batches go through ``stream_storage.batch_scan``,
the strict decoder. Anything that does not parse raises CORRUPT_MESSAGE naming the offsets.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

from crc32c import crc32c

from metadata_quorum.errors import ErrorCode, FerryError

_HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_BYTES = 61
LOG_OVERHEAD = 12
CODEC_MASK = 0x07
TIMESTAMP_TYPE_FLAG = 0x08
CONTROL_FLAG = 0x20
CREATE_TIME = 0
LOG_APPEND_TIME = 1


@dataclass
class Columns:
    """Column lists for one Arrow batch of the Kafka source's rows."""

    include_headers: bool = False
    offsets: list[int] = field(default_factory=list)
    timestamps_ms: list[int] = field(default_factory=list)
    timestamp_types: list[int] = field(default_factory=list)
    keys: list[bytes | None] = field(default_factory=list)
    values: list[bytes | None] = field(default_factory=list)
    headers: list[list[dict[str, Any]]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.offsets)


def _corrupt(stream: str, base_offset: int, why: str) -> FerryError:
    return FerryError(ErrorCode.CORRUPT_MESSAGE, f"{stream}: the batch at offset {base_offset} cannot be read: {why}")


def _varint(data: bytes, p: int) -> tuple[int, int]:
    raw = shift = 0
    while True:
        byte = data[p]
        p += 1
        raw |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (raw >> 1) ^ -(raw & 1), p
        shift += 7
        if shift > 63:
            raise ValueError("varint longer than 10 bytes")


def decode_batches(data: bytes, start_offset: int, end_offset: int, out: Columns, stream: str = "",
                   check_batch_crc: bool = True) -> int:
    """Append the records of ``data`` (whole batches) with ``start_offset <= offset < end_offset``
    to ``out``; returns the offset just past the last batch walked. ``check_batch_crc=False`` when
    a CRC over the same bytes (an object block's) already matched."""
    position, total, next_offset = 0, len(data), start_offset
    while position < total:
        if total - position < HEADER_BYTES:
            raise _corrupt(stream, next_offset, f"{total - position} bytes left, less than a batch header")
        (base, length, _epoch, magic, crc, attributes, last_delta, first_ts, max_ts, _pid, _pepoch, _seq,
         count) = _HEADER.unpack_from(data, position)
        batch_end = position + LOG_OVERHEAD + length
        if magic != 2 or batch_end > total or length < HEADER_BYTES - LOG_OVERHEAD:
            raise _corrupt(stream, base, f"bad framing (magic {magic}, length {length})")
        batch_next = base + last_delta + 1
        if batch_next <= start_offset or base >= end_offset or attributes & CONTROL_FLAG:
            position, next_offset = batch_end, max(next_offset, batch_next)
            continue
        if check_batch_crc and crc32c(memoryview(data)[position + 21: batch_end]) != crc:
            raise _corrupt(stream, base, "CRC mismatch")
        log_append = bool(attributes & TIMESTAMP_TYPE_FLAG)
        if attributes & CODEC_MASK or out.include_headers:
            _decode_slow(data[position:batch_end], start_offset, end_offset, log_append, max_ts, out, stream)
        else:
            try:
                _walk_plain(data, position + HEADER_BYTES, batch_end, count, base, first_ts,
                            max_ts if log_append else None, start_offset, end_offset, out)
            except (IndexError, ValueError) as exc:
                raise _corrupt(stream, base, f"records do not parse: {exc}") from None
        position, next_offset = batch_end, batch_next
    return next_offset


def _walk_plain(data: bytes, p: int, end: int, count: int, base: int, first_ts: int, append_ts: int | None,
                start_offset: int, end_offset: int, out: Columns) -> None:
    """Uncompressed records without headers kept; the hot loop (varints of 1–2 bytes inline)."""
    offsets, stamps, kinds, keys, values = out.offsets, out.timestamps_ms, out.timestamp_types, out.keys, out.values
    kind = CREATE_TIME if append_ts is None else LOG_APPEND_TIME
    for _ in range(count):
        b = data[p]
        if b < 0x80:
            length, p = (b >> 1) ^ -(b & 1), p + 1
        elif data[p + 1] < 0x80:
            raw = (b & 0x7F) | (data[p + 1] << 7)
            length, p = (raw >> 1) ^ -(raw & 1), p + 2
        else:
            length, p = _varint(data, p)
        record_end = p + length
        p += 1  # attributes
        b = data[p]
        if b < 0x80:
            ts_delta, p = (b >> 1) ^ -(b & 1), p + 1
        elif data[p + 1] < 0x80:
            raw = (b & 0x7F) | (data[p + 1] << 7)
            ts_delta, p = (raw >> 1) ^ -(raw & 1), p + 2
        else:
            ts_delta, p = _varint(data, p)
        b = data[p]
        if b < 0x80:
            offset_delta, p = (b >> 1) ^ -(b & 1), p + 1
        else:
            offset_delta, p = _varint(data, p)
        offset = base + offset_delta
        if offset < start_offset or offset >= end_offset:
            p = record_end
            continue
        b = data[p]
        if b < 0x80:
            key_len, p = (b >> 1) ^ -(b & 1), p + 1
        else:
            key_len, p = _varint(data, p)
        if key_len >= 0:
            keys.append(data[p:p + key_len])
            p += key_len
        else:
            keys.append(None)
        b = data[p]
        if b < 0x80:
            value_len, p = (b >> 1) ^ -(b & 1), p + 1
        elif data[p + 1] < 0x80:
            raw = (b & 0x7F) | (data[p + 1] << 7)
            value_len, p = (raw >> 1) ^ -(raw & 1), p + 2
        else:
            value_len, p = _varint(data, p)
        if value_len >= 0:
            if p + value_len > record_end:
                raise ValueError(f"the value of offset {offset} runs past its record")
            values.append(data[p:p + value_len])
        else:
            values.append(None)
        offsets.append(offset)
        stamps.append(first_ts + ts_delta if append_ts is None else append_ts)
        kinds.append(kind)
        p = record_end
    if p != end:
        raise ValueError(f"the records end at byte {p}, the batch at {end}")


def _decode_slow(batch: bytes, start_offset: int, end_offset: int, log_append: bool, max_ts: int, out: Columns,
                 stream: str) -> None:
    """Compressed batches, or headers wanted: the strict decoder, one record object each."""
    from stream_storage.batch_scan import CorruptBatch, scan_batches  # kafka-python's codecs: only when needed

    for item in scan_batches(batch):
        if isinstance(item, CorruptBatch):
            raise _corrupt(stream, item.base_offset, item.reason)
        for record in item.records or ():
            if not start_offset <= record.offset < end_offset:
                continue
            out.offsets.append(record.offset)
            out.timestamps_ms.append(max_ts if log_append else record.timestamp_ms)
            out.timestamp_types.append(LOG_APPEND_TIME if log_append else CREATE_TIME)
            out.keys.append(record.key)
            out.values.append(record.value)
            if out.include_headers:
                out.headers.append([{"key": k, "value": v} for k, v in record.headers])


def to_arrow(out: Columns, topic: str, partition: int) -> Any:
    """The rows as one pyarrow RecordBatch in the Kafka source's column order."""
    import numpy as np
    import pyarrow as pa

    n = len(out)
    micros = np.asarray(out.timestamps_ms, dtype=np.int64) * 1000  # no Arrow cast kernel (slow to load)
    arrays = [pa.array(out.keys, pa.binary()), pa.array(out.values, pa.binary()),
              pa.array([topic] * n, pa.string()), pa.array(np.full(n, partition, dtype=np.int32)),
              pa.array(out.offsets, pa.int64()),
              pa.array(micros, pa.timestamp("us", tz="UTC")),
              pa.array(out.timestamp_types, pa.int32())]
    names = ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]
    if out.include_headers:
        arrays.append(pa.array(out.headers, pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))))
        names.append("headers")
    return pa.RecordBatch.from_arrays(arrays, names=names)
