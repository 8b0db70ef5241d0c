"""Real Kafka clients, unmodified, against a real cluster through moves and a kill -9.

The promise checked is the user's: every record a client saw acknowledged is read back exactly
once, in order, at the offset it was acknowledged with.
"""
from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass, field

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka import TopicPartition as CTP

from tools.admin import Admin
from tools.client import TopicPartition

pytestmark = pytest.mark.integration


@dataclass
class Acked:
    by_partition: dict[int, list[tuple[int, bytes]]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def on_delivery(self, err: KafkaError | None, msg) -> None:  # type: ignore[no-untyped-def]
        with self.lock:
            if err is not None:
                self.errors.append(str(err))
            else:
                self.by_partition.setdefault(msg.partition(), []).append((msg.offset(), msg.value()))

    def count(self) -> int:
        with self.lock:
            return sum(len(v) for v in self.by_partition.values())


def produce_paced(bootstrap: str, topic: str, partitions: int, total: int, per_s: float, acked: Acked,
                  stop: threading.Event) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                         "linger.ms": 5, "message.timeout.ms": 120000})
    started = time.monotonic()
    for i in range(total):
        if stop.is_set():
            break
        producer.produce(topic, value=b"r%08d" % i, partition=i % partitions, on_delivery=acked.on_delivery)
        producer.poll(0)
        delay = started + (i + 1) / per_s - time.monotonic()
        if delay > 0:
            time.sleep(delay)
    producer.flush(120)


def read_all(bootstrap: str, topic: str, partitions: int, expected: int, timeout_s: float = 60.0
             ) -> dict[int, list[tuple[int, bytes]]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "read-back", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})
    consumer.assign([CTP(topic, p, 0) for p in range(partitions)])
    got: dict[int, list[tuple[int, bytes]]] = {}
    deadline = time.monotonic() + timeout_s
    n = 0
    try:
        while n < expected and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            got.setdefault(msg.partition(), []).append((msg.offset(), msg.value()))
            n += 1
    finally:
        consumer.close()
    return got


def assert_read_back_exactly(acked: Acked, got: dict[int, list[tuple[int, bytes]]]) -> None:
    for partition, records in acked.by_partition.items():
        read = got.get(partition, [])
        offsets = [o for o, _ in read]
        assert offsets == sorted(set(offsets)), f"partition {partition}: offsets repeat or go back"
        at = dict(read)
        for offset, value in records:
            assert at.get(offset) == value, f"partition {partition}: acked {value!r} at {offset}, read {at.get(offset)!r}"
        values = [v for _, v in read]
        assert len(values) == len(set(values)), f"partition {partition}: a record was written twice"
        assert values == sorted(values), f"partition {partition}: records out of order"


async def test_librdkafka_idempotent_producer_through_moves_and_a_kill(cluster) -> None:
    topic, partitions = "ck", 4
    async with Admin(bootstrap_controllers=cluster.controller_bootstrap) as admin:
        await admin.create_topic(topic, partitions)
        for p in range(partitions):
            await admin.wait_for_leader(TopicPartition(topic, p), timeout_s=20)
        acked, stop = Acked(), threading.Event()
        producing = asyncio.ensure_future(asyncio.to_thread(
            produce_paced, cluster.kafka_bootstrap, topic, partitions, 3000, 250.0, acked, stop))
        try:
            tp = TopicPartition(topic, 0)
            for i in range(6):  # partition 0 back and forth between brokers
                while acked.count() < 200 * (i + 1):
                    await asyncio.sleep(0.05)
                owner = (await admin.wait_for_leader(tp, timeout_s=20)).leader
                target = owner % 3 + 1
                await admin.move_partition(tp, [target])
                await admin.wait_for_leader(tp, leader=target, timeout_s=20)
            victim = (await admin.wait_for_leader(TopicPartition(topic, 1), timeout_s=20)).leader
            cluster.kill_broker(victim)  # kill -9 of a partition's owner
            await asyncio.sleep(1.0)
            cluster.start_broker(victim, wait=True)
            await asyncio.wait_for(producing, 180)
        finally:
            stop.set()
            await asyncio.gather(producing, return_exceptions=True)
    assert acked.errors == []
    assert acked.count() == 3000
    got = await asyncio.to_thread(read_all, cluster.kafka_bootstrap, topic, partitions, 3000)
    assert_read_back_exactly(acked, got)
