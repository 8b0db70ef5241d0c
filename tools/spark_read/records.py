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
    """Column lists for one Arrow batch of the Kafka source's rows.

    Keys and values are not copied out of the fetched bytes one by one: a row keeps where its key
    and value sit (position and length, -1 for null) in one of ``buffers``, and :func:`to_arrow`
    gathers them in one C++ pass (an Arrow binary-view array over the buffers, cast to binary).
    A bytes object and a Python-level copy per record made ``pa.array`` the largest cost of a read.
    ``runs`` says which buffer the rows from a given row on point into.
    """

    include_headers: bool = False
    offsets: list[int] = field(default_factory=list)
    timestamps_ms: list[int] = field(default_factory=list)
    timestamp_types: list[int] = field(default_factory=list)
    key_positions: list[int] = field(default_factory=list)
    key_lengths: list[int] = field(default_factory=list)
    value_positions: list[int] = field(default_factory=list)
    value_lengths: list[int] = field(default_factory=list)
    headers: list[list[dict[str, Any]]] = field(default_factory=list)
    buffers: list[bytes | bytearray] = field(default_factory=list)
    runs: list[tuple[int, int]] = field(default_factory=list)  # (buffer index, first row)
    buffer_bytes: int = 0  # bytes of the buffers the rows point into: bounds an Arrow batch

    def __len__(self) -> int:
        return len(self.offsets)

    def add_buffer(self, data: bytes | bytearray) -> int:
        """Rows appended from now on point into ``data``; its index."""
        self.buffers.append(data)
        self.buffer_bytes += len(data)
        return self.point_into(len(self.buffers) - 1)

    def point_into(self, index: int) -> int:
        if self.runs and self.runs[-1][1] == len(self.offsets):
            self.runs[-1] = (index, len(self.offsets))
        else:
            self.runs.append((index, len(self.offsets)))
        return index

    def keys(self) -> list[bytes | None]:
        return [self._slice(i, self.key_positions, self.key_lengths) for i in range(len(self))]

    def values(self) -> list[bytes | None]:
        return [self._slice(i, self.value_positions, self.value_lengths) for i in range(len(self))]

    def _slice(self, row: int, positions: list[int], lengths: list[int]) -> bytes | None:
        """One key or value as bytes (for checks; the read path never does this per row)."""
        if lengths[row] < 0:
            return None
        index = [b for b, first in self.runs if first <= row][-1]
        return bytes(self.buffers[index][positions[row]:positions[row] + lengths[row]])


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
    data_index = out.add_buffer(data)
    side: bytearray | None = None  # keys and values of compressed batches (or with headers kept)
    side_index = -1
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
            if side is None:
                side = bytearray()
                side_index = out.add_buffer(side)
            else:
                out.point_into(side_index)
            _decode_slow(data[position:batch_end], start_offset, end_offset, log_append, max_ts, out, stream, side)
            out.point_into(data_index)
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
    offsets, stamps, kinds = out.offsets, out.timestamps_ms, out.timestamp_types
    key_at, key_len_of, value_at, value_len_of = out.key_positions, out.key_lengths, out.value_positions, out.value_lengths
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
        if record_end > end:
            raise ValueError(f"a record runs past its batch at byte {p}")
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
        key_at.append(p)
        key_len_of.append(key_len)
        if key_len > 0:
            p += key_len
        b = data[p]
        if b < 0x80:
            value_len, p = (b >> 1) ^ -(b & 1), p + 1
        elif data[p + 1] < 0x80:
            raw = (b & 0x7F) | (data[p + 1] << 7)
            value_len, p = (raw >> 1) ^ -(raw & 1), p + 2
        else:
            value_len, p = _varint(data, p)
        if p + value_len > record_end:
            raise ValueError(f"the key or value of offset {offset} runs past its record")
        value_at.append(p)
        value_len_of.append(value_len)
        offsets.append(offset)
        stamps.append(first_ts + ts_delta if append_ts is None else append_ts)
        kinds.append(kind)
        p = record_end
    if p != end:
        raise ValueError(f"the records end at byte {p}, the batch at {end}")


def _decode_slow(batch: bytes, start_offset: int, end_offset: int, log_append: bool, max_ts: int, out: Columns,
                 stream: str, side: bytearray) -> None:
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
            for blob, positions, lengths in ((record.key, out.key_positions, out.key_lengths),
                                             (record.value, out.value_positions, out.value_lengths)):
                positions.append(len(side))
                lengths.append(-1 if blob is None else len(blob))
                if blob:
                    side += blob
            if out.include_headers:
                out.headers.append([{"key": k, "value": v} for k, v in record.headers])


_INLINE_BYTES = 12  # an Arrow binary view holds up to 12 bytes itself, else a prefix and where they are


def _binary_column(buffers: list[Any], used: list[int], buffer_of_row: Any, positions: list[int],
                   lengths: list[int]) -> Any:
    """Arrow ``binary`` column of the slices ``buffers[b][pos:pos + len]`` (len -1: null).

    Built as a binary-view array (16 bytes per row, made with numpy) pointing into the buffers,
    then cast to ``binary``, which gathers the bytes in C++: no Python object per row."""
    import numpy as np
    import pyarrow as pa
    from numpy.lib.stride_tricks import sliding_window_view

    n = len(lengths)
    pos = np.asarray(positions, dtype=np.int64)
    lens = np.asarray(lengths, dtype=np.int64)
    valid = lens >= 0
    lens = np.where(valid, lens, 0)
    views = np.zeros((n, 16), dtype=np.uint8)
    words = views.view(np.int32)  # per row: length, prefix (or inline bytes), buffer index, offset
    words[:, 0] = lens
    data_buffers = []
    for slot, index in enumerate(used):
        buf = buffers[index]
        rows = np.flatnonzero(buffer_of_row == index)
        if len(buf) >= 1 << 31 or (len(rows) and int((pos[rows] + lens[rows]).max()) > len(buf)):
            raise ValueError("a key or value lies outside the bytes it was read from")
        # the first 12 bytes of each slice (all of a short one, the 4-byte prefix of a long one), read
        # through a sliding window; slices starting in the last 12 bytes of a buffer are copied singly
        near_end = pos[rows] + _INLINE_BYTES > len(buf)
        windowed = rows[~near_end]
        if len(windowed):
            u8 = np.frombuffer(buf, dtype=np.uint8)
            views[windowed, 4:16] = sliding_window_view(u8, _INLINE_BYTES)[pos[windowed]]
        for row in rows[near_end].tolist():
            head = bytes(buf[pos[row]:pos[row] + min(lens[row], _INLINE_BYTES)])
            views[row, 4:4 + len(head)] = np.frombuffer(head, dtype=np.uint8)
        long_rows = rows[lens[rows] > _INLINE_BYTES]
        words[long_rows, 2] = slot
        words[long_rows, 3] = pos[long_rows]
        data_buffers.append(pa.py_buffer(buf))
    short = np.flatnonzero(lens < _INLINE_BYTES)  # inline bytes past a short slice's end must be zero
    if len(short):
        views[short, 4:16] *= (np.arange(_INLINE_BYTES)[None, :] < lens[short, None])
    nulls = n - int(valid.sum())
    bitmap = pa.py_buffer(np.packbits(valid, bitorder="little")) if nulls else None
    view_array = pa.Array.from_buffers(pa.binary_view(), n, [bitmap, pa.py_buffer(views), *data_buffers],
                                       null_count=nulls)
    return view_array.cast(pa.binary())


def to_arrow(out: Columns, topic: str, partition: int) -> Any:
    """The rows as one pyarrow RecordBatch in the Kafka source's column order."""
    import numpy as np
    import pyarrow as pa

    n = len(out)
    firsts = [first for _b, first in out.runs] + [n]
    buffer_of_row = np.repeat(np.asarray([b for b, _f in out.runs], dtype=np.int64),
                              np.diff(np.asarray(firsts, dtype=np.int64)))
    used = sorted({b for (b, first), end in zip(out.runs, firsts[1:]) if end > first})
    micros = np.asarray(out.timestamps_ms, dtype=np.int64) * 1000  # no Arrow cast kernel (slow to load)
    arrays = [_binary_column(out.buffers, used, buffer_of_row, out.key_positions, out.key_lengths),
              _binary_column(out.buffers, used, buffer_of_row, out.value_positions, out.value_lengths),
              pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, dtype=np.int32)), pa.array([topic], pa.string()))
              .cast(pa.string()),
              pa.array(np.full(n, partition, dtype=np.int32)),
              pa.array(np.asarray(out.offsets, dtype=np.int64)),
              pa.array(micros, pa.timestamp("us", tz="UTC")),
              pa.array(np.asarray(out.timestamp_types, dtype=np.int32))]
    names = ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]
    if out.include_headers:
        arrays.append(pa.array(out.headers, pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))))
        names.append("headers")
    return pa.RecordBatch.from_arrays(arrays, names=names)
