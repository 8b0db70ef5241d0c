"""Opens and closes this broker's partitions as the metadata log says (the I/O shell).

For each committed delta the manager asks ``local_changes`` which partitions this broker gained,
lost or must re-open, feeds that to the pure state machine (partition.py) and runs the actions
it returns: open (step 6), close (steps 2-4), elect (step 5). It also records each move's
timeline (move_timeline.py), publishes its half in the metadata log's KV, and logs it. What a
closing owner sends beside step 4's commit (the election behind it, the closing object's tail to
the next owner) is close_handoff.py's.
"""
from __future__ import annotations

import asyncio
import logging
import os
import random
import shutil
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Awaitable, Callable

from metadata_quorum.kernel.clock import wall_ms
from broker import admission
from broker import partition as sm
from broker.elections import ElectionQueue
from broker.handoff import HandoffWaits
from broker.log_dirs import choose_log_dir, partition_dir_name
from broker.metrics import BrokerMetrics
from broker.move_log import MoveLog, WriteManyFn
from broker.move_timeline import ROLE_SOURCE, ROLE_TARGET, MoveHalf, MoveTimeline
from broker.replica import Replica, StreamPlan
from broker.storage_factory import UploadBatcher, prefetch_streams
from broker.close_handoff import CloseHandoff, TailSender
from metadata_quorum.delta import MetadataDelta, TopicIdPartition
from metadata_quorum.kernel.controller_api import ControllerWrites
from metadata_quorum.kernel.errors import ErrorCode, FerryError
from metadata_quorum.image import MetadataImage, PartitionRegistration
from metadata_quorum.records import NO_LEADER, STORAGE_S3, STREAM_OPENED, partition_stream_key
from stream_storage.control import description_from_image
from stream_storage.storage import StreamStorage

if TYPE_CHECKING:
    from broker.local_partitions import LocalSlot
    from broker.log_dirs_manager import LogDirsManager

log = logging.getLogger("ferry.broker.partitions")

# The old owner's last meta-stream object holds the partition meta as a snapshot: the new owner
# needs that object alone (older ones only when it holds no snapshot, read on demand)
PREFETCH_OBJECTS = 1
PREFETCH_BYTES = 1024 * 1024
FENCED_ERRORS = sm.FENCED_ERRORS


def now_ms() -> int:
    return wall_ms()  # move timeline marks: wall time, compared across brokers


@dataclass(slots=True)  # one per partition this broker holds
class Slot:
    tp: TopicIdPartition
    topic: str
    status: sm.PartitionStatus = field(default_factory=sm.PartitionStatus)
    replica: Replica | None = None
    task: asyncio.Task[None] | None = None
    source: MoveHalf | None = None
    target: MoveHalf | None = None
    log_dir: str | None = None
    requested_dir: str | None = None
    # step 5 sent right behind step 4's closing commit: the partitions it elected
    election_with_close: asyncio.Task[frozenset[TopicIdPartition]] | None = None
    given_up_mono_s: float | None = None  # when this broker last stopped owning it (produce_forward.py)
    io_lock: asyncio.Lock = field(default_factory=asyncio.Lock)  # a log-dir move vs. a close


def serving_state(slot: Slot | LocalSlot | None) -> admission.ServingState | None:
    """What admission.py decides from, of a slot (either kind), or None when there is none here."""
    if slot is None:
        return None
    return admission.ServingState(
        accepts_requests=slot.status.accepts_produce and slot.replica is not None,
        state_name=slot.status.state.value, replica_closed=slot.replica is None or slot.replica.closed,
        replica_leader_epoch=slot.replica.leader_epoch if slot.replica is not None else -1)


class PartitionManager:
    def __init__(self, broker_id: int, storage: StreamStorage | dict[str, StreamStorage], controller: ControllerWrites, metrics: BrokerMetrics,
                 wal_dirs_of: Callable[[int], list[str]], log_dirs: "LogDirsManager",
                 write_many: WriteManyFn | None = None,
                 meta_checkpoint_interval_ms: int = 30000, tail_sender: TailSender | None = None) -> None:
        self.broker_id = broker_id
        # one stream storage (WAL, cache, uploader) per log dir, or one shared by all of them
        self.storages: dict[str, StreamStorage] = dict(storage) if isinstance(storage, dict) else {}
        self.storage: StreamStorage = next(iter(self.storages.values())) if isinstance(storage, dict) else storage
        self._batchers: dict[int, UploadBatcher] = {}
        self._controller = controller
        self.meta_checkpoint_interval_ms = meta_checkpoint_interval_ms
        self._checkpoint_task: asyncio.Task[None] | None = None
        self.metrics = metrics
        self._wal_dirs_of = wal_dirs_of
        self._log_dirs = log_dirs
        self.image = MetadataImage()
        self.slots: dict[TopicIdPartition, Slot] = {}
        self.move_log = MoveLog(broker_id, metrics, lambda: self.image, controller, write_many, self._spawn)
        self._tasks: set[asyncio.Task[Any]] = set()
        self.elections = ElectionQueue(controller, self._spawn, self._finish_half)
        self._incoming: dict[int, StreamStorage] = {}  # meta stream id of a partition moving here -> its storage
        self._prefetched: set[str] = set()
        self.stopping = False
        self.handoffs = HandoffWaits()  # told whenever the image or a slot's state changes
        # Partitions by state are counted when /metrics is scraped, not on every state change: a
        # count walks every slot, and a move of thousands of partitions changes thousands of states
        # (counting on each change made a 5,000-partition move quadratic and starved the broker).
        for state in sm.PartitionState:
            metrics.partitions.labels(state.value).set_function(self._counter_of(state))
        storages = list(self.storages.values()) if self.storages else [self.storage]
        self.close_handoff = CloseHandoff(broker_id, lambda: self.image, lambda: self.slots.values(), controller,
                                          self._spawn, storages, metrics, tail_sender)

    def _counter_of(self, state: sm.PartitionState) -> Callable[[], float]:
        return lambda: float(self.state_counts()[state.value])

    # ------------------------------------------------------------------ lookups
    def storage_for(self, log_dir: str | None) -> StreamStorage:
        """The stream storage whose WAL lives with ``log_dir``."""
        if log_dir is not None and log_dir in self.storages:
            return self.storages[log_dir]
        return self.storage

    def uploads_for(self, storage: StreamStorage) -> UploadBatcher:
        batcher = self._batchers.get(id(storage))
        if batcher is None:
            batcher = self._batchers[id(storage)] = UploadBatcher(storage)
        return batcher

    def slot_by_name(self, topic: str, partition: int) -> Slot | None:
        topic_id = self.image.topics.by_name.get(topic)
        if topic_id is None:
            return None
        return self.slots.get(TopicIdPartition(topic_id, partition))

    def serving(self) -> list[Slot]:
        return [s for s in self.slots.values() if s.status.accepts_produce and s.replica is not None]

    def state_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {st.value: 0 for st in sm.PartitionState}
        for s in self.slots.values():
            counts[s.status.state.value] += 1
        return counts

    def partitions_per_dir(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for s in self.slots.values():
            if s.log_dir and s.status.state is not sm.PartitionState.CLOSED:
                out[s.log_dir] = out.get(s.log_dir, 0) + 1
        return out

    def _handoff_pending(self, topic: str, partition: int, view: Callable[[], admission.LeaderView | None]) -> bool:
        slot = self.slot_by_name(topic, partition)
        if slot is not None and slot.status.accepts_produce and slot.replica is not None and not slot.replica.closed:
            return False  # the common case, decided without building the image's view
        return admission.handoff_pending(self.broker_id, view(), serving_state(slot))

    def handed_over(self, topic: str, partition: int) -> tuple[admission.ServingState, float] | None:
        """For a partition this broker gave up and does not serve: its slot's state and when it
        gave it up (``produce_routes.py``); None otherwise, decided from the slot alone."""
        slot = self.slot_by_name(topic, partition)
        if slot is None or slot.given_up_mono_s is None or (
                slot.status.accepts_produce and slot.replica is not None and not slot.replica.closed):
            return None
        state = serving_state(slot)
        assert state is not None
        return state, slot.given_up_mono_s

    async def hold(self, key: tuple[str, str, int], pending: Callable[[], bool], timeout_s: float) -> None:
        """Hold a produce the old owner forwards until ``pending()`` is false (``handoff.py``)."""
        await self.handoffs.wait(key, pending, timeout_s)

    async def await_handoff(self, topic: str, partition: int, view: Callable[[], admission.LeaderView | None],
                            timeout_s: float) -> None:
        """Hold a produce or fetch request while the partition changes hands here (``handoff.py``)."""
        await self.handoffs.wait((topic, partition), lambda: self._handoff_pending(topic, partition, view),
                                 timeout_s)

    def busy(self) -> bool:
        return any(s.status.busy or (s.task is not None and not s.task.done()) for s in self.slots.values())

    # ------------------------------------------------------------------ deltas
    def on_delta(self, delta: MetadataDelta, image: MetadataImage) -> None:
        """A committed batch of records: apply local changes (called in order, on the event loop)."""
        seen_ms = now_ms()
        changes = delta.local_changes(self.broker_id)
        self.image = image
        self.metrics.metadata_offset.set(image.offset)
        for tp, reg in changes.gained.items():
            self._target(tp, reg, lead=True, seen_ms=seen_ms, gained=True)
        for tp, reg in changes.reopen.items():
            self._target(tp, reg, lead=True, seen_ms=seen_ms, gained=False)
        for tp, old in changes.lost.items():
            new = image.topics.partition(tp.topic_id, tp.partition)
            self._target(tp, new or old, lead=False, seen_ms=seen_ms, gained=False,
                         elect=new is not None and new.leader == NO_LEADER)
        self._prefetch_incoming(delta, image)
        self.handoffs.changed()

    def _prefetch_incoming(self, delta: MetadataDelta, image: MetadataImage) -> None:
        """A partition moving here has no leader until the old owner closes its streams (step 4).
        When the old owner's last meta-stream object is committed, read it into the storage's
        caches now (no GET when the old owner handed its tail over), so that step 6 does not
        wait for S3."""
        for tp in delta.changed_partitions():
            reg = image.topics.partition(tp.topic_id, tp.partition)
            raw = image.kv.get(partition_stream_key(tp.topic_id, tp.partition, "meta"))
            if reg is None or raw is None:
                continue
            slot = self.slots.get(tp)
            arriving = reg.leader == NO_LEADER or (  # or elected in the same delta as the close (step 5 with 4)
                reg.leader == self.broker_id and slot is not None and slot.target is not None and
                not slot.status.accepts_produce)
            if arriving and self.broker_id in reg.replicas:
                planned = self._dir_path_of(reg.directories[0]) if reg.directories else None
                self._incoming[int(raw)] = self.storage_for(planned)
            else:
                self._incoming.pop(int(raw), None)
        if not self._incoming:
            return
        by_object: dict[tuple[str, int, int], set[int]] = {}
        for stream_id in delta.changed_stream_ids():
            if stream_id not in self._incoming:
                continue
            storage = self._incoming[stream_id]
            meta = image.streams.streams.get(stream_id)
            if meta is None:
                continue
            for obj in meta.objects[-PREFETCH_OBJECTS:]:
                if obj.object_key not in self._prefetched:
                    by_object.setdefault((obj.object_key, obj.size, id(storage)), set()).add(stream_id)
        if len(self._prefetched) > 4096:
            self._prefetched.clear()
        storages = {id(st): st for st in self._incoming.values()}
        for (key, size, storage_id), stream_ids in by_object.items():
            self._prefetched.add(key)
            self._spawn(self._prefetch(storages[storage_id], key, size, stream_ids))

    async def _prefetch(self, storage: StreamStorage, object_key: str, size: int, stream_ids: set[int]) -> None:
        try:
            await prefetch_streams(storage, object_key, size, stream_ids)
        except Exception as exc:  # noqa: BLE001 - an optimisation: the open reads S3 itself if needed
            log.debug("prefetch of %s failed: %r", object_key, exc)

    def _target(self, tp: TopicIdPartition, reg: PartitionRegistration, lead: bool, seen_ms: int, gained: bool,
                elect: bool = False) -> None:
        topic = self.image.topics.by_id.get(tp.topic_id)
        if reg.storage != STORAGE_S3:  # storage=local replicas are local_partitions.py's
            return
        slot = self.slots.get(tp)
        if slot is None:
            if not lead:
                return
            slot = self.slots[tp] = Slot(tp, topic.name if topic else tp.topic_id)
        if lead and gained and reg.change_started_ms > 0:  # a move, not the partition's creation
            slot.target = MoveHalf(ROLE_TARGET, slot.topic, tp.partition, reg.change_started_ms or seen_ms,
                                   self.broker_id, reg.leader_epoch)
            slot.target.mark("t5_seen", seen_ms)
            self.move_log.begin(slot.target)
        if lead and gained and reg.directories and reg.directories[0]:
            slot.requested_dir = self._dir_path_of(reg.directories[0])
        if not lead and slot.status.state in (sm.PartitionState.SERVING, sm.PartitionState.OPENING):
            slot.given_up_mono_s = time.monotonic()
            slot.source = MoveHalf(ROLE_SOURCE, slot.topic, tp.partition, reg.change_started_ms or seen_ms,
                                   self.broker_id, reg.leader_epoch)
            slot.source.mark("t1", seen_ms)
            self.move_log.begin(slot.source)
            log.info("move %s-%d: step 1 done, change seen (t0=%d, +%d ms)", slot.topic, tp.partition,
                     slot.source.move_id, seen_ms - slot.source.move_id)
        me = self.image.cluster.brokers.get(self.broker_id)
        status, actions = sm.on_target(slot.status, lead, reg.leader_epoch, elect_after_close=elect,
                                       broker_epoch=me.broker_epoch if me is not None else -1)
        slot.status = status
        self._run(slot, actions)

    def _dir_path_of(self, dir_id_or_path: str) -> str | None:
        for d in self._log_dirs.dirs:
            if d.path == dir_id_or_path or d.dir_id == dir_id_or_path:
                return str(d.path)
        return None

    # ------------------------------------------------------------------ actions
    def _run(self, slot: Slot, actions: tuple[sm.Action, ...]) -> None:
        self.handoffs.changed()  # every change of a slot's state comes through here
        for action in actions:
            if action is sm.Action.OPEN:
                self._slot_task(slot, self._open(slot))
            elif action is sm.Action.CLOSE:
                if slot.replica is not None:
                    slot.replica.closed = True  # step 2: refuse produce from this instant
                self._slot_task(slot, self._close(slot))
            elif action is sm.Action.ELECT:
                self._queue_election(slot)
            elif action is sm.Action.SET_EPOCH:
                if slot.replica is not None:
                    slot.replica.leader_epoch = slot.status.leader_epoch
            elif action is sm.Action.DROP:
                if slot.replica is not None:
                    slot.replica.abandon()
                    slot.replica.wake_fetchers()
                slot.replica = None

    def _slot_task(self, slot: Slot, coro: Any) -> None:
        """Run a slot's open or close; the slot lets go of the task once it is done (a finished
        task kept per partition was ~0.5 KiB each)."""
        task = slot.task = self._spawn(coro)

        def done(_t: asyncio.Task[Any]) -> None:
            if slot.task is task:
                slot.task = None
        task.add_done_callback(done)

    def _spawn(self, coro: Any) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _stream_plan(self, tp: TopicIdPartition, kind: str, leader_epoch: int) -> StreamPlan:
        raw = self.image.kv.get(partition_stream_key(tp.topic_id, tp.partition, kind))
        if raw is None:
            raise FerryError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                             f"partition {tp.topic_id}-{tp.partition} has no {kind} stream yet")
        stream_id = int(raw)
        meta = self.image.streams.streams.get(stream_id)
        opened = meta is not None and meta.state == STREAM_OPENED
        s_epoch = meta.epoch if meta is not None else 0
        owner = meta.owner if meta is not None else -1
        me = self.image.cluster.brokers.get(self.broker_id)
        epoch = sm.stream_open_epoch(leader_epoch, s_epoch, opened, owner, self.broker_id,
                                     meta.owner_epoch if meta is not None else -1,
                                     me.broker_epoch if me is not None else -1)
        # the committed objects as the image has them: it holds the previous owner's close (this
        # broker saw the election that followed it), so step 6 asks the controller for none of them
        described = description_from_image(self.image, stream_id)
        return StreamPlan(stream_id, epoch, owner if opened else -1, s_epoch,
                          meta.wal_owners if meta is not None else (),
                          described.objects if described is not None else ())

    async def _open(self, slot: Slot) -> None:
        tp = slot.tp
        epoch = slot.status.leader_epoch
        replica: Replica | None = None
        try:
            data_plan = self._stream_plan(tp, "data", epoch)
            meta_plan = self._stream_plan(tp, "meta", epoch)
            if slot.log_dir is None:
                infos = self._log_dirs.infos()
                # counting replicas per dir walks every slot: only when there is a choice to make
                counts = self.partitions_per_dir() if slot.requested_dir is None and len(infos) > 1 else {}
                slot.log_dir = choose_log_dir(infos, counts, slot.requested_dir)
                await asyncio.to_thread(_ensure_partition_dir, slot.log_dir, slot.topic, tp)
            replica = Replica(self.storage_for(slot.log_dir), slot.topic, tp.topic_id, tp.partition, self.broker_id,
                              self._wal_dirs_of, slot.log_dir)
            result = await replica.open(data_plan, meta_plan, epoch)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - every failure goes through the state machine
            await self._open_failed(slot, epoch, replica, exc)
            return
        slot.replica = replica
        self._incoming.pop(meta_plan.stream_id, None)  # its own commits from now on: nothing to read ahead
        if self._checkpoint_task is None and self.meta_checkpoint_interval_ms > 0:
            self._checkpoint_task = self._spawn(self._checkpoints())
        slot.status, actions = sm.on_opened(slot.status)
        served_ms = now_ms()
        if not result.clean:
            self.metrics.wal_recoveries.inc()
        log.info("opened %s-%d at leader epoch %d (stream epoch %d, end offset %d, %s%s)", slot.topic, tp.partition,
                 epoch, data_plan.epoch, result.end_offset, "clean" if result.clean else "recovered",
                 f", {result.recovered_records} records from broker {data_plan.previous_owner}'s WAL"
                 if result.recovered_records else "")
        if slot.target is not None and slot.status.state is sm.PartitionState.SERVING:
            half = slot.target
            half.clean = result.clean
            half.leader_epoch = epoch
            half.recovered_records = result.recovered_records
            half.wal_unreachable = result.wal_unreachable
            half.mark("t6", served_ms)
            slot.target = None
            self._finish_half(half)
        self._run(slot, actions)

    async def _open_failed(self, slot: Slot, epoch: int, replica: Replica | None, exc: Exception) -> None:
        """Apply the state machine's decision on a failed open (``partition.on_open_failed``)."""
        tp = slot.tp
        current = self.image.topics.partition(tp.topic_id, tp.partition)
        me = self.image.cluster.brokers.get(self.broker_id)
        context = sm.OpenContext(leads_at_epoch=current is not None and current.leader == self.broker_id and
                                 current.leader_epoch == epoch, broker_fenced=me is None or me.fenced,
                                 stopping=self.stopping)
        error = sm.StepError.of(exc)
        slot.status, decision, actions = sm.on_open_failed(slot.status, error, context, random.random())
        verdict = decision.verdict
        if verdict is sm.Verdict.RETRY and error.fenced:
            log.info("open %s-%d: %s; retrying", slot.topic, tp.partition, exc)
        elif verdict is sm.Verdict.FENCED:
            log.warning("open %s-%d fenced: %s", slot.topic, tp.partition, exc)
            self.metrics.stream_fenced.inc()
        elif decision.attempt == 1 or decision.attempt % 20 == 0 or verdict is not sm.Verdict.RETRY:
            log.warning("open %s-%d at leader epoch %d failed (attempt %d, %s): %r", slot.topic, tp.partition,
                        epoch, decision.attempt, "retrying" if verdict is sm.Verdict.RETRY else "giving up", exc)
        if verdict is sm.Verdict.RETRY:
            await asyncio.sleep(decision.after_ms / 1000)
            slot.status, actions = sm.on_open_retry_due(slot.status)
        if sm.Action.RELEASE in actions and replica is not None:
            await self._release_half_open(slot, replica)
        self._run(slot, actions)

    async def _release_half_open(self, slot: Slot, replica: Replica) -> None:
        """An open that will not be retried, or was fenced on one stream, may have opened the
        other: close what it holds so that the next owner is not kept waiting for this broker
        (STREAM_NOT_CLOSED). Best effort: a dead owner's streams are taken over anyway."""
        held = await self._release_unfenced(slot, replica)
        if held is not None:
            log.info("releasing the streams of %s-%d: %r", slot.topic, slot.tp.partition, held)

    async def _close(self, slot: Slot) -> None:
        """Steps 2-4, each done once; a failed step is retried (bounded) from where it stopped."""
        async with slot.io_lock:
            await self._close_locked(slot)

    async def _close_locked(self, slot: Slot) -> None:
        tp = slot.tp
        replica = slot.replica
        half = slot.source
        deleted = self.image.topics.partition(tp.topic_id, tp.partition) is None
        try:
            if replica is not None and deleted:
                # the topic was deleted: its streams are gone, there is nothing to persist or upload
                await replica.drain()
                replica.abandon()
                log.info("%s-%d was deleted; dropped its local state", slot.topic, tp.partition)
            elif replica is not None:
                if slot.status.close_phase is not sm.ClosePhase.UPLOAD_AND_CLOSE:
                    await replica.drain()
                    if half:
                        half.mark("t2", now_ms())
                    await replica.persist_meta(clean=True)
                    slot.status = sm.on_meta_persisted(slot.status)
                    if half:
                        half.mark("t3", now_ms())
                # both streams (and those of partitions closing alongside) in one object
                await replica.prepare_close()
                await self.uploads_for(replica.storage).upload([replica.data_stream_id], [replica.meta_stream_id],
                                                               close=True)
                await replica.close_streams()
                if half:
                    half.mark("t4", now_ms())
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - every failure goes through the state machine
            if not await self._close_failed(slot, replica, exc):
                return
        elected = await self.close_handoff.elected_with_close(slot, half)
        slot.replica = None
        if slot.log_dir is not None:  # the replica left this broker: its local dir goes too
            await asyncio.to_thread(_remove_partition_dir, slot.log_dir, slot.topic, tp)
            slot.log_dir = None
        slot.status, actions = sm.on_closed(slot.status, elected=elected)
        if deleted:
            self.slots.pop(tp, None)
        else:
            log.info("closed %s-%d (meta persisted, streams uploaded and closed)", slot.topic, tp.partition)
        if sm.Action.ELECT not in actions and half is not None:
            slot.source = None
            self._finish_half(half)
        self._run(slot, actions)

    async def _close_failed(self, slot: Slot, replica: Replica | None, exc: Exception) -> bool:
        """Apply the state machine's decision on a failed close (``partition.on_close_failed``);
        returns whether the close is over (done, or given up) and is to be finished."""
        tp = slot.tp
        closed_here = replica is not None and self._closed_here(replica)
        slot.status, decision, actions = sm.on_close_failed(slot.status, sm.StepError.of(exc), closed_here,
                                                            random.random())
        if decision.verdict is sm.Verdict.RELEASE_UNFENCED:
            held = await self._release_unfenced(slot, replica) if replica is not None else None
            if held is not None:
                exc = held
            closed_here = replica is not None and self._closed_here(replica)
            slot.status, decision, actions = sm.on_unfenced_released(
                slot.status, sm.StepError.of(held) if held is not None else None, closed_here, random.random())
        verdict = decision.verdict
        if verdict is sm.Verdict.FENCED:
            log.warning("close %s-%d fenced: %s (another broker owns it now)", slot.topic, tp.partition, exc)
            self.metrics.stream_fenced.inc()
            slot.election_with_close = None
            self._run(slot, actions)
            return False
        if verdict is sm.Verdict.CLOSED_ALREADY:
            log.info("close %s-%d: its streams are closed already (%r)", slot.topic, tp.partition, exc)
        elif verdict is sm.Verdict.RETRY:
            log.warning("close %s-%d failed (attempt %d of %d): %r; retrying", slot.topic, tp.partition,
                        decision.attempt, sm.CLOSE_ATTEMPTS, exc)
            await asyncio.sleep(decision.after_ms / 1000)
            self._slot_task(slot, self._close(slot))
            return False
        else:
            log.error("close %s-%d failed %d times (%r); leaving its streams to the next owner's recovery",
                      slot.topic, tp.partition, decision.attempt, exc)
            self.metrics.close_failures.inc()
        if replica is not None:
            replica.abandon()
        return True

    async def _release_unfenced(self, slot: Slot, replica: Replica) -> Exception | None:
        """Close (upload and release) each of the replica's streams that this broker still owns
        (after a fenced close, or an open given up). Returns the error of one that did not close
        for another reason than being fenced itself (a close is then retried), else None; the
        other stream is closed all the same."""
        first: Exception | None = None
        for sid in replica.unfenced_stream_ids():
            try:
                await replica.storage.close_stream(sid)
                log.info("%s-%d: stream %d was still ours and is closed", slot.topic, slot.tp.partition, sid)
            except asyncio.CancelledError:
                raise
            except FerryError as exc:
                if exc.error not in FENCED_ERRORS and first is None:
                    first = exc
            except Exception as exc:  # noqa: BLE001 - retried by the caller's bounded loop
                first = first or exc
        return first

    def _closed_here(self, replica: Replica) -> bool:
        """Both of the replica's streams are CLOSED in the image, last owned by this broker at the
        epoch it held them with (so no other broker has opened them since)."""
        for sid in (replica.data_stream_id, replica.meta_stream_id):
            meta = self.image.streams.streams.get(sid)
            if meta is None or meta.state == STREAM_OPENED or meta.owner != self.broker_id or \
                    meta.epoch != replica.stream_epochs.get(sid):
                return False
        return True

    def _queue_election(self, slot: Slot) -> None:
        """Step 5, batched with other closes' (``elections.py``)."""
        half, slot.source = slot.source, None
        self.elections.ask(slot.topic, slot.tp.partition, half)

    async def _checkpoints(self) -> None:
        """Every interval, each serving partition that took writes persists its meta (not clean)."""
        while not self.stopping:
            await asyncio.sleep(self.meta_checkpoint_interval_ms / 1000)
            for slot in self.serving():
                replica = slot.replica
                if replica is None:
                    continue
                try:
                    await replica.checkpoint()
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # noqa: BLE001 - the next checkpoint (or close) writes it
                    log.info("meta checkpoint of %s-%d failed: %r", slot.topic, slot.tp.partition, exc)

    async def relieve_saturated(self, log_dir: str) -> None:
        """KIP-928 in s3 mode: a full log dir takes no appends (produce answers KAFKA_STORAGE_ERROR);
        everything its WAL buffers is uploaded now so that the WAL segments can be deleted."""
        storage = self.storage_for(log_dir)
        ids = [sid for s in self.slots.values() if s.replica is not None and s.replica.storage is storage
               for sid in (s.replica.data_stream_id, s.replica.meta_stream_id)]
        if ids:
            await self.uploads_for(storage).upload(ids)
        wal = getattr(storage, "wal", None)
        if wal is not None:
            await wal.trim()
        log.info("log dir %s is full: uploaded %d streams and trimmed its WAL", log_dir, len(ids))

    # ------------------------------------------------------------------ AlterReplicaLogDirs
    async def move_replica(self, slot: Slot, target: str,
                           move_dir: Callable[[str, str, str, int], Awaitable[None]]) -> None:
        """Move a replica hosted here to log dir ``target`` (KIP-113).

        Its dir travels through ``-future``; when the target dir has its own WAL, the partition
        pauses briefly (produce answers NOT_LEADER_OR_FOLLOWER, clients retry): buffered data is
        uploaded, the streams are closed in the old dir's storage and re-opened in the target's at
        the next stream epoch, and the partition serves again from there.
        """
        async with slot.io_lock:
            source = slot.log_dir
            replica = slot.replica
            assert source is not None
            old_storage, new_storage = self.storage_for(source), self.storage_for(target)
            if old_storage is new_storage or replica is None:
                await move_dir(source, target, slot.topic, slot.tp.partition)
                slot.log_dir = target
                return
            if not slot.status.accepts_produce:
                raise FerryError(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"{slot.topic}-{slot.tp.partition} is "
                                 f"{slot.status.state.value.lower()} here; move its log dir once it serves")
            epochs = {sid: h.epoch for sid in (replica.data_stream_id, replica.meta_stream_id)
                      if (h := old_storage.stream(sid)) is not None}
            replica.closed = True  # the swap: no appends until the target serves
            try:
                await replica.drain()
                await replica.persist_meta(clean=True)
                await replica.prepare_close()
                await self.uploads_for(old_storage).upload([replica.data_stream_id], [replica.meta_stream_id])
                await replica.close_streams()
                await move_dir(source, target, slot.topic, slot.tp.partition)
                slot.log_dir = target
                moved = Replica(new_storage, slot.topic, slot.tp.topic_id, slot.tp.partition, self.broker_id,
                                self._wal_dirs_of, target)
                plans = [StreamPlan(sid, epochs.get(sid, 0) + 1, -1, epochs.get(sid, 0))
                         for sid in (replica.data_stream_id, replica.meta_stream_id)]
                await moved.open(plans[0], plans[1], replica.leader_epoch)
            except Exception as exc:
                log.error("moving %s-%d to %s failed (%r); re-opening it", slot.topic, slot.tp.partition, target,
                          exc)
                slot.replica = None
                slot.status = sm.PartitionStatus(state=sm.PartitionState.OPENING,
                                                 leader_epoch=slot.status.leader_epoch, want_lead=True,
                                                 want_epoch=slot.status.want_epoch)
                self._run(slot, (sm.Action.OPEN,))
                if isinstance(exc, FerryError):
                    raise
                raise FerryError(ErrorCode.KAFKA_STORAGE_ERROR, f"moving {slot.topic}-{slot.tp.partition} to "
                                 f"{target} failed: {exc}") from exc
            slot.replica = moved
            log.info("moved %s-%d from log dir %s to %s", slot.topic, slot.tp.partition, source, target)
            replica.wake_fetchers()

    # ------------------------------------------------------------------ fencing from produce
    def on_fenced(self, slot: Slot, exc: BaseException) -> None:
        log.warning("%s-%d: %s; stepping down", slot.topic, slot.tp.partition, exc)
        self.metrics.stream_fenced.inc()
        slot.status, actions = sm.on_fenced(slot.status)
        self._run(slot, actions)

    # ------------------------------------------------------------------ timelines
    def _finish_half(self, half: MoveHalf) -> None:
        self.move_log.finish(half)

    def timeline_for(self, half: MoveHalf) -> MoveTimeline | None:
        return self.move_log.timeline_for(half)

    def moves(self, topic: str | None = None, partition: int | None = None, limit: int = 100) -> list[MoveTimeline]:
        return self.move_log.moves(topic, partition, limit)

    # ------------------------------------------------------------------ shutdown
    async def close_all(self, timeout_s: float) -> None:
        """Close every partition still open here (clean shutdown), without asking for elections."""
        self.stopping = True
        for slot in self.slots.values():
            if slot.status.state is sm.PartitionState.SERVING:
                slot.status, actions = sm.on_target(slot.status, lead=False, leader_epoch=slot.status.leader_epoch)
                self._run(slot, actions)
        deadline = time.monotonic() + timeout_s
        # shutdown only: busy() changes on many paths, polled to a deadline
        while self.busy() and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.02)

    async def cancel_tasks(self) -> None:
        for t in list(self._tasks):
            t.cancel()
        for t in list(self._tasks):
            try:
                await t
            except (asyncio.CancelledError, Exception):  # noqa: BLE001
                pass


def _ensure_partition_dir(log_dir: str, topic: str, tp: TopicIdPartition) -> None:
    """A replica's dir in its log dir (``topic-partition``), holding its partition.metadata file."""
    path = os.path.join(log_dir, partition_dir_name(topic, tp.partition))
    os.makedirs(path, exist_ok=True)
    meta = os.path.join(path, "partition.metadata")
    if not os.path.exists(meta):
        tmp = meta + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(f"version: 0\ntopic_id: {tp.topic_id}\ntopic: {topic}\npartition: {tp.partition}\n")
        os.replace(tmp, meta)


def _remove_partition_dir(log_dir: str, topic: str, tp: TopicIdPartition) -> None:
    shutil.rmtree(os.path.join(log_dir, partition_dir_name(topic, tp.partition)), ignore_errors=True)
