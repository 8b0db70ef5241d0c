"""librdkafka's idempotent producer against the broker's write-lease rules (``RequestCore``'s
admission and its re-check after the WAL sync), over loopback, with a log that keeps the
producer state as a replica does.

A write the image went stale during (a controller failover: the heartbeat lease holds, the
metadata log does not answer) was refused after it was in the log. librdkafka retries a refused
batch with its sequence, which the log would answer as a duplicate; but a sequence gap on any
partition makes it bump its epoch, for every partition, and renumber what waits to be retried:
the refused batch was appended a second time (chaos seed 6, ``--net``: "acknowledged record
#22675 is in the log 2 times"). The broker must acknowledge a write the lease covered.
"""
from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from confluent_kafka import Producer
from kafka.protocol.api_key import ApiKey

from broker import admission
from broker.heartbeat import BrokerLease
from broker.kafka.data_apis import DataApis
from broker.kafka.listener import KafkaListener
from broker.partition_meta import ProducerState, sequence_after, sequence_error
from broker.producer_ids import CountingProducerIds
from broker.request_core import RequestCore
from metadata_quorum.kernel.errors import ErrorCode, FerryError
from metadata_quorum.local_controller import LocalController
from stream_storage import batches
from tests.quorum.quorum_helpers import ManualClock, log_dirs

TOPIC = "t"
STRADDLER_AFTER = 20  # the image falls behind during the write of partition 0's 21st batch


@dataclass(frozen=True)
class Appended:
    base_offset: int
    last_offset: int
    leader_epoch: int = 0
    log_start_offset: int = 0
    log_append_time_ms: int = -1


class LeaseScriptCore:
    """``BrokerCore`` for one broker leading both partitions of ``t``: admission and the answer
    after the sync are RequestCore's own (its write lease: heartbeat lease and image freshness);
    the log keeps each producer's last batches as a replica does. The script: the image falls
    behind while partition 0's 21st batch is being written; once every partition has been
    refused at least once the image catches up, and the head of partition 1's line still finds
    it behind (it came in just before) while the batches pipelined behind it do not: a sequence
    gap. Partition 0 stays refused until the producer's new epoch shows, as when its retry had
    not come back before the gap was answered."""

    broker_id = 1
    cluster_id = "c"

    def __init__(self, quorum: LocalController) -> None:
        self.quorum = quorum
        self.fresh = True
        self.lease = BrokerLease(30_000)
        self.lease.renewed(time.monotonic())
        core: Any = object.__new__(RequestCore)
        core.broker_id = self.broker_id
        core.heartbeater = SimpleNamespace(lease=self.lease)
        core.follower = SimpleNamespace(fresh=lambda now, window_s: self.fresh)
        core.manager = SimpleNamespace(image=quorum.image)
        core._lease_warned_mono_s = -1e9
        self.core = core
        self.logs: dict[int, list[bytes]] = {0: [], 1: []}
        self.producers = {0: ProducerState(), 1: ProducerState()}
        self.appended = {0: 0, 1: 0}
        self.refused_while_behind: set[int] = set()
        self.gap_made = False
        self.epochs_seen: set[int] = set()
        self.replicas = {p: SimpleNamespace(leader_epoch=quorum.image.topics.partition(
            quorum.image.topics.by_name[TOPIC], p).leader_epoch, fenced=False) for p in (0, 1)}

    @property
    def image(self) -> Any:
        return self.quorum.image

    def _admit(self, partition: int, info: batches.BatchInfo) -> None:
        self.epochs_seen.add(info.producer_epoch)
        if not self.fresh and self.refused_while_behind >= {0, 1}:
            self.fresh = True  # caught up
        caught_up_again = self.fresh and self.refused_while_behind >= {0, 1}
        known = self.producers[partition].last_sequence(info.producer_id)
        head = known is not None and info.base_sequence == sequence_after(known[1])
        if partition == 1 and caught_up_again and not self.gap_made and head:
            self.gap_made = True  # the head of partition 1's line came in just before it caught up
            raise FerryError(ErrorCode.NOT_LEADER_OR_FOLLOWER, "image not caught up (arrived before)")
        if partition == 0 and caught_up_again and len(self.epochs_seen) == 1:
            raise FerryError(ErrorCode.NOT_LEADER_OR_FOLLOWER, "retry not back before the gap was answered")
        if not self.fresh:
            self.refused_while_behind.add(partition)
        admission.check_write_lease(self.broker_id, self.core.write_lease_valid())

    async def append_records(self, topic: str, partition: int, body: bytearray, acks: int,
                             client_leader_epoch: int | None = None) -> Appended:
        (info,) = batches.validate_batches(body)
        self._admit(partition, info)
        state, log = self.producers[partition], self.logs[partition]
        dup = state.duplicate_of(info.producer_id, info.producer_epoch, info.base_sequence)
        if dup is not None:
            return Appended(*dup)
        error = sequence_error(state.last_sequence(info.producer_id), info.producer_id, info.producer_epoch,
                               info.base_sequence, f"{topic}-{partition}")
        if error is not None:
            raise error
        lease_until = self.core._lease_until_mono_s()
        base = len(log)
        log.extend(r.value for r in batches.read_records(body))
        last = len(log) - 1
        state.record(info.producer_id, info.producer_epoch, info.base_sequence, info.records_count, base, last)
        self.appended[partition] += 1
        straddler = partition == 0 and self.appended[0] == STRADDLER_AFTER + 1

        async def wal_sync() -> Appended:
            await asyncio.sleep(0.002)
            if straddler:
                self.fresh = False  # the image falls behind while this write syncs
            return Appended(base, last)

        slot = SimpleNamespace(tp=SimpleNamespace(partition=partition), replica=self.replicas[partition])
        result: Appended = await self.core._acknowledged(topic, partition, slot, self.replicas[partition],
                                                          wal_sync(), lease_until)
        return result


async def test_a_write_the_image_went_stale_during_is_acknowledged_and_never_appended_twice() -> None:
    quorum = LocalController(ManualClock())
    listener = KafkaListener({}, "127.0.0.1", 0)
    await listener.start()
    epoch = quorum.write("register_broker", {
        "broker_id": 1, "incarnation_id": "inc-1", "log_dirs": log_dirs(1),
        "endpoints": ["http://127.0.0.1:1", f"kafka://127.0.0.1:{listener.port}"]})["broker_epoch"]
    quorum.write("broker_heartbeat", {"broker_id": 1, "broker_epoch": epoch, "metadata_offset": quorum.image.offset})
    quorum.write("create_topics", {"topics": [{"name": TOPIC, "num_partitions": 2, "replication_factor": 1}],
                                   "validate_only": False})
    core = LeaseScriptCore(quorum)
    data = DataApis(core, CountingProducerIds())
    listener.handlers.update({ApiKey.ApiVersions: data.api_versions, ApiKey.Metadata: data.metadata,
                              ApiKey.Produce: data.produce, ApiKey.InitProducerId: data.init_producer_id})
    acked: dict[bytes, int] = {}
    failed: list[str] = []

    def produce() -> None:
        producer = Producer({
            "bootstrap.servers": f"127.0.0.1:{listener.port}", "enable.idempotence": True, "acks": "all",
            "linger.ms": 0, "batch.num.messages": 1, "retry.backoff.ms": 20, "retry.backoff.max.ms": 50,
            "message.timeout.ms": 20_000})

        def done(err: Any, msg: Any) -> None:
            if err is not None:
                failed.append(str(err))
            else:
                acked[msg.value()] = msg.offset()

        for n in range(400):
            producer.produce(TOPIC, value=b"v%04d" % n, partition=n % 2, on_delivery=done)
            producer.poll(0)
            time.sleep(0.003)
        assert producer.flush(20) == 0

    try:
        thread = threading.Thread(target=produce)
        thread.start()
        while thread.is_alive():
            await asyncio.sleep(0.05)
        thread.join()
    finally:
        await listener.stop()
    # the script ran: the gap was made and the producer bumped its epoch
    assert core.gap_made and len(core.epochs_seen) >= 2, (core.gap_made, core.epochs_seen)
    assert not failed and len(acked) == 400
    for partition, log in core.logs.items():
        twice = sorted({v for v in log if log.count(v) > 1})
        assert not twice, f"partition {partition}: appended twice: {twice[:5]}"
        assert sorted(log) == sorted(v for v in acked if int(v[1:]) % 2 == partition)
