"""StreamStorage: one broker's streams — WAL, log cache, uploader and reader behind one API.

Typical life of a stream on its owner::

    info = await storage.open_stream(stream_id, epoch)          # recovers this WAL's tail, if any
    base = await storage.append(stream_id, batches)              # after fsync; offsets stamped
    res  = await storage.fetch(stream_id, offset, max_bytes)     # cache, then S3
    await storage.close_stream(stream_id)                        # drain, force upload, close

A move's new owner opens with a higher epoch; if the old owner died, the open's reply names the
owners whose WALs may hold an acknowledged tail that never reached S3 (``wal_owners``: the dead
broker, and any earlier owner that died before its tail was recovered), and the new owner calls
``storage.recovery.recover_from_owners`` (``owner_recovery.py``) to bring it back from their WAL
dirs (a shared volume) or their WAL objects (``wal.mode = s3``).
"""
from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Callable, Sequence

from metadata_quorum.kernel.errors import ErrorCode, FerryError
from stream_storage.batches import BatchInfo, iter_batches, stamp_offsets, validate_batches
from stream_storage.cache import BlockCache, IndexCache, LogCache
from stream_storage.config import StreamStorageConfig
from stream_storage.control import StreamControl, StreamDescription
from stream_storage import compaction, key_compaction
from stream_storage.compaction import CompactionPolicy
from stream_storage.control import ObjectRef
from stream_storage.object_format import Chunk, build_object
from stream_storage.object_store import ObjectStore, ObjectStoreError
from stream_storage.reader import ObjectReader, next_offset_of
from stream_storage.stream import CLOSED, CLOSING, FAILED, FENCED, OPEN, StreamHandle, objects_for
from stream_storage.uploader import Uploader
from stream_storage.owner_recovery import OwnerRecovery
from stream_storage.recovery import recoverable_tail
from stream_storage.wal import KIND_VOID, ReplayResult, WalEntry, WriteAheadLog
from stream_storage.wal_api import WalLog
from stream_storage.s3_wal import PeerWalReader, S3WriteAheadLog

log = logging.getLogger(__name__)
COMPACTION_READ_CONCURRENCY = 8  # objects of one compaction run read at once


@dataclass(frozen=True)
class OpenInfo:
    stream_id: int
    epoch: int
    start_offset: int
    end_offset: int
    recovered_offsets: int = 0
    # earlier owners whose WALs may hold an acknowledged tail: recovery.recover_from_owners reads them
    wal_owners: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True)
class FetchResult:
    data: bytes
    start_offset: int
    next_offset: int
    high_watermark: int
    log_start_offset: int


class StreamStorage:
    """One per broker. Call :meth:`start` first and :meth:`close` (or :meth:`abort`) last."""

    def __init__(self, config: StreamStorageConfig, store: ObjectStore, control: StreamControl,
                 broker_id: int, broker_epoch: int = 0, wal_name: str = "main") -> None:
        """``wal_name`` names this storage's WAL among the broker's (one per log dir) in S3."""
        self.config = config
        self.store = store
        self.control = control
        self.broker_id = broker_id
        self.broker_epoch = broker_epoch
        self.wal: WalLog = S3WriteAheadLog(store, config.wal, broker_id, wal_name, lambda: self.broker_epoch,
                                           config.controller_retry) if config.wal.mode == "s3" else \
            WriteAheadLog(config.wal_dir, config.wal_segment_bytes, config.wal_fsync)
        self.cache = LogCache(config.cache_bytes)
        self.index_cache = IndexCache(config.index_cache_entries)
        # room for a few sequential readers' readahead runs at once
        self.block_cache = BlockCache(max(config.object_block_bytes * 8, 4 * config.readahead_bytes))
        self.reader = ObjectReader(store, self.index_cache, self.block_cache, readahead_bytes=config.readahead_bytes)
        self.uploader = Uploader(config, store, control, self.cache, self.index_cache, self.wal,
                                 lambda: (self.broker_id, self.broker_epoch))
        self.handles = self.uploader.handles
        self._replayed: list[WalEntry] = []
        self.recovery = OwnerRecovery(self, control, lambda: (self.broker_id, self.broker_epoch),
                                      PeerWalReader(store, config.wal.key_prefix), config.wal.mode == "s3")
        self._image_lookup: Callable[[int], StreamDescription | None] | None = None
        self.replay: ReplayResult | None = None
        self._started = False
        self._deletes: set[asyncio.Future[None]] = set()
        # Streams this storage held and let go of, and how: closed here (by its last upload or by
        # close_stream) or fenced (the handle that said why). A close retried after an answer was
        # lost, or after another broker took one of a partition's two streams, then finds out
        # what became of each stream instead of "not opened here" on every attempt. Dropped
        # when the stream is opened here again.
        self._closed_by_commit: set[int] = set()
        self._fenced_handles: dict[int, StreamHandle] = {}
        self.compaction_runs = 0
        self.compaction_replaced_objects = 0
        self.compaction_bytes = 0

    # -- life cycle --------------------------------------------------------------------------

    async def start(self) -> ReplayResult:
        """Open the WAL (cutting a torn tail) and keep its entries for streams re-opened here."""
        self.replay = await self.wal.start()
        self._replayed = self.replay.entries
        await self._release_committed_replay()
        self.uploader.start()
        self._started = True
        return self.replay

    async def _release_committed_replay(self) -> None:
        """Entries already in S3 (committed before a crash, or recovered by another broker) free their segments."""
        max_end: dict[int, int] = {}
        for entry in self._replayed:
            if entry.kind != KIND_VOID:
                max_end[entry.stream_id] = max(max_end.get(entry.stream_id, 0), entry.end_offset)
        gate = asyncio.Semaphore(16)

        async def check(stream_id: int) -> None:
            async with gate:
                try:
                    desc = await self.control.describe_stream(stream_id)
                except FerryError as exc:
                    if exc.error == ErrorCode.STREAM_NOT_EXIST:
                        self.wal.release_stream(stream_id)
                    return
            self.wal.mark_committed(stream_id, desc.end_offset)

        await asyncio.gather(*(check(sid) for sid in max_end))
        self._replayed = [e for e in self._replayed
                          if e.kind == KIND_VOID or e.end_offset > self.wal.committed_end(e.stream_id)]
        await self.wal.trim()

    def set_image_lookup(self, lookup: Callable[[int], StreamDescription | None] | None) -> None:
        """Where fetch finds committed objects first: the broker's metadata image (e.g.
        ``lambda sid: description_from_image(follower.image, sid)``); the controller is asked
        only when the image does not have them yet."""
        self._image_lookup = lookup

    def set_broker_epoch(self, broker_epoch: int) -> None:
        self.broker_epoch = broker_epoch

    async def close(self) -> None:
        """Clean shutdown: close every open stream (force upload + close at the controller),
        a few at a time so that a broker with many partitions is not paying one PUT after another."""
        gate = asyncio.Semaphore(8)

        async def close_one(stream_id: int) -> None:
            async with gate:
                try:
                    await self.close_stream(stream_id)
                except FerryError as exc:
                    log.warning("closing stream %d at shutdown: %s", stream_id, exc)

        await asyncio.gather(*(close_one(sid) for sid in list(self.handles)))
        await self.uploader.drain()
        try:
            await self.wal.trim()
        except OSError as exc:
            log.warning("WAL trim at shutdown failed: %s", exc)
        await self.uploader.stop()
        await self.reader.close()
        await self._cancel_deletes()
        await self.wal.close()
        await self.store.close()

    async def abort(self) -> None:
        """Stop without uploading (what a crash leaves behind: the WAL and S3 as they are)."""
        for handle in self.handles.values():
            handle.fence("storage aborted")
        await self.uploader.stop()
        await self.reader.close()
        await self._cancel_deletes()
        await self.wal.close()

    async def _cancel_deletes(self) -> None:
        for task in list(self._deletes):  # objects left unnamed: the garbage collector's
            task.cancel()
        await asyncio.gather(*self._deletes, return_exceptions=True)

    # -- ownership ---------------------------------------------------------------------------

    async def create_stream(self) -> int:
        return await self.control.create_stream()

    async def open_stream(self, stream_id: int, epoch: int, previous_owner: int | None = None,
                          previous_epoch: int | None = None,
                          known_objects: tuple[ObjectRef, ...] | list[ObjectRef] = ()) -> OpenInfo:
        """Take ownership at ``epoch`` (idempotent for the same epoch); recover this WAL's tail.

        ``previous_owner`` is the stream's owner before this open, when the caller knows it (-1 =
        nobody: it was closed cleanly, everything is in S3). If it is not this broker, whatever
        this WAL still holds of the stream from earlier epochs is stale (the other owner recovered
        what counted, or a fenced owner wrote it late) and is voided, never recovered.
        ``previous_epoch`` is the stream's epoch before this open: when this broker was its owner,
        only entries up to that epoch are its tail. Raises STREAM_FENCED if the epoch is not newer,
        STREAM_NOT_CLOSED while another live broker still owns it.
        ``known_objects``: the stream's committed objects as the caller's metadata image names
        them, from an image that holds the previous owner's last commit (e.g. the new owner of a
        move saw the election that followed the close). Reads of those offsets then start at
        once, without asking the controller for the list; an offset they do not cover is looked
        up as usual.
        """
        existing = self.handles.get(stream_id)
        if existing is not None and existing.epoch == epoch and existing.state == OPEN:
            return OpenInfo(stream_id, epoch, existing.start_offset, existing.durable_end,
                            wal_owners=self.recovery.pending(stream_id))
        if existing is not None and existing.state == OPEN:
            # moving to a newer epoch on this broker: what the old epoch acknowledged goes to S3 first
            existing.state = CLOSING
            await existing.idle.wait()
            try:
                await self.uploader.force_upload(existing)
            except FerryError as exc:
                log.warning("stream %d: upload before re-opening at epoch %d failed: %s", stream_id, epoch, exc)
        opened = await self.control.open_stream(stream_id, epoch, self.broker_id, self.broker_epoch)
        if existing is not None:
            existing.fence(f"re-opened at epoch {epoch}")
            self.uploader.discard(sum(len(c.data) for c in self.cache.chunks_between(
                stream_id, existing.taken_end, existing.durable_end)))
        handle = StreamHandle(stream_id, opened.epoch, opened.start_offset, opened.end_offset, opened.end_offset,
                              opened.end_offset, opened.end_offset)
        handle.objects = sorted((o for o in known_objects if opened.start_offset < o.end_offset <= opened.end_offset),
                                key=lambda o: o.start_offset)
        self.cache.reset(stream_id, opened.end_offset)
        self.handles[stream_id] = handle
        self._closed_by_commit.discard(stream_id)
        self._fenced_handles.pop(stream_id, None)
        self.wal.reset_committed(stream_id, opened.end_offset)
        self.recovery.opened(stream_id, opened.wal_owners)
        mine_before = previous_owner is None or previous_owner == self.broker_id
        stale = [e for e in self._replayed if e.stream_id == stream_id]
        tail = recoverable_tail(self._replayed, stream_id, opened.end_offset, previous_epoch) if mine_before else []
        self._replayed = [e for e in self._replayed if e.stream_id != stream_id]
        if not mine_before and (stale or self.wal.holds(stream_id)):
            await self.wal.append(stream_id, opened.epoch, opened.end_offset, opened.end_offset, b"", KIND_VOID)
        for entry in tail:  # already durable in this WAL: back into the cache, uploaded as usual
            self.cache.add(stream_id, Chunk(entry.start_offset, entry.end_offset, entry.payload))
            handle.next_offset = entry.end_offset
            handle.mark_durable(entry.end_offset)
            self.uploader.on_durable(handle, len(entry.payload))
        if tail:
            await self.force_upload(stream_id)
        return OpenInfo(stream_id, opened.epoch, opened.start_offset, handle.durable_end,
                        handle.durable_end - opened.end_offset, opened.wal_owners)

    async def append_recovered(self, stream_id: int, entries: Sequence[WalEntry]) -> None:
        """Append a tail recovered from earlier owners' WALs (``self.recovery``) at the offsets
        they acknowledged it with; durable here and committed in S3 when this returns."""
        handle = self._writable(stream_id)
        if not entries:
            return
        self.hurry_wal()
        # all queued at once: the WAL group-commits them, offsets stay in order
        await asyncio.gather(*(self._append_entry(handle, e.start_offset, e.end_offset, e.payload) for e in entries))
        await self.force_upload(stream_id)

    def hurry_wal(self) -> None:
        """Appends on a move's critical path follow (a closing partition's last appends and meta,
        a recovered tail): with the WAL in S3, seal them at once rather than after the batching
        window. The local WAL syncs as soon as it can anyway."""
        if isinstance(self.wal, S3WriteAheadLog):
            self.wal.hurry()

    def fence(self, stream_id: int, reason: str = "a newer epoch owns it") -> None:
        """The broker learned another owner has the stream: stop accepting appends at once."""
        handle = self.handles.get(stream_id)
        if handle is not None:
            handle.fence(reason)
            self._forget(stream_id)

    def release_stream(self, stream_id: int) -> None:
        """Nothing of ``stream_id`` left in this WAL is needed (it was recovered or abandoned)."""
        self._replayed = [e for e in self._replayed if e.stream_id != stream_id]
        self.wal.release_stream(stream_id)

    def _forget(self, stream_id: int) -> None:
        self.recovery.forget(stream_id)
        handle = self.handles.pop(stream_id, None)
        if handle is not None and handle.state == CLOSED:
            self._closed_by_commit.add(stream_id)
        elif handle is not None and handle.state == FENCED:
            self._fenced_handles[stream_id] = handle
        if handle is not None:
            self.uploader.discard(sum(
                len(c.data) for c in self.cache.chunks_between(stream_id, handle.taken_end, handle.durable_end)))
        self.cache.drop(stream_id)
        self.wal.release_stream(stream_id)

    def writable(self, stream_id: int) -> StreamHandle:
        """The stream's open handle; STREAM_NOT_OPENED / STREAM_FENCED otherwise."""
        return self._writable(stream_id)

    def _writable(self, stream_id: int) -> StreamHandle:
        handle = self.handles.get(stream_id)
        if handle is None:
            raise FerryError(ErrorCode.STREAM_NOT_OPENED, f"stream {stream_id} is not opened on broker "
                             f"{self.broker_id}", {"stream_id": stream_id})
        handle.check_writable()
        return handle

    # -- data --------------------------------------------------------------------------------

    async def append(self, stream_id: int, batches: bytes | bytearray, leader_epoch: int | None = None,
                     validated: list[BatchInfo] | None = None, urgent: bool = False) -> int:
        """Append Kafka v2 RecordBatches; returns the first offset once the WAL has fsynced them.

        Offsets (and the leader epoch, if given) are stamped into the batches; the CRC does not
        cover them. Raises STREAM_FENCED / STREAM_NOT_OPENED / CORRUPT_MESSAGE / MESSAGE_TOO_LARGE.
        ``validated``: the caller already ran :func:`validate_batches` on ``batches``, a bytearray
        it hands over (stamped in place, not copied). ``urgent``: not held by the bound on bytes
        not yet in S3 (``backlog.py``), for a few small appends on a move's critical path.
        """
        self._writable(stream_id)
        if len(batches) > self.config.max_append_bytes:
            raise FerryError(ErrorCode.MESSAGE_TOO_LARGE, f"{len(batches)} bytes exceed the "
                             f"{self.config.max_append_bytes}-byte limit of one append")
        if validated is not None and isinstance(batches, bytearray):
            buf, infos = batches, validated
        else:
            buf = bytearray(batches)
            infos = validate_batches(buf)
        count = sum(info.offset_count for info in infos)
        await self.uploader.admit(len(buf), urgent)
        try:
            handle = self._writable(stream_id)
            base = handle.next_offset
            stamp_offsets(buf, infos, base, leader_epoch)
            await self._append_entry(handle, base, base + count, bytes(buf))
        finally:
            self.uploader.release_admitted(len(buf))
        return base

    async def _append_entry(self, handle: StreamHandle, base: int, end: int, data: bytes) -> None:
        handle.next_offset = end
        handle.inflight_appends += 1
        handle.idle.clear()
        self.cache.add(handle.stream_id, Chunk(base, end, data))
        try:
            await self.wal.append(handle.stream_id, handle.epoch, base, end, data)
        except FerryError as exc:
            handle.fail(base, exc.message)
            raise
        finally:
            handle.inflight_appends -= 1
            if handle.inflight_appends == 0:
                handle.idle.set()
        if handle.state == FENCED:
            raise FerryError(ErrorCode.STREAM_FENCED, f"stream {handle.stream_id} was fenced while appending "
                             f"offsets [{base}, {end}); they are not acknowledged", {"stream_id": handle.stream_id})
        if not handle.mark_durable(end):
            handle.check_writable()
        self.uploader.on_durable(handle, len(data))

    async def _describe(self, stream_id: int, need_offset: int | None = None) -> StreamDescription:
        if self._image_lookup is not None:
            local = self._image_lookup(stream_id)
            if local is not None and (need_offset is None or objects_for(local.objects, need_offset) is not None):
                return local
        return await self.control.describe_stream(stream_id)

    async def fetch(self, stream_id: int, start_offset: int, max_bytes: int) -> FetchResult:
        """Batches from the one holding ``start_offset`` up to ``max_bytes`` (at least one batch),
        below the high watermark (acknowledged offsets). Works on streams owned elsewhere too
        (committed offsets only). Raises OFFSET_OUT_OF_RANGE outside [start, high watermark]."""
        handle = self.handles.get(stream_id)
        desc: StreamDescription | None = None
        if handle is not None and handle.state in (OPEN, CLOSING, FAILED):
            log_start, hw = handle.start_offset, handle.durable_end
        else:
            desc = await self._describe(stream_id)
            log_start, hw = desc.start_offset, desc.end_offset
        if start_offset < log_start or start_offset > hw:
            raise FerryError(ErrorCode.OFFSET_OUT_OF_RANGE, f"offset {start_offset} of stream {stream_id} is "
                             f"outside [{log_start}, {hw}]", {"log_start_offset": log_start, "high_watermark": hw})
        parts: list[bytes] = []
        cursor, budget = start_offset, max(1, max_bytes)
        for _ in range(64):
            if cursor >= hw or budget <= 0 or len(parts) >= 16:
                break
            piece = await self._read_piece(stream_id, handle, desc, cursor, budget, hw, first=not parts)
            if not piece:
                # a first read comes back empty only where no batch is left (key compaction);
                # a later one also when its next batch does not fit the budget
                gap_end = self._gap_end(handle, desc, cursor, hw) if not parts else None
                if gap_end is None:
                    break
                cursor = gap_end  # key compaction left no batch here: the object's next one follows
                continue
            if parts and len(piece) > budget:
                break
            parts.append(piece)
            budget -= len(piece)
            cursor = next_offset_of(piece) or cursor
        data = b"".join(parts)
        return FetchResult(data, start_offset, cursor, hw, log_start)

    @staticmethod
    def _gap_end(handle: StreamHandle | None, desc: StreamDescription | None, offset: int, hw: int) -> int | None:
        """Where the object holding ``offset`` ends, if that is past it and within ``hw``."""
        ref = handle.object_for(offset) if handle is not None else \
            objects_for(desc.objects, offset) if desc is not None else None
        if ref is None or not offset < ref.end_offset <= hw:
            return None
        return ref.end_offset

    async def _read_piece(self, stream_id: int, handle: StreamHandle | None, desc: StreamDescription | None,
                          offset: int, max_bytes: int, hw: int, first: bool = True) -> bytes:
        if handle is not None:
            cached = self.cache.read(stream_id, offset, max_bytes, hw)
            if cached:
                return cached
            for attempt in range(8):  # a follower controller may not have applied the commit yet
                if handle.object_for(offset) is not None:
                    break
                if attempt:
                    await asyncio.sleep(self.config.controller_retry.backoff_ms(attempt) / 1000)
                handle.merge_objects((await self._describe(stream_id, offset)).objects)
            ref = handle.object_for(offset)
        else:
            assert desc is not None
            ref = objects_for(desc.objects, offset)
        if ref is None:
            raise FerryError(ErrorCode.OFFSET_NOT_AVAILABLE, f"offset {offset} of stream {stream_id} is below the "
                             "high watermark but neither cached nor in a committed object")
        try:
            data = await self.reader.read(stream_id, ref, offset, max_bytes, first)
        except ObjectStoreError as exc:
            raise FerryError(ErrorCode.KAFKA_STORAGE_ERROR, f"reading {ref.object_key}: {exc}") from exc
        return _below(data, hw)

    async def prefetch(self, object_key: str, size: int, stream_ids: set[int] | frozenset[int]) -> int:
        """Warm the block cache with the blocks of ``stream_ids`` in one committed object (e.g.
        partitions a new owner is about to serve); returns how many blocks it holds for them."""
        try:
            return await self.reader.prefetch(object_key, size, stream_ids)
        except ObjectStoreError as exc:
            raise FerryError(ErrorCode.KAFKA_STORAGE_ERROR, f"prefetching {object_key}: {exc}") from exc

    def accept_tail(self, object_key: str, size: int, tail_start: int, tail: bytes) -> bool:
        """Keep bytes ``[tail_start, size)`` of an object another broker stored (its last object
        of a partition moving here), as this storage's index GET would have read them; see
        ``ObjectReader.accept_tail``."""
        return self.reader.accept_tail(object_key, size, tail_start, tail)

    async def force_upload(self, stream_id: int) -> None:
        """Upload and commit everything acknowledged for this stream now (one PUT, one commit)."""
        handle = self.handles.get(stream_id)
        if handle is None:
            if stream_id in self._closed_by_commit:
                return  # closed here: everything was committed before
            if stream_id in self._fenced_handles:
                self._fenced_handles[stream_id].check_writable()  # STREAM_FENCED, with why
            raise FerryError(ErrorCode.STREAM_NOT_OPENED, f"stream {stream_id} is not opened here")
        await self.uploader.force_upload(handle)

    async def force_upload_many(self, stream_ids: list[int], close: bool = False) -> dict[int, FerryError]:
        """Force-upload several streams in one object and one commit (partitions closing
        together); returns the streams that did not commit and why. The order of ``stream_ids`` is
        the order of their ranges in the object. With ``close`` (the streams take no more
        appends), the commit also closes the streams it carries: step 4 in one controller write;
        a stream with nothing to upload is closed by :meth:`close_stream` as usual."""
        handles = [h for sid in stream_ids if (h := self.handles.get(sid)) is not None]
        if close:
            for h in handles:
                if h.state == OPEN:
                    h.state = CLOSING
                await h.idle.wait()
        failed = await self.uploader.force_upload_many(handles, close=close)
        for h in handles:
            if h.state == CLOSED:
                self._closed_by_commit.add(h.stream_id)
                self._forget(h.stream_id)
        for sid in stream_ids:
            if sid in self._fenced_handles:
                try:
                    self._fenced_handles[sid].check_writable()
                except FerryError as exc:
                    failed[sid] = exc
            elif sid not in self.handles and sid not in self._closed_by_commit:
                failed[sid] = FerryError(ErrorCode.STREAM_NOT_OPENED, f"stream {sid} is not opened here")
        return failed

    async def trim(self, stream_id: int, new_start_offset: int) -> None:
        """Move the stream's start forward; objects wholly below are deleted from S3."""
        handle = self._writable(stream_id)
        if new_start_offset > handle.durable_end:
            raise FerryError(ErrorCode.OFFSET_OUT_OF_RANGE, f"cannot trim stream {stream_id} to "
                             f"{new_start_offset}: it ends at {handle.durable_end}")
        if new_start_offset > handle.committed_end:
            await self.force_upload(stream_id)
        try:
            removed = await self.control.trim_stream(stream_id, handle.epoch, self.broker_id, self.broker_epoch,
                                                     new_start_offset)
        except FerryError as exc:
            if exc.error == ErrorCode.STREAM_FENCED:
                handle.fence(str(exc))
            raise
        handle.trim_objects(new_start_offset)
        self.cache.trim(stream_id, new_start_offset)
        if removed:
            try:
                await self.store.delete(removed)
            except ObjectStoreError as exc:
                log.warning("trim of stream %d: could not delete %d objects: %s", stream_id, len(removed), exc)
            for key in removed:
                self.index_cache.discard(key)

    async def committed_objects(self, stream_id: int) -> list[ObjectRef]:
        """An owned stream's committed objects, oldest first (the owner learns of the objects an
        earlier owner committed lazily: they are merged from the metadata here)."""
        handle = self._writable(stream_id)
        handle.merge_objects((await self._describe(stream_id)).objects)
        return list(handle.objects)

    async def compact_stream(self, stream_id: int, policy: CompactionPolicy, now_ms: int | None = None) -> int:
        """Rewrite runs of this owned stream's small settled objects as one object each (see
        ``compaction.py``); returns how many runs were committed. A run whose commit is refused
        (fenced, trimmed or compacted meanwhile) is dropped, its new object deleted."""
        handle = self._writable(stream_id)
        handle.merge_objects((await self._describe(stream_id)).objects)
        done = 0
        for run in compaction.plan(handle.objects, compaction.now_ms() if now_ms is None else now_ms, policy):
            if handle.state != OPEN or not await self._rewrite(handle, run, None):
                break
            done += 1
        return done

    async def clean_keys(self, stream_id: int, now_ms: int, delete_retention_ms: int, target_bytes: int,
                         stable_end: int | None = None, aborted: key_compaction.Aborted = ()) -> int:
        """Key compaction of this owned stream's committed objects (``key_compaction.py``): each
        run of objects (up to ``target_bytes``) holding a record to remove is rewritten without
        it; only objects below ``stable_end`` (a partition's last stable offset) are cleaned, the
        records of ``aborted`` transactions removed. Returns how many records went."""
        handle = self._writable(stream_id)
        handle.merge_objects((await self._describe(stream_id)).objects)
        objects = [o for o in handle.objects if o.end_offset > handle.start_offset and
                   (stable_end is None or o.end_offset <= stable_end)]
        if not objects:
            return 0
        latest: dict[bytes, int] = {}
        for ref in objects:  # first pass: the latest offset of every key
            key_compaction.latest_offsets(
                key_compaction.data_records(await self._object_data(handle.stream_id, ref), aborted), latest)
        rule = key_compaction.CleanRule(latest, objects[-1].end_offset - 1, now_ms - delete_retention_ms,
                                        tuple(aborted))
        removed_total = 0
        run: list[ObjectRef] = []
        run_bytes = 0
        groups: list[list[ObjectRef]] = []
        for ref in objects:
            if run and run_bytes + compaction.stream_bytes(ref) > target_bytes:
                groups.append(run)
                run, run_bytes = [], 0
            run.append(ref)
            run_bytes += compaction.stream_bytes(ref)
        groups.append(run)
        for group in groups:
            removed: list[int] = []

            def transform(data: bytes) -> bytes | None:
                cleaned, n = key_compaction.clean(data, rule)
                removed.append(n)  # noqa: B023 - _rewrite calls it within this iteration
                return cleaned if n else None

            if handle.state != OPEN or not await self._rewrite(handle, group, transform):
                if not removed or removed[0]:
                    break
                continue  # nothing to remove in this group
            removed_total += sum(removed)
        return removed_total

    async def _object_data(self, stream_id: int, ref: ObjectRef) -> bytes:
        """The stream's whole batches in one object, ``[ref.start_offset, ref.end_offset)``."""
        data = bytearray()
        offset = ref.start_offset
        while offset < ref.end_offset:
            piece = await self.reader.read(stream_id, ref, offset, 8 * 1024 * 1024)
            nxt = next_offset_of(piece)
            if nxt is None:
                break  # what is left of the range holds no batch (removed by key compaction)
            if nxt <= offset or nxt > ref.end_offset:
                raise FerryError(ErrorCode.STREAM_INNER_ERROR, f"stream {stream_id}: {ref.object_key} does "
                                 f"not hold [{offset}, {ref.end_offset}) as recorded")
            data += piece
            offset = nxt
        return bytes(data)

    async def _rewrite(self, handle: StreamHandle, run: list[ObjectRef],
                       transform: Callable[[bytes], bytes | None] | None) -> bool:
        """Replace ``run`` by one object with its batches (``transform``ed; None = leave the run
        as it is), committed through the controller. False when nothing was committed."""
        stream_id = handle.stream_id
        # the run's objects are read a few at a time: one after another, a run of small objects
        # costs a GET round trip per object (and an index GET), which bounds how many small
        # objects a broker can compact per second
        gate = asyncio.Semaphore(COMPACTION_READ_CONCURRENCY)

        async def read(ref: ObjectRef) -> bytes:
            async with gate:
                return await self._object_data(stream_id, ref)

        data = b"".join(await asyncio.gather(*(read(ref) for ref in run)))
        if transform is not None:
            changed = transform(data)
            if changed is None:
                return False
            data = changed
        start, end = run[0].start_offset, run[-1].end_offset
        chunks = compaction.chunks_of(data, self.config.object_block_bytes, start, end) or \
            [Chunk(start, end, b"")]
        built = await asyncio.get_running_loop().run_in_executor(
            None, build_object, [(stream_id, chunks)], self.config.object_block_bytes)
        key = self.uploader.new_key()
        new = ObjectRef(key, start, end, len(built.data), handle.epoch, built.ranges[0].size_bytes)
        await self.store.put(key, built.data)
        try:
            removed = await self.control.compact_objects(stream_id, handle.epoch, self.broker_id,
                                                         self.broker_epoch, new, [r.object_key for r in run])
        except FerryError as exc:
            if not exc.retriable:  # refused for sure: nobody will ever name the new object
                await self._delete_quietly([key])
            if exc.error == ErrorCode.STREAM_FENCED:
                handle.fence(str(exc))
            log.info("rewrite of %d objects of stream %d refused: %s", len(run), stream_id, exc)
            return False
        replaced = {r.object_key for r in run}
        handle.objects = [o for o in handle.objects if o.object_key not in replaced]
        handle.add_object(new)
        self.index_cache.put(key, built.index)
        if transform is not None:  # the log cache still holds the records removed: read them from S3
            self.cache.trim(stream_id, end)
        self.compaction_runs += 1
        self.compaction_replaced_objects += len(run)
        self.compaction_bytes += len(built.data)
        if removed:  # later: a fetch that chose one of them a moment ago still reads it
            self._spawn_delete(removed, self.config.compaction_delete_delay_ms)
        return True

    def _spawn_delete(self, keys: list[str], delay_ms: int) -> None:
        async def later() -> None:
            await asyncio.sleep(delay_ms / 1000)
            await self._delete_quietly(keys)
            for key in keys:
                self.index_cache.discard(key)

        task = asyncio.ensure_future(later())
        self._deletes.add(task)
        task.add_done_callback(self._deletes.discard)

    async def _delete_quietly(self, keys: list[str]) -> None:
        try:
            await self.store.delete(keys)
        except ObjectStoreError as exc:  # unnamed objects: the garbage collector gets them later
            log.info("could not delete %d objects: %s", len(keys), exc)

    async def close_stream(self, stream_id: int) -> None:
        """Stop appends, wait for in-flight ones, force-upload, then close at the controller."""
        handle = self.handles.get(stream_id)
        if handle is None:
            return
        if handle.state == OPEN:
            handle.state = CLOSING
        await handle.idle.wait()
        try:
            if handle.state in (CLOSING, FAILED):
                await self.uploader.force_upload(handle)
            if handle.state == FENCED:
                handle.check_writable()
            await self.control.close_stream(stream_id, handle.epoch, self.broker_id, self.broker_epoch)
            handle.state = CLOSED
        except FerryError as exc:
            if exc.error == ErrorCode.STREAM_FENCED:
                handle.fence(str(exc))
            raise
        finally:
            if handle.state in (CLOSED, FENCED):
                self._forget(stream_id)

    def stream(self, stream_id: int) -> StreamHandle | None:
        return self.handles.get(stream_id)

    def stats(self) -> dict[str, float]:
        """Gauges and counters for the broker's metrics endpoint (every buffer here is bounded)."""
        up = self.uploader.stats
        return {
            "open_streams": len(self.handles),
            "pending_upload_bytes": self.uploader.pending_bytes,
            "uploading_bytes": self.uploader.uploading_bytes,
            "admitted_append_bytes": self.uploader.admitted_bytes,
            "uncommitted_bytes": self.uploader.backlog().total_bytes,  # what a close may have to upload
            "uncommitted_limit_bytes": self.uploader.buffered_limit_bytes,
            "wal_bytes": self.wal.size_bytes,
            "wal_segments": self.wal.segment_count,
            "wal_fsyncs_total": self.wal.fsyncs,
            "wal_appended_bytes_total": self.wal.appended_bytes,
            "wal_extending_syncs_total": self.wal.extending_syncs,
            "wal_preallocated_bytes_total": self.wal.preallocated_bytes,
            "wal_sync_seconds_total": self.wal.sync_seconds,
            "wal_s3_mode": 1 if self.config.wal.mode == "s3" else 0,
            "append_admit_waits_total": self.uploader.admit_waits,
            "uploaded_objects_total": up.objects,
            "uploaded_bytes_total": up.bytes,
            "upload_put_retries_total": up.put_retries,
            "upload_commit_retries_total": up.commit_retries,
            "upload_rebuilds_total": up.rebuilds,
            "log_cache_uploaded_bytes": self.cache.uploaded_bytes,
            "block_cache_hits_total": self.block_cache.hits,
            "block_cache_misses_total": self.block_cache.misses,
            "index_cache_hits_total": self.index_cache.hits,
            "index_cache_misses_total": self.index_cache.misses,
            "object_gets_total": self.reader.gets,
            "object_readahead_gets_total": self.reader.readahead_gets,
            "compaction_runs_total": self.compaction_runs,
            "compaction_replaced_objects_total": self.compaction_replaced_objects,
            "compaction_bytes_total": self.compaction_bytes,
        }


def _below(data: bytes, hw: int) -> bytes:
    end = 0
    for info in iter_batches(data):
        if info.next_offset > hw:
            break
        end = info.position + info.size_bytes
    return data[:end]


__all__ = ["StreamStorage", "OpenInfo", "FetchResult", "recoverable_tail"]

