"""The broker's request core: what serves a produce, fetch, list-offsets, delete-records or
WriteTxnMarkers request against the partitions this broker hosts.

Both front ends call this one object (HTTP in http_api.py, Kafka's protocol in kafka/, through the
``BrokerCore`` Protocols), so a request is admitted, ordered into the WAL and acknowledged by the
same rules whichever way it came. It is kept apart from server.py, which builds the broker from
its config, starts and stops it and runs its background loops: the rules here (the write lease,
the hand-off wait, the re-check after the WAL sync) read as one piece, and the assembly can change
without touching them. The partitions it serves are attached once start-up has registered the
broker (:meth:`RequestCore.attach`); until then every request is refused as ``starting``.
"""
from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Awaitable, Protocol, TypeVar

from metadata_quorum.kernel.clock import wall_ms
from broker import admission, replica_fetch_http
from broker.config import BrokerConfig
from broker.freshness import FreshnessTrackingFollower
from broker.heartbeat_thread import ThreadedHeartbeater
from broker.kafka.broker_configs import StaticConfig, broker_static_configs, default_validation_policy
from broker.local_partitions import LocalPartitions, LocalSlot
from broker.log_dirs_manager import LogDirsManager
from broker.log_dirs_report import LogDirReport, TopicFilter, alter_replica_log_dirs, log_dirs_report
from broker.metrics import BrokerMetrics
from broker.move_timeline import MoveTimeline
from broker.partition_manager import PartitionManager, Slot, serving_state
from broker.pre_upload import pre_upload
from broker.served_replica import ServedReplica
from metadata_quorum.kernel.loop_lag import LoopLagProbe
from metadata_quorum.image import MetadataImage
from metadata_quorum.kernel.controller_api import ControllerApi
from metadata_quorum.kernel.errors import ErrorCode, FerryError
from metadata_quorum.records import NO_LEADER
from stream_storage import batches
from stream_storage.record_validator import ValidationPolicy, validate_produce_records
from stream_storage.storage import StreamStorage

if TYPE_CHECKING:
    from broker.kafka.listener import KafkaListener

log = logging.getLogger("ferry.broker")
T = TypeVar("T")


@dataclass(frozen=True)
class AppendResult:
    base_offset: int
    last_offset: int
    leader_epoch: int
    log_start_offset: int
    log_append_time_ms: int


@dataclass(frozen=True)
class ReadResult:
    data: bytes
    high_watermark: int
    log_start_offset: int
    leader_epoch: int
    last_stable_offset: int = -1
    aborted_transactions: tuple[tuple[int, int], ...] = ()  # (producer id, first offset), read_committed only


class ProcessState(Protocol):
    """What the core reports of the process around it (server.py's ``Broker``) without owning it:
    its lifecycle state and advertised URL (``/v1/health``) and its Kafka listener (DescribeConfigs)."""

    @property
    def state(self) -> str: ...

    @property
    def url(self) -> str: ...

    @property
    def kafka(self) -> KafkaListener | None: ...


class RequestCore:
    def __init__(self, config: BrokerConfig, metrics: BrokerMetrics, heartbeater: ThreadedHeartbeater,
                 controller: ControllerApi, log_dirs: LogDirsManager, storages: dict[str, StreamStorage],
                 process: ProcessState) -> None:
        self.config = config
        self.broker_id = config.broker_id
        self.cluster_id = config.cluster_id
        self.metrics = metrics
        self.heartbeater = heartbeater
        self.controller = controller  # one request per call (internal topics)
        self.log_dirs = log_dirs
        self.storages = storages  # log dir -> its stream storage, filled in by start-up
        self._process = process
        self.loop_lag = LoopLagProbe()  # started with the broker (server.py)
        # what requests are served against, attached once the broker has registered (attach)
        self.manager: PartitionManager | None = None
        self.local: LocalPartitions | None = None  # storage=local replicas (Kafka's replication)
        self.follower: FreshnessTrackingFollower | None = None
        self._lease_warned_mono_s = -1e9
        self._policies: dict[str, tuple[Any, ValidationPolicy]] = {}
        # the broker's message.max.bytes is the default of every topic's max.message.bytes, as in Kafka
        self._default_policy = default_validation_policy(config)

    def attach(self, manager: PartitionManager, local: LocalPartitions, follower: FreshnessTrackingFollower) -> None:
        """Serve from these partitions and this image from now on (start-up, once registered)."""
        self.manager = manager
        self.local = local
        self.follower = follower

    @property
    def image(self) -> MetadataImage | None:
        return self.manager.image if self.manager is not None else None

    # ------------------------------------------------------------------ admission
    async def await_handoff(self, topic: str, partition: int, limit_ms: int | None = None) -> None:
        """A request for a partition changing hands here waits (bounded by
        ``produce_handoff_wait_ms``, and by ``limit_ms`` when given) for the hand-off to settle."""
        wait_ms = self.config.produce_handoff_wait_ms if limit_ms is None else \
            min(limit_ms, self.config.produce_handoff_wait_ms)
        if self.manager is not None and wait_ms > 0:
            await self.manager.await_handoff(topic, partition, lambda: self.leader_view(topic, partition),
                                             wait_ms / 1000)

    def leader_view(self, topic: str, partition: int) -> admission.LeaderView | None:
        assert self.manager is not None
        image = self.manager.image
        topic_id = image.topics.by_name.get(topic)
        reg = image.topics.partition(topic_id, partition) if topic_id is not None else None
        if reg is None:
            return None
        if reg.leader != NO_LEADER:
            return admission.LeaderView(reg.leader, reg.leader_epoch)
        next_leader, next_epoch = reg.named_leader(image.cluster.is_active)
        return admission.LeaderView(reg.leader, reg.leader_epoch, next_leader, next_epoch)

    def _validation_policy(self, topic: str) -> ValidationPolicy:
        """The topic's record-validation settings, parsed once per change of its configs."""
        configs = self.image.configs.get("topic", topic) if self.image is not None else {}
        cached = self._policies.get(topic)
        if cached is not None and cached[0] is configs:
            return cached[1]
        try:
            policy = ValidationPolicy.from_topic_configs(configs, defaults=self._default_policy)
        except FerryError:  # a config the controller accepted but the validator cannot use: the defaults
            log.warning("topic %s has configs the record validator cannot use; using the defaults", topic)
            policy = self._default_policy
        self._policies[topic] = (configs, policy)
        return policy

    def accept_object_tail(self, object_key: str, size: int, tail_start: int, tail: bytes) -> bool:
        """``POST /v1/object-tail``: a moving partition's last object, handed over by its old owner."""
        return self.manager is not None and self.manager.close_handoff.accept_object_tail(object_key, size, tail_start, tail)

    def leader_url(self, broker_id: int) -> str | None:
        if self.manager is None or broker_id == NO_LEADER:
            return None
        reg = self.manager.image.cluster.brokers.get(broker_id)
        return reg.endpoints[0] if reg is not None and reg.endpoints else None

    def serving_epoch(self, topic: str, partition: int) -> int:
        slot = self.partition_slot(topic, partition, for_write=False)
        assert slot.replica is not None
        return int(slot.replica.leader_epoch)

    async def create_internal_topic(self, name: str, partitions: int, configs: dict[str, str]) -> None:
        """Create an internal topic (``__consumer_offsets`` on first use), spread over the brokers."""
        reply = await self.controller.create_topics({"topics": [{
            "name": name, "num_partitions": partitions, "replication_factor": 1, "storage": "s3",
            "configs": configs}], "validate_only": False})
        (result,) = reply["topics"]
        if result.get("error") and result["error"] != "NONE":
            raise FerryError(ErrorCode.from_name(result["error"]), str(result.get("message", "")))

    def partition_slot(self, topic: str, partition: int, for_write: bool,
                       client_leader_epoch: int | None = None) -> Slot | LocalSlot:
        """The slot serving ``topic-partition`` here, or the Kafka error the client gets."""
        if self.manager is None:
            raise FerryError(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"broker {self.broker_id} is starting")
        view = self.leader_view(topic, partition)
        local = self.local is not None and self.local.is_local(topic)
        slot = self.local.slot_by_name(topic, partition) if local and self.local is not None \
            else self.manager.slot_by_name(topic, partition)
        if isinstance(slot, Slot) and slot.status.accepts_produce and slot.replica is not None and \
                slot.replica.streams_fenced:
            self.manager.on_fenced(slot, FerryError(ErrorCode.STREAM_FENCED, "an upload of this partition was fenced"))
        admission.check_serving(topic, partition, self.broker_id, view, serving_state(slot),
                                self.leader_url(view.named[0]) if view is not None else None)
        assert slot is not None and slot.replica is not None
        admission.check_leader_epoch(topic, partition, client_leader_epoch, slot.replica.leader_epoch)
        if for_write:
            admission.check_write_lease(self.broker_id, self.write_lease_valid())
        return slot

    def _confirm_ack(self, topic: str, slot: Slot | LocalSlot, replica: ServedReplica,
                     lease_until_mono_s: float | None = None) -> None:
        """See :func:`admission.may_acknowledge`: checked after the WAL sync, no await before the answer."""
        admission.may_acknowledge(
            topic, slot.tp.partition, self.broker_id, lease_valid=self.write_lease_valid(),
            now_mono_s=time.monotonic(), lease_until_mono_s=lease_until_mono_s, replica_fenced=replica.fenced,
            replica_leader_epoch=replica.leader_epoch, same_replica=slot.replica is replica,
            view=self.leader_view(topic, slot.tp.partition))

    def write_lease_valid(self) -> bool:
        """Writes are acknowledged only with a live heartbeat lease and a recently caught-up image."""
        now = time.monotonic()
        heartbeat_ok = self.heartbeater.lease.valid(now)
        fresh = self.follower is not None and self.follower.fresh(now, self.heartbeater.lease.session_timeout_s)
        if not (heartbeat_ok and fresh) and now - self._lease_warned_mono_s > 5.0:
            self._lease_warned_mono_s = now
            log.warning("refusing writes: heartbeat lease %s, metadata image %s", "valid" if heartbeat_ok else
                        "expired", "fresh" if fresh else "not caught up within the session timeout")
        return heartbeat_ok and fresh

    def _not_leader(self, topic: str, partition: int, leader: int, leader_epoch: int,
                    slot: Slot | LocalSlot | None) -> FerryError:
        return admission.not_leader(topic, partition, self.broker_id, admission.LeaderView(leader, leader_epoch),
                                    slot.status.state.value if slot is not None else None, self.leader_url(leader))

    # ------------------------------------------------------------------ produce, fetch, offsets
    async def append_records(self, topic: str, partition: int, body: bytearray, acks: int,
                             client_leader_epoch: int | None = None, coordinator: bool = False) -> AppendResult:
        """Validate, append and (for acks != 0) wait for the WAL sync of one partition's batch.
        ``coordinator``: a coordinator's own transactional batch (the producer's id and epoch,
        sequence -1, so no sequence check), as Kafka's AppendOrigin.COORDINATOR.

        Everything up to ``replica.append`` runs without an await, so requests handled in
        arrival order reach the WAL in that order (a pipelining idempotent producer relies on it)."""
        started = time.monotonic()
        try:
            admission.check_acks(acks)
            await self.await_handoff(topic, partition)
            slot = self.partition_slot(topic, partition, for_write=True, client_leader_epoch=client_leader_epoch)
            if len(body) > self.config.max_batch_bytes:
                raise FerryError(ErrorCode.MESSAGE_TOO_LARGE,
                                 f"record batch of {len(body)} bytes exceeds max_batch_bytes {self.config.max_batch_bytes}")
            policy = self._validation_policy(topic)
            if coordinator:
                policy = dataclasses.replace(policy, unsequenced_producer_batches=True)
            validated = validate_produce_records(body, policy, wall_ms(),
                                                 f"{topic}-{partition}")
            body, infos = validated.data, validated.infos
            replica: ServedReplica | None = slot.replica
            assert replica is not None
            if self.log_dirs.is_saturated(slot.log_dir):
                raise FerryError(ErrorCode.KAFKA_STORAGE_ERROR, f"log dir {slot.log_dir} is full (saturated)")
            lease_until_mono_s = self._lease_until_mono_s()
            append = replica.append_acked(body, infos, acks)
            if acks == 0:
                task = asyncio.ensure_future(append)
                task.add_done_callback(lambda t: t.exception() if not t.cancelled() else None)
                return AppendResult(-1, -1, replica.leader_epoch, replica.log_start_offset, -1)
            base, last = await self._acknowledged(topic, partition, slot, replica, append, lease_until_mono_s)
        except FerryError as exc:
            self.metrics.produce_errors.labels(exc.error.name).inc()
            raise
        self.metrics.observe_produce(topic, partition, len(body), last - base + 1, time.monotonic() - started)
        return AppendResult(base, last, replica.leader_epoch, replica.log_start_offset, validated.log_append_time_ms)

    async def read_records(self, topic: str, partition: int, offset: int, max_bytes: int, max_wait_ms: int,
                           client_leader_epoch: int | None = None, read_committed: bool = False) -> ReadResult:
        """Whole batches from ``offset`` (at least one, as Kafka's fetch), long-polling up to
        ``max_wait_ms`` when nothing is there yet; ``read_committed``: below the last stable offset,
        with the aborted transactions the batches returned overlap."""
        try:
            # a consumer sent here by the named owner-to-be waits for it to serve, within its long poll
            await self.await_handoff(topic, partition, max(0, max_wait_ms))
            slot = self.partition_slot(topic, partition, for_write=False, client_leader_epoch=client_leader_epoch)
            if max_bytes <= 0:
                raise FerryError(ErrorCode.INVALID_REQUEST, "max_bytes must be positive")
            wait_ms = admission.fetch_wait_ms(max_wait_ms, self.config.fetch_max_wait_ms_limit)
            replica = slot.replica
            assert replica is not None
            data = await replica.fetch(offset, max_bytes, wait_ms, read_committed)
        except FerryError as exc:
            self.metrics.fetch_errors.labels(exc.error.name).inc()
            raise
        aborted: tuple[tuple[int, int], ...] = ()
        if read_committed and data:
            upper = max(i.next_offset for i in batches.iter_batches(data))
            aborted = tuple((a.producer_id, a.first_offset) for a in replica.aborted_transactions(offset, upper))
        labels = (topic, str(partition))
        self.metrics.fetch_requests.labels(*labels).inc()
        self.metrics.fetch_bytes.labels(*labels).inc(len(data))
        if data:
            replica.counters.records_out += sum(i.offset_count for i in batches.iter_batches(data))
        return ReadResult(data, replica.high_watermark, replica.log_start_offset, replica.leader_epoch,
                          replica.last_stable_offset, aborted)

    async def write_txn_marker(self, topic: str, partition: int, producer_id: int, producer_epoch: int,
                               commit: bool, coordinator_epoch: int) -> int:
        """WriteTxnMarkers on one partition this broker leads: the marker's offset once durable
        (acknowledged under the same lease and ownership checks as a produce)."""
        await self.await_handoff(topic, partition)
        slot = self.partition_slot(topic, partition, for_write=True)
        replica: ServedReplica | None = slot.replica
        assert replica is not None
        lease_until_mono_s = self._lease_until_mono_s()
        return await self._acknowledged(topic, partition, slot, replica,
                                        replica.append_marker(producer_id, producer_epoch, commit, coordinator_epoch),
                                        lease_until_mono_s)

    def _lease_until_mono_s(self) -> float | None:
        """Until when this broker may acknowledge a write it starts now (its write lease)."""
        lease = self.heartbeater.lease
        return lease.sent_mono_s + lease.session_timeout_s if lease.sent_mono_s >= 0 else None

    async def _acknowledged(self, topic: str, partition: int, slot: Slot | LocalSlot, replica: ServedReplica,
                            write: Awaitable[T], lease_until_mono_s: float | None) -> T:
        """A produce's or a marker's write, acknowledged only if this broker still owns the
        partition under a lease that covered the write: a fenced stream or one not opened here
        is NOT_LEADER_OR_FOLLOWER to the client (which finds the new owner)."""
        try:
            result = await write
        except FerryError as exc:
            if exc.error in (ErrorCode.STREAM_FENCED, ErrorCode.STALE_BROKER_EPOCH) and isinstance(slot, Slot):
                assert self.manager is not None
                self.manager.on_fenced(slot, exc)
                raise self._not_leader(topic, partition, -1, replica.leader_epoch, slot) from exc
            if exc.error is ErrorCode.STREAM_NOT_OPENED:
                raise self._not_leader(topic, partition, -1, replica.leader_epoch, slot) from exc
            raise
        self._confirm_ack(topic, slot, replica, lease_until_mono_s)
        return result

    async def serve_replica_fetch(self, topic: str, partition: int, replica_id: int, offset: int,
                                  last_fetched_epoch: int, leader_epoch: int, max_bytes: int,
                                  max_wait_ms: int) -> replica_fetch_http.ReplicaFetchResult:
        """A follower's fetch of a storage=local partition this broker leads."""
        if self.local is None:
            raise FerryError(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"broker {self.broker_id} is starting")
        return await self.local.serve_replica_fetch(topic, partition, replica_id, offset, last_fetched_epoch,
                                                    leader_epoch, max_bytes, max_wait_ms)

    async def delete_records(self, topic: str, partition: int, offset: int) -> int:
        """Kafka's DeleteRecords on the leader: ``offset`` -1 means the high watermark. Returns the
        new low watermark (log start offset)."""
        slot = self.partition_slot(topic, partition, for_write=True)
        replica = slot.replica
        assert replica is not None
        if offset == -1:
            offset = replica.high_watermark
        async with slot.io_lock:  # not while a log-dir move swaps the partition's storage
            return int(await replica.delete_records_before(offset))

    async def offset_at(self, topic: str, partition: int, spec: str, timestamp_ms: int = -1,
                        client_leader_epoch: int | None = None) -> tuple[int, int, int]:
        """Kafka's ListOffsets: (offset, timestamp_ms, leader_epoch) for ``spec`` — ``earliest``,
        ``latest``, ``latest_stable`` (latest for read_committed: the last stable offset), ``timestamp``, ``max_timestamp`` (-3: the first record with the largest
        timestamp), ``earliest_local`` (-4: the log start, since clients see one tier) or
        ``latest_tiered`` (-5: the last offset already in S3 objects, -1 if none)."""
        slot = self.partition_slot(topic, partition, for_write=False, client_leader_epoch=client_leader_epoch)
        replica = slot.replica
        assert replica is not None
        if spec in ("earliest", "earliest_local"):
            return replica.log_start_offset, -1, replica.leader_epoch
        if spec == "latest":
            return replica.high_watermark, -1, replica.leader_epoch
        if spec == "latest_stable":  # latest with isolation_level=1 (READ_COMMITTED)
            return replica.last_stable_offset, -1, replica.leader_epoch
        if spec == "timestamp":
            offset, found_ts = await replica.offset_for_timestamp(timestamp_ms)
            return offset, found_ts, replica.leader_epoch
        if spec == "max_timestamp":
            offset, found_ts = await replica.max_timestamp_offset()
            return offset, found_ts, replica.leader_epoch if offset >= 0 else -1
        if spec == "latest_tiered":
            offset = replica.latest_tiered_offset()
            return offset, -1, replica.leader_epoch if offset >= 0 else -1
        raise FerryError(ErrorCode.INVALID_REQUEST, f"spec={spec!r}; use earliest, latest, latest_stable, timestamp, "
                                                    "max_timestamp, earliest_local or latest_tiered")

    # ------------------------------------------------------------------ log dirs
    def log_dirs_report(self, wanted: TopicFilter) -> list[LogDirReport]:
        """This broker's log dirs and the replicas in them (the HTTP and Kafka front ends' answer)."""
        slots: list[Any] = list(self.manager.slots.values()) if self.manager is not None else []
        if self.local is not None:
            slots.extend(self.local.slots.values())
        return log_dirs_report(self.log_dirs, slots, wanted, self.local)

    async def alter_replica_log_dirs(self, moves: list[tuple[str, int, str]]) -> list[FerryError | None]:
        if self.manager is None:
            return [FerryError(ErrorCode.KAFKA_STORAGE_ERROR, f"broker {self.broker_id} is starting")] * len(moves)
        return await alter_replica_log_dirs(self.log_dirs, self.manager, moves, self.local)

    async def pre_upload(self, partitions: list[tuple[str, int]]) -> list[FerryError | None]:
        """Upload the buffered bytes of partitions about to move, while they serve (broker/pre_upload.py)."""
        manager = self.manager
        if manager is None:
            return [FerryError(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"broker {self.broker_id} is starting")] * len(partitions)
        return await pre_upload(self.broker_id, partitions, manager.slot_by_name, manager.uploads_for)

    def move_timelines(self, topic: str | None, partition: int | None, limit: int) -> list[MoveTimeline]:
        """The timelines of moves of this broker's partitions it remembers (``/v1/moves``)."""
        return self.manager.moves(topic, partition, limit) if self.manager else []

    # ------------------------------------------------------------------ broker configs, health, metrics
    def static_configs(self) -> dict[str, StaticConfig]:
        """The broker configs it applies, as Kafka names them (DescribeConfigs; broker_configs.py)."""
        kafka = self._process.kafka
        listener = f"PLAINTEXT://{self.config.host}:{kafka.port}" if kafka is not None else None
        return broker_static_configs(self.config, [d.path for d in self.log_dirs.dirs], listener)

    def health_report(self) -> dict[str, Any]:
        """The broker's state, session, lease and partition counts (``/v1/health``)."""
        hb = self.heartbeater.state
        return {"broker_id": self.broker_id, "state": self._process.state, "url": self._process.url,
                "broker_epoch": hb.broker_epoch, "fenced": hb.fenced,
                "metadata_offset": self.follower.offset if self.follower is not None else -1,
                "lease_valid": self.write_lease_valid(), "last_heartbeat_error": hb.last_error,
                "partitions": self.manager.state_counts() if self.manager else {}, **self.loop_lag.report()}

    def storage_stats(self) -> dict[str, float]:
        """The stream storages' counters summed over the log dirs (the ``/metrics`` storage gauges)."""
        totals: dict[str, float] = {}
        for storage in self.storages.values():
            for name, value in storage.stats().items():
                totals[name] = totals.get(name, 0) + value
        return totals
