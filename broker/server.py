"""The broker process: `ferry broker --id N --config FILE`, its assembly and lifecycle.

This module builds the broker from its BrokerConfig (controller connections, log dirs, stream
storages, the partition manager, both front ends), starts and stops it, and runs its background
loops (heartbeats, metadata, load samples, garbage collection, compaction, retention, log-dir
checks). What serves a request against the partitions is request_core.py's ``RequestCore``, the
one object both front ends call (HTTP in http_api.py, API in docs/broker-api.md; Kafka's protocol
in kafka/): kept apart so that the admission and acknowledgement rules do not change with the
wiring around them.

Start-up: bind the HTTP port, open the stream storage (its WAL dir), register with the
controllers, follow the committed metadata log (each delta opens/closes partitions through the
PartitionManager), heartbeat. SIGTERM is a controlled shutdown: the heartbeat asks to shut down,
the controller moves the partitions away (each is closed cleanly here, steps 2-5), and the
process exits once the controller says it may (or every partition is closed).
"""
from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
import time
from typing import Any

from aiohttp import web

from broker.config import BrokerConfig, load_config, wal_dir_of, wal_dirs_of
from broker.heartbeat_thread import HeartbeatClient, ThreadedHeartbeater
from broker.load_sampler import LoadSampler, PartitionLoad
from broker.local_partitions import LocalPartitions
from broker.log_dirs_manager import LogDirsManager
from broker import replica_fetch_http, tail_handoff_http
from broker.http_api import BrokerHttpApi
from broker.metrics import BrokerMetrics
from broker.partition_manager import PartitionManager
from broker.request_core import RequestCore
from broker.compaction import compaction_loop
from broker.retention import retention_loop
from broker.stream_directory import image_directory
from stream_storage.compaction import CompactionPolicy
from stream_storage.gc import GarbageCollector, gc_loop
from stream_storage.object_store import ObjectStore
from stream_storage.storage import StreamStorage
from stream_storage.wal_gc import DeadWalCollector
from broker.peer_liveness import PeerDeathWatcher, ProcessLock
from broker.storage_factory import close_storage, open_object_store, open_storage, wal_dirs_for
from broker.freshness import FreshnessTrackingFollower
from broker.kafka.broker_configs import authorizer_settings, topic_defaults
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
from metadata_quorum.kernel.heap import HeapKeeper
from metadata_quorum.write_batcher import WriteBatcher
from metadata_quorum.kernel.controller_api import ControllerApi, ControllerWrites
from metadata_quorum.kernel.messages.cluster import BrokerAddresses
from metadata_quorum.kernel.errors import FerryError

log = logging.getLogger("ferry.broker")


class Broker:
    """One broker process: builds and owns its parts, starts them in order and stops them."""

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
        self.url = config.advertised_url
        self.cluster_id = config.cluster_id
        self.kafka: KafkaListener | None = None
        self.produce_forwarder = ProduceForwarder(config.broker_id)  # produce_forward.py
        # what both front ends call (request_core.py); it serves once start-up attaches the partitions
        self.core = RequestCore(config, self.metrics, self.heartbeater, self.controller, self.log_dirs, self.storages,
                                process=self)

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

    def _metadata_offset(self) -> int:
        return self.follower.offset if self.follower is not None else -1

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        # held before registering, until the process ends: peers sharing the WAL root take a free
        # lock as proof that this broker's process is gone (peer_liveness.py)
        self.process_lock = await asyncio.to_thread(ProcessLock.acquire, self.config.effective_wal_dir)
        await asyncio.to_thread(self.log_dirs.prepare)
        self.core.loop_lag.start()
        self._runner = web.AppRunner(BrokerHttpApi(self.core).app(), access_log=None)
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
            handlers = kafka_handlers(self.core, forwarder, producer_ids, topic_defaults(self.config), quorum=self.client,
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
        self.core.attach(self.manager, self.local, self.follower)
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
        self.core.loop_lag.stop()
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
        routes = ProduceRoutes(self.broker_id, lambda: self.manager, self.core.leader_view,
                               lambda: kafka_endpoints(self.image).keys(), self.config.produce_forward_window_ms,
                               self.config.produce_handoff_wait_ms)

        def target_of(broker_id: int) -> ForwardTarget | None:
            e = kafka_endpoints(self.image).get(broker_id)
            return ForwardTarget(broker_id, e.host, e.port) if e is not None and broker_id != self.broker_id else None
        return ProduceForwarding(self.broker_id, routes, self.produce_forwarder, target_of,
                                 lambda outcome: self.metrics.produce_forwarded.labels(outcome).inc())

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
    heap = HeapKeeper(loop)
    heap.install()  # metadata_quorum/kernel/heap.py: the collector off the event loop
    await broker.stopped.wait()
    heap.uninstall()
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
