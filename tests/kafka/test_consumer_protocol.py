"""The consumer group protocol (KIP-848, ``group.protocol=consumer``) with librdkafka's consumer,
unmodified, against a real cluster: the server-side assignor splits a topic between two members,
a member that leaves hands its partitions over, and the group carries on when its coordinator
partition moves to another broker."""
from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass, field

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient

from broker.groups import partition_for_group
from broker.kafka.group_apis import OFFSETS_TOPIC
from tools.admin import Admin
from tools.client import TopicPartition

pytestmark = pytest.mark.integration

TOPIC, PARTITIONS, GROUP = "kip848", 4, "kip848-group"


@dataclass
class Member:
    """A consumer thread: what it read (value -> count) and the partitions it was assigned."""

    bootstrap: str
    name: str
    read: dict[bytes, int] = field(default_factory=dict)
    assigned: set[int] = field(default_factory=set)
    errors: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def run(self) -> None:
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": GROUP, "group.protocol": "consumer",
                             "client.id": self.name, "auto.offset.reset": "earliest", "enable.auto.commit": False})
        consumer.subscribe([TOPIC])
        try:
            while not self.stop.is_set():
                msg = consumer.poll(0.2)
                with self.lock:
                    self.assigned = {tp.partition for tp in consumer.assignment()}
                if msg is None:
                    continue
                if msg.error() is not None:
                    self.errors.append(str(msg.error()))
                    continue
                with self.lock:
                    self.read[msg.value()] = self.read.get(msg.value(), 0) + 1
                consumer.commit(message=msg, asynchronous=False)
        except KafkaException as exc:
            self.errors.append(str(exc))
        finally:
            consumer.close()  # leaves the group (member epoch -1)

    def partitions(self) -> set[int]:
        with self.lock:
            return set(self.assigned)


def produce(bootstrap: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i, value in enumerate(values):
        producer.produce(TOPIC, value=value, partition=i % PARTITIONS)
    assert producer.flush(60) == 0


async def wait_for(check, timeout_s: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.2)


async def test_two_consumer_protocol_members_split_hand_over_and_survive_a_coordinator_move(cluster) -> None:
    bootstrap = cluster.kafka_bootstrap
    async with Admin(bootstrap_controllers=cluster.controller_bootstrap) as admin:
        await admin.create_topic(TOPIC, PARTITIONS)
        for p in range(PARTITIONS):
            await admin.wait_for_leader(TopicPartition(TOPIC, p), timeout_s=20)
        a, b = Member(bootstrap, "member-a"), Member(bootstrap, "member-b")
        threads = [threading.Thread(target=m.run) for m in (a, b)]
        for t in threads:
            t.start()
        try:
            # the uniform assignor splits the four partitions two and two, each owned once
            await wait_for(lambda: len(a.partitions()) == 2 and len(b.partitions()) == 2, 30, "a 2/2 split")
            assert a.partitions().isdisjoint(b.partitions())
            first = [b"first-%04d" % i for i in range(400)]
            await asyncio.to_thread(produce, bootstrap, first)
            await wait_for(lambda: sum(a.read.values()) + sum(b.read.values()) >= len(first), 30, "the first batch")
            assert set(a.read) | set(b.read) == set(first)
            assert all(n == 1 for m in (a, b) for n in m.read.values()) and set(a.read).isdisjoint(b.read), \
                "a record was read twice"
            assert a.read and b.read, "both members read"
            # b leaves: a takes over its partitions and reads on from b's committed offsets
            b.stop.set()
            await asyncio.to_thread(threads[1].join, 30)
            await wait_for(lambda: a.partitions() == set(range(PARTITIONS)), 20, "a to own every partition")
            second = [b"second-%04d" % i for i in range(200)]
            await asyncio.to_thread(produce, bootstrap, second)
            await wait_for(lambda: set(second) <= set(a.read), 20, "the second batch")
            # the group's coordinator partition moves to another broker: the group goes on
            n = len((await admin.describe_topics([OFFSETS_TOPIC]))[OFFSETS_TOPIC])  # type: ignore[arg-type]
            coordinator_tp = TopicPartition(OFFSETS_TOPIC, partition_for_group(GROUP, n))
            owner = (await admin.wait_for_leader(coordinator_tp, timeout_s=20)).leader
            await admin.move_partition(coordinator_tp, [owner % 3 + 1])
            await admin.wait_for_leader(coordinator_tp, leader=owner % 3 + 1, timeout_s=20)
            third = [b"third-%04d" % i for i in range(200)]
            await asyncio.to_thread(produce, bootstrap, third)
            await wait_for(lambda: set(third) <= set(a.read), 20, "the third batch")
            assert a.partitions() == set(range(PARTITIONS))
            assert all(n == 1 for n in a.read.values()) and set(a.read).isdisjoint(b.read), "a record was read twice"
            # the moved coordinator describes the group from its records
            client = AdminClient({"bootstrap.servers": bootstrap})
            described = client.describe_consumer_groups([GROUP])[GROUP].result(timeout=30)
            assert [m.client_id for m in described.members] == ["member-a"]
            assert str(described.type).endswith("CONSUMER") and str(described.state).endswith("STABLE")
            assert sorted(tp.partition for tp in described.members[0].assignment.topic_partitions) == [0, 1, 2, 3]
            listed = client.list_consumer_groups().result(timeout=30)
            assert [str(g.type) for g in listed.valid if g.group_id == GROUP][0].endswith("CONSUMER")
            assert a.errors == [] and b.errors == []
        finally:
            a.stop.set()
            b.stop.set()
            for t in threads:
                await asyncio.to_thread(t.join, 30)
