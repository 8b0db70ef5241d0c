"""One partition on this broker: a data stream of Kafka v2 RecordBatches and a meta stream.

This is the I/O side of steps 3, 4 and 6 of a move: ``close`` persists the partition meta
(clean shutdown, offsets, leader-epoch checkpoint, producer state) and force-uploads and closes
both streams; ``open`` opens them with an epoch above the previous owner's, reads the meta and,
when earlier owners did not close them, replays the WAL tails of every owner the controller names
(``wal_owners``: the previous one, and any before it that died before its tail was recovered) so
that nothing they acknowledged is lost.

Partition offsets are stream offsets. Only acknowledged data (``high_watermark``) is served.
"""
from __future__ import annotations

import asyncio
import logging
import random
import time
from dataclasses import dataclass
from typing import Any, Callable

from metadata_quorum.kernel.clock import wall_ms
from broker import partition_meta as pm
from broker.txn_state import AbortedTxn, TxnState, stable_bytes
from broker.load_sampler import LoadCounters
from broker import timestamp_lookup as lookup
from broker.max_timestamp import MaxTimestampIndex
from broker.timestamp_lookup import FetchedRange
from metadata_quorum.kernel.signals import LazyEvent, Pulse
from metadata_quorum.kernel.errors import ErrorCode, FerryError
from stream_storage import batches
from stream_storage.control import ObjectRef
from stream_storage.meta_stream import MetaStream
from stream_storage.stream import FENCED as STREAM_HANDLE_FENCED
from stream_storage.storage import StreamStorage

log = logging.getLogger("ferry.broker.replica")

META_KEY = "partition"
REBUILD_SCAN_BYTES = 64 * 1024 * 1024
META_COMPACT_AFTER_RECORDS = 6  # each move adds one record (and one small object) to the meta stream
META_COMPACT_DELAY_S = (0.5, 2.0)
META_COMPACT_FORCE_RECORDS = 12


@dataclass(frozen=True)
class StreamPlan:
    """How to open one stream: its id, the epoch to open with, and whose WAL may hold its tail."""

    stream_id: int
    epoch: int
    previous_owner: int  # -1 = nobody held it open (a clean close)
    previous_epoch: int
    # earlier owners whose WALs may hold an acknowledged tail, as this broker's image has them
    # (the open's reply is what counts; this only says whether this broker's own WAL is one)
    wal_owners: tuple[tuple[int, int], ...] = ()
    # the stream's committed objects as the metadata image says (the open starts with them; the
    # meta stream is read from the last one first, see MetaStream.load)
    objects: tuple[ObjectRef, ...] = ()

    @property
    def last_object_start(self) -> int | None:
        return max((o.start_offset for o in self.objects), default=None)


@dataclass(frozen=True)
class OpenResult:
    clean: bool
    recovered_records: int
    end_offset: int
    wal_unreachable: bool = False


class Replica:
    """A partition's streams, offsets and indexes while this broker owns it."""

    # a broker holds one per partition it serves: without an instance dict each is ~1.5 KiB smaller
    __slots__ = ("_checkpointed_end", "_checkpointing", "_compacting", "_compaction", "_data_arrived",
                 "_drained", "_flush_meta_on_close", "_inflight", "_inflight_tail", "_next_offset",
                 "_observed_ahead", "_observed_through", "_pending_sequences", "_wal_dirs_of",
                 "_wal_unreachable", "broker_id", "closed", "counters", "data_stream_id", "fenced",
                 "high_watermark", "leader_epoch", "log_dir", "log_start_offset", "max_timestamps", "meta",
                 "meta_stream", "meta_stream_id", "partition", "producers", "size_bytes", "storage",
                 "stream_epoch", "stream_epochs", "time_index", "topic", "topic_id", "txns")

    def __init__(self, storage: StreamStorage, topic: str, topic_id: str, partition: int, broker_id: int,
                 wal_dirs_of: Callable[[int], list[str]], log_dir: str) -> None:
        self.storage = storage
        self.topic = topic
        self.topic_id = topic_id
        self.partition = partition
        self.broker_id = broker_id
        self._wal_dirs_of = wal_dirs_of
        self.log_dir = log_dir
        self.data_stream_id = -1
        self.meta_stream_id = -1
        self.leader_epoch = -1
        self.stream_epoch = -1
        self.stream_epochs: dict[int, int] = {}  # stream id -> the epoch this broker opened it with
        self.log_start_offset = 0
        self.high_watermark = 0
        self._next_offset = 0
        self.size_bytes = 0
        self.meta = pm.PartitionMeta()
        self.meta_stream: MetaStream | None = None
        self.producers = pm.ProducerState()
        self.txns = TxnState()
        self.time_index = pm.TimeIndex()
        self.max_timestamps = MaxTimestampIndex()
        self.counters = LoadCounters()
        self._inflight = 0
        self._drained = LazyEvent()
        self._drained.set()
        self._data_arrived = Pulse()
        self.closed = False
        self.fenced = False
        self._compaction: asyncio.Future[None] | None = None
        self._compacting = False
        self._flush_meta_on_close = False
        self._checkpointing: asyncio.Future[bool] | None = None
        self._checkpointed_end = -1
        self._wal_unreachable = False
        self._pending_sequences: dict[tuple[int, int, int], asyncio.Future[tuple[int, int]]] = {}
        # producer id -> [epoch, last sequence, appends in flight] of its latest batch on its way to
        # the WAL: the sequence check of a pipelined batch follows the batch sent just before it
        self._inflight_tail: dict[int, list[int]] = {}
        # every batch below this offset is in the producer state, time index and size (a
        # checkpoint records this end, so a rebuild after a crash re-reads what it lacks)
        self._observed_through = 0
        self._observed_ahead: dict[int, int] = {}  # base -> next offset of batches observed past a gap

    # ------------------------------------------------------------------ open (step 6)
    async def open(self, data: StreamPlan, meta: StreamPlan, leader_epoch: int) -> OpenResult:
        self.data_stream_id, self.meta_stream_id = data.stream_id, meta.stream_id
        self.leader_epoch = leader_epoch
        self.stream_epoch = data.epoch
        self.stream_epochs = {data.stream_id: data.epoch, meta.stream_id: meta.epoch}
        started = time.monotonic()
        marks: dict[str, float] = {}
        for plan in (meta, data):
            own_wal_named = any(b == self.broker_id for b, _e in plan.wal_owners)
            if plan.previous_owner != self.broker_id and not own_wal_named and \
                    self.storage.stream(plan.stream_id) is None:
                # this broker's own WAL may still hold entries of an older ownership that was fenced
                # or closed; they were never acknowledged or are in S3 already: never replay them
                self.storage.release_stream(plan.stream_id)

        async def open_meta() -> dict[str, bytes]:
            info = await self.storage.open_stream(meta.stream_id, meta.epoch, previous_owner=meta.previous_owner,
                                                  previous_epoch=meta.previous_epoch, known_objects=meta.objects)
            if info.wal_owners:
                unclean.add(meta.stream_id)
                await self._recover_from_owners(meta.stream_id, info.wal_owners)
            marks["meta_opened"] = time.monotonic()
            # compaction is ours to schedule (after serving), never on a move's critical path
            self.meta_stream = MetaStream(self.storage, meta.stream_id, snapshot_min_bytes=1 << 40)
            # the previous owner's close wrote the meta as a snapshot into its last object: one read
            return await self.meta_stream.load(latest_from=meta.last_object_start)

        async def open_data() -> int:
            info = await self.storage.open_stream(data.stream_id, data.epoch, previous_owner=data.previous_owner,
                                                  previous_epoch=data.previous_epoch, known_objects=data.objects)
            marks["data_opened"] = time.monotonic()
            if info.wal_owners:
                unclean.add(data.stream_id)
                return await self._recover_from_owners(data.stream_id, info.wal_owners)
            return 0

        unclean: set[int] = set()  # streams whose earlier owners did not close them
        # the meta stream is read while the data stream opens (and recovers): step 6 is their max
        values, recovered = await asyncio.gather(open_meta(), open_data())
        loaded = time.monotonic()
        self.meta = pm.PartitionMeta.decode(values.get(META_KEY))
        nobody_held_it = data.previous_owner < 0 and meta.previous_owner < 0 and not unclean
        handle = self.storage.writable(data.stream_id)  # just opened: STREAM_NOT_OPENED / STREAM_FENCED if not
        fresh = META_KEY not in values and int(handle.durable_end) == 0
        clean = nobody_held_it and (self.meta.clean_shutdown or fresh)
        self.log_start_offset = int(handle.start_offset)
        end = int(handle.durable_end)
        self.high_watermark = end
        self.size_bytes = self.meta.size_bytes
        self.producers = pm.ProducerState.from_json(self.meta.producers)
        self.txns = TxnState.from_json(self.meta.transactions)
        self.time_index = pm.TimeIndex(self.meta.time_index)
        self.max_timestamps = MaxTimestampIndex.from_json(self.meta.max_timestamps) \
            if self.meta.max_timestamps is not None else MaxTimestampIndex.seeded(self.meta.time_index,
                                                                                  self.meta.end_offset)
        self.max_timestamps.trim(self.log_start_offset)
        self._observed_through = end
        if not clean:
            rebuild_from = self.meta.end_offset if self.log_start_offset <= self.meta.end_offset <= end \
                else self.log_start_offset
            self._observed_through = rebuild_from
            complete = await self._rebuild_indexes(rebuild_from, end)
            self._observed_through, self._observed_ahead = end, {}
            if not complete:
                # a producer's latest batch may lie in the part not read: forget every producer, so
                # that each is accepted at any sequence (as Kafka does for one it has no state of)
                # rather than refused against a stale last sequence
                self.producers = pm.ProducerState()
                log.warning("%s-%d: producer state rebuilt from part of [%d, %d) only; idempotent producers "
                            "start afresh here, and transactions ended in the part not read may still count "
                            "as open", self.topic, self.partition, rebuild_from, end)
        self.meta.leader_epochs = pm.add_leader_epoch(self.meta.leader_epochs, leader_epoch, end)
        self.meta.end_offset = end
        self.meta.clean_shutdown = False
        meta_handle = self.storage.stream(meta.stream_id)
        if self.meta_stream is not None and meta_handle is not None and \
                meta_handle.durable_end - meta_handle.start_offset >= META_COMPACT_AFTER_RECORDS:
            self._compaction = asyncio.ensure_future(self._compact_meta())
        log.debug("%s-%d open: meta stream opened %.1f ms, data stream opened %.1f ms, meta read %.1f ms, "
                  "indexes %.1f ms", self.topic, self.partition, (marks["meta_opened"] - started) * 1e3,
                  (marks["data_opened"] - started) * 1e3, (loaded - marks["meta_opened"]) * 1e3,
                  (time.monotonic() - loaded) * 1e3)
        return OpenResult(clean=clean, recovered_records=recovered, end_offset=end,
                          wal_unreachable=self._wal_unreachable)

    async def _recover_from_owners(self, stream_id: int, owners: tuple[tuple[int, int], ...]) -> int:
        """Earlier owners did not close the stream: bring back the tail their WALs hold (nothing
        they acknowledged is lost while their WALs are reachable: their WAL dirs, one per log dir,
        or with ``wal.mode = s3`` their WAL objects, for which nothing of those brokers is
        needed). Every owner the controller names is read, not only the last one: an owner that
        died before recovering its predecessor's tail left it in the predecessor's WAL."""
        result = await self.storage.recovery.recover_from_owners(stream_id, owners, self._wal_dirs_of)
        if result.unreachable:
            self._wal_unreachable = True
            log.warning("%s-%d: no WAL of broker(s) %s is reachable; stream %d is recovered from what else "
                        "remains (what they had not uploaded is lost)", self.topic, self.partition,
                        ", ".join(map(str, result.unreachable)), stream_id)
        if result.offsets:
            log.info("%s-%d: recovered %d offsets of stream %d from the WALs of broker(s) %s", self.topic,
                     self.partition, result.offsets, stream_id, ", ".join(str(b) for b, _e in owners))
        return result.offsets

    async def _rebuild_indexes(self, start: int, end: int) -> bool:
        """After an unclean shutdown: producer state, time index and size from the unrecorded tail.
        Returns whether every batch up to ``end`` was read."""
        offset = start
        scanned = 0
        while offset < end and scanned < REBUILD_SCAN_BYTES:
            result = await self.storage.fetch(self.data_stream_id, offset, 4 * 1024 * 1024)
            if not result.data:
                break
            for info in batches.iter_batches(result.data):
                if info.next_offset <= offset:
                    continue
                # a marker ends its producer's transaction here as when it was appended
                self._observe(info, info.base_offset, info.offset_count, batches.control_marker(result.data, info))
                offset = info.next_offset
            scanned += len(result.data)
        return offset >= end

    async def _compact_meta(self) -> None:
        """Rewrite the meta stream as one snapshot and trim what precedes it, so that the next
        owner reads one small object at step 6 however many moves came before."""
        # later and spread out, so that a batch of moves is not followed by a burst of uploads
        await asyncio.sleep(random.uniform(*META_COMPACT_DELAY_S))
        if self.closed:
            return
        self._compacting = True
        try:
            assert self.meta_stream is not None
            await self.meta_stream.compact()
            await self.meta_stream.flush()  # upload the snapshot and trim the history before it now
        except Exception as exc:  # noqa: BLE001 - compaction is an optimisation; the history stays readable
            log.info("%s-%d: meta stream compaction failed: %r", self.topic, self.partition, exc)

    async def checkpoint(self) -> bool:
        """Persist the partition meta while serving (not as a clean shutdown), so that after a
        crash the next owner re-indexes at most one checkpoint interval of batches; compact the
        meta stream when its history has grown. Returns whether anything was written."""
        if self.closed or self.fenced or self.meta_stream is None or self._compacting or \
                self.high_watermark == self._checkpointed_end:
            return False
        self._checkpointing = asyncio.ensure_future(self._checkpoint())
        return await asyncio.shield(self._checkpointing)

    async def _checkpoint(self) -> bool:
        assert self.meta_stream is not None
        end = self.high_watermark
        await self.meta_stream.put(META_KEY, self.meta_snapshot(clean=False).encode())
        self._checkpointed_end = end
        handle = self.storage.stream(self.meta_stream_id)
        if handle is not None and handle.durable_end - handle.start_offset >= META_COMPACT_AFTER_RECORDS:
            await self.meta_stream.compact()
            await self.meta_stream.flush()
        return True

    def _observe(self, info: batches.BatchInfo, base_offset: int, offset_count: int,
                 marker: batches.ControlMarker | None = None) -> None:
        self.size_bytes += info.size_bytes
        self.time_index.observe(info.max_timestamp_ms, base_offset)
        self.max_timestamps.observe(info.max_timestamp_ms, base_offset, base_offset + offset_count)
        if marker is not None:
            self.txns.on_marker(info.producer_id, info.producer_epoch, marker.commit, marker.coordinator_epoch,
                                base_offset)
        elif not info.is_control:
            self.producers.record(info.producer_id, info.producer_epoch, info.base_sequence, info.records_count,
                                  base_offset, base_offset + info.last_offset_delta)
            self.txns.on_batch(info.producer_id, info.producer_epoch, info.is_transactional, base_offset)
        end = base_offset + offset_count
        if base_offset != self._observed_through:  # an append that finished before an earlier one
            self._observed_ahead[base_offset] = end
            return
        self._observed_through = end
        while self._observed_through in self._observed_ahead:
            self._observed_through = self._observed_ahead.pop(self._observed_through)

    # ------------------------------------------------------------------ produce
    async def append_acked(self, body: bytearray, infos: list[batches.BatchInfo], acks: int) -> tuple[int, int]:
        """acks=1 and acks=all ask the same here: the stream has one writer and the batch is durable
        once the WAL (a local fsync or the S3 WAL) holds it; object storage keeps the copies."""
        return await self.append(body, infos)

    async def append(self, body: bytes | bytearray, infos: list[batches.BatchInfo]) -> tuple[int, int]:
        """Append one batch (the storage stamps its offsets and our leader epoch); returns (base, last)
        once the WAL has fsynced it."""
        if self.closed or self.fenced:
            raise FerryError(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"{self.topic}-{self.partition} is closing here")
        info = infos[0]
        dup = self.producers.duplicate_of(info.producer_id, info.producer_epoch, info.base_sequence)
        if dup is not None:
            return dup
        key = (info.producer_id, info.producer_epoch, info.base_sequence)
        pending: asyncio.Future[tuple[int, int]] | None = None
        idempotent = info.producer_id >= 0 and info.base_sequence >= 0
        if idempotent:
            first = self._pending_sequences.get(key)
            if first is not None:  # a retry of a batch still in flight: answer with its offsets
                return await asyncio.shield(first)
            error = self.txns.batch_error(info.producer_id, info.producer_epoch, info.is_transactional,
                                          self._idempotent_epoch(info.producer_id), self._where)
            if error is not None:
                raise error
            self._check_sequence(info)
            pending = asyncio.get_running_loop().create_future()
            self._pending_sequences[key] = pending
        self._inflight += 1
        self._drained.clear()
        try:
            base = int(await self.storage.append(self.data_stream_id, body, self.leader_epoch, validated=infos))
        except BaseException as exc:
            if pending is not None:
                pending.set_exception(exc if isinstance(exc, Exception) else asyncio.CancelledError())
                pending.exception()  # retrieved: a retry that never came is not an error
            raise
        finally:
            self._inflight -= 1
            if self._inflight == 0:
                self._drained.set()
            if pending is not None:
                self._pending_sequences.pop(key, None)
                self._release_tail(info.producer_id)
        if pending is not None:
            pending.set_result((base, base + info.last_offset_delta))
        self._observe(info, base, sum(i.offset_count for i in infos))
        self.counters.bytes_in += len(body)
        self.counters.records_in += info.offset_count
        await self._advance()
        return base, base + info.last_offset_delta

    async def _advance(self) -> None:
        handle = self.storage.stream(self.data_stream_id)
        if handle is not None and handle.durable_end > self.high_watermark:
            self.high_watermark = int(handle.durable_end)
        self._data_arrived.notify_all()

    @property
    def _where(self) -> str:
        return f"{self.topic}-{self.partition}"

    def _idempotent_epoch(self, producer_id: int) -> int | None:
        tail = self._inflight_tail.get(producer_id)
        written = self.producers.epoch_of(producer_id)
        if tail is None:
            return written
        return tail[0] if written is None else max(tail[0], written)

    async def append_marker(self, producer_id: int, producer_epoch: int, commit: bool,
                            coordinator_epoch: int) -> int:
        """WriteTxnMarkers on this partition: append the commit or abort marker of the producer's
        transaction (a control batch) once the transaction state allows it, and end the
        transaction here (an aborted one enters the index read_committed fetches answer from).
        Returns the marker's offset once the WAL holds it."""
        if self.closed or self.fenced:
            raise FerryError(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"{self._where} is closing here")
        error = self.txns.marker_error(producer_id, producer_epoch, coordinator_epoch,
                                       self._idempotent_epoch(producer_id), self._where)
        if error is not None:
            raise error
        body = bytearray(batches.build_control_batch(producer_id, producer_epoch, commit, coordinator_epoch,
                                                     wall_ms()))
        infos = batches.validate_batches(body)
        self._inflight += 1
        self._drained.clear()
        try:
            base = int(await self.storage.append(self.data_stream_id, body, self.leader_epoch, validated=infos))
        finally:
            self._inflight -= 1
            if self._inflight == 0:
                self._drained.set()
        self._observe(infos[0], base, 1, batches.ControlMarker(commit, coordinator_epoch))
        self.counters.bytes_in += len(body)
        await self._advance()
        return base

    @property
    def last_stable_offset(self) -> int:
        """Kafka's LSO: below the first offset of every open transaction and below what the
        transaction state has observed (a batch durable before its append finished is not yet known
        to open a transaction)."""
        return self.txns.last_stable_offset(min(self.high_watermark, self._observed_through))

    def aborted_transactions(self, fetch_offset: int, upper_offset: int) -> list[AbortedTxn]:
        return self.txns.aborted_between(fetch_offset, upper_offset)

    def _check_sequence(self, info: batches.BatchInfo) -> None:
        """Refuse a batch that does not follow the producer's previous one (written or in flight);
        otherwise it becomes the producer's in-flight tail. Synchronous: appends reach the WAL in
        the order they pass here."""
        pid = info.producer_id
        tail = self._inflight_tail.get(pid)
        known = (tail[0], tail[1]) if tail is not None else self.producers.last_sequence(pid)
        error = pm.sequence_error(known, pid, info.producer_epoch, info.base_sequence, f"{self.topic}-{self.partition}")
        if error is not None:
            raise error
        last = pm.sequence_after(info.base_sequence, max(0, info.records_count - 1))
        self._inflight_tail[pid] = [info.producer_epoch, last, (tail[2] if tail is not None else 0) + 1]

    def _release_tail(self, producer_id: int) -> None:
        """An append of the producer finished: once none is in flight, the written state decides."""
        tail = self._inflight_tail.get(producer_id)
        if tail is not None:
            tail[2] -= 1
            if tail[2] <= 0:
                del self._inflight_tail[producer_id]

    # ------------------------------------------------------------------ fetch
    def _visible_end(self, read_committed: bool) -> int:
        return self.last_stable_offset if read_committed else self.high_watermark

    async def fetch(self, offset: int, max_bytes: int, max_wait_ms: int, read_committed: bool = False) -> bytes:
        """Whole batches from ``offset`` below the high watermark, or (read_committed) below the
        last stable offset."""
        if offset < self.log_start_offset or offset > self.high_watermark:
            raise FerryError(ErrorCode.OFFSET_OUT_OF_RANGE,
                             f"offset {offset} is outside [{self.log_start_offset}, {self.high_watermark}]",
                             {"log_start_offset": self.log_start_offset, "high_watermark": self.high_watermark})
        if offset >= self._visible_end(read_committed) and max_wait_ms > 0:
            try:
                await asyncio.wait_for(self._data_arrived.wait_for(
                    lambda: self._visible_end(read_committed) > offset or self.closed or self.fenced),
                    max_wait_ms / 1000)
            except asyncio.TimeoutError:
                pass
        end = self._visible_end(read_committed)
        if offset >= end or self.fenced:
            return b""
        result = await self.storage.fetch(self.data_stream_id, offset, max_bytes)
        data = bytes(result.data)
        if read_committed:
            data = data[:stable_bytes(batches.iter_batches(data), end)]
        self.counters.bytes_out += len(data)
        return data

    async def _read_range(self, offset: int, max_bytes: int) -> FetchedRange:
        return await self.storage.fetch(self.data_stream_id, offset, max_bytes)

    async def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int]:
        """Kafka's ListOffsets by timestamp: (offset, timestamp) of the first record at or after it."""
        return await lookup.offset_for_timestamp(self._read_range, self.time_index, self.log_start_offset,
                                                 self.high_watermark, timestamp_ms)

    async def max_timestamp_offset(self) -> tuple[int, int]:
        """ListOffsets -3 (KIP-734): (offset, timestamp) of the first record with the largest
        timestamp still in the log, (-1, -1) when it has none."""
        return await lookup.max_timestamp_offset(self._read_range, self.time_index, self.max_timestamps,
                                                 self.log_start_offset, self.high_watermark)

    def latest_tiered_offset(self) -> int:
        """ListOffsets -5 (KIP-1005): the last offset already in S3 objects (committed by the
        controller; what is newer is in the WAL and the broker's cache), -1 when none is."""
        handle = self.storage.stream(self.data_stream_id)
        committed = int(handle.committed_end) if handle is not None else 0
        return committed - 1 if committed > 0 else -1

    # ------------------------------------------------------------------ retention and DeleteRecords
    async def committed_objects(self) -> list[Any]:
        """The data stream's committed objects, oldest first."""
        return list(await self.storage.committed_objects(self.data_stream_id))

    def time_index_entries(self) -> list[tuple[int, int]]:
        return list(self.time_index.entries)

    async def delete_records_before(self, offset: int) -> int:
        """Kafka's DeleteRecords: move the log start offset to ``offset`` (≤ the high watermark)
        through the data stream's trim; objects wholly below it leave the metadata log and S3.
        Returns the new log start offset (the low watermark)."""
        if self.closed or self.fenced:
            raise FerryError(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"{self.topic}-{self.partition} is closing here")
        if offset < 0 or offset > self.high_watermark:
            raise FerryError(ErrorCode.OFFSET_OUT_OF_RANGE,
                             f"cannot delete records before offset {offset} of {self.topic}-{self.partition}: "
                             f"it must be within [0, {self.high_watermark}] (the high watermark)",
                             {"log_start_offset": self.log_start_offset, "high_watermark": self.high_watermark})
        if offset <= self.log_start_offset:
            return self.log_start_offset
        removed_bytes = sum(o.range_bytes or 0 for o in await self.committed_objects() if o.end_offset <= offset)
        try:
            await self.storage.trim(self.data_stream_id, offset)
        except FerryError as exc:
            if exc.error in (ErrorCode.STREAM_FENCED, ErrorCode.STREAM_NOT_OPENED):
                raise FerryError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                 f"{self.topic}-{self.partition} is no longer served here: {exc}") from exc
            raise
        self.log_start_offset = max(self.log_start_offset, offset)
        self.max_timestamps.trim(self.log_start_offset)
        self.txns.trim(self.log_start_offset)
        self.size_bytes = max(0, self.size_bytes - removed_bytes)
        return self.log_start_offset

    # ------------------------------------------------------------------ close (steps 2-4)
    async def drain(self, timeout_s: float = 10.0) -> None:
        """Step 2: no new appends (the caller already refuses them); wait for those in flight."""
        self.closed = True
        self.storage.hurry_wal()  # those in flight and the meta of step 3: no batching window
        self._data_arrived.notify_all()
        try:
            if self._compaction is not None and not self._compaction.done():
                if self._compacting:
                    await asyncio.wait_for(asyncio.shield(self._compaction), timeout_s)
                else:
                    self._compaction.cancel()  # not started yet: the next owner will compact
            if self._checkpointing is not None and not self._checkpointing.done():
                await asyncio.wait_for(asyncio.shield(self._checkpointing), timeout_s)
            await asyncio.wait_for(self._drained.wait(), timeout_s)
        except asyncio.TimeoutError:
            log.warning("%s-%d: appends still in flight after %.1fs", self.topic, self.partition, timeout_s)

    def meta_snapshot(self, clean: bool) -> pm.PartitionMeta:
        m = self.meta
        m.clean_shutdown = clean
        m.start_offset = self.log_start_offset
        # the end of what the producer state, time index and size describe (an append still
        # finishing may be durable already): a rebuild after a crash starts here
        m.end_offset = min(self.high_watermark, self._observed_through)
        m.size_bytes = self.size_bytes
        m.producers = self.producers.to_json()
        m.transactions = None if self.txns == TxnState() else self.txns.to_json()
        m.time_index = list(self.time_index.entries)
        m.max_timestamps = self.max_timestamps.to_json()
        m.data_stream_id = self.data_stream_id
        m.meta_stream_id = self.meta_stream_id
        m.closed_by_broker = self.broker_id
        m.stream_epoch = self.stream_epoch
        return m

    async def persist_meta(self, clean: bool) -> None:
        """Step 3: the partition meta, as a snapshot of the meta stream: the next owner reads it
        from the last object the close uploads and nothing before it (step 6: one GET)."""
        assert self.meta_stream is not None, "persist_meta before open"
        self.meta_stream.state.values[META_KEY] = self.meta_snapshot(clean).encode()
        # a clean close is step 3 of a move: the snapshot does not wait behind other partitions'
        # upload backlog (the close uploads it in its own object right after)
        await self.meta_stream.compact(urgent=clean)
        handle = self.storage.stream(self.meta_stream_id)
        if handle is not None and handle.durable_end - handle.start_offset > META_COMPACT_FORCE_RECORDS:
            # moves came too fast for the background compaction: trim the history before this
            # snapshot when the streams close (one extra controller write)
            self._flush_meta_on_close = True

    async def prepare_close(self) -> None:
        """Before the streams' final upload: a meta snapshot written at step 3 trims the history
        before it now (one upload and one controller write, only when moves came too fast)."""
        if self._flush_meta_on_close and self.meta_stream is not None:
            await self.meta_stream.flush()
            self._flush_meta_on_close = False

    async def close_streams(self) -> None:
        """Step 4: force-upload everything buffered, then close both streams at the controller."""
        ids = [sid for sid in (self.data_stream_id, self.meta_stream_id) if sid >= 0]
        await asyncio.gather(*(self.storage.close_stream(sid) for sid in ids))

    @property
    def streams_fenced(self) -> bool:
        """The storage learned (e.g. from a refused upload commit) that another broker owns a stream."""
        for sid in (self.data_stream_id, self.meta_stream_id):
            handle = self.storage.stream(sid)
            if handle is not None and handle.state == STREAM_HANDLE_FENCED:
                return True
        return False

    def unfenced_stream_ids(self) -> list[int]:
        """The streams this broker still holds open: not fenced, not closed (their handles remain)."""
        out = []
        for sid in (self.data_stream_id, self.meta_stream_id):
            handle = self.storage.stream(sid) if sid >= 0 else None
            if handle is not None and handle.state != STREAM_HANDLE_FENCED:
                out.append(sid)
        return out

    def abandon(self) -> None:
        """Fenced: forget the partition without touching its streams again."""
        self.fenced = True
        self.closed = True
        for sid in (self.data_stream_id, self.meta_stream_id):
            self.storage.fence(sid, "another broker owns the partition now")

    def wake_fetchers(self) -> None:
        """Wake every fetch waiting for data (the partition left this broker): each looks again."""
        self._data_arrived.notify_all()
