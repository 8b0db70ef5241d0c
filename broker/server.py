"""The broker process: `ferry broker --id N --config FILE`, its lifecycle and the core both front
ends call (HTTP in http_api.py, API in docs/broker-api.md; Kafka's protocol in kafka/).

Start-up: bind the HTTP port, open the stream storage (its WAL dir), register with the
controllers, follow the committed metadata log (each delta opens/closes partitions through the
PartitionManager), heartbeat. SIGTERM is a controlled shutdown: the heartbeat asks to shut down,
the controller moves the partitions away (each is closed cleanly here, steps 2-5), and the
process exits once the controller says it may (or every partition is closed).
"""
from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
import signal
import sys
import time
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from broker import admission
from broker.config import BrokerConfig, load_config, wal_dir_of, wal_dirs_of
from broker.heartbeat_thread import HeartbeatClient, ThreadedHeartbeater
from broker.load_sampler import LoadSampler, PartitionLoad
from broker.local_partitions import LocalPartitions, LocalSlot
from broker.log_dirs_manager import LogDirsManager
from broker import replica_fetch_http, tail_handoff_http
from broker.http_api import BrokerHttpApi
from broker.log_dirs_report import LogDirReport, TopicFilter, alter_replica_log_dirs, log_dirs_report
from broker.metrics import BrokerMetrics
from broker.move_timeline import MoveTimeline
from broker.partition_manager import PartitionManager, Slot
from broker.compaction import compaction_loop
from broker.retention import retention_loop
from broker.served_replica import ServedReplica
from broker.stream_directory import image_directory
from stream_storage.compaction import CompactionPolicy
from stream_storage.gc import GarbageCollector, gc_loop
from stream_storage.object_store import ObjectStore
from stream_storage.storage import StreamStorage
from stream_storage.wal_gc import DeadWalCollector
from broker.peer_liveness import PeerDeathWatcher, ProcessLock
from broker.storage_factory import close_storage, open_object_store, open_storage, wal_dirs_for
from broker.freshness import FreshnessTrackingFollower
from broker.kafka.broker_configs import (StaticConfig, authorizer_settings, broker_static_configs, default_validation_policy,
                                         topic_defaults)
from broker.kafka.forwarding import QuorumForwarder
from broker.kafka.handlers import kafka_handlers
from broker.kafka.listener import KafkaListener
from broker.kafka.data_apis import kafka_endpoints
from broker.kafka.produce_forwarder import ForwardTarget, ProduceForwarder
from broker.kafka.produce_forwarding import ProduceForwarding
from broker.produce_routes import ProduceRoutes
from broker.producer_ids import ProducerIdManager
from broker.kafka.sasl import ScramStore, Users
from metadata_quorum.image import MetadataImage
from metadata_quorum.client import ControllerClient
from metadata_quorum.write_batcher import WriteBatcher
from metadata_quorum.kernel.controller_api import ControllerApi, ControllerWrites
from metadata_quorum.kernel.messages.cluster import BrokerAddresses
from metadata_quorum.kernel.errors import ErrorCode, FerryError
from metadata_quorum.records import NO_LEADER
from stream_storage import batches
from stream_storage.record_validator import ValidationPolicy, validate_produce_records

log = logging.getLogger("ferry.broker")


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


class Broker:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.broker_id = config.broker_id
        self.metrics = BrokerMetrics(config.broker_id)
        self.state = "STARTING"
        internal_token = config.security.internal_token if config.security is not None else None
        self.client = ControllerClient(list(config.controllers), timeout_ms=config.controller_timeout_ms,
                                       token=internal_token)
        # Stream operations and elections of many partitions go out together (write_batcher.py).
        self.batcher = WriteBatcher(self.client.write_many, timeout_ms=config.controller_timeout_ms)
        self.controller = ControllerApi(self.client)  # one request per call
        self.batched = ControllerWrites(self.batcher)  # calls of many partitions go out together
        # The metadata log gets a connection of its own: queued behind thousands of stream
        # operations of a large move, the image went stale and writes were refused.
        self.session_client = ControllerClient(
            list(config.controllers), timeout_ms=max(config.heartbeat_interval_ms, config.session_timeout_ms // 3),
            attempt_timeout_ms=max(config.heartbeat_interval_ms, config.session_timeout_ms // 3),
            token=internal_token)
        self.log_dirs = LogDirsManager(list(config.log_dirs), config.log_dir_reserved_bytes,
                                       config.alter_log_dirs_max_bytes_per_second)
        self.storage: StreamStorage | None = None  # the first log dir's (set in start)
        self.storages: dict[str, StreamStorage] = {}  # log dir -> its stream storage (WAL, cache, uploader)
        self.object_store: ObjectStore | None = None
        self.manager: PartitionManager | None = None
        self.local: LocalPartitions | None = None  # storage=local replicas (Kafka's replication)
        self.fetch_client = replica_fetch_http.HttpReplicaFetchClient(internal_token, config.controller_timeout_ms)
        self.tail_client = tail_handoff_http.TailHandoffClient(internal_token)  # a move's step 4 -> step 6
        self.follower: FreshnessTrackingFollower | None = None
        # Heartbeats go out from a thread of their own (heartbeat_thread.py), so a loop busy with
        # thousands of partition opens never makes them late.
        self.heartbeater = ThreadedHeartbeater(self._heartbeat_client, config.broker_id, config.heartbeat_interval_ms,
                                               config.session_timeout_ms, self._registration, self._metadata_offset,
                                               self.log_dirs.heartbeat_dirs,
                                               on_failure=self.metrics.heartbeat_failures.inc)
        self.sampler = LoadSampler(config.broker_id, config.metrics_interval_ms)
        self._runner: web.AppRunner | None = None
        self._background: list[asyncio.Task[Any]] = []
        self.process_lock: ProcessLock | None = None
        self.stopped = asyncio.Event()
        self._lease_warned_mono_s = -1e9
        self.url = config.advertised_url
        self.cluster_id = config.cluster_id
        self.kafka: KafkaListener | None = None
        self.produce_forwarder = ProduceForwarder(config.broker_id)  # produce_forward.py
        self._policies: dict[str, tuple[Any, ValidationPolicy]] = {}
        # the broker's message.max.bytes is the default of every topic's max.message.bytes, as in Kafka
        self._default_policy = default_validation_policy(config)

    @property
    def image(self) -> MetadataImage | None:
        return self.manager.image if self.manager is not None else None

    # ------------------------------------------------------------------ controller calls
    def _heartbeat_client(self) -> HeartbeatClient:
        """The heartbeat thread's own controller connection. Heartbeats are pipelined, so a slow
        answer delays no other beat: one is waited for up to a session (later, it could not renew
        the lease), each attempt up to a third of one (a paused or cut-off controller is left for
        the next in time for the new leader to hear the broker within its session)."""
        config = self.config
        attempt_ms = max(config.heartbeat_interval_ms, config.session_timeout_ms // 3)
        client = ControllerClient(list(config.controllers), timeout_ms=config.session_timeout_ms,
                                  attempt_timeout_ms=attempt_ms,
                                  token=config.security.internal_token if config.security is not None else None)
        return HeartbeatClient(client.write, client.close)

    def _registration(self) -> BrokerAddresses:
        endpoints = [self.url] + ([f"kafka://{self.config.host}:{self.kafka.port}"] if self.kafka is not None else [])
        return {"endpoints": endpoints, "rack": self.config.rack,
                "log_dirs": [{"dir_id": d.dir_id, "path": d.path} for d in self.log_dirs.dirs]}

    async def _wait_for_metadata(self, offset: int, timeout_s: float) -> None:
        """Until this broker's image holds ``offset`` (a write it forwarded), or the time is up."""
        if self.follower is not None:
            await self.follower.wait_for_offset(offset, timeout_s)

    def static_configs(self) -> dict[str, StaticConfig]:
        """The broker configs it applies, as Kafka names them (DescribeConfigs; broker_configs.py)."""
        listener = f"PLAINTEXT://{self.config.host}:{self.kafka.port}" if self.kafka is not None else None
        return broker_static_configs(self.config, [d.path for d in self.log_dirs.dirs], listener)

    def _metadata_offset(self) -> int:
        return self.follower.offset if self.follower is not None else -1

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        # held before registering, until the process ends: peers sharing the WAL root take a free
        # lock as proof that this broker's process is gone (peer_liveness.py)
        self.process_lock = await asyncio.to_thread(ProcessLock.acquire, self.config.effective_wal_dir)
        await asyncio.to_thread(self.log_dirs.prepare)
        self._runner = web.AppRunner(BrokerHttpApi(self).app(), access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.config.host, self.config.port)
        await site.start()
        if self.config.port == 0:
            port = self._runner.addresses[0][1]
            self.url = f"http://{self.config.host}:{port}"
        log.info("broker %d listening on %s", self.broker_id, self.url)
        if self.config.kafka_port is not None:
            forwarder = QuorumForwarder(self.client, self._wait_for_metadata)
            producer_ids = ProducerIdManager(self.controller.allocate_producer_ids, self.broker_id,
                                             lambda: self.heartbeater.state.broker_epoch)
            handlers = kafka_handlers(self, forwarder, producer_ids, topic_defaults(self.config), quorum=self.client,
                                      authorizer=authorizer_settings(self.config),
                                      forwarding=self._produce_forwarding())
            self.kafka = KafkaListener(handlers, self.config.host, self.config.kafka_port,
                                       self.config.kafka_max_request_bytes, observe=self.metrics.observe_kafka,
                                       sasl_users=ScramStore(Users.load(self.config.sasl_users_file),
                                                             lambda: self.image)
                                       if self.config.sasl_users_file else None)
            await self.kafka.start(serve=False)  # served once the image holds this registration (_on_metadata)
            log.info("broker %d Kafka listener on %s:%d", self.broker_id, self.config.host, self.kafka.port)
        epoch = await self.heartbeater.register()
        self.object_store = open_object_store(self.config, observer=self.metrics.observe_s3)
        wal_dirs = wal_dirs_for(self.config, {d.path: d.dir_id for d in self.log_dirs.dirs})
        for path, wal_dir in wal_dirs.items():
            await asyncio.to_thread(os.makedirs, wal_dir, exist_ok=True)
            self.storages[path] = await open_storage(self.config, self.object_store, self.client, self.broker_id,
                                                     lambda: self.heartbeater.state.broker_epoch, wal_dir,
                                                     writes=self.batcher)
        self.storage = next(iter(self.storages.values()))
        self.heartbeater.on_registered = self._set_broker_epoch
        self.manager = PartitionManager(self.broker_id, dict(self.storages), self.batched, self.metrics,
                                        lambda b: wal_dirs_of(self.config.effective_wal_root, b),
                                        self.log_dirs, self.client.write_many,
                                        self.config.meta_checkpoint_interval_ms, self.tail_client)
        self.local = LocalPartitions(self.broker_id, self.log_dirs, self.controller,
                                     lambda: self.heartbeater.state.broker_epoch, self.fetch_client,
                                     self.config.replica_lag_time_max_ms, self.config.replica_fetch_wait_max_ms,
                                     self.config.replica_high_watermark_checkpoint_interval_ms,
                                     self.config.produce_request_timeout_ms)
        # a long-poll must end well within the session timeout, or an idle image never counts as fresh
        poll_wait_ms = min(self.config.metadata_poll_wait_ms, self.config.session_timeout_ms // 4)
        self.follower = FreshnessTrackingFollower(self.session_client, self._on_metadata, max_wait_ms=poll_wait_ms)
        self.follower.start()
        self.heartbeater.start()
        self._background.append(asyncio.create_task(self.sampler.run(self.object_store, self._loads)))
        if self.config.peer_probe_interval_ms > 0:
            watcher = PeerDeathWatcher(self.broker_id, lambda: self.image,
                                       lambda b: wal_dir_of(self.config.effective_wal_root, b), self.controller,
                                       lambda: self.heartbeater.state.broker_epoch, self.config.peer_probe_interval_ms)
            self._background.append(asyncio.create_task(watcher.run()))
        collector = GarbageCollector(self.object_store, self.batched,
                                     lambda: (self.broker_id, self.heartbeater.state.broker_epoch),
                                     str(self.storage.config.object_key_prefix), self.config.gc_grace_ms)
        self._background.append(asyncio.create_task(gc_loop(collector, self.config.gc_interval_ms,
                                                            self._is_gc_collector)))
        if self.storage.config.wal.mode == "s3":  # dead brokers' WAL objects, once nothing needs them
            wal_gc = DeadWalCollector(self.object_store, self.storage.config.wal.key_prefix,
                                      lambda: image_directory(self.image))
            self._background.append(asyncio.create_task(wal_gc.loop(self.config.dead_wal_gc_interval_ms,
                                                                    self._is_gc_collector)))
        cfg = self.storage.config
        if cfg.compaction_interval_ms > 0:
            policy = CompactionPolicy(cfg.compaction_target_bytes, cfg.compaction_min_age_ms,
                                      max_small_objects=cfg.compaction_max_small_objects)
            self._background.append(asyncio.create_task(compaction_loop(
                cfg.compaction_interval_ms, self._retained_partitions, policy, self._topic_configs,
                self.config.key_compaction_interval_ms)))
        self._background.append(asyncio.create_task(retention_loop(
            self.config.retention_check_interval_ms, self._retained_partitions, self._topic_configs)))
        self._background.append(asyncio.create_task(self.log_dirs.monitor(self.config.log_dir_check_interval_ms,
                                                                          self.manager.relieve_saturated)))
        self.state = "RUNNING"
        log.info("broker %d registered (broker epoch %d), following the metadata log", self.broker_id, epoch)

    def _set_broker_epoch(self, broker_epoch: int) -> None:
        for storage in self.storages.values():
            storage.set_broker_epoch(broker_epoch)

    async def _on_metadata(self, records: list[Any], delta: Any, image: Any) -> None:
        assert self.manager is not None
        try:
            self.manager.on_delta(delta, image)
            if self.local is not None:
                self.local.on_delta(delta, image)
        except Exception:  # never stop following the metadata log
            log.exception("applying metadata offset %d failed", image.offset)
        reg = image.cluster.brokers.get(self.broker_id)
        if reg is not None and reg.fenced and not self.heartbeater.state.want_shutdown:
            self.heartbeater.poke()
        if self.kafka is not None and not self.kafka.serving and reg is not None \
                and reg.broker_epoch == self.heartbeater.state.broker_epoch:
            # the image reached this broker's own registration: every topic created before it is known
            await self.kafka.serve()
            log.info("broker %d Kafka listener serving (metadata offset %d)", self.broker_id, image.offset)

    async def controlled_shutdown(self) -> None:
        """SIGTERM: let the controller move every partition away, close what is left, stop."""
        if self.state != "RUNNING":
            self.stopped.set()
            return
        self.state = "SHUTTING_DOWN"
        log.info("controlled shutdown: asking the controller to move partitions away")
        self.heartbeater.request_shutdown()
        deadline = time.monotonic() + self.config.shutdown_timeout_ms / 1000
        assert self.manager is not None
        while time.monotonic() < deadline:
            if self.heartbeater.state.should_shut_down and not self.manager.busy():
                break
            await asyncio.sleep(0.05)
        await self.manager.close_all(max(1.0, deadline - time.monotonic()))
        await self.stop()

    async def stop(self) -> None:
        self.state = "STOPPED"
        for t in self._background:
            t.cancel()
        await self.heartbeater.stop()
        if self.follower is not None:
            await self.follower.stop()
        if self.manager is not None:
            await self.manager.cancel_tasks()
        if self.local is not None:
            await self.local.close()
        await self.fetch_client.close()
        await self.tail_client.close()
        if self.storages and self.object_store is not None:
            await close_storage(list(self.storages.values()), self.object_store)
        if self.kafka is not None:
            await self.kafka.stop()
        await self.produce_forwarder.close()
        if self._runner is not None:
            await self._runner.cleanup()
        await self.batcher.close()
        await self.client.close()
        await self.session_client.close()
        if self.process_lock is not None:
            self.process_lock.release()
        self.stopped.set()

    def _loads(self) -> list[PartitionLoad]:
        if self.manager is None:
            return []
        return [PartitionLoad(s.topic, s.tp.partition, s.replica.counters, s.replica.size_bytes)
                for s in self.manager.serving() if s.replica is not None]

    def _produce_forwarding(self) -> ProduceForwarding | None:
        """A produce for a partition this broker has just handed over goes to its owner
        (produce_forward.py); not on a SASL listener, whose credentials a broker does not hold, nor
        with the authorizer on (the owner would judge the forwarding broker, not the client)."""
        if self.config.sasl_users_file or self.config.authorizer_enabled or self.config.produce_forward_window_ms <= 0:
            return None
        routes = ProduceRoutes(self.broker_id, lambda: self.manager, self._view,
                               lambda: kafka_endpoints(self.image).keys(), self.config.produce_forward_window_ms,
                               self.config.produce_handoff_wait_ms)

        def target_of(broker_id: int) -> ForwardTarget | None:
            e = kafka_endpoints(self.image).get(broker_id)
            return ForwardTarget(broker_id, e.host, e.port) if e is not None and broker_id != self.broker_id else None
        return ProduceForwarding(self.broker_id, routes, self.produce_forwarder, target_of,
                                 lambda outcome: self.metrics.produce_forwarded.labels(outcome).inc())

    # ------------------------------------------------------------------ the core both front ends call
    async def await_handoff(self, topic: str, partition: int, limit_ms: int | None = None) -> None:
        """A request for a partition changing hands here waits (bounded by
        ``produce_handoff_wait_ms``, and by ``limit_ms`` when given) for the hand-off to settle."""
        wait_ms = self.config.produce_handoff_wait_ms if limit_ms is None else \
            min(limit_ms, self.config.produce_handoff_wait_ms)
        if self.manager is not None and wait_ms > 0:
            await self.manager.await_handoff(topic, partition, lambda: self._view(topic, partition),
                                             wait_ms / 1000)

    def _view(self, topic: str, partition: int) -> admission.LeaderView | None:
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
        view = self._view(topic, partition)
        local = self.local is not None and self.local.is_local(topic)
        slot = self.local.slot_by_name(topic, partition) if local and self.local is not None \
            else self.manager.slot_by_name(topic, partition)
        if isinstance(slot, Slot) and slot.status.accepts_produce and slot.replica is not None and \
                slot.replica.streams_fenced:
            self.manager.on_fenced(slot, FerryError(ErrorCode.STREAM_FENCED, "an upload of this partition was fenced"))
        state = None
        if slot is not None:
            state = admission.ServingState(
                accepts_requests=slot.status.accepts_produce and slot.replica is not None,
                state_name=slot.status.state.value, replica_closed=slot.replica is None or slot.replica.closed,
                replica_leader_epoch=slot.replica.leader_epoch if slot.replica is not None else -1)
        admission.check_serving(topic, partition, self.broker_id, view, state,
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
            view=self._view(topic, slot.tp.partition))

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

    async def append_records(self, topic: str, partition: int, body: bytearray, acks: int,
                             client_leader_epoch: int | None = None) -> AppendResult:
        """Validate, append and (for acks != 0) wait for the WAL sync of one partition's batch.

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
            validated = validate_produce_records(body, self._validation_policy(topic), int(time.time() * 1000),
                                                 f"{topic}-{partition}")
            body, infos = validated.data, validated.infos
            replica: ServedReplica | None = slot.replica
            assert replica is not None
            if self.log_dirs.is_saturated(slot.log_dir):
                raise FerryError(ErrorCode.KAFKA_STORAGE_ERROR, f"log dir {slot.log_dir} is full (saturated)")
            lease = self.heartbeater.lease
            lease_until_mono_s = lease.sent_mono_s + lease.session_timeout_s if lease.sent_mono_s >= 0 else None
            append = replica.append_acked(body, infos, acks)
            if acks == 0:
                task = asyncio.ensure_future(append)
                task.add_done_callback(lambda t: t.exception() if not t.cancelled() else None)
                return AppendResult(-1, -1, replica.leader_epoch, replica.log_start_offset, -1)
            try:
                base, last = await append
            except FerryError as exc:
                if exc.error in (ErrorCode.STREAM_FENCED, ErrorCode.STALE_BROKER_EPOCH) and isinstance(slot, Slot):
                    assert self.manager is not None
                    self.manager.on_fenced(slot, exc)
                    raise self._not_leader(topic, partition, -1, replica.leader_epoch, slot) from exc
                if exc.error is ErrorCode.STREAM_NOT_OPENED:
                    raise self._not_leader(topic, partition, -1, replica.leader_epoch, slot) from exc
                raise
            self._confirm_ack(topic, slot, replica, lease_until_mono_s)
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
        lease = self.heartbeater.lease
        lease_until_mono_s = lease.sent_mono_s + lease.session_timeout_s if lease.sent_mono_s >= 0 else None
        try:
            offset = await replica.append_marker(producer_id, producer_epoch, commit, coordinator_epoch)
        except FerryError as exc:
            if exc.error in (ErrorCode.STREAM_FENCED, ErrorCode.STALE_BROKER_EPOCH) and isinstance(slot, Slot):
                assert self.manager is not None
                self.manager.on_fenced(slot, exc)
                raise self._not_leader(topic, partition, -1, replica.leader_epoch, slot) from exc
            if exc.error is ErrorCode.STREAM_NOT_OPENED:
                raise self._not_leader(topic, partition, -1, replica.leader_epoch, slot) from exc
            raise
        self._confirm_ack(topic, slot, replica, lease_until_mono_s)
        return offset

    async def serve_replica_fetch(self, topic: str, partition: int, replica_id: int, offset: int,
                                  last_fetched_epoch: int, leader_epoch: int, max_bytes: int,
                                  max_wait_ms: int) -> replica_fetch_http.ReplicaFetchResult:
        """A follower's fetch of a storage=local partition this broker leads."""
        if self.local is None:
            raise FerryError(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"broker {self.broker_id} is starting")
        return await self.local.serve_replica_fetch(topic, partition, replica_id, offset, last_fetched_epoch,
                                                    leader_epoch, max_bytes, max_wait_ms)

    def _is_gc_collector(self) -> bool:
        """The lowest-id live broker collects garbage (two at once would only repeat each other)."""
        image = self.image
        if image is None:
            return False
        live = [b for b, reg in image.cluster.brokers.items() if not reg.fenced]
        return bool(live) and min(live) == self.broker_id

    def _retained_partitions(self) -> list[Any]:
        return [s.replica for s in self.manager.serving()] if self.manager is not None else []

    def _topic_configs(self, topic: str) -> Any:
        return self.image.configs.get("topic", topic) if self.image is not None else {}

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

    def move_timelines(self, topic: str | None, partition: int | None, limit: int) -> list[MoveTimeline]:
        """The timelines of moves of this broker's partitions it remembers (``/v1/moves``)."""
        return self.manager.moves(topic, partition, limit) if self.manager else []

    # ------------------------------------------------------------------ health, metrics
    def health_report(self) -> dict[str, Any]:
        """The broker's state, session, lease and partition counts (``/v1/health``)."""
        hb = self.heartbeater.state
        return {"broker_id": self.broker_id, "state": self.state, "url": self.url, "broker_epoch": hb.broker_epoch,
                "fenced": hb.fenced, "metadata_offset": self._metadata_offset(),
                "lease_valid": self.write_lease_valid(), "last_heartbeat_error": hb.last_error,
                "partitions": self.manager.state_counts() if self.manager else {}}

    def storage_stats(self) -> dict[str, float]:
        """The stream storages' counters summed over the log dirs (the ``/metrics`` storage gauges)."""
        totals: dict[str, float] = {}
        for storage in self.storages.values():
            for name, value in storage.stats().items():
                totals[name] = totals.get(name, 0) + value
        return totals


def freeze_startup_heap() -> None:
    """Move what start-up allocated (modules, boto3's service models, aiohttp, the config: ~110,000
    objects that live as long as the process) out of the garbage collector's generations. A full
    collection walked all of them: 100-160 ms on the event loop, a few times a minute under
    produce, landing now and then inside a move's step 3 or 6; after the freeze it takes ~1 ms."""
    gc.collect()
    gc.freeze()


async def run(config: BrokerConfig) -> int:
    broker = Broker(config)
    loop = asyncio.get_running_loop()
    shutdown: list[asyncio.Task[None]] = []

    def on_term() -> None:
        if not shutdown:
            log.info("SIGTERM: controlled shutdown")
            shutdown.append(loop.create_task(broker.controlled_shutdown()))

    loop.add_signal_handler(signal.SIGTERM, on_term)
    loop.add_signal_handler(signal.SIGINT, on_term)
    try:
        await broker.start()
    except FerryError as exc:
        log.error("broker %d could not start: %s", config.broker_id, exc)
        await broker.stop()
        return 1
    freeze_startup_heap()
    await broker.stopped.wait()
    log.info("broker %d stopped", config.broker_id)
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="ferry broker", description="Run a Ferry broker.")
    parser.add_argument("--id", type=int, required=True, help="the broker id (must match broker_id in the config)")
    parser.add_argument("--config", required=True, help="the broker's JSON config file")
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config, args.id)
    except FerryError as exc:
        print(f"ferry broker: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=getattr(logging, config.log_level.upper(), logging.INFO),
                        format=f"%(asctime)s broker-{config.broker_id} %(levelname)s %(name)s: %(message)s")
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    logging.getLogger("botocore").setLevel(logging.WARNING)
    os.makedirs(config.effective_wal_dir, exist_ok=True)
    return asyncio.run(run(config))
