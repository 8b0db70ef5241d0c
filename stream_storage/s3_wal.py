"""The WAL in S3 (``wal.mode = s3``): appends of all of a broker's streams are batched into WAL
objects in the bucket, and an append is acknowledged only once the object holding it is stored.

This is the I/O shell around ``wal_objects.py`` (which appends go into which object, when an
append may be acknowledged, which objects may go, what a recovery reads). It offers the local
WAL's API (``wal.py``), so the uploader and ``StreamStorage`` use either one unchanged: committed
stream ranges are marked, and objects whose every range is committed are deleted by ``trim``.
:class:`PeerWalReader` reads another broker's WAL objects for a failover: no directory of that
broker is needed, only the bucket.
"""
from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Callable

from metadata_quorum.kernel.clock import wall_ms
from metadata_quorum.kernel.backoff import Backoff
from metadata_quorum.kernel.errors import ErrorCode, FerryError
from stream_storage.config import RetryPolicy, WalConfig
from stream_storage.object_store import ObjectNotFound, ObjectStore, ObjectStoreError
from stream_storage.wal import KIND_DATA, ReplayResult, WalEntry, entry_header
from stream_storage.wal_objects import (
    HEADER_BYTES, ObjectSummary, Resolved, Seal, WalBatchPlanner, WalBatchPolicy, WalObject, broker_prefix,
    deletable, encode_header, object_key, parse_key, parse_object, summarize, wal_prefix)

log = logging.getLogger(__name__)

_RELEASED = 2 ** 63 - 1
_GET_CONCURRENCY = 8


@dataclass
class _Waiting:
    header: bytes
    payload: bytes | bytearray | memoryview
    stream_id: int
    start_offset: int
    end_offset: int
    kind: int
    future: asyncio.Future[int]
    position: int = 0  # byte offset in its object, once sealed


class S3WriteAheadLog:
    """One WAL of one broker, as objects under ``<key_prefix>/broker-<id>/<wal_name>/``.
    Call :meth:`start` (returns what an earlier process of this broker left) before appending."""

    def __init__(self, store: ObjectStore, config: WalConfig, broker_id: int, wal_name: str,
                 broker_epoch: Callable[[], int], retry: RetryPolicy | None = None) -> None:
        self.store = store
        self.config = config
        self.broker_id = broker_id
        self.prefix = wal_prefix(config.key_prefix, broker_id, wal_name)
        self.directory = self.prefix  # named like the local WAL's, for messages
        self._broker_epoch = broker_epoch
        self.retry = retry or RetryPolicy()
        self._backoff = Backoff(initial_ms=float(max(1, self.retry.base_backoff_ms)),
                                max_ms=float(max(1, self.retry.max_backoff_ms)))
        self.policy = WalBatchPolicy(config.object_interval_ms, config.object_bytes, config.max_inflight_puts)
        self.planner = WalBatchPlanner(self.policy)
        self._waiting: dict[int, _Waiting] = {}
        self._sealed: dict[int, list[_Waiting]] = {}  # seq -> its entries, until resolved
        self._live: dict[str, ObjectSummary] = {}
        self._committed: dict[int, int] = {}
        self._kick = asyncio.Event()
        self._loop_task: asyncio.Task[None] | None = None
        self._puts: set[asyncio.Task[None]] = set()
        self._trim_lock = asyncio.Lock()
        self._closing = False
        self._hurry_until_ms = 0.0
        self._open = False
        self._failed: str | None = None
        # counters (the local WAL's names, so /metrics reads either): one "sync" is one PUT
        self.fsyncs = 0
        self.put_failures = 0
        self.appended_bytes = 0
        self.extending_syncs = 0
        self.preallocated_bytes = 0
        self.sync_seconds = 0.0
        self.deleted_objects = 0

    # -- life cycle --------------------------------------------------------------------------

    async def start(self) -> ReplayResult:
        """Read back this WAL's objects (a restart of the broker, on this machine or another)."""
        objects = await read_objects(self.store, self.prefix)
        entries: list[WalEntry] = []
        for obj in objects:
            entries.extend(obj.entries)
            self._live[obj.key] = summarize(obj.key, obj.seq, HEADER_BYTES + sum(
                len(e.payload) for e in obj.entries), obj.entries)
        self.planner = WalBatchPlanner(self.policy, max((o.seq for o in objects), default=0))
        self._open = True
        self._loop_task = asyncio.create_task(self._run())
        return ReplayResult(sorted(entries, key=lambda e: e.position), 0, len(objects))

    @property
    def is_open(self) -> bool:
        return self._open

    @property
    def size_bytes(self) -> int:
        return sum(s.size_bytes for s in self._live.values())

    @property
    def segment_count(self) -> int:
        return len(self._live)

    async def close(self) -> None:
        """Seal and store what waits, then stop (nothing waiting is dropped)."""
        self._closing = True
        self._kick.set()
        while self._waiting or self._sealed or self._puts:
            if self._loop_task is None or self._loop_task.done():
                break
            await asyncio.sleep(0.001)
            self._kick.set()
        self._open = False
        if self._loop_task is not None:
            self._loop_task.cancel()
            await asyncio.gather(self._loop_task, return_exceptions=True)
        for task in list(self._puts):
            task.cancel()
        await asyncio.gather(*self._puts, return_exceptions=True)
        self._fail_all("the WAL is closed")

    # -- appends -----------------------------------------------------------------------------

    async def append(self, stream_id: int, epoch: int, start_offset: int, end_offset: int,
                     payload: bytes | bytearray | memoryview, kind: int = KIND_DATA) -> int:
        """Durably append one entry; returns once the WAL object holding it is stored in S3
        (its position: ``seq << 32 | byte offset``). ``payload`` must not change until then."""
        if self._failed is not None or not self._open or self._closing:
            raise FerryError(ErrorCode.KAFKA_STORAGE_ERROR, f"WAL {self.prefix} is not writable: "
                             f"{self._failed or 'closed'}")
        header = entry_header(stream_id, epoch, start_offset, end_offset, payload, kind)
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        ticket = self.planner.add(len(header) + len(payload), time.monotonic() * 1000)
        self._waiting[ticket] = _Waiting(header, payload, stream_id, start_offset, end_offset, kind, fut)
        self._kick.set()
        return await fut

    def hurry(self) -> None:
        """For one batching window from now, seal each append at once instead of waiting for
        the window to fill: a partition closing for a move (its last appends and its meta) or a
        failover's recovered tail is on a move's critical path; ordinary produce is not."""
        self._hurry_until_ms = time.monotonic() * 1000 + self.policy.interval_ms
        self._kick.set()

    async def _run(self) -> None:
        while True:
            now_ms = time.monotonic() * 1000
            action = self.planner.next_action(now_ms, wall_ms(),
                                              flush=self._closing or now_ms < self._hurry_until_ms)
            if isinstance(action, Seal):
                self._seal(action)
                continue
            self._kick.clear()
            try:
                if action.ms is None:
                    await self._kick.wait()
                else:
                    await asyncio.wait_for(self._kick.wait(), action.ms / 1000)
            except asyncio.TimeoutError:
                pass

    def _seal(self, seal: Seal) -> None:
        entries = [self._waiting.pop(t) for t in seal.tickets]
        pieces: list[bytes | bytearray | memoryview] = [encode_header(self.broker_id, self._broker_epoch(), seal.seq)]
        offset = 0
        for w in entries:
            w.position = offset
            offset += len(w.header) + len(w.payload)
            pieces.append(w.header)
            if len(w.payload):
                pieces.append(w.payload)
        body = b"".join(pieces)
        key = object_key(self.prefix, seal.seq, uuid.uuid4().hex[:16])
        summary = summarize(key, seal.seq, len(body), (
            WalEntry(w.stream_id, 0, w.start_offset, w.end_offset, b"", 0, w.kind) for w in entries))
        self._sealed[seal.seq] = entries
        task = asyncio.create_task(self._put(seal.seq, key, body, summary))
        self._puts.add(task)
        task.add_done_callback(self._puts.discard)

    async def _put(self, seq: int, key: str, body: bytes, summary: ObjectSummary) -> None:
        started = time.perf_counter()
        stored = False
        attempt = 0
        while True:
            try:
                await self.store.put(key, body)
                stored = True
                break
            except ObjectStoreError as exc:
                if not exc.retriable or self._closing or attempt + 1 >= self.retry.max_attempts:
                    log.warning("WAL object %s not stored: %s", key, exc)
                    break
                delay_s = self._backoff.delay_s(attempt)
                attempt += 1
                log.info("WAL object %s: PUT failed (%s); again in %.0f ms", key, exc, delay_s * 1000)
                await asyncio.sleep(delay_s)
        self.sync_seconds += time.perf_counter() - started
        # a PUT whose reply was lost may have stored the object: it is tracked (and deleted) either way
        self._live[key] = summary
        if stored:
            self.fsyncs += 1
            self.appended_bytes += len(body)
            resolved = self.planner.on_stored(seq)
        else:
            self.put_failures += 1
            resolved = self.planner.on_failed(seq)
        self._resolve(resolved)
        self._kick.set()

    def _resolve(self, resolved: list[Resolved]) -> None:
        for outcome in resolved:
            for w in self._sealed.pop(outcome.seq, []):
                if w.future.done():
                    continue
                if outcome.stored:
                    w.future.set_result((outcome.seq << 32) | w.position)
                else:
                    w.future.set_exception(FerryError(ErrorCode.KAFKA_STORAGE_ERROR, f"WAL object {outcome.seq} "
                                                      f"of {self.prefix} was not stored"))

    def _fail_all(self, reason: str) -> None:
        error = FerryError(ErrorCode.KAFKA_STORAGE_ERROR, f"WAL {self.prefix}: {reason}")
        for w in list(self._waiting.values()) + [w for ws in self._sealed.values() for w in ws]:
            if not w.future.done():
                w.future.set_exception(error)
        self._waiting.clear()
        self._sealed.clear()

    # -- what is committed, and trimming -----------------------------------------------------

    def mark_committed(self, stream_id: int, end_offset: int) -> None:
        if end_offset > self._committed.get(stream_id, -1):
            self._committed[stream_id] = end_offset

    def reset_committed(self, stream_id: int, end_offset: int) -> None:
        self._committed[stream_id] = end_offset

    def committed_end(self, stream_id: int) -> int:
        return self._committed.get(stream_id, -1)

    def release_stream(self, stream_id: int) -> None:
        self._committed[stream_id] = _RELEASED

    def holds(self, stream_id: int) -> bool:
        """Whether a stored (or storing) object of this WAL has data of the stream."""
        return any(stream_id in s.data_ends for s in self._live.values()) or any(
            w.stream_id == stream_id and w.kind == KIND_DATA
            for w in list(self._waiting.values()) + [w for ws in self._sealed.values() for w in ws])

    async def trim(self) -> int:
        """Delete the WAL objects nothing needs (``wal_objects.deletable``); returns how many."""
        async with self._trim_lock:
            keys = deletable(list(self._live.values()), self.committed_end)
            if not keys:
                return 0
            try:
                await self.store.delete(keys)
            except ObjectStoreError as exc:  # kept: the next trim tries again
                log.info("WAL %s: deleting %d objects failed: %s", self.prefix, len(keys), exc)
                return 0
            for key in keys:
                self._live.pop(key, None)
            self.deleted_objects += len(keys)
            return len(keys)


async def read_objects(store: ObjectStore, prefix: str, known: dict[str, WalObject] | None = None) -> list[WalObject]:
    """Every WAL object under ``prefix``, parsed, in seq order (``known``: objects read before;
    WAL objects never change, so only new keys are read). A key deleted between the listing and
    its GET was trimmed by its live owner: everything in it was committed."""
    listed = [k for info in await store.list(prefix) if (k := parse_key(info.key)) is not None]
    known = known or {}
    gate = asyncio.Semaphore(_GET_CONCURRENCY)

    async def read(key: str) -> WalObject | None:
        if key in known:
            return known[key]
        async with gate:
            try:
                data = await store.get(key)
            except ObjectNotFound:
                return None
        return parse_object(key, data)

    try:
        objects = await asyncio.gather(*(read(k.key) for k in listed))
    except ObjectStoreError as exc:
        raise FerryError(ErrorCode.KAFKA_STORAGE_ERROR, f"reading WAL objects under {prefix}: {exc}") from exc
    return sorted((o for o in objects if o is not None), key=lambda o: o.seq)


@dataclass
class _Listing:
    started_mono: float
    objects: dict[str, WalObject] = field(default_factory=dict)


class PeerWalReader:
    """Other brokers' WAL objects, for failovers: one listing serves every partition recovered
    after it started, and objects already read are not read again.

    A listing counts for a stream only if it started after the stream was opened by the new
    owner: the controller lets a stream be opened only once its old owner was fenced, and the old
    owner acknowledges nothing after its lease (which ends before that fence), so every object
    holding an acknowledged append was stored before such a listing began.
    """

    def __init__(self, store: ObjectStore, key_prefix: str, keep_s: float = 60.0) -> None:
        self.store = store
        self.key_prefix = key_prefix
        self.keep_s = keep_s
        self._listings: dict[int, _Listing] = {}
        self._locks: dict[int, asyncio.Lock] = {}
        self.listings = 0

    async def objects(self, broker_id: int, opened_mono: float) -> list[WalObject]:
        now = time.monotonic()
        for other in [b for b, listing in self._listings.items() if now - listing.started_mono > self.keep_s]:
            self._listings.pop(other, None)  # a failover is over: keep no copies of a dead WAL
        lock = self._locks.setdefault(broker_id, asyncio.Lock())
        async with lock:
            cached = self._listings.get(broker_id)
            if cached is None or cached.started_mono < opened_mono:
                started = time.monotonic()
                objects = await read_objects(self.store, broker_prefix(self.key_prefix, broker_id),
                                             cached.objects if cached is not None else None)
                self.listings += 1
                cached = self._listings[broker_id] = _Listing(started, {o.key: o for o in objects})
            return sorted(cached.objects.values(), key=lambda o: o.seq)


