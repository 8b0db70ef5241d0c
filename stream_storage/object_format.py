"""The layout of one stream object: data blocks, an index, and a CRC'd footer.

::

    block* | index | footer
    index  = entry_count u32 | entry* (stream_id i64 | start_offset i64 | end_offset i64 |
                                       position u64 | size u32 | crc32c u32)
    footer = magic "FRYOBJ01" | index_position u64 | index_size u32 | index_crc u32 |
             version u16 | reserved u16 | footer_crc u32              (32 bytes)

A block holds whole record batches of one stream, contiguous in offsets; a stream's blocks are
contiguous in the object, so one ranged GET reads any run of them. One object may hold ranges of
many streams (a stream-set object: few PUTs) or of one. A reader GETs the tail (footer and, in the
same request, usually the whole index), then only the blocks it needs. Pure code: no I/O here.
"""
from __future__ import annotations

import bisect
import struct
from dataclasses import dataclass
from typing import Sequence

from crc32c import crc32c

from metadata_quorum.kernel.errors import ErrorCode, FerryError

MAGIC = b"FRYOBJ01"
VERSION = 1
_FOOTER = struct.Struct(">8sQIIHHI")
FOOTER_BYTES = _FOOTER.size
_ENTRY = struct.Struct(">qqqQII")
_COUNT = struct.Struct(">I")
TAIL_READ_BYTES = 64 * 1024


@dataclass(frozen=True)
class IndexEntry:
    stream_id: int
    start_offset: int
    end_offset: int
    position: int
    size: int
    crc: int


@dataclass(frozen=True)
class StreamRange:
    stream_id: int
    start_offset: int
    end_offset: int
    size_bytes: int = 0  # the stream's bytes in the object (retention.bytes counts them)


@dataclass(frozen=True)
class Chunk:
    """Whole record batches of one stream covering ``[start_offset, end_offset)``."""

    start_offset: int
    end_offset: int
    data: bytes


@dataclass(frozen=True)
class BuiltObject:
    data: bytes
    ranges: tuple[StreamRange, ...]
    index: "ObjectIndex"


class ObjectIndex:
    """The parsed index: find the blocks holding a stream's offsets."""

    def __init__(self, entries: Sequence[IndexEntry], index_position: int) -> None:
        self.entries = tuple(entries)
        self.index_position = index_position
        self._by_stream: dict[int, list[IndexEntry]] = {}
        for entry in self.entries:
            self._by_stream.setdefault(entry.stream_id, []).append(entry)
        self._starts = {sid: [e.start_offset for e in es] for sid, es in self._by_stream.items()}

    def ranges(self) -> list[StreamRange]:
        out = []
        for sid, es in self._by_stream.items():
            out.append(StreamRange(sid, es[0].start_offset, es[-1].end_offset, sum(e.size for e in es)))
        return out

    def blocks_for(self, stream_id: int, start_offset: int, max_bytes: int) -> list[IndexEntry]:
        """The run of blocks from the one holding ``start_offset``, up to ``max_bytes`` (at least one)."""
        entries = self._by_stream.get(stream_id, [])
        if not entries:
            return []
        i = max(0, bisect.bisect_right(self._starts[stream_id], start_offset) - 1)
        while i < len(entries) and entries[i].end_offset <= start_offset:
            i += 1
        chosen: list[IndexEntry] = []
        total = 0
        while i < len(entries):
            if chosen and total + entries[i].size > max_bytes:
                break
            chosen.append(entries[i])
            total += entries[i].size
            i += 1
        return chosen


def build_object(streams: Sequence[tuple[int, Sequence[Chunk]]], block_bytes: int = 1024 * 1024) -> BuiltObject:
    """Lay out ``(stream_id, chunks)`` pairs (each stream's chunks contiguous in offsets)."""
    parts: list[bytes] = []  # chunk data as is: the object is assembled with one copy at the end
    entries: list[IndexEntry] = []
    ranges: list[StreamRange] = []
    position = 0
    for stream_id, chunks in streams:
        if not chunks:
            continue
        stream_bytes = 0
        expected = chunks[0].start_offset
        block_start, block_size, block_crc = expected, 0, 0
        for chunk in chunks:
            if chunk.start_offset != expected:
                raise ValueError(f"stream {stream_id}: chunk at {chunk.start_offset} does not follow {expected}")
            if block_size and block_size + len(chunk.data) > block_bytes:
                entries.append(IndexEntry(stream_id, block_start, chunk.start_offset, position, block_size, block_crc))
                position += block_size
                block_start, block_size, block_crc = chunk.start_offset, 0, 0
            parts.append(chunk.data)
            block_crc = crc32c(chunk.data, block_crc)
            block_size += len(chunk.data)
            stream_bytes += len(chunk.data)
            expected = chunk.end_offset
        entries.append(IndexEntry(stream_id, block_start, expected, position, block_size, block_crc))
        position += block_size
        ranges.append(StreamRange(stream_id, chunks[0].start_offset, expected, stream_bytes))
    index_body = _COUNT.pack(len(entries)) + b"".join(
        _ENTRY.pack(e.stream_id, e.start_offset, e.end_offset, e.position, e.size, e.crc) for e in entries)
    footer_head = _FOOTER.pack(MAGIC, position, len(index_body), crc32c(index_body), VERSION, 0, 0)[:-4]
    footer = footer_head + struct.pack(">I", crc32c(footer_head))
    data = b"".join([*parts, index_body, footer])
    return BuiltObject(data, tuple(ranges), ObjectIndex(entries, position))


def _corrupt(key: str, what: str) -> FerryError:
    return FerryError(ErrorCode.CORRUPT_MESSAGE, f"stream object {key!r}: {what}")


def parse_footer(footer: bytes, key: str = "") -> tuple[int, int, int]:
    """``(index_position, index_size, index_crc)``; raises CORRUPT_MESSAGE on a bad footer."""
    if len(footer) != FOOTER_BYTES:
        raise _corrupt(key, f"footer is {len(footer)} bytes, expected {FOOTER_BYTES}")
    magic, index_position, index_size, index_crc, version, _reserved, footer_crc = _FOOTER.unpack(footer)
    if crc32c(footer[:-4]) != footer_crc:
        raise _corrupt(key, "footer fails its CRC check")
    if magic != MAGIC:
        raise _corrupt(key, f"bad magic {magic!r}")
    if version > VERSION:
        raise _corrupt(key, f"format version {version} is newer than supported {VERSION}")
    return index_position, index_size, index_crc


def parse_index(index_body: bytes, index_position: int, index_crc: int, key: str = "") -> ObjectIndex:
    if crc32c(index_body) != index_crc:
        raise _corrupt(key, "index fails its CRC check")
    (count,) = _COUNT.unpack_from(index_body, 0)
    if len(index_body) != _COUNT.size + count * _ENTRY.size:
        raise _corrupt(key, "index length does not match its entry count")
    entries = [IndexEntry(*_ENTRY.unpack_from(index_body, _COUNT.size + i * _ENTRY.size)) for i in range(count)]
    return ObjectIndex(entries, index_position)


def parse_tail(tail: bytes, tail_start: int, key: str = "") -> ObjectIndex | tuple[int, int]:
    """Parse the index from the object's last bytes (``tail`` starts at byte ``tail_start``).

    Returns the index, or ``(start, end)`` of the bytes still needed when the index is longer
    than the tail read.
    """
    index_position, index_size, index_crc = parse_footer(tail[-FOOTER_BYTES:], key)
    if index_position < tail_start:
        return index_position, index_position + index_size
    rel = index_position - tail_start
    if rel + index_size + FOOTER_BYTES != len(tail):
        raise _corrupt(key, "index and footer do not end the object")
    return parse_index(tail[rel: rel + index_size], index_position, index_crc, key)


def check_block(data: bytes | memoryview, entry: IndexEntry, key: str = "") -> None:
    if len(data) != entry.size or crc32c(data) != entry.crc:
        raise _corrupt(key, f"block of stream {entry.stream_id} at byte {entry.position} fails its CRC check")
