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
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
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
        leaders_seen: list[int] = []
        watching = threading.Event()
        watcher = asyncio.ensure_future(asyncio.to_thread(
            watch_leader, cluster.kafka_bootstrap, topic, 0, leaders_seen, watching))
        try:
            tp = TopicPartition(topic, 0)
            for i in range(6):  # partition 0 back and forth between brokers
                while acked.count() < 200 * (i + 1):
                    await asyncio.sleep(0.05)
                owner = (await admin.wait_for_leader(tp, timeout_s=20)).leader
                target = owner % 3 + 1
                await admin.move_partition(tp, [target])
                await admin.wait_for_leader(tp, leader=target, timeout_s=20)
            watching.set()
            await watcher
            # Metadata named a leader throughout the six moves (the owner-to-be while the partition
            # was between owners), and the watch saw the moves happen
            assert -1 not in leaders_seen and len(set(leaders_seen)) >= 2, sorted(set(leaders_seen))
            victim = (await admin.wait_for_leader(TopicPartition(topic, 1), timeout_s=20)).leader
            cluster.kill_broker(victim)  # kill -9 of a partition's owner
            await asyncio.sleep(1.0)
            cluster.start_broker(victim, wait=True)
            await asyncio.wait_for(producing, 180)
        finally:
            stop.set()
            watching.set()
            await asyncio.gather(producing, watcher, return_exceptions=True)
    assert acked.errors == []
    assert acked.count() == 3000
    got = await asyncio.to_thread(read_all, cluster.kafka_bootstrap, topic, partitions, 3000)
    assert_read_back_exactly(acked, got)


def watch_leader(bootstrap: str, topic: str, partition: int, seen: list[int], stop: threading.Event) -> None:
    """The leader Metadata names for one partition, asked over and over until ``stop``."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    while not stop.is_set():
        meta = admin.list_topics(topic, timeout=10)
        seen.append(meta.topics[topic].partitions[partition].leader)
        time.sleep(0.002)


# ---------------------------------------------------------------------- consumer groups, three clients
from broker.groups import partition_for_group  # noqa: E402
from broker.kafka.group_apis import OFFSETS_TOPIC  # noqa: E402


class ConfluentClient:
    name = "confluent-kafka"

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap

    def produce(self, topic: str, values: list[tuple[int, bytes]], acked: Acked, per_s: float) -> None:
        producer = Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True, "acks": "all",
                             "message.timeout.ms": 120000})
        started = time.monotonic()
        for i, (partition, value) in enumerate(values):
            producer.produce(topic, value=value, partition=partition, on_delivery=acked.on_delivery)
            producer.poll(0)
            delay = started + (i + 1) / per_s - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        producer.flush(120)

    def member(self, topic: str, group: str, seen: list[bytes], stop: threading.Event) -> None:
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                             "enable.auto.commit": False, "session.timeout.ms": 6000})
        consumer.subscribe([topic])
        try:
            while not stop.is_set():
                msg = consumer.poll(0.2)
                if msg is None or msg.error() is not None:
                    continue
                seen.append(msg.value())
                consumer.commit(message=msg, asynchronous=True)
            self._final_commit(consumer, seen)
        finally:
            consumer.close()

    @staticmethod
    def _final_commit(consumer: Consumer, seen: list[bytes], timeout_s: float = 30.0) -> None:
        """Commit what was consumed before leaving, as a Kafka application does: a commit refused
        because the group rebalanced meanwhile (a coordinator failover, a member joining or
        leaving) is retried once the member has rejoined (librdkafka rejoins on the next poll)."""
        rebalanced = (KafkaError.UNKNOWN_MEMBER_ID, KafkaError.ILLEGAL_GENERATION, KafkaError.REBALANCE_IN_PROGRESS)
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                consumer.commit(asynchronous=False)
                return
            except KafkaException as exc:
                code = exc.args[0].code()
                if code == KafkaError._NO_OFFSET:  # nothing consumed since the last commit
                    return
                if code not in rebalanced or time.monotonic() > deadline:
                    raise
            msg = consumer.poll(0.5)  # rejoin; records it hands out now are consumed too
            if msg is not None and msg.error() is None:
                seen.append(msg.value())


class KafkaPythonClient:
    name = "kafka-python"

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap

    def produce(self, topic: str, values: list[tuple[int, bytes]], acked: Acked, per_s: float) -> None:
        from kafka import KafkaProducer
        producer = KafkaProducer(bootstrap_servers=self.bootstrap, enable_idempotence=True, acks="all",
                                 delivery_timeout_ms=120000, retries=2**31 - 1)
        started = time.monotonic()
        futures = []
        for i, (partition, value) in enumerate(values):
            futures.append((value, producer.send(topic, value=value, partition=partition)))
            delay = started + (i + 1) / per_s - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        producer.flush(120)
        for value, f in futures:
            try:
                md = f.get(timeout=120)
                with acked.lock:
                    acked.by_partition.setdefault(md.partition, []).append((md.offset, value))
            except Exception as exc:  # noqa: BLE001 - reported by the test
                acked.errors.append(str(exc))
        producer.close()

    def member(self, topic: str, group: str, seen: list[bytes], stop: threading.Event) -> None:
        from kafka import KafkaConsumer
        consumer = KafkaConsumer(topic, bootstrap_servers=self.bootstrap, group_id=group,
                                 auto_offset_reset="earliest", enable_auto_commit=False, session_timeout_ms=6000)
        try:
            while not stop.is_set():
                for records in consumer.poll(200).values():
                    seen.extend(r.value for r in records)
                    consumer.commit_async()
            consumer.commit()
        finally:
            consumer.close()


class AioKafkaClient:
    name = "aiokafka"

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap

    def produce(self, topic: str, values: list[tuple[int, bytes]], acked: Acked, per_s: float) -> None:
        from aiokafka import AIOKafkaProducer

        async def run() -> None:
            producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap, enable_idempotence=True, acks="all",
                                        request_timeout_ms=120000)
            await producer.start()
            try:
                started = time.monotonic()
                pending = []
                for i, (partition, value) in enumerate(values):
                    pending.append((value, await producer.send(topic, value=value, partition=partition)))
                    delay = started + (i + 1) / per_s - time.monotonic()
                    if delay > 0:
                        await asyncio.sleep(delay)
                for value, fut in pending:
                    try:
                        md = await fut
                        with acked.lock:
                            acked.by_partition.setdefault(md.partition, []).append((md.offset, value))
                    except Exception as exc:  # noqa: BLE001 - reported by the test
                        acked.errors.append(str(exc))
            finally:
                await producer.stop()
        asyncio.run(run())

    def member(self, topic: str, group: str, seen: list[bytes], stop: threading.Event) -> None:
        from aiokafka import AIOKafkaConsumer

        async def run() -> None:
            consumer = AIOKafkaConsumer(topic, bootstrap_servers=self.bootstrap, group_id=group,
                                        auto_offset_reset="earliest", enable_auto_commit=False,
                                        session_timeout_ms=6000)
            await consumer.start()
            try:
                while not stop.is_set():
                    batch = await consumer.getmany(timeout_ms=200)
                    for records in batch.values():
                        seen.extend(r.value for r in records)
                    if batch:
                        await consumer.commit()
                await consumer.commit()
            finally:
                await consumer.stop()
        asyncio.run(run())


@pytest.mark.parametrize("client_cls", [ConfluentClient, AioKafkaClient, KafkaPythonClient],
                         ids=lambda c: c.name)
async def test_a_group_of_two_through_moves_and_a_coordinator_kill(cluster, client_cls) -> None:
    client = client_cls(cluster.kafka_bootstrap)
    topic, partitions, group = "gt", 4, f"group-{client.name}"
    values = [(i % partitions, b"g%06d" % i) for i in range(600)]
    async with Admin(bootstrap_controllers=cluster.controller_bootstrap) as admin:
        await admin.create_topic(topic, partitions)
        for p in range(partitions):
            await admin.wait_for_leader(TopicPartition(topic, p), timeout_s=20)
        acked, stop_a, stop_b = Acked(), threading.Event(), threading.Event()
        seen_a: list[bytes] = []
        seen_b: list[bytes] = []
        member_a = threading.Thread(target=client.member, args=(topic, group, seen_a, stop_a))
        member_a.start()
        producing = asyncio.ensure_future(asyncio.to_thread(client.produce, topic, values, acked, 60.0))
        await asyncio.sleep(2.0)
        member_b = threading.Thread(target=client.member, args=(topic, group, seen_b, stop_b))
        member_b.start()  # a rebalance on join
        tp = TopicPartition(topic, 0)
        for _ in range(2):  # a data partition back and forth
            owner = (await admin.wait_for_leader(tp, timeout_s=20)).leader
            await admin.move_partition(tp, [owner % 3 + 1])
            await admin.wait_for_leader(tp, leader=owner % 3 + 1, timeout_s=20)
            await asyncio.sleep(1.0)
        n = len((await admin.describe_topics([OFFSETS_TOPIC]))[OFFSETS_TOPIC])  # type: ignore[arg-type]
        coordinator_tp = TopicPartition(OFFSETS_TOPIC, partition_for_group(group, n))
        victim = (await admin.wait_for_leader(coordinator_tp, timeout_s=20)).leader
        cluster.kill_broker(victim)  # kill -9 of the group coordinator's owner
        await asyncio.sleep(1.0)
        cluster.start_broker(victim, wait=True)
        stop_b.set()  # a rebalance on leave
        await asyncio.to_thread(member_b.join, 60)
        await asyncio.wait_for(producing, 180)
        deadline = time.monotonic() + 60
        wanted = {v for _, v in values}
        while not wanted <= set(seen_a) | set(seen_b) and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        stop_a.set()
        await asyncio.to_thread(member_a.join, 60)
    assert acked.errors == [] and acked.count() == len(values)
    assert wanted <= set(seen_a) | set(seen_b), "the group missed acknowledged records"
    got = await asyncio.to_thread(read_all, cluster.kafka_bootstrap, topic, partitions, len(values))
    assert_read_back_exactly(acked, got)
    # committed offsets survived the coordinator's kill: a new member starts where the group stopped
    extra = [(p, b"late-%d" % p) for p in range(partitions)]
    late = Acked()
    await asyncio.to_thread(ConfluentClient(cluster.kafka_bootstrap).produce, topic, extra, late, 1000.0)
    seen_c: list[bytes] = []
    stop_c = threading.Event()
    member_c = threading.Thread(target=client.member, args=(topic, group, seen_c, stop_c))
    member_c.start()
    deadline = time.monotonic() + 60
    while len(seen_c) < len(extra) and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
    await asyncio.sleep(1.0)
    stop_c.set()
    await asyncio.to_thread(member_c.join, 60)
    assert sorted(seen_c) == sorted(v for _, v in extra), f"resumed member read {len(seen_c)} records"
    # ListGroups goes to every broker, DescribeGroups to the coordinator: the group is there, empty
    from confluent_kafka.admin import AdminClient
    admin_client = AdminClient({"bootstrap.servers": cluster.kafka_bootstrap})
    listed = admin_client.list_consumer_groups().result(timeout=30)
    assert group in {g.group_id for g in listed.valid}
    described = admin_client.describe_consumer_groups([group])[group].result(timeout=30)
    assert described.group_id == group and str(described.state).endswith("EMPTY") and not described.members


async def test_a_broker_killed_and_restarted_leads_its_partitions_again(tmp_path) -> None:
    """One broker: after kill -9 and a restart, the new incarnation must open the streams the dead
    one held open above their epoch (reopening at the same epoch is fenced forever)."""
    from tools.cluster import LocalCluster
    cluster = LocalCluster(str(tmp_path / "one"), brokers=1).start()
    try:
        async with Admin(bootstrap_controllers=cluster.controller_bootstrap) as admin:
            await admin.create_topic("solo", 2)
            for p in range(2):
                await admin.wait_for_leader(TopicPartition("solo", p), timeout_s=20)
        acked = Acked()
        client = ConfluentClient(cluster.kafka_bootstrap)
        await asyncio.to_thread(client.produce, "solo", [(i % 2, b"a%03d" % i) for i in range(40)], acked, 500.0)
        cluster.kill_broker(1)
        cluster.start_broker(1, wait=True)
        await asyncio.to_thread(client.produce, "solo", [(i % 2, b"b%03d" % i) for i in range(40)], acked, 500.0)
        assert acked.errors == [] and acked.count() == 80
        got = await asyncio.to_thread(read_all, cluster.kafka_bootstrap, "solo", 2, 80)
        assert_read_back_exactly(acked, got)
    finally:
        cluster.stop(graceful=False)
