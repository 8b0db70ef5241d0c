"""The uploader: WAL-durable data → objects in S3 → committed at the controller → WAL trimmed.

Uploads start when the buffered bytes reach ``upload_bytes`` or the oldest buffered byte is
``upload_interval_ms`` old (``upload_trigger.upload_due`` decides, with the clock passed in), and hold every stream's pending range in one stream-set object (few
PUTs). ``force_upload`` puts one stream's pending bytes in an object of its own at once, so a
close pays one PUT of its own data and nothing else. Commits of one stream happen in offset order
(each upload waits for the previous upload touching the same stream). A PUT is retried with the
same key and bytes; a commit with the same key is idempotent at the controller; so a lost reply
never commits an object twice. A commit refused with ``STREAM_FENCED`` fences those streams and
the object is rebuilt without them.
"""
from __future__ import annotations

import asyncio
import collections
import logging
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Coroutine

from metadata_quorum.kernel.clock import wall_ms
from metadata_quorum.kernel.errors import ErrorCode, FerryError
from metadata_quorum.kernel.object_keys import object_created_ms, object_key
from stream_storage import backlog
from stream_storage.cache import IndexCache, LogCache
from stream_storage.config import StreamStorageConfig
from stream_storage.control import ObjectRef, StreamControl, is_fenced
from stream_storage.object_format import BuiltObject, Chunk, build_object
from stream_storage.object_store import ObjectStore, ObjectStoreError
from stream_storage.stream import CLOSED, FAILED, FENCED, StreamHandle
from stream_storage.upload_trigger import UploadPolicy, upload_due
from stream_storage.wal_api import WalLog

INLINE_BUILD_BYTES = 1024 * 1024  # objects up to this size are built on the event loop (≈ 0.2 ms)
log = logging.getLogger(__name__)


@dataclass
class UploadStats:
    objects: int = 0
    bytes: int = 0
    put_retries: int = 0
    commit_retries: int = 0
    rebuilds: int = 0


class Uploader:
    def __init__(self, config: StreamStorageConfig, store: ObjectStore, control: StreamControl, cache: LogCache,
                 index_cache: IndexCache, wal: WalLog, broker: Callable[[], tuple[int, int]],
                 monotonic_ms: Callable[[], float] = lambda: time.monotonic() * 1000) -> None:
        self.config = config
        self.policy = UploadPolicy(config.upload_bytes, config.upload_interval_ms)
        self._monotonic_ms = monotonic_ms  # the trigger's clock (the shell reads it, upload_due does not)
        self.store = store
        self.control = control
        self.cache = cache
        self.index_cache = index_cache
        self.wal = wal
        self.broker = broker
        self.handles: dict[int, StreamHandle] = {}
        self.pending_bytes = 0  # durable in the WAL, not yet taken by an upload
        self.uploading_bytes = 0  # taken by an upload, not committed yet
        self.admitted_bytes = 0  # admitted appends on their way to the WAL
        self.admit_waits = 0  # appends that waited for buffered bytes to be uploaded (backpressure)
        self.stats = UploadStats()
        self._kick = asyncio.Event()
        self._room = asyncio.Event()
        self._room.set()
        self._admit_queue: collections.deque[asyncio.Future[None]] = collections.deque()  # waiting appends, in order
        self._slots = asyncio.Semaphore(max(1, config.max_inflight_uploads))
        self._tasks: set[asyncio.Task[None]] = set()
        self._loop_task: asyncio.Task[None] | None = None
        self._stopping = False
        # added to this clock in new keys after a commit was refused for a key older than the GC
        # horizon: a clock running behind the collector's catches up instead of being refused forever
        self._key_clock_adjust_ms = 0
        # told (key, bytes, closing stream ids) once a closing upload's PUT succeeded, before its
        # commit: the broker hands the object's tail to the streams' next owner (tail_handoff.py)
        self.on_closing_put: Callable[[str, bytes, frozenset[int]], None] | None = None
        # told the ids of the streams a commit is about to close, just before it is sent
        self.on_closing_commit: Callable[[frozenset[int]], None] | None = None

    # -- bookkeeping -------------------------------------------------------------------------

    def start(self) -> None:
        self._loop_task = asyncio.create_task(self._run())

    @property
    def buffered_limit_bytes(self) -> int:
        return backlog.limit_bytes(self.config.upload_bytes, self.config.max_uncommitted_uploads)

    def backlog(self) -> backlog.Backlog:
        return backlog.Backlog(self.admitted_bytes, self.pending_bytes, self.uploading_bytes)

    def _update_room(self) -> None:
        if backlog.has_room(self.backlog(), self.buffered_limit_bytes):
            self._room.set()
        else:
            self._room.clear()

    def _fits(self, size_bytes: int) -> bool:
        return backlog.admits(self.backlog(), size_bytes, self.buffered_limit_bytes)

    async def admit(self, size_bytes: int, urgent: bool = False) -> None:
        """Backpressure: an append waits while ``max_uncommitted_uploads`` uploads' worth of
        bytes are not committed in S3 — on their way to the WAL, buffered, or being uploaded
        (``backlog.py``: what a close may have to upload). One append is always admitted when
        nothing is uncommitted; an ``urgent`` one (a closing partition's meta) at once.

        Appends are admitted in the order they asked (a small one never passes a large one that
        waits): appends reach the WAL in call order, which a pipelining idempotent producer's
        sequence check relies on."""
        if urgent or (not self._admit_queue and self._fits(size_bytes)):
            self.admitted_bytes += size_bytes
            self._update_room()
            return
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._admit_queue.append(turn)
        try:
            while self._admit_queue[0] is not turn or not self._fits(size_bytes):
                self.admit_waits += 1
                self._room.clear()
                await self._room.wait()
        finally:
            self._admit_queue.remove(turn)
            self._room.set()  # the next in line looks again
        self.admitted_bytes += size_bytes
        self._update_room()

    def release_admitted(self, size_bytes: int) -> None:
        self.admitted_bytes = max(0, self.admitted_bytes - size_bytes)
        self._update_room()

    def on_durable(self, handle: StreamHandle, size_bytes: int) -> None:
        if handle.oldest_pending_ms is None:
            handle.oldest_pending_ms = self._monotonic_ms()
        self.pending_bytes += size_bytes
        if self.pending_bytes >= self.config.upload_bytes:
            self._kick.set()
        self._update_room()

    def discard(self, size_bytes: int) -> None:
        """Bytes that will never be uploaded (a fenced or forgotten stream's) leave the count."""
        self.pending_bytes = max(0, self.pending_bytes - size_bytes)
        self._update_room()

    def _take(self, handle: StreamHandle) -> list[Chunk]:
        """Claim the stream's durable, not-yet-taken chunks for an upload (synchronous)."""
        if handle.durable_end <= handle.taken_end or handle.state in (FENCED, FAILED):
            return []
        chunks = self.cache.chunks_between(handle.stream_id, handle.taken_end, handle.durable_end)
        if not chunks:
            return []
        handle.taken_end = chunks[-1].end_offset
        size = sum(len(c.data) for c in chunks)
        self.pending_bytes -= size
        self.uploading_bytes += size
        if handle.taken_end >= handle.durable_end:
            handle.oldest_pending_ms = None
        self._update_room()
        return chunks

    # -- triggers ----------------------------------------------------------------------------

    async def _run(self) -> None:
        while not self._stopping:
            oldest = min((h.oldest_pending_ms for h in self.handles.values()
                          if h.oldest_pending_ms is not None and h.state not in (FENCED, FAILED)), default=None)
            check = upload_due(self.pending_bytes, oldest, self._monotonic_ms(), self.policy)
            if check.due:
                await self._slots.acquire()
                self._kick.clear()
                parts = [(h, c) for h in list(self.handles.values()) if (c := self._take(h))]
                if parts:
                    self._begin(parts, slot=True)
                    continue
                self._slots.release()  # nothing uploadable (e.g. only failed streams): wait below
            try:
                await asyncio.wait_for(self._kick.wait(), timeout=check.next_check_ms / 1000)
            except asyncio.TimeoutError:
                pass

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def force_upload(self, handle: StreamHandle) -> None:
        """Upload everything durable of this stream now and wait until it is committed."""
        chunks = self._take(handle)
        if chunks:
            self._begin([(handle, chunks)], slot=False)
        if handle.last_commit is not None:
            await asyncio.shield(handle.last_commit)
        if handle.state in (FENCED, FAILED):
            handle.check_writable()
        if handle.committed_end < handle.taken_end:
            raise FerryError(ErrorCode.KAFKA_STORAGE_ERROR,
                             f"stream {handle.stream_id}: upload did not commit offsets "
                             f"[{handle.committed_end}, {handle.taken_end})")

    async def force_upload_many(self, handles: list[StreamHandle],
                                close: bool = False) -> dict[int, FerryError]:
        """Upload what all these streams buffer as ONE stream-set object with one commit, and
        wait; returns the streams that did not commit, with why (empty: all did). With ``close``
        the same commit closes the streams it carries (they must take no more appends)."""
        parts = [(h, c) for h in handles if (c := self._take(h))]
        if parts:
            self._begin(parts, slot=False, close_ids=frozenset(h.stream_id for h, _c in parts) if close else frozenset())
        waits = [asyncio.shield(h.last_commit) for h in handles if h.last_commit is not None]
        if waits:
            await asyncio.gather(*waits, return_exceptions=True)
        failed: dict[int, FerryError] = {}
        for h in handles:
            if h.state == CLOSED:
                continue
            try:
                if h.state in (FENCED, FAILED):
                    h.check_writable()
                if h.committed_end < h.taken_end:
                    raise FerryError(ErrorCode.KAFKA_STORAGE_ERROR, f"stream {h.stream_id}: upload did not commit "
                                     f"offsets [{h.committed_end}, {h.taken_end})")
            except FerryError as exc:
                failed[h.stream_id] = exc
        return failed

    # -- one upload --------------------------------------------------------------------------

    def _begin(self, parts: list[tuple[StreamHandle, list[Chunk]]], slot: bool,
               close_ids: frozenset[int] = frozenset()) -> None:
        """Chain this upload behind the previous one of each of its streams, synchronously."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        previous = []
        for handle, _chunks in parts:
            if handle.last_commit is not None and not handle.last_commit.done():
                previous.append(handle.last_commit)
            handle.last_commit = done
        size = sum(len(c.data) for _h, chunks in parts for c in chunks)
        self._spawn(self._upload(parts, slot, previous, done, size, close_ids))

    async def _upload(self, parts: list[tuple[StreamHandle, list[Chunk]]], slot: bool,
                      previous: list[asyncio.Future[None]], done: asyncio.Future[None], size_bytes: int,
                      close_ids: frozenset[int] = frozenset()) -> None:
        try:
            await self._upload_and_commit(parts, previous, close_ids)
        except Exception as exc:  # never leave a waiter hanging; the streams carry the outcome
            log.exception("upload failed")
            for handle, chunks in parts:
                if handle.committed_end < chunks[-1].end_offset:
                    handle.fail(chunks[0].start_offset, f"upload failed: {exc}")
                    self.discard(sum(len(c.data) for c in self.cache.chunks_between(
                        handle.stream_id, handle.taken_end, handle.durable_end)))
                    handle.taken_end = max(handle.taken_end, handle.durable_end)
        finally:
            self.uploading_bytes -= size_bytes  # committed, or given up (the streams carry why)
            self._update_room()
            if slot:
                self._slots.release()
            if not done.done():
                done.set_result(None)

    def new_key(self) -> str:
        return self._new_key()

    def _new_key(self) -> str:
        """``<prefix>/<broker>/<created_ms>-<random>``: the garbage collector's horizon is compared
        with the creation time (commit_object refuses keys created at or before it)."""
        broker_id, _ = self.broker()
        created_ms = wall_ms() + self._key_clock_adjust_ms
        return object_key(self.config.object_key_prefix, broker_id, created_ms, uuid.uuid4().hex)

    async def _upload_and_commit(self, parts: list[tuple[StreamHandle, list[Chunk]]],
                                 previous: list[asyncio.Future[None]],
                                 close_ids: frozenset[int] = frozenset()) -> None:
        put_done: tuple[str, BuiltObject] | None = None
        attempt = 0
        ambiguous = False  # a commit attempt of the current key may have been applied (no reply)
        while True:
            if put_done is None:
                ambiguous = False
                parts = [(h, c) for h, c in parts if h.state not in (FENCED, FAILED)]
                if not parts:
                    return
                streams = [(h.stream_id, c) for h, c in parts]
                if sum(len(x.data) for _h, c in parts for x in c) <= INLINE_BUILD_BYTES:
                    # small (a move's last upload, typically): a thread hop costs more than the
                    # build, and on a busy machine it is a wait on the move's critical path
                    built = build_object(streams, self.config.object_block_bytes)
                else:  # on a thread: joining and checksumming MiBs would stall the loop's appends
                    built = await asyncio.get_running_loop().run_in_executor(
                        None, build_object, streams, self.config.object_block_bytes)
                key = self._new_key()
                await self._put(key, built)
                put_done = (key, built)
                if close_ids and self.on_closing_put is not None:
                    # stored, not yet committed: whoever reads it next may have its bytes now
                    self.on_closing_put(key, built.data, frozenset(h.stream_id for h, _c in parts
                                                                   if h.stream_id in close_ids))
            key, built = put_done
            if previous:
                await asyncio.gather(*(asyncio.shield(p) for p in previous))
                previous = []
                broken = [h for h, c in parts if h.state in (FENCED, FAILED) or h.committed_end != c[0].start_offset]
                if broken:
                    for h in broken:
                        if h.state not in (FENCED, FAILED):
                            h.fail(h.committed_end, "an earlier upload of this stream did not commit")
                    await self._discard(key)
                    put_done = None
                    self.stats.rebuilds += 1
                    continue
            broker_id, broker_epoch = self.broker()
            ranges = [(r, h.epoch) for r, (h, _c) in zip(built.ranges, parts, strict=True)]
            closing = [h.stream_id for h, _c in parts if h.stream_id in close_ids]
            try:
                if closing:
                    if self.on_closing_commit is not None and attempt == 0:
                        self.on_closing_commit(frozenset(closing))  # may queue a write right behind it
                    await self.control.commit_object(key, len(built.data), broker_id, broker_epoch, ranges,
                                                     close_stream_ids=closing)
                else:
                    await self.control.commit_object(key, len(built.data), broker_id, broker_epoch, ranges)
            except FerryError as exc:
                if is_fenced(exc):
                    if ambiguous and await self._committed_already(key, parts):
                        self._on_committed(key, built, parts)
                        return
                    if not await self._find_fenced(parts, exc):
                        # no stream of the upload could be named fenced (the controller did not
                        # answer): try again, a bounded number of times
                        attempt += 1
                        if attempt > self.config.controller_retry.max_attempts:
                            raise
                        await asyncio.sleep(self.config.controller_retry.backoff_ms(attempt) / 1000)
                    close_ids = frozenset()  # a rebuilt upload leaves the close to close_stream
                    if not ambiguous:  # never delete what an unanswered attempt may have committed
                        await self._discard(key)
                    put_done = None
                    self.stats.rebuilds += 1
                    continue
                if exc.error is ErrorCode.OBJECT_NOT_EXIST and \
                        attempt < self.config.controller_retry.max_attempts:  # created before the GC horizon
                    attempt += 1
                    horizon = int((exc.details or {}).get("gc_horizon_ms", 0))
                    behind_ms = horizon - (object_created_ms(key) or horizon) + 1
                    self._key_clock_adjust_ms += max(1, behind_ms)
                    await self._discard(key)
                    put_done = None
                    self.stats.rebuilds += 1
                    continue
                if exc.retriable and not self._stopping and attempt < self.config.controller_retry.max_attempts:
                    ambiguous = True
                    attempt += 1
                    self.stats.commit_retries += 1
                    await asyncio.sleep(self.config.controller_retry.backoff_ms(attempt) / 1000)
                    continue
                raise
            self._on_committed(key, built, parts)
            for handle, _chunks in parts:
                if handle.stream_id in closing:
                    handle.state = CLOSED  # closed at the controller by the same write
            return

    async def _put(self, key: str, built: BuiltObject) -> None:
        attempt = 0
        while True:
            try:
                await self.store.put(key, built.data)
                return
            except ObjectStoreError as exc:
                if not exc.retriable or self._stopping or attempt >= self.config.controller_retry.max_attempts:
                    raise
                attempt += 1
                self.stats.put_retries += 1
                log.warning("PUT %s failed after the store's retries (%s); trying again", key, exc)
                await asyncio.sleep(self.config.controller_retry.backoff_ms(attempt) / 1000)

    async def _discard(self, key: str) -> None:
        try:
            await self.store.delete([key])
        except ObjectStoreError as exc:  # an uncommitted object is garbage, not a correctness problem
            log.warning("could not delete uncommitted object %s: %s", key, exc)

    async def _committed_already(self, key: str, parts: list[tuple[StreamHandle, list[Chunk]]]) -> bool:
        """Whether an earlier, unanswered attempt committed ``key`` (commits are all-or-nothing)."""
        try:
            desc = await self.control.describe_stream(parts[0][0].stream_id)
        except FerryError:
            return False
        return any(o.object_key == key for o in desc.objects)

    async def _find_fenced(self, parts: list[tuple[StreamHandle, list[Chunk]]], exc: FerryError) -> bool:
        """Fence the streams of a refused commit whose own epoch or owner changed; returns whether
        any was. A stream whose description cannot be read is left as it is: fencing it would
        make this broker give up a stream it may still own (nobody else could close it)."""
        if len(parts) == 1 or exc.error == ErrorCode.STALE_BROKER_EPOCH:
            for h, _c in parts:
                h.fence(str(exc))
            return True
        broker_id, _ = self.broker()
        found = False
        for h, _c in parts:
            try:
                desc = await self.control.describe_stream(h.stream_id)
            except FerryError as err:
                log.warning("commit of stream %d refused (%s) and its description unreadable: %s", h.stream_id,
                            exc, err)
                continue
            if desc.owner != broker_id or desc.epoch != h.epoch:
                h.fence(f"stream {h.stream_id} is at epoch {desc.epoch} owned by broker {desc.owner} "
                        f"(this broker held epoch {h.epoch})")
                found = True
        return found

    def _on_committed(self, key: str, built: BuiltObject, parts: list[tuple[StreamHandle, list[Chunk]]]) -> None:
        self.stats.objects += 1
        self.stats.bytes += len(built.data)
        self.index_cache.put(key, built.index)
        for stream_range, (handle, _chunks) in zip(built.ranges, parts, strict=True):
            handle.committed_end = stream_range.end_offset
            handle.add_object(ObjectRef(key, stream_range.start_offset, stream_range.end_offset, len(built.data),
                                        handle.epoch, stream_range.size_bytes))
            self.cache.mark_uploaded(handle.stream_id, stream_range.end_offset)
            self.wal.mark_committed(handle.stream_id, stream_range.end_offset)
        self._spawn(self._trim_wal())

    async def _trim_wal(self) -> None:
        try:
            await self.wal.trim()
        except OSError as exc:
            log.warning("WAL trim failed: %s", exc)

    async def drain(self) -> None:
        """Wait for the uploads and WAL trims under way now."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def stop(self) -> None:
        self._stopping = True
        self._kick.set()
        if self._loop_task is not None:
            self._loop_task.cancel()
            try:
                await self._loop_task
            except asyncio.CancelledError:
                pass
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
