"""In-memory caches: the log cache of recent appends, object indexes, and fetched blocks.

The log cache holds every appended chunk until it is uploaded (the uploader reads its objects
from here, never from the WAL) and keeps uploaded chunks for tail reads until the byte budget
evicts them, oldest first. All bounded; nothing here does I/O.
"""
from __future__ import annotations

import bisect
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from stream_storage.batches import slice_from
from stream_storage.object_format import Chunk, ObjectIndex

K = TypeVar("K")
V = TypeVar("V")


class LruCache(Generic[K, V]):
    """A bounded LRU by entry count or by total size (``size_of`` = len for bytes)."""

    def __init__(self, max_entries: int = 1024, max_bytes: int | None = None) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._items: OrderedDict[K, V] = OrderedDict()
        self._bytes = 0
        self.hits = 0
        self.misses = 0

    def _size(self, value: V) -> int:
        return len(value) if self.max_bytes is not None else 0  # type: ignore[arg-type]

    def get(self, key: K) -> V | None:
        value = self._items.get(key)
        if value is None:
            self.misses += 1
            return None
        self.hits += 1
        self._items.move_to_end(key)
        return value

    def put(self, key: K, value: V) -> None:
        old = self._items.pop(key, None)
        if old is not None:
            self._bytes -= self._size(old)
        self._items[key] = value
        self._bytes += self._size(value)
        while self._items and (len(self._items) > self.max_entries or
                               (self.max_bytes is not None and self._bytes > self.max_bytes)):
            _key, evicted = self._items.popitem(last=False)
            self._bytes -= self._size(evicted)

    def peek(self, key: K) -> bool:
        """Whether ``key`` is cached (no hit or miss counted, no recency change)."""
        return key in self._items

    def discard(self, key: K) -> None:
        old = self._items.pop(key, None)
        if old is not None:
            self._bytes -= self._size(old)

    def __len__(self) -> int:
        return len(self._items)


@dataclass
class _StreamChunks:
    chunks: list[Chunk] = field(default_factory=list)
    starts: list[int] = field(default_factory=list)
    uploaded_end: int = 0
    pending_bytes: int = 0


class LogCache:
    """Chunks per stream in offset order. Not-yet-uploaded chunks are never evicted."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._streams: dict[int, _StreamChunks] = {}
        self._uploaded_order: deque[tuple[int, int]] = deque()  # (stream_id, chunk start) oldest first
        self.uploaded_bytes = 0

    def reset(self, stream_id: int, committed_end: int) -> None:
        self.drop(stream_id)
        self._streams[stream_id] = _StreamChunks(uploaded_end=committed_end)

    def drop(self, stream_id: int) -> None:
        entry = self._streams.pop(stream_id, None)
        if entry is not None:
            self.uploaded_bytes -= sum(len(c.data) for c in entry.chunks if c.end_offset <= entry.uploaded_end)

    def add(self, stream_id: int, chunk: Chunk) -> None:
        entry = self._streams.setdefault(stream_id, _StreamChunks(uploaded_end=chunk.start_offset))
        if entry.starts and chunk.start_offset < entry.starts[-1]:
            raise ValueError(f"stream {stream_id}: chunk {chunk.start_offset} added out of order")
        entry.chunks.append(chunk)
        entry.starts.append(chunk.start_offset)
        entry.pending_bytes += len(chunk.data)

    def pending_bytes(self, stream_id: int) -> int:
        entry = self._streams.get(stream_id)
        return entry.pending_bytes if entry else 0

    def chunks_between(self, stream_id: int, start_offset: int, end_offset: int) -> list[Chunk]:
        """The chunks covering exactly ``[start_offset, end_offset)`` (chunk boundaries)."""
        entry = self._streams.get(stream_id)
        if entry is None:
            return []
        i = bisect.bisect_left(entry.starts, start_offset)
        out = []
        while i < len(entry.chunks) and entry.chunks[i].end_offset <= end_offset:
            out.append(entry.chunks[i])
            i += 1
        return out

    def mark_uploaded(self, stream_id: int, end_offset: int) -> None:
        entry = self._streams.get(stream_id)
        if entry is None or end_offset <= entry.uploaded_end:
            return
        i = bisect.bisect_left(entry.starts, entry.uploaded_end)
        while i < len(entry.chunks) and entry.chunks[i].end_offset <= end_offset:
            size = len(entry.chunks[i].data)
            entry.pending_bytes -= size
            self.uploaded_bytes += size
            self._uploaded_order.append((stream_id, entry.chunks[i].start_offset))
            i += 1
        entry.uploaded_end = end_offset
        self._evict()

    def _evict(self) -> None:
        while self.uploaded_bytes > self.max_bytes and self._uploaded_order:
            stream_id, start = self._uploaded_order.popleft()
            entry = self._streams.get(stream_id)
            if entry is None or not entry.chunks or entry.starts[0] != start:
                continue
            chunk = entry.chunks.pop(0)
            entry.starts.pop(0)
            self.uploaded_bytes -= len(chunk.data)

    def trim(self, stream_id: int, start_offset: int) -> None:
        """Forget uploaded chunks wholly below ``start_offset``."""
        entry = self._streams.get(stream_id)
        while entry and entry.chunks and entry.chunks[0].end_offset <= min(start_offset, entry.uploaded_end):
            self.uploaded_bytes -= len(entry.chunks[0].data)
            entry.chunks.pop(0)
            entry.starts.pop(0)

    def first_offset(self, stream_id: int) -> int | None:
        entry = self._streams.get(stream_id)
        return entry.starts[0] if entry and entry.chunks else None

    def read(self, stream_id: int, start_offset: int, max_bytes: int, end_offset: int) -> bytes | None:
        """Batches from the one holding ``start_offset`` up to ``max_bytes`` and below ``end_offset``;
        None when the cache does not hold ``start_offset``."""
        entry = self._streams.get(stream_id)
        if entry is None or not entry.chunks or start_offset < entry.starts[0]:
            return None
        i = bisect.bisect_right(entry.starts, start_offset) - 1
        if i < 0 or entry.chunks[i].end_offset <= start_offset:
            return None
        parts: list[bytes] = []
        total = 0
        while i < len(entry.chunks) and entry.chunks[i].end_offset <= end_offset:
            chunk = entry.chunks[i]
            data = chunk.data if chunk.start_offset >= start_offset else slice_from(chunk.data, start_offset, max_bytes)
            if parts and total + len(data) > max_bytes:
                break
            if not parts and len(data) > max_bytes:
                data = slice_from(data, start_offset, max_bytes)
            parts.append(data)
            total += len(data)
            i += 1
        return b"".join(parts)


class IndexCache(LruCache[str, ObjectIndex]):
    """Parsed object indexes by object key (small; count-bounded)."""


class BlockCache(LruCache[tuple[str, int], bytes]):
    """Fetched blocks by (object key, position), so sequential readers GET each block once."""

    def __init__(self, max_bytes: int) -> None:
        super().__init__(max_entries=1 << 30, max_bytes=max_bytes)
