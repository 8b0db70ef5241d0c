"""This broker's ``storage=local`` replicas, driven by the metadata log (Kafka's ReplicaManager).

Each committed delta says, per partition, whether this broker is a replica, and who leads at
which epoch: a replica it did not host is opened from its dir (or created in the dir the
controller named, else the least-loaded one); a leader change makes it leader (Kafka's
makeLeader) or follower, which starts a fetch task from the new leader; a replica no longer
assigned here (a finished reassignment, a deleted topic) is stopped and its dir deleted. The
leaders' ISR proposals go to the controller as ``alter_partition`` (KIP-497); a background task
drops lagging followers from the ISR and writes the per-dir ``replication-offset-checkpoint``
(high watermarks) and ``recovery-point-offset-checkpoint`` (flushed offsets).
"""
from __future__ import annotations

import asyncio
import logging
import os
import shutil
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

from metadata_quorum.kernel.clock import mono_ms
from broker import local_layout as lay
from broker import partition as sm
from broker import local_dir_mover as mover
from broker import replication_throttle as thr
from broker.local_log import LocalLog
from broker.local_replica import ROLE_FOLLOWER, ROLE_LEADER, LocalReplica, ReplicaFetchResult, ReplicationSettings
from broker.log_dirs import choose_log_dir, delete_dir_name, partition_dir_name, validate_log_dir
from broker.log_dirs_manager import LogDirsManager
from broker.replica_fetch_http import ReplicaFetchClient
from broker.replica_fetcher import follow
from metadata_quorum.delta import MetadataDelta, TopicIdPartition
from metadata_quorum.kernel.controller_api import ControllerWrites
from metadata_quorum.kernel.errors import ErrorCode, FerryError
from metadata_quorum.kernel.messages.replication import AlterPartitionRequest
from metadata_quorum.image import MetadataImage, PartitionRegistration
from metadata_quorum.records import STORAGE_S3

log = logging.getLogger("ferry.broker.local_partitions")


@dataclass
class LocalSlot:
    """A storage=local partition hosted here, in the shape the broker's front ends read (as the
    s3 manager's ``LocalSlot``): SERVING while this broker leads it, CLOSED while it follows."""

    tp: TopicIdPartition
    topic: str
    status: sm.PartitionStatus = field(default_factory=sm.PartitionStatus)
    replica: LocalReplica | None = None
    log_dir: str | None = None
    io_lock: asyncio.Lock = field(default_factory=asyncio.Lock)


@dataclass
class LogDirMove:
    """A replica's KIP-113 move in progress: its future log in ``target_dir`` and the copy task."""

    target_dir: str
    future: LocalLog
    task: asyncio.Task[None] | None = None


def _int_config(configs: Any, name: str, default: int) -> int:
    try:
        return int(configs.get(name, default)) if configs else default
    except (TypeError, ValueError):
        return default


class LocalPartitions:
    def __init__(self, broker_id: int, log_dirs: LogDirsManager, controller: ControllerWrites,
                 broker_epoch: Callable[[], int],
                 fetch_client: ReplicaFetchClient, lag_max_ms: int, fetch_wait_max_ms: int,
                 checkpoint_interval_ms: int, request_timeout_ms: int) -> None:
        self.broker_id = broker_id
        self._log_dirs = log_dirs
        self._controller = controller
        self._broker_epoch = broker_epoch
        self._client = fetch_client
        self.lag_max_ms = lag_max_ms
        self.fetch_wait_max_ms = fetch_wait_max_ms
        self.checkpoint_interval_ms = checkpoint_interval_ms
        self.request_timeout_ms = request_timeout_ms
        self.image = MetadataImage()
        self.slots: dict[TopicIdPartition, LocalSlot] = {}
        self._fetchers: dict[TopicIdPartition, asyncio.Task[None]] = {}
        self._checkpoints: dict[str, tuple[dict[tuple[str, int], int], dict[tuple[str, int], int]]] = {}
        self._background: asyncio.Task[None] | None = None
        self._leader_debt = thr.Debt()
        self._follower_debt = thr.Debt()
        self._moves: dict[TopicIdPartition, LogDirMove] = {}
        self._preferred_dirs: dict[TopicIdPartition, str] = {}

    # ------------------------------------------------------------------ lookups
    def slot_by_name(self, topic: str, partition: int) -> LocalSlot | None:
        topic_id = self.image.topics.by_name.get(topic)
        return self.slots.get(TopicIdPartition(topic_id, partition)) if topic_id is not None else None

    def is_local(self, topic: str) -> bool:
        topic_id = self.image.topics.by_name.get(topic)
        t = self.image.topics.by_id.get(topic_id) if topic_id is not None else None
        return t is not None and t.storage != STORAGE_S3

    def replica(self, topic: str, partition: int) -> LocalReplica:
        slot = self.slot_by_name(topic, partition)
        if slot is None or not isinstance(slot.replica, LocalReplica):
            raise FerryError(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"broker {self.broker_id} has no replica of "
                             f"{topic}-{partition}")
        return slot.replica

    def settings_for(self, topic: str) -> ReplicationSettings:
        configs = self.image.configs.get("topic", topic)
        return ReplicationSettings(min_insync_replicas=max(1, _int_config(configs, "min.insync.replicas", 1)),
                                   replica_lag_time_max_ms=self.lag_max_ms, request_timeout_ms=self.request_timeout_ms)

    def _policy_for(self, topic: str) -> lay.RollPolicy:
        configs = self.image.configs.get("topic", topic)
        default = lay.RollPolicy()
        return lay.RollPolicy(segment_bytes=max(1024, _int_config(configs, "segment.bytes", default.segment_bytes)),
                              segment_ms=max(1, _int_config(configs, "segment.ms", default.segment_ms)),
                              index_interval_bytes=max(1, _int_config(configs, "index.interval.bytes",
                                                                      default.index_interval_bytes)))

    # ------------------------------------------------------------------ deltas
    def on_delta(self, delta: MetadataDelta, image: MetadataImage) -> None:
        self.image = image
        for tp in sorted(delta.changed_partitions()):
            reg = image.topics.partition(tp.topic_id, tp.partition)
            slot = self.slots.get(tp)
            if reg is None or reg.storage == STORAGE_S3 or self.broker_id not in reg.replicas:
                if slot is not None:
                    self._remove(slot, deleted=reg is None)
                continue
            try:
                self._apply(tp, reg, slot)
            except Exception:  # one partition's failure never stops the others
                log.exception("applying the change of %s-%d failed", tp.topic_id, tp.partition)
        if self._background is None and self.slots:
            self._background = asyncio.get_running_loop().create_task(self._maintain())

    def _apply(self, tp: TopicIdPartition, reg: PartitionRegistration, slot: LocalSlot | None) -> None:
        topic = self.image.topics.by_id.get(tp.topic_id)
        name = topic.name if topic is not None else tp.topic_id
        if slot is None:
            slot = self.slots[tp] = LocalSlot(tp, name)
            slot.replica = self._open(tp, name, reg)
            self._resume_move(slot)
        replica = slot.replica
        assert isinstance(replica, LocalReplica)
        if reg.leader == self.broker_id:
            if replica.role != ROLE_LEADER or replica.leader_epoch != reg.leader_epoch:
                self._stop_fetcher(tp)
                replica.become_leader(reg.leader_epoch, reg.partition_epoch, reg.replicas, reg.isr)
            else:
                replica.update_registration(reg.partition_epoch, reg.replicas, reg.isr)
            slot.status = sm.PartitionStatus(sm.PartitionState.SERVING, reg.leader_epoch, True, reg.leader_epoch)
            return
        slot.status = sm.PartitionStatus(sm.PartitionState.CLOSED, reg.leader_epoch, False, reg.leader_epoch)
        if replica.role != ROLE_FOLLOWER or replica.leader_epoch != reg.leader_epoch or \
                replica.leader_id != reg.leader:
            self._stop_fetcher(tp)
            replica.become_follower(reg.leader, reg.leader_epoch, reg.partition_epoch, reg.replicas, reg.isr)
            if reg.leader >= 0:
                self._fetchers[tp] = asyncio.get_running_loop().create_task(
                    follow(replica, self._client, self._leader_url, self.fetch_wait_max_ms, throttle=self))
        else:
            replica.update_registration(reg.partition_epoch, reg.replicas, reg.isr)

    def _open(self, tp: TopicIdPartition, topic: str, reg: PartitionRegistration) -> LocalReplica:
        log_dir = self._existing_dir(topic, tp.partition)
        if log_dir is None:
            requested = None
            idx = reg.replicas.index(self.broker_id)
            if idx < len(reg.directories) and reg.directories[idx]:
                requested = next((d.path for d in self._log_dirs.dirs if d.dir_id == reg.directories[idx]), None)
            requested = self._preferred_dirs.pop(tp, None) or requested
            counts: dict[str, int] = {}
            for s in self.slots.values():
                if s.log_dir:
                    counts[s.log_dir] = counts.get(s.log_dir, 0) + 1
            log_dir = choose_log_dir(self._log_dirs.infos(), counts, requested)
        _drop_stray_dir(os.path.join(log_dir, partition_dir_name(topic, tp.partition)), tp.topic_id)
        recovery, replication = self._checkpoints_of(log_dir)
        key = (topic, tp.partition)
        local_log = LocalLog(os.path.join(log_dir, partition_dir_name(topic, tp.partition)), tp.topic_id,
                             self._policy_for(topic)).open(recovery.get(key, 0))
        if local_log.recovered_bytes_truncated:
            log.warning("%s-%d: recovery cut %d bytes of a torn tail", topic, tp.partition,
                        local_log.recovered_bytes_truncated)
        slot = self.slots[tp]
        slot.log_dir = log_dir
        return LocalReplica(topic, tp.topic_id, tp.partition, self.broker_id, local_log, log_dir,
                            replication.get(key, 0), self._propose_isr, lambda: self.settings_for(topic),
                            on_disk_full=self._log_dirs.mark_full)

    def _existing_dir(self, topic: str, partition: int) -> str | None:
        for d in self._log_dirs.dirs:
            if os.path.isdir(os.path.join(d.path, partition_dir_name(topic, partition))):
                return str(d.path)
        return None

    def _checkpoints_of(self, log_dir: str) -> tuple[dict[tuple[str, int], int], dict[tuple[str, int], int]]:
        cached = self._checkpoints.get(log_dir)
        if cached is None:
            cached = (_read_checkpoint(os.path.join(log_dir, lay.RECOVERY_POINT_CHECKPOINT)),
                      _read_checkpoint(os.path.join(log_dir, lay.REPLICATION_CHECKPOINT)))
            self._checkpoints[log_dir] = cached
        return cached

    def _leader_url(self, broker_id: int) -> str | None:
        reg = self.image.cluster.brokers.get(broker_id)
        return reg.endpoints[0] if reg is not None and reg.endpoints else None

    def _stop_fetcher(self, tp: TopicIdPartition) -> None:
        task = self._fetchers.pop(tp, None)
        if task is not None:
            task.cancel()

    def _remove(self, slot: LocalSlot, deleted: bool) -> None:
        """Kafka's StopReplica with deletion: the dir is renamed ``-delete``, then removed."""
        self._stop_fetcher(slot.tp)
        self._drop_move(slot.tp)  # the future dir goes first: alone, start-up would promote it
        self.slots.pop(slot.tp, None)
        replica = slot.replica
        if isinstance(replica, LocalReplica):
            replica.stop()
            replica.log.close()
            path = replica.log.dir_path
            doomed = os.path.join(os.path.dirname(path),
                                  delete_dir_name(slot.topic, slot.tp.partition, uuid.uuid4().hex))
            try:
                os.replace(path, doomed)
                shutil.rmtree(doomed, ignore_errors=True)
            except OSError as exc:
                log.warning("deleting %s failed: %r", path, exc)
            log.info("%s-%d: replica %s and its dir deleted", slot.topic, slot.tp.partition,
                     "of a deleted topic" if deleted else "no longer assigned here")

    # ------------------------------------------------------------------ log-dir moves (KIP-113)
    async def alter_log_dir(self, topic: str, partition: int, path: str) -> None:
        """AlterReplicaLogDirs of a local replica: create its future log in ``path`` and start
        copying (the answer does not wait for the copy, as in Kafka); nothing changes on bad input."""
        target = validate_log_dir(path, self._log_dirs.infos()).path
        topic_id = self.image.topics.by_name.get(topic)
        reg = self.image.topics.partition(topic_id, partition) if topic_id is not None else None
        if topic_id is None or reg is None:
            raise FerryError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown partition {topic}-{partition}")
        tp = TopicIdPartition(topic_id, partition)
        slot = self.slots.get(tp)
        if slot is None or slot.replica is None or slot.log_dir is None:
            if self.broker_id not in reg.replicas:
                raise FerryError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                 f"broker {self.broker_id} hosts no replica of {topic}-{partition}")
            self._preferred_dirs[tp] = target  # created there when it opens
            return
        moving = self._moves.get(tp)
        if moving is not None and moving.target_dir == target:
            return
        self._drop_move(tp)
        if os.path.normpath(slot.log_dir) == target:  # noqa: ASYNC240 - normpath is string work, no I/O
            return  # back to where it is: the move in flight (if any) is cancelled
        future = LocalLog(mover.future_path(target, topic, partition), topic_id, self._policy_for(topic))
        await asyncio.to_thread(future.open, 0)
        self._start_move(slot, LogDirMove(target, future))

    def _resume_move(self, slot: LocalSlot) -> None:
        """A move found unfinished at start-up goes on from where its copy stopped."""
        path = self._log_dirs.take_future(slot.topic, slot.tp.partition)
        if path is None:
            return
        target = os.path.dirname(path)
        try:
            if slot.log_dir is None or os.path.normpath(target) == os.path.normpath(slot.log_dir):
                raise FerryError(ErrorCode.KAFKA_STORAGE_ERROR, "the future log is in the current log's dir")
            future = LocalLog(path, slot.tp.topic_id, self._policy_for(slot.topic)).open(0)
        except (FerryError, OSError) as exc:
            log.warning("%s-%d: dropping the unfinished move in %s: %s", slot.topic, slot.tp.partition, path, exc)
            shutil.rmtree(path, ignore_errors=True)
            return
        log.info("%s-%d: resuming the move to %s from offset %d", slot.topic, slot.tp.partition, target,
                 future.log_end_offset)
        self._start_move(slot, LogDirMove(target, future))

    def _start_move(self, slot: LocalSlot, move: LogDirMove) -> None:
        self._moves[slot.tp] = move

        def swapped(_old_root: str) -> None:
            self._moves.pop(slot.tp, None)

        async def run() -> None:
            try:
                await mover.move(slot, move.future, move.target_dir, lambda: self._alter_rate(), swapped)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - the move is dropped; the current log stays
                log.warning("%s-%d: the move to %s failed: %r", slot.topic, slot.tp.partition, move.target_dir, exc)
                if self._moves.get(slot.tp) is move:
                    self._drop_move(slot.tp)

        move.task = asyncio.get_running_loop().create_task(run())

    def _drop_move(self, tp: TopicIdPartition) -> None:
        move = self._moves.pop(tp, None)
        if move is None:
            return
        if move.task is not None and not move.task.done():
            move.task.cancel()
        move.future.release()
        shutil.rmtree(move.future.dir_path, ignore_errors=True)

    def _alter_rate(self) -> int | None:
        """``replica.alter.log.dirs.io.max.bytes.per.second``: the dynamic broker config (set by
        ``reassign-partitions --replica-alter-log-dirs-throttle``), else the broker's own setting."""
        rate = thr.rate_of(self.image.configs.get("broker", str(self.broker_id)), self.image.configs.get("broker", ""),
                           mover.ALTER_RATE)
        return rate if rate is not None else (self._log_dirs.alter_max_bytes_per_second or None)

    def future_replicas(self) -> list[tuple[str, int, str, int, int]]:
        """(topic, partition, target dir, future size, offsets behind) of each move in progress."""
        out = []
        for tp, move in self._moves.items():
            slot = self.slots.get(tp)
            if slot is not None and slot.replica is not None:
                out.append((slot.topic, tp.partition, move.target_dir, move.future.size_bytes,
                            max(0, slot.replica.log.log_end_offset - move.future.log_end_offset)))
        return out

    # ------------------------------------------------------------------ ISR changes (KIP-497)
    async def _propose_isr(self, replica: LocalReplica, isr: tuple[int, ...]) -> None:
        args: AlterPartitionRequest = {
            "broker_id": self.broker_id, "broker_epoch": self._broker_epoch(), "topic": replica.topic,
            "partition": replica.partition, "leader_epoch": replica.leader_epoch,
            "partition_epoch": replica.partition_epoch, "isr": list(isr)}
        try:
            reply = await self._controller.alter_partition(args)
        except FerryError as exc:
            log.info("%s-%d: AlterPartition %s refused: %s", replica.topic, replica.partition, list(isr), exc)
            return
        except Exception as exc:  # noqa: BLE001 - the next check proposes again
            log.info("%s-%d: AlterPartition %s failed: %r", replica.topic, replica.partition, list(isr), exc)
            return
        if int(reply.get("leader_epoch", -1)) == replica.leader_epoch and replica.is_leader:
            replica.update_registration(int(reply["partition_epoch"]), tuple(reply.get("replicas", replica.replicas)),
                                        tuple(int(r) for r in reply["isr"]))
        log.info("%s-%d: ISR is now %s", replica.topic, replica.partition, reply.get("isr"))

    # ------------------------------------------------------------------ follower fetch (leader side)
    async def serve_replica_fetch(self, topic: str, partition: int, replica_id: int, offset: int,
                                  last_fetched_epoch: int, leader_epoch: int, max_bytes: int,
                                  max_wait_ms: int) -> ReplicaFetchResult:
        if not self.is_local(topic):
            raise FerryError(ErrorCode.INVALID_REQUEST, f"{topic} is not a storage=local topic")
        replica = self.replica(topic, partition)
        rate = self._throttle_rate(thr.LEADER_RATE, thr.LEADER_REPLICAS, replica, replica_id)
        if rate is None:
            return await replica.serve_replica_fetch(replica_id, offset, last_fetched_epoch, leader_epoch, max_bytes,
                                                     max_wait_ms)
        wait = thr.wait_ms(self._leader_debt, rate, _now_ms())
        if wait > 0:  # KIP-73 on the leader: a throttled replica's data waits for the quota
            await asyncio.sleep(min(wait, max_wait_ms) / 1000)
        result = await replica.serve_replica_fetch(replica_id, offset, last_fetched_epoch, leader_epoch,
                                                   thr.chunk_bytes(rate, max_bytes), 0)
        self._leader_debt, _ = thr.charge(self._leader_debt, rate, len(result.data), _now_ms())
        return result

    # ------------------------------------------------------------------ KIP-73 on the follower
    def _throttle_rate(self, rate_key: str, replicas_key: str, replica: LocalReplica, throttled_id: int) -> int | None:
        """The rate that applies to ``throttled_id``'s copy of the partition, or None: throttled
        only when the replica is listed and outside the ISR (Kafka's rule)."""
        if throttled_id in replica.isr:
            return None
        listed_as = self.broker_id if rate_key == thr.LEADER_RATE else throttled_id
        if not thr.throttled(self.image.configs.get("topic", replica.topic).get(replicas_key), replica.partition,
                             listed_as):
            return None
        return thr.rate_of(self.image.configs.get("broker", str(self.broker_id)), self.image.configs.get("broker", ""),
                           rate_key)

    def fetch_bytes(self, replica: LocalReplica, max_bytes: int) -> int:
        rate = self._throttle_rate(thr.FOLLOWER_RATE, thr.FOLLOWER_REPLICAS, replica, self.broker_id)
        return max_bytes if rate is None else thr.chunk_bytes(rate, max_bytes)

    def paused(self, replica: LocalReplica) -> bool:
        return self._log_dirs.is_saturated(replica.log_dir)

    def delay_s(self, replica: LocalReplica, nbytes: int) -> float:
        rate = self._throttle_rate(thr.FOLLOWER_RATE, thr.FOLLOWER_REPLICAS, replica, self.broker_id)
        if rate is None:
            return 0.0
        self._follower_debt, delay_ms = thr.charge(self._follower_debt, rate, nbytes, _now_ms())
        return delay_ms / 1000

    # ------------------------------------------------------------------ background
    async def _maintain(self) -> None:
        """ISR shrink checks every half lag time; checkpoints every interval."""
        period_s = max(0.05, min(self.lag_max_ms / 2, self.checkpoint_interval_ms) / 1000)
        since_checkpoint_s = 0.0
        while True:
            await asyncio.sleep(period_s)
            for slot in list(self.slots.values()):
                if isinstance(slot.replica, LocalReplica) and slot.replica.is_leader:
                    slot.replica.maybe_change_isr()
            since_checkpoint_s += period_s
            if since_checkpoint_s * 1000 >= self.checkpoint_interval_ms:
                since_checkpoint_s = 0.0
                try:
                    await asyncio.to_thread(self.write_checkpoints)
                except OSError as exc:
                    log.warning("writing checkpoints failed: %r", exc)

    def write_checkpoints(self) -> None:
        """Flush each log, then record its recovery point and high watermark in its dir's files."""
        # every dir is rewritten, so one a replica left (a move, a deletion) forgets it
        per_dir: dict[str, tuple[dict[tuple[str, int], int], dict[tuple[str, int], int]]] = {
            d.path: ({}, {}) for d in self._log_dirs.dirs}
        for slot in list(self.slots.values()):
            replica = slot.replica
            if not isinstance(replica, LocalReplica) or slot.log_dir is None or replica.fenced:
                continue
            recovery, replication = per_dir.setdefault(slot.log_dir, ({}, {}))
            key = (slot.topic, slot.tp.partition)
            try:
                recovery[key] = replica.log.flush()
            except OSError:
                continue
            replication[key] = replica.high_watermark
        for log_dir, (recovery, replication) in per_dir.items():
            try:
                _write_checkpoint(os.path.join(log_dir, lay.RECOVERY_POINT_CHECKPOINT), recovery)
                _write_checkpoint(os.path.join(log_dir, lay.REPLICATION_CHECKPOINT), replication)
            except OSError as exc:  # a full dir keeps its last checkpoints (older is safe: more to scan)
                log.warning("writing the checkpoints of %s failed: %r", log_dir, exc)

    async def close(self) -> None:
        if self._background is not None:
            self._background.cancel()
        for tp in list(self._fetchers):
            self._stop_fetcher(tp)
        for move in self._moves.values():  # their future dirs stay: the next start resumes them
            if move.task is not None:
                move.task.cancel()
        try:
            await asyncio.to_thread(self.write_checkpoints)
        except OSError as exc:
            log.warning("writing checkpoints at shutdown failed: %r", exc)
        for slot in self.slots.values():
            if isinstance(slot.replica, LocalReplica):
                slot.replica.stop()
                slot.replica.log.close()


def _now_ms() -> int:
    return mono_ms()  # rates, ages and lags are durations: a wall-clock step must not move them


def _drop_stray_dir(path: str, topic_id: str) -> None:
    """A replica dir of an earlier topic of the same name (deleted while this broker was down) is
    deleted, as Kafka deletes stray logs, before the new topic's replica is created."""
    meta = os.path.join(path, lay.PARTITION_METADATA)
    try:
        with open(meta, encoding="utf-8") as f:
            found = lay.parse_partition_metadata(f.read())
    except (OSError, FerryError):
        return
    if found != topic_id:
        log.warning("%s belongs to topic id %s, not %s: deleting the stray log", path, found, topic_id)
        shutil.rmtree(path, ignore_errors=True)


def _read_checkpoint(path: str) -> dict[tuple[str, int], int]:
    try:
        with open(path, encoding="utf-8") as f:
            return lay.parse_offset_checkpoint(f.read())
    except FileNotFoundError:
        return {}
    except FerryError as exc:  # Kafka treats a corrupt checkpoint as absent: recovery scans from 0
        log.warning("%s is unreadable (%s); ignoring it", path, exc)
        return {}


def _write_checkpoint(path: str, entries: dict[tuple[str, int], int]) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(lay.render_offset_checkpoint(entries))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
