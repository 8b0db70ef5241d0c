"""The write-ahead log in a broker's log dir: durable before acknowledged, deleted once in S3.

Segment files ``wal-<base position>.log`` hold entries::

    body_length u32 | crc32c(body) u32 | body
    body = kind u8 | stream_id i64 | epoch i64 | start_offset i64 | end_offset i64 | payload

Kind 1 is data. Kind 2 is a void marker: data entries of that stream written *earlier* with a
lower epoch at or past ``start_offset`` are not part of the stream (its owner moved on; see
:func:`stream_storage.recovery.recoverable_tail`).

Appends are group-committed: one writer thread writes everything queued and fsyncs once, and
every append waiting on that fsync is acknowledged together. Replay stops at the first entry
whose length or CRC is wrong; in the last segment that is a torn tail (a crash mid-write) and is
cut off, never replayed as data. A segment is deleted once every stream range in it is committed
in S3. Another broker's WAL (a shared volume) can be read with :func:`read_wal` without changing it.
"""
from __future__ import annotations

import asyncio
import logging
import os
import re
import struct
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from crc32c import crc32c

from metadata_quorum.errors import ErrorCode, FerryError

log = logging.getLogger(__name__)

_PREFIX = struct.Struct(">II")
_BODY_HEADER = struct.Struct(">Bqqqq")
ENTRY_OVERHEAD = _PREFIX.size + _BODY_HEADER.size
KIND_DATA = 1
KIND_VOID = 2
_SEGMENT_RE = re.compile(r"^wal-(\d{20})\.log$")


def segment_name(base_position: int) -> str:
    return f"wal-{base_position:020d}.log"


@dataclass(frozen=True)
class WalEntry:
    stream_id: int
    epoch: int
    start_offset: int
    end_offset: int
    payload: bytes
    position: int = 0
    kind: int = KIND_DATA


@dataclass
class ReplayResult:
    entries: list[WalEntry]
    torn_bytes: int = 0
    segments: int = 0


@dataclass
class _Segment:
    base: int
    path: str
    size: int = 0
    max_end: dict[int, int] = field(default_factory=dict)


def encode_entry(stream_id: int, epoch: int, start_offset: int, end_offset: int,
                 payload: bytes | bytearray | memoryview, kind: int = KIND_DATA) -> bytes:
    body_header = _BODY_HEADER.pack(kind, stream_id, epoch, start_offset, end_offset)
    crc = crc32c(payload, crc32c(body_header))
    return _PREFIX.pack(len(body_header) + len(payload), crc) + body_header + bytes(payload)


def _parse_segment(data: bytes, base: int) -> tuple[list[WalEntry], int]:
    """Entries of one segment and the byte length of its valid prefix."""
    entries: list[WalEntry] = []
    pos, total = 0, len(data)
    view = memoryview(data)
    while pos + _PREFIX.size <= total:
        length, crc = _PREFIX.unpack_from(view, pos)
        end = pos + _PREFIX.size + length
        if length < _BODY_HEADER.size or end > total:
            break
        body = view[pos + _PREFIX.size: end]
        if crc32c(body) != crc:
            break
        kind, stream_id, epoch, start, stop = _BODY_HEADER.unpack_from(body, 0)
        if kind not in (KIND_DATA, KIND_VOID) or stop < start:
            break
        entries.append(WalEntry(stream_id, epoch, start, stop, bytes(body[_BODY_HEADER.size:]), base + pos, kind))
        pos = end
    return entries, pos


def list_segments(directory: str) -> list[tuple[int, str]]:
    if not os.path.isdir(directory):
        return []
    found = []
    for name in os.listdir(directory):
        match = _SEGMENT_RE.match(name)
        if match:
            found.append((int(match.group(1)), os.path.join(directory, name)))
    return sorted(found)


def _scan(directory: str, repair: bool) -> tuple[ReplayResult, list[_Segment]]:
    result = ReplayResult([])
    segments: list[_Segment] = []
    listed = list_segments(directory)
    for index, (base, path) in enumerate(listed):
        try:
            with open(path, "rb") as fh:
                data = fh.read()
        except FileNotFoundError:
            if repair:
                raise
            continue  # a live owner trimmed it meanwhile: everything in it was committed
        entries, valid = _parse_segment(data, base)
        if valid < len(data):
            if index != len(listed) - 1:
                raise FerryError(ErrorCode.KAFKA_STORAGE_ERROR,
                                 f"WAL segment {path} is corrupt at byte {valid} and is not the last segment; "
                                 "refusing to replay past it")
            result.torn_bytes = len(data) - valid
            log.warning("WAL %s: torn tail of %d bytes at byte %d cut off", path, result.torn_bytes, valid)
            if repair:
                with open(path, "r+b") as fh:
                    fh.truncate(valid)
                    os.fsync(fh.fileno())
        segment = _Segment(base, path, valid)
        for entry in entries:
            if entry.kind == KIND_DATA:
                segment.max_end[entry.stream_id] = max(segment.max_end.get(entry.stream_id, 0), entry.end_offset)
        segments.append(segment)
        result.entries += entries
    result.segments = len(segments)
    return result, segments


def read_wal(directory: str) -> ReplayResult:
    """Read a WAL (e.g. a dead broker's, on a shared volume) without changing it."""
    return _scan(directory, repair=False)[0]


class WriteAheadLog:
    """One broker's WAL. Call :meth:`open` (returns the replayed entries) before appending."""

    def __init__(self, directory: str, segment_bytes: int = 64 * 1024 * 1024, fsync: bool = True) -> None:
        self.directory = directory
        self.segment_bytes = segment_bytes
        self.fsync = fsync
        self._segments: list[_Segment] = []
        self._fd: int | None = None
        self._queue: list[tuple[bytes, int, int, asyncio.Future[int]]] = []
        self._flusher: asyncio.Task[None] | None = None
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ferry-wal")
        self._committed: dict[int, int] = {}
        self._failed: str | None = None
        self.fsyncs = 0
        self.appended_bytes = 0

    def open(self) -> ReplayResult:
        os.makedirs(self.directory, exist_ok=True)
        result, self._segments = _scan(self.directory, repair=True)
        if not self._segments:
            self._new_segment(0)
        else:
            last = self._segments[-1]
            self._fd = os.open(last.path, os.O_WRONLY | os.O_APPEND)
        return result

    def _new_segment(self, base: int) -> None:
        path = os.path.join(self.directory, segment_name(base))
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        if self._fd is not None:
            if self.fsync:
                os.fsync(self._fd)
            os.close(self._fd)
        self._fd = fd
        self._segments.append(_Segment(base, path))
        if self.fsync:
            dir_fd = os.open(self.directory, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    @property
    def segment_count(self) -> int:
        return len(self._segments)

    async def append(self, stream_id: int, epoch: int, start_offset: int, end_offset: int,
                     payload: bytes | bytearray | memoryview, kind: int = KIND_DATA) -> int:
        """Durably append one entry; returns its WAL position once fsynced (shared with concurrent appends)."""
        if self._failed is not None:
            raise FerryError(ErrorCode.KAFKA_STORAGE_ERROR, f"WAL in {self.directory} failed: {self._failed}")
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._queue.append((encode_entry(stream_id, epoch, start_offset, end_offset, payload, kind), stream_id,
                            end_offset if kind == KIND_DATA else -1, fut))
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush_loop())
        return await fut

    async def _flush_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while self._queue:
            batch, self._queue = self._queue, []
            try:
                positions = await loop.run_in_executor(self._pool, self._write_batch, [b[0] for b in batch],
                                                       [(b[1], b[2]) for b in batch])
            except OSError as exc:
                error = FerryError(ErrorCode.KAFKA_STORAGE_ERROR, f"WAL write in {self.directory} failed: {exc}")
                for *_rest, fut in batch:
                    if not fut.done():
                        fut.set_exception(error)
                continue
            for (_data, _sid, _end, fut), position in zip(batch, positions):
                if not fut.done():
                    fut.set_result(position)

    def _write_batch(self, entries: list[bytes], ranges: list[tuple[int, int]]) -> list[int]:
        """Runs on the writer thread: roll if needed, write, fsync once."""
        assert self._fd is not None
        segment = self._segments[-1]
        if segment.size >= self.segment_bytes:
            self._new_segment(segment.base + segment.size)
            segment = self._segments[-1]
        data = b"".join(entries)
        before = segment.size
        try:
            written = os.write(self._fd, data)
            while written < len(data):
                written += os.write(self._fd, data[written:])
            if self.fsync:
                os.fdatasync(self._fd)
                self.fsyncs += 1
        except OSError:
            try:  # leave no torn entry in the middle of the log
                os.ftruncate(self._fd, before)
            except OSError as exc2:
                self._failed = str(exc2)
            raise
        positions, pos = [], segment.base + before
        for entry, (stream_id, end) in zip(entries, ranges):
            positions.append(pos)
            pos += len(entry)
            if end >= 0:  # data pins the segment until committed; a void marker pins nothing
                segment.max_end[stream_id] = max(segment.max_end.get(stream_id, 0), end)
        segment.size = before + len(data)
        self.appended_bytes += len(data)
        return positions

    def mark_committed(self, stream_id: int, end_offset: int) -> None:
        """Offsets of ``stream_id`` below ``end_offset`` are in S3 (or no longer this WAL's concern)."""
        if end_offset > self._committed.get(stream_id, -1):
            self._committed[stream_id] = end_offset

    def reset_committed(self, stream_id: int, end_offset: int) -> None:
        """A new ownership of the stream starts here: forget an earlier release, so that what is
        appended from now on pins its segments until committed."""
        self._committed[stream_id] = end_offset

    def holds(self, stream_id: int) -> bool:
        """Whether any live segment has data of the stream."""
        return any(stream_id in segment.max_end for segment in list(self._segments))

    def committed_end(self, stream_id: int) -> int:
        """What :meth:`mark_committed` was told for the stream (-1 = nothing)."""
        return self._committed.get(stream_id, -1)

    def release_stream(self, stream_id: int) -> None:
        """Nothing of ``stream_id`` in this WAL is needed any more (closed, or recovered elsewhere)."""
        self._committed[stream_id] = 2 ** 63 - 1

    def _segment_done(self, segment: _Segment) -> bool:
        return all(self._committed.get(sid, -1) >= end for sid, end in segment.max_end.items())

    async def trim(self) -> int:
        """Delete the oldest segments whose every range is committed; returns how many were deleted.

        The active segment is rolled first when everything in it is committed, so an idle WAL empties.
        """
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, self._trim_sync)

    def _trim_sync(self) -> int:
        active = self._segments[-1]
        if active.size > 0 and self._segment_done(active):
            self._new_segment(active.base + active.size)
        deleted = 0
        while len(self._segments) > 1 and self._segment_done(self._segments[0]):
            segment = self._segments.pop(0)
            os.remove(segment.path)
            deleted += 1
        return deleted

    async def close(self) -> None:
        """Finish queued writes, then close the file on the writer thread (after any roll or
        trim it is still doing)."""
        while self._flusher is not None and not self._flusher.done():
            await self._flusher
        await asyncio.get_running_loop().run_in_executor(self._pool, self._close_sync)
        self._pool.shutdown(wait=True)

    def _close_sync(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)

    @property
    def is_open(self) -> bool:
        return self._fd is not None
