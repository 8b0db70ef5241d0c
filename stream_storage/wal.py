"""The write-ahead log in a broker's log dir: durable before acknowledged, deleted once in S3.

Segment files ``wal-<base position>.log`` hold entries::

    body_length u32 | crc32c(body) u32 | body
    body = kind u8 | stream_id i64 | epoch i64 | start_offset i64 | end_offset i64 | payload

Kind 1 is data. Kind 2 is a void marker: data entries of that stream written *earlier* with a
lower epoch at or past ``start_offset`` are not part of the stream (its owner moved on; see
:func:`stream_storage.recovery.recoverable_tail`).

Appends are group-committed: everything queued is written at once (on the event loop: a write to
the page cache is cheaper than a hand-off to a thread; a segment roll, which syncs, goes to the
writer thread), a sync thread syncs it once, and every append waiting on that sync is acknowledged
together. While one batch syncs the next is written and synced too (two syncs in flight; the disk
merges their cache flushes);
batches are acknowledged in WAL order, each only after its own sync returned. A failed sync stops
the WAL: nothing written after the last good sync is acknowledged. Segment files are preallocated with
zeros a few MiB ahead of the writer (on a second thread, which claims a range under the lock and
writes it without: an append waits only if it reaches into that range), so that most syncs are ``fdatasync``
calls that leave the file size unchanged and flush data blocks only; ``fdatasync`` also flushes
the size whenever a write did extend the file, so durability never depends on the preallocation.
Replay stops at the first entry whose length or CRC is wrong: zeros after it are preallocated
space (the clean end); anything else is, in the last segment, a torn tail (a crash mid-write) and
is cut off, never replayed as data. A segment is deleted once every stream range in it is committed
in S3. Another broker's WAL (a shared volume) can be read with :func:`read_wal` without changing it.
"""
from __future__ import annotations

import asyncio
import logging
import os
import re
import struct
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from crc32c import crc32c

from metadata_quorum.kernel.errors import ErrorCode, FerryError

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


_PREALLOC_MIN_BYTES = 256 * 1024
_PREALLOC_MAX_BYTES = 8 * 1024 * 1024
_ZEROS = bytes(1024 * 1024)
_IOV_MAX = 1024
_SYNC_DEPTH = 2  # batches synced at once: concurrent fdatasyncs share the device's cache flushes


def entry_header(stream_id: int, epoch: int, start_offset: int, end_offset: int,
                 payload: bytes | bytearray | memoryview, kind: int = KIND_DATA) -> bytes:
    """The bytes that precede ``payload`` in its entry (written separately: no copy of the payload)."""
    body_header = _BODY_HEADER.pack(kind, stream_id, epoch, start_offset, end_offset)
    crc = crc32c(payload, crc32c(body_header))
    return _PREFIX.pack(len(body_header) + len(payload), crc) + body_header


def encode_entry(stream_id: int, epoch: int, start_offset: int, end_offset: int,
                 payload: bytes | bytearray | memoryview, kind: int = KIND_DATA) -> bytes:
    return entry_header(stream_id, epoch, start_offset, end_offset, payload, kind) + bytes(payload)


def must_wait_for_zeros(write_start: int, write_length: int, zeroing: tuple[int, int]) -> bool:
    """Whether a write of ``write_length`` bytes at ``write_start`` must wait for the zeros being
    written to ``[zeroing)``: only if the two ranges overlap (zeros written after the data would
    erase it). A claimed range starts at or past the write position it was claimed at, so a
    write overlaps it only when the writer has caught up with the preallocation."""
    start, end = zeroing
    return write_start < end and start < write_start + write_length


def _is_zeros(data: bytes, start: int) -> bool:
    return data.count(0, start) == len(data) - start


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


def _pwrite_all(fd: int, pieces: list[bytes | bytearray | memoryview], position: int) -> None:
    """Write ``pieces`` back to back at ``position`` (vectored: the payloads are not joined)."""
    for first in range(0, len(pieces), _IOV_MAX):
        group = pieces[first:first + _IOV_MAX]
        length = sum(len(p) for p in group)
        written = os.pwritev(fd, group, position)
        if written < length:
            rest = b"".join(group)
            while written < length:
                written += os.pwrite(fd, memoryview(rest)[written:], position + written)
        position += length


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
        if valid < len(data) and _is_zeros(data, valid):  # preallocated space: the clean end
            if repair and index == len(listed) - 1:
                with open(path, "r+b") as fh:  # appends continue at the end of the valid data
                    fh.truncate(valid)
                    os.fsync(fh.fileno())
        elif valid < len(data):
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

    def __init__(self, directory: str, segment_bytes: int = 64 * 1024 * 1024, fsync: bool = True,
                 preallocate: bool | None = None) -> None:
        self.directory = directory
        self.segment_bytes = segment_bytes
        self.fsync = fsync
        self.preallocate = fsync if preallocate is None else preallocate
        self._segments: list[_Segment] = []
        self._fd: int | None = None
        self._queue: list[tuple[tuple[bytes, bytes | bytearray | memoryview], int, int, asyncio.Future[int]]] = []
        self._flusher: asyncio.Task[None] | None = None
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ferry-wal")
        self._prealloc_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ferry-wal-prealloc")
        self._sync_pool = ThreadPoolExecutor(max_workers=_SYNC_DEPTH, thread_name_prefix="ferry-wal-sync")
        # Guards the active segment's fd, write position and preallocated end between the writer
        # thread and the preallocating thread: zeros are only ever written past the write position.
        # The preallocator claims a range under the lock and writes its zeros without it, so the
        # writer (on the event loop) never waits on a zero write unless it reaches into that range.
        self._lock = threading.Lock()
        self._zeroed = threading.Condition(self._lock)  # notified when a claimed range is written
        self._zeroing: tuple[int, int] | None = None  # [start, end) of the active segment being zeroed
        self.zeroing_waits = 0  # writes that had to wait for zeros under them
        self._alloc_end = 0  # bytes of the active segment that exist on disk (zeros or data)
        self._alloc_generation = 0  # bumped when the active segment changes or shrinks
        self._prealloc_pending = False
        self._committed: dict[int, int] = {}
        self._failed: str | None = None
        self.fsyncs = 0
        self.extending_syncs = 0  # syncs whose write grew the file (not preallocated yet)
        self.preallocated_bytes = 0
        self.appended_bytes = 0
        self.sync_seconds = 0.0  # time spent in syncs (summed over the sync threads)
        self._writer_jobs = 0  # trims/closes queued on the writer thread: writes go there too meanwhile

    def open(self) -> ReplayResult:
        os.makedirs(self.directory, exist_ok=True)
        result, self._segments = _scan(self.directory, repair=True)
        if not self._segments:
            self._new_segment(0)
        else:
            last = self._segments[-1]
            self._fd = os.open(last.path, os.O_WRONLY)
            self._alloc_end = last.size  # _scan cut any zeros or torn bytes past the valid data
        return result

    async def start(self) -> ReplayResult:
        """:meth:`open` on a thread (it reads and may repair segment files)."""
        return await asyncio.get_running_loop().run_in_executor(None, self.open)

    def _new_segment(self, base: int) -> None:
        path = os.path.join(self.directory, segment_name(base))
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
        with self._lock:
            old, self._fd = self._fd, fd
            self._segments.append(_Segment(base, path))
            self._alloc_end = 0
            self._alloc_generation += 1
            self._zeroing = None  # a claim in the old segment does not concern writes to this one
        if old is not None:
            if self.fsync:
                os.fsync(old)
            os.close(old)
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
        """Durably append one entry; returns its WAL position once synced (shared with concurrent appends).

        ``payload`` is written as given (not copied): it must not change until this returns."""
        if self._failed is not None:
            raise FerryError(ErrorCode.KAFKA_STORAGE_ERROR, f"WAL in {self.directory} failed: {self._failed}")
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        header = entry_header(stream_id, epoch, start_offset, end_offset, payload, kind)
        self._queue.append(((header, payload), stream_id, end_offset if kind == KIND_DATA else -1, fut))
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush_loop())
        return await fut

    async def _flush_loop(self) -> None:
        """Write each queued batch, then sync it on a sync thread while the next batch is written
        and synced (two syncs in flight: the disk merges their cache flushes). A batch is
        acknowledged once its own sync returned, always in WAL order."""
        loop = asyncio.get_running_loop()
        inflight: list[tuple[asyncio.Future[None], list[Any], list[int]]] = []
        while self._queue or inflight:
            if self._queue and len(inflight) < _SYNC_DEPTH and self._failed is None:
                batch, self._queue = self._queue, []
                entries, ranges = [b[0] for b in batch], [(b[1], b[2]) for b in batch]
                try:
                    if self._writer_jobs == 0 and self._segments[-1].size < self.segment_bytes:
                        positions, sync_fd, extends = self._write_batch(entries, ranges)
                    else:  # a roll (it syncs) or a trim in progress: stay in order behind it
                        positions, sync_fd, extends = await loop.run_in_executor(
                            self._pool, self._write_batch, entries, ranges)
                except OSError as exc:
                    self._fail_batch(batch, f"WAL write in {self.directory} failed: {exc}")
                    continue
                synced = loop.run_in_executor(self._sync_pool, self._sync, sync_fd, extends)
                inflight.append((synced, batch, positions))
                continue
            if not inflight:  # the WAL failed: nothing queued can be written any more
                batch, self._queue = self._queue, []
                self._fail_batch(batch, f"WAL in {self.directory} failed: {self._failed}")
                continue
            synced, batch, positions = inflight.pop(0)
            try:
                await synced
            except OSError as exc:
                # After a failed sync the kernel may have dropped the dirty pages: what this and
                # every later batch wrote cannot be trusted, so the WAL stops (as a log dir does).
                self._failed = f"sync failed: {exc}"
                self._fail_batch(batch, f"WAL sync in {self.directory} failed: {exc}")
                continue
            if self._failed is not None:
                self._fail_batch(batch, f"WAL in {self.directory} failed: {self._failed}")
                continue
            for (_data, _sid, _end, fut), position in zip(batch, positions, strict=True):
                if not fut.done():
                    fut.set_result(position)

    @staticmethod
    def _fail_batch(batch: list[Any], message: str) -> None:
        error = FerryError(ErrorCode.KAFKA_STORAGE_ERROR, message)
        for *_rest, fut in batch:
            if not fut.done():
                fut.set_exception(error)

    def _write_batch(self, entries: list[tuple[bytes, bytes | bytearray | memoryview]],
                     ranges: list[tuple[int, int]]) -> tuple[list[int], int, bool]:
        """On the loop, or on the writer thread when the segment must roll first: write (not synced
        yet). Returns the entries' positions, a duplicate of the file descriptor for the sync (the
        segment may roll and its descriptor close meanwhile) and whether the write grew the file."""
        assert self._fd is not None
        segment = self._segments[-1]
        if segment.size >= self.segment_bytes:
            self._new_segment(segment.base + segment.size)
            segment = self._segments[-1]
        pieces: list[bytes | bytearray | memoryview] = []
        for header, payload in entries:
            pieces.append(header)
            if len(payload):
                pieces.append(payload)
        length = sum(len(p) for p in pieces)
        fd = self._fd
        with self._lock:
            before = segment.size
            if self._zeroing is not None and must_wait_for_zeros(before, length, self._zeroing):
                self.zeroing_waits += 1
                while self._zeroing is not None and must_wait_for_zeros(before, length, self._zeroing):
                    self._zeroed.wait()
            extends = before + length > self._alloc_end
            try:
                _pwrite_all(fd, pieces, before)
                sync_fd = os.dup(fd)
            except OSError:
                self._cut_back(fd, before)  # leave no partial entry in the middle of the log
                raise
            segment.size = before + length  # the preallocator writes zeros only beyond this
        positions, pos = [], segment.base + before
        for (header, payload), (stream_id, end) in zip(entries, ranges, strict=True):
            positions.append(pos)
            pos += len(header) + len(payload)
            if end >= 0:  # data pins the segment until committed; a void marker pins nothing
                segment.max_end[stream_id] = max(segment.max_end.get(stream_id, 0), end)
        self.appended_bytes += length
        self._maybe_preallocate(segment)
        return positions, sync_fd, extends

    def _sync(self, sync_fd: int, extends: bool) -> None:
        """Runs on a sync thread: everything written to the file before this call is durable
        when it returns (``fdatasync`` also flushes the size when a write grew the file)."""
        started = time.perf_counter()
        try:
            if self.fsync:
                os.fdatasync(sync_fd)
                self.fsyncs += 1
                self.extending_syncs += extends
        finally:
            os.close(sync_fd)
            self.sync_seconds += time.perf_counter() - started

    def _cut_back(self, fd: int, size: int) -> None:
        """Under the lock: drop everything from ``size`` on (a failed write or sync)."""
        try:
            os.ftruncate(fd, size)
            self._alloc_end = min(self._alloc_end, size)
            self._alloc_generation += 1
        except OSError as exc:
            self._failed = str(exc)

    # -- preallocation (second thread) -------------------------------------------------------

    def _prealloc_ahead_bytes(self, segment: _Segment) -> int:
        return min(_PREALLOC_MAX_BYTES, max(_PREALLOC_MIN_BYTES, segment.size))

    def _maybe_preallocate(self, segment: _Segment) -> None:
        """Keep zeros ahead of the writer (more as the segment grows: an idle WAL writes few zeros)."""
        if not self.preallocate or self._prealloc_pending or self._failed is not None:
            return
        if min(self.segment_bytes, segment.size + self._prealloc_ahead_bytes(segment)) <= self._alloc_end:
            return
        self._prealloc_pending = True
        try:
            self._prealloc_pool.submit(self._preallocate, segment)
        except RuntimeError:  # shutting down
            self._prealloc_pending = False

    def _preallocate(self, segment: _Segment) -> None:
        """Zeros are written a chunk at a time, each past the write position as it is when the
        chunk is claimed (under the lock); the write itself runs without the lock, so an append
        waits for it only if it reaches into the chunk (see :func:`must_wait_for_zeros`)."""
        dup = -1
        try:
            with self._lock:
                if self._fd is None or segment is not self._segments[-1]:
                    return
                generation = self._alloc_generation
                start = max(self._alloc_end, segment.size)
                end = min(self.segment_bytes, segment.size + 2 * self._prealloc_ahead_bytes(segment))
                if end <= start:
                    return
                dup = os.dup(self._fd)
            pos = start
            while pos < end:
                with self._lock:
                    if generation != self._alloc_generation:
                        return  # rolled or cut back meanwhile
                    pos = max(pos, segment.size)
                    if pos >= end:
                        break
                    claim_end = pos + min(len(_ZEROS), end - pos)
                    self._zeroing = (pos, claim_end)
                try:
                    pos += os.pwrite(dup, memoryview(_ZEROS)[:claim_end - pos], pos)
                finally:
                    with self._lock:
                        self._zeroing = None
                        self._zeroed.notify_all()
            os.fsync(dup)  # size and allocation durable: later fdatasyncs flush data blocks only
            with self._lock:
                if generation == self._alloc_generation and segment is self._segments[-1]:
                    self._alloc_end = max(self._alloc_end, end)
                    self.preallocated_bytes += end - start
        except OSError as exc:  # only an optimisation: appends still extend the file and sync it
            log.warning("WAL preallocation in %s failed: %s", self.directory, exc)
        finally:
            if dup >= 0:
                os.close(dup)
            self._prealloc_pending = False

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
        self._writer_jobs += 1
        try:
            return await loop.run_in_executor(self._pool, self._trim_sync)
        finally:
            self._writer_jobs -= 1

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
        self._writer_jobs += 1
        await asyncio.get_running_loop().run_in_executor(self._pool, self._close_sync)
        self._pool.shutdown(wait=True)
        self._sync_pool.shutdown(wait=True)
        self._prealloc_pool.shutdown(wait=True)

    def _close_sync(self) -> None:
        with self._lock:
            fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    @property
    def is_open(self) -> bool:
        return self._fd is not None
