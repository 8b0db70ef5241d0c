"""The consumer group protocol (KIP-848, ``group.protocol=consumer``) with librdkafka's consumer,
unmodified, against a real cluster: the server-side assignor splits a topic between two members,
a member that leaves hands its partitions over, and the group carries on when its coordinator
partition moves to another broker."""
from __future__ import annotations

import asyncio
import subprocess
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
from tools.peer.apache_kafka import java_command
from tools.peer.jars import kafka_jars_dir

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


def produce(bootstrap: str, values: list[bytes], topic: str = TOPIC, partitions: int = PARTITIONS) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i, value in enumerate(values):
        producer.produce(topic, value=value, partition=i % partitions)
    assert producer.flush(60) == 0


async def wait_for(check, timeout_s: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.2)


async def test_two_consumer_protocol_members_split_hand_over_and_survive_a_coordinator_move(shared_cluster) -> None:
    cluster = shared_cluster
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
            # kill -9 of the coordinator's new owner: the restarted broker (or a new owner) reloads the group
            victim = owner % 3 + 1
            cluster.kill_broker(victim)
            await asyncio.sleep(1.0)
            cluster.start_broker(victim, wait=True)
            fourth = [b"fourth-%04d" % i for i in range(200)]
            await asyncio.to_thread(produce, bootstrap, fourth)
            await wait_for(lambda: set(fourth) <= set(a.read), 30, "the fourth batch")
            assert all(n == 1 for n in a.read.values()) and set(a.read).isdisjoint(b.read), "a record was read twice"
            # the reloaded coordinator describes the group from its records
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


async def test_kafka_java_consumer_and_group_tool_speak_the_consumer_protocol(shared_cluster) -> None:
    """Kafka's own Java client (ConsoleConsumer, ``group.protocol=consumer``) reads a topic as a
    consumer-protocol group and commits; Kafka's group tool lists the group's type and its offsets."""
    jars = kafka_jars_dir()
    if jars is None:
        pytest.skip("Apache Kafka's jars are not installed (make kafka-jars)")
    bootstrap, topic, group = shared_cluster.kafka_bootstrap, "kip848-java", "kip848-java-group"
    async with Admin(bootstrap_controllers=shared_cluster.controller_bootstrap) as admin:
        await admin.create_topic(topic, 2)
        for p in range(2):
            await admin.wait_for_leader(TopicPartition(topic, p), timeout_s=20)
    values = [f"java-{i:03d}" for i in range(20)]
    await asyncio.to_thread(produce, bootstrap, [v.encode() for v in values], topic, 2)

    def java(main_class: str, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(java_command(jars, main_class, ["--bootstrap-server", bootstrap, *args], 256),
                              capture_output=True, text=True, timeout=120)
    read = await asyncio.to_thread(
        java, "org.apache.kafka.tools.consumer.ConsoleConsumer", "--topic", topic, "--group", group,
        "--consumer-property", "group.protocol=consumer", "--from-beginning", "--max-messages", "20",
        "--timeout-ms", "40000")
    assert read.returncode == 0, read.stderr[-2000:]
    # (the tool may print a deprecation notice about its flags before the records)
    assert sorted(line for line in read.stdout.splitlines() if line.startswith("java-")) == values
    tool = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
    listed = await asyncio.to_thread(java, tool, "--list", "--type")
    assert any(line.split() == [group, "Consumer"] for line in listed.stdout.splitlines()), listed.stdout
    described = await asyncio.to_thread(java, tool, "--describe", "--group", group)
    rows = [line.split() for line in described.stdout.splitlines() if line.startswith(group)]
    assert sorted((r[2], r[3], r[4]) for r in rows) == [("0", "10", "10"), ("1", "10", "10")], described.stdout
