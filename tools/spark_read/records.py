"""Stored record batches of one stream to Arrow columns (the Kafka source's schema). Pure.

The batches were validated when they were produced and their bytes are CRC-checked here again
(the batch CRC, or the object block CRC that covers the same bytes), so uncompressed records take
a lean path: Python follows only the chain of record lengths, numpy parses every record's fields
at once, and keys and values are gathered into Arrow by C++ from where they lie in the fetched
bytes (no Python object per record: Spark's Python workers spent most of a read's time on that).
Compressed batches, and reads that keep headers, go through ``stream_storage.batch_scan``, the
strict decoder. Anything that does not parse raises CORRUPT_MESSAGE naming the offsets.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

from crc32c import crc32c

from metadata_quorum.kernel.errors import ErrorCode, FerryError

_HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_BYTES = 61
LOG_OVERHEAD = 12
CODEC_MASK = 0x07
TIMESTAMP_TYPE_FLAG = 0x08
CONTROL_FLAG = 0x20
CREATE_TIME = 0
LOG_APPEND_TIME = 1


FIELDS = ("offsets", "timestamps_ms", "timestamp_types", "key_positions", "key_lengths", "value_positions",
          "value_lengths")


@dataclass
class Columns:
    """Column arrays for one Arrow batch of the Kafka source's rows, in chunks of numpy arrays.

    Keys and values are not copied out of the fetched bytes one by one: a row keeps where its key
    and value sit (position and length, -1 for null) in one of ``buffers``, and :func:`to_arrow`
    gathers them in one C++ pass (an Arrow binary-view array over the buffers, cast to binary).
    ``runs`` says which buffer the rows from a given row on point into.
    """

    include_headers: bool = False
    chunks: list[tuple[Any, ...]] = field(default_factory=list)  # numpy arrays in FIELDS order
    rows: int = 0
    headers: list[list[dict[str, Any]]] = field(default_factory=list)
    buffers: list[bytes | bytearray] = field(default_factory=list)
    runs: list[tuple[int, int]] = field(default_factory=list)  # (buffer index, first row)
    buffer_bytes: int = 0  # bytes of the buffers the rows point into: bounds an Arrow batch

    def __len__(self) -> int:
        return self.rows

    def extend(self, *columns: Any) -> None:
        """Append rows: one sequence (or numpy array) per name of FIELDS, all of one length."""
        import numpy as np

        arrays = tuple(np.asarray(c, dtype=np.int64) for c in columns)
        if len(arrays) != len(FIELDS) or len({len(a) for a in arrays}) != 1:
            raise ValueError("one column per field, all of one length")
        if len(arrays[0]):
            self.chunks.append(arrays)
            self.rows += len(arrays[0])

    def column(self, name: str) -> Any:
        """One of FIELDS over all rows, as one int64 numpy array."""
        import numpy as np

        i = FIELDS.index(name)
        return np.concatenate([c[i] for c in self.chunks]) if self.chunks else np.zeros(0, dtype=np.int64)

    @property
    def offsets(self) -> list[int]:
        return [int(x) for x in self.column("offsets")]

    @property
    def timestamps_ms(self) -> list[int]:
        return [int(x) for x in self.column("timestamps_ms")]

    @property
    def timestamp_types(self) -> list[int]:
        return [int(x) for x in self.column("timestamp_types")]

    def add_buffer(self, data: bytes | bytearray) -> int:
        """Rows appended from now on point into ``data``; its index."""
        self.buffers.append(data)
        self.buffer_bytes += len(data)
        return self.point_into(len(self.buffers) - 1)

    def point_into(self, index: int) -> int:
        if self.runs and self.runs[-1][1] == self.rows:
            self.runs[-1] = (index, self.rows)
        else:
            self.runs.append((index, self.rows))
        return index

    def keys(self) -> list[bytes | None]:
        return self._slices("key_positions", "key_lengths")

    def values(self) -> list[bytes | None]:
        return self._slices("value_positions", "value_lengths")

    def _slices(self, positions: str, lengths: str) -> list[bytes | None]:
        """Keys or values as bytes (for checks; the read path never does this per row)."""
        out: list[bytes | None] = []
        for row, (at, n) in enumerate(zip(self.column(positions).tolist(), self.column(lengths).tolist(), strict=True)):
            index = [b for b, first in self.runs if first <= row][-1]
            out.append(None if n < 0 else bytes(self.buffers[index][at:at + n]))
        return out


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
                   check_batch_crc: bool = True, first_byte: int = 0, end_byte: int | None = None) -> int:
    """Append the records of ``data[first_byte:end_byte]`` (whole batches) with ``start_offset <=
    offset < end_offset`` to ``out``; returns the offset just past the last batch walked.
    ``check_batch_crc=False`` when a CRC over the same bytes (an object block's) already matched.
    The rows point into ``data`` itself: a stream's run of blocks in a whole fetched object is
    decoded where it lies, not copied out first."""
    total = len(data) if end_byte is None else end_byte
    if not 0 <= first_byte <= total <= len(data):
        raise ValueError(f"byte range {first_byte}..{total} is not within {len(data)} bytes")
    position, next_offset = first_byte, start_offset
    data_index = out.add_buffer(data)
    side: bytearray | None = None  # keys and values of compressed batches (or with headers kept)
    side_index = -1
    plain = _PlainRecords()
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
            plain.decode_into(data, start_offset, end_offset, out, stream)
            if side is None:
                side = bytearray()
                side_index = out.add_buffer(side)
            else:
                out.point_into(side_index)
            _decode_slow(data[position:batch_end], start_offset, end_offset, log_append, max_ts, out, stream, side)
            out.point_into(data_index)
        else:
            try:
                plain.add_batch(data, position + HEADER_BYTES, batch_end, count, base, first_ts,
                                max_ts if log_append else None)
            except (IndexError, ValueError) as exc:
                raise _corrupt(stream, base, f"records do not parse: {exc}") from None
        position, next_offset = batch_end, batch_next
    plain.decode_into(data, start_offset, end_offset, out, stream)
    return next_offset


class _PlainRecords:
    """Uncompressed batches (headers not kept) of one buffer, decoded together.

    ``add_batch`` only follows the chain of record lengths (the one thing that must be walked
    record by record; a 1–2 byte varint inline); ``decode_into`` then parses every record's fields
    at once with numpy. A per-record Python walk of all fields was the largest CPU cost of a read.
    """

    def __init__(self) -> None:
        self.bodies: list[int] = []  # where each record's attributes byte is
        self.lengths: list[int] = []  # each record's length from there
        self.batches: list[tuple[int, int, int, int | None]] = []  # (records, base offset, first ts, append ts)

    def add_batch(self, data: bytes, p: int, end: int, count: int, base: int, first_ts: int,
                  append_ts: int | None) -> None:
        add_body, add_length = self.bodies.append, self.lengths.append
        for _ in range(count):
            b = data[p]  # the record length, a zigzag varint: 1-2 bytes inline, longer ones by _varint
            if b < 0x80:
                raw, p = b, p + 1
            else:
                c = data[p + 1]
                if c < 0x80:
                    raw, p = (b & 0x7F) | (c << 7), p + 2
                else:
                    length, p = _varint(data, p)
                    if length < 1:
                        raise ValueError(f"a record of {length} bytes at byte {p}")
                    raw = length << 1
            if raw & 1 or raw == 0:
                raise ValueError(f"a record of {(raw >> 1) ^ -(raw & 1)} bytes at byte {p}")
            add_body(p)
            add_length(raw >> 1)
            p += raw >> 1
        if p != end:
            raise ValueError(f"the records end at byte {p}, the batch at {end}")
        self.batches.append((count, base, first_ts, append_ts))

    def decode_into(self, data: bytes, start_offset: int, end_offset: int, out: Columns, stream: str) -> None:
        if not self.bodies:
            return
        import numpy as np

        counts = np.asarray([b[0] for b in self.batches], dtype=np.int64)
        first_base = self.batches[0][1]
        try:
            u8 = np.frombuffer(data, dtype=np.uint8)
            bodies = np.asarray(self.bodies, dtype=np.int64)
            ends = bodies + np.asarray(self.lengths, dtype=np.int64)
            p = bodies + 1  # the attributes byte
            ts_delta, p = _varints(u8, p, ends)
            offset_delta, p = _varints(u8, p, ends)
            key_len, p = _varints(u8, p, ends)
            key_at = p
            value_len, p = _varints(u8, p + np.maximum(key_len, 0), ends)
            if (p + np.maximum(value_len, 0) >= ends).any():  # the headers count follows the value
                raise ValueError("a key or value runs past its record")
        except (IndexError, ValueError) as exc:
            raise _corrupt(stream, first_base, f"records do not parse: {exc}") from None
        offsets = np.repeat(np.asarray([b[1] for b in self.batches], dtype=np.int64), counts) + offset_delta
        append = np.repeat(np.asarray([-1 if b[3] is None else b[3] for b in self.batches], dtype=np.int64), counts)
        log_append = np.repeat(np.asarray([b[3] is not None for b in self.batches]), counts)
        stamps = np.where(log_append, append,
                          np.repeat(np.asarray([b[2] for b in self.batches], dtype=np.int64), counts) + ts_delta)
        keep = (offsets >= start_offset) & (offsets < end_offset)
        columns = (offsets, stamps, log_append.astype(np.int64) * LOG_APPEND_TIME + (~log_append) * CREATE_TIME,
                   key_at, key_len, p, value_len)
        out.extend(*(c if keep.all() else c[keep] for c in columns))
        self.bodies, self.lengths, self.batches = [], [], []


def _varints(u8: Any, p: Any, ends: Any) -> tuple[Any, Any]:
    """The zigzag varints starting at each position of ``p`` and the positions after them
    (numpy, one pass per varint byte); a varint past its record's end is an error."""
    import numpy as np

    if (p >= ends).any():
        raise ValueError("a record ends before its fields")
    b = u8[p].astype(np.int64)
    raw = b & 0x7F
    more = np.flatnonzero(b >= 0x80)
    after = p + 1
    shift = 7
    while len(more):
        if shift > 63:
            raise ValueError("varint longer than 10 bytes")
        if (after[more] >= ends[more]).any():
            raise ValueError("a varint runs past its record")
        b = u8[after[more]].astype(np.int64)
        raw[more] |= (b & 0x7F) << shift
        after[more] += 1
        more = more[b >= 0x80]
        shift += 7
    return (raw >> 1) ^ -(raw & 1), after


def _decode_slow(batch: bytes, start_offset: int, end_offset: int, log_append: bool, max_ts: int, out: Columns,
                 stream: str, side: bytearray) -> None:
    """Compressed batches, or headers wanted: the strict decoder, one record object each."""
    from stream_storage.batch_scan import CorruptBatch, scan_batches  # kafka-python's codecs: only when needed

    rows: list[list[int]] = []
    for item in scan_batches(batch):
        if isinstance(item, CorruptBatch):
            raise _corrupt(stream, item.base_offset, item.reason)
        for record in item.records or ():
            if not start_offset <= record.offset < end_offset:
                continue
            row = [record.offset, max_ts if log_append else record.timestamp_ms,
                   LOG_APPEND_TIME if log_append else CREATE_TIME]
            for blob in (record.key, record.value):
                row += [len(side), -1 if blob is None else len(blob)]
                if blob:
                    side += blob
            rows.append(row)
            if out.include_headers:
                out.headers.append([{"key": k, "value": v} for k, v in record.headers])
    if rows:
        out.extend(*zip(*rows, strict=True))


_INLINE_BYTES = 12  # an Arrow binary view holds up to 12 bytes itself, else a prefix and where they are


def _binary_column(buffers: list[Any], used: list[int], buffer_of_row: Any, positions: Any, lengths: Any) -> Any:
    """Arrow ``binary`` column of the slices ``buffers[b][pos:pos + len]`` (len -1: null).

    Built as a binary-view array (16 bytes per row, made with numpy) pointing into the buffers,
    then cast to ``binary``, which gathers the bytes in C++: no Python object per row."""
    import numpy as np
    import pyarrow as pa

    n = len(lengths)
    pos = np.asarray(positions, dtype=np.int64)
    lens = np.asarray(lengths, dtype=np.int64)
    valid = lens >= 0
    lens = np.where(valid, lens, 0)
    words = np.zeros((n, 4), dtype=np.int32)  # per row: length, prefix (or inline bytes), buffer index, offset
    words[:, 0] = lens
    short = lens <= _INLINE_BYTES
    data_buffers = []
    for slot, index in enumerate(used):
        buf = buffers[index]
        size = len(buf)
        rows = np.flatnonzero(buffer_of_row == index)
        if size >= 1 << 31 or (len(rows) and int((pos[rows] + lens[rows]).max()) > size):
            raise ValueError("a key or value lies outside the bytes it was read from")
        # each slice's first 12 bytes (all of a short one, the 4-byte prefix of a long one) as three
        # little-endian words, gathered through a view of the buffer with a word at every byte; the
        # slices starting in its last 12 bytes (short ones: the others would run past its end) are
        # copied singly
        near_end = pos[rows] + _INLINE_BYTES > size
        windowed = rows[~near_end]
        if len(windowed):
            at = pos[windowed]
            word_at_each_byte = np.ndarray((size - 3,), dtype="<i4", buffer=buf, strides=(1,))
            words[windowed, 1] = word_at_each_byte[at]
            inline = windowed[short[windowed]]
            words[inline, 2] = word_at_each_byte[pos[inline] + 4]
            words[inline, 3] = word_at_each_byte[pos[inline] + 8]
        for row in rows[near_end].tolist():
            head = bytes(buf[pos[row]:pos[row] + lens[row]])
            words[row].view(np.uint8)[4:4 + len(head)] = np.frombuffer(head, dtype=np.uint8)
        long_rows = rows[~short[rows]]
        words[long_rows, 2] = slot
        words[long_rows, 3] = pos[long_rows]
        data_buffers.append(pa.py_buffer(buf))
    # inline bytes past a short slice's end must be zero: keep the first len - 4k bytes of word k
    keep = np.asarray([0, 0xFF, 0xFFFF, 0xFFFFFF, -1], dtype=np.int32)
    inline_rows = np.flatnonzero(short)
    for k in range(3):
        words[inline_rows, 1 + k] &= keep[np.clip(lens[inline_rows] - 4 * k, 0, 4)]
    nulls = n - int(valid.sum())
    bitmap = pa.py_buffer(np.packbits(valid, bitorder="little")) if nulls else None
    view_array = pa.Array.from_buffers(pa.binary_view(), n, [bitmap, pa.py_buffer(words), *data_buffers],
                                       null_count=nulls)
    return view_array.cast(pa.binary())


def to_arrow(out: Columns, topic: str, partition: int) -> Any:
    """The rows as one pyarrow RecordBatch in the Kafka source's column order."""
    import numpy as np
    import pyarrow as pa

    n = len(out)
    firsts = [first for _b, first in out.runs] + [n]
    run_rows = [end - first for first, end in pairwise(firsts)]
    buffer_of_row = np.repeat(np.asarray([b for b, _f in out.runs], dtype=np.int64),
                              np.asarray(run_rows, dtype=np.int64))
    used = sorted({b for (b, first), end in zip(out.runs, firsts[1:], strict=True) if end > first})
    micros = out.column("timestamps_ms") * 1000  # no Arrow cast kernel (slow to load)
    arrays = [_binary_column(out.buffers, used, buffer_of_row, out.column("key_positions"), out.column("key_lengths")),
              _binary_column(out.buffers, used, buffer_of_row, out.column("value_positions"),
                             out.column("value_lengths")),
              pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, dtype=np.int32)), pa.array([topic], pa.string()))
              .cast(pa.string()),
              pa.array(np.full(n, partition, dtype=np.int32)),
              pa.array(out.column("offsets")),
              pa.array(micros, pa.timestamp("us", tz="UTC")),
              pa.array(out.column("timestamp_types").astype(np.int32))]
    names = ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]
    if out.include_headers:
        arrays.append(pa.array(out.headers, pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))))
        names.append("headers")
    return pa.RecordBatch.from_arrays(arrays, names=names)
