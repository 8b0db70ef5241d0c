"""Transactions on the partition side, against a real cluster: transactional batches in raw
Produce requests, their commit and abort markers in raw WriteTxnMarkers requests (what a
transaction coordinator sends), and kafka-python's read_committed consumer reading them —
then the same after a partition move and after its owner is killed with SIGKILL."""
from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from kafka import KafkaConsumer, TopicPartition as KTP
from kafka.protocol.consumer.fetch import FetchRequest, FetchResponse
from kafka.protocol.producer.produce import ProduceRequest, ProduceResponse
from kafka.protocol.producer.transaction import WriteTxnMarkersRequest, WriteTxnMarkersResponse

from stream_storage.batches import build_batch
from tests.kafka.test_kafka_semantics import kafka_call
from tools.admin import Admin
from tools.client import TopicPartition

pytestmark = pytest.mark.integration

TOPIC = "txn-live"
RETRIABLE = (3, 5, 6)  # UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER
A, B, C, D = 7001, 7002, 7003, 7004  # producer ids: A aborted, B committed, C and D open for a while


async def produce(port: int, value: bytes, pid: int, seq: int, transactional: bool = True) -> tuple[int, int]:
    """(error code, base offset) of one batch in a raw Produce v9."""
    T = ProduceRequest.TopicProduceData
    batch = build_batch([(None, value)], timestamp_ms=int(time.time() * 1000), producer_id=pid, producer_epoch=0,
                        base_sequence=seq, transactional=transactional)
    request = ProduceRequest[9](transactional_id=f"tx-{pid}" if transactional else None, acks=-1, timeout_ms=10000,
                                topic_data=[T(name=TOPIC, partition_data=[T.PartitionProduceData(index=0,
                                                                                                 records=batch)])])
    for _ in range(100):  # retried while the broker has not seen itself named yet, as a client does
        part = (await kafka_call(port, request, 9, ProduceResponse)).responses[0].partition_responses[0]
        if part.error_code not in RETRIABLE:
            break
        await asyncio.sleep(0.1)
    return part.error_code, part.base_offset


async def marker(port: int, pid: int, commit: bool, coordinator_epoch: int = 0, epoch: int = 0,
                 topic: str = TOPIC, partition: int = 0) -> int:
    M = WriteTxnMarkersRequest.WritableTxnMarker
    request = WriteTxnMarkersRequest[1](markers=[M(
        producer_id=pid, producer_epoch=epoch, transaction_result=commit, coordinator_epoch=coordinator_epoch,
        topics=[M.WritableTxnMarkerTopic(name=topic, partition_indexes=[partition])])])
    for _ in range(100):
        (result,) = (await kafka_call(port, request, 1, WriteTxnMarkersResponse)).markers
        assert result.producer_id == pid
        code = int(result.topics[0].partitions[0].error_code)
        if code not in RETRIABLE:
            return code
        await asyncio.sleep(0.1)
    return code


async def fetch_offsets(port: int, isolation_level: int) -> tuple[int, int, list[tuple[int, int]] | None]:
    """(high watermark, last stable offset, aborted transactions) of a raw Fetch v11 from 0."""
    F = FetchRequest.FetchTopic
    request = FetchRequest[11](replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20,
                               isolation_level=isolation_level, session_id=0, session_epoch=-1, topics=[
                                   F(topic=TOPIC, partitions=[F.FetchPartition(
                                       partition=0, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1,
                                       log_start_offset=-1, partition_max_bytes=1 << 20)])],
                               forgotten_topics_data=[], rack_id="")
    p = (await kafka_call(port, request, 11, FetchResponse)).responses[0].partitions[0]
    assert p.error_code == 0
    aborted = None if p.aborted_transactions is None else [(a.producer_id, a.first_offset)
                                                           for a in p.aborted_transactions]
    return p.high_watermark, p.last_stable_offset, aborted


def read_committed(bootstrap: str, expected: int) -> tuple[list[bytes], int]:
    """kafka-python's read_committed consumer from the start: its values (waiting for ``expected``,
    then a while for any more) and its end offset (ListOffsets with isolation_level=1)."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed",
                             enable_auto_commit=False, auto_offset_reset="earliest", fetch_max_wait_ms=100)
    try:
        tp = KTP(TOPIC, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        values: list[bytes] = []
        deadline = time.monotonic() + 20
        quiet_until = None
        while time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=200).values():
                values += [r.value for r in records]
            if len(values) >= expected:
                quiet_until = quiet_until or time.monotonic() + 1.0
                if time.monotonic() > quiet_until:
                    break
        return values, consumer.end_offsets([tp])[tp]
    finally:
        consumer.close()


def read_committed_librdkafka(bootstrap: str, expected: int) -> list[bytes]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition as CTP
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "txn-live-rd", "isolation.level": "read_committed",
                         "enable.auto.commit": False, "fetch.wait.max.ms": 100})
    try:
        consumer.assign([CTP(TOPIC, 0, OFFSET_BEGINNING)])
        values: list[bytes] = []
        deadline, quiet_until = time.monotonic() + 20, None
        while time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                values.append(msg.value())
            if len(values) >= expected:
                quiet_until = quiet_until or time.monotonic() + 1.0
                if time.monotonic() > quiet_until:
                    break
        return values
    finally:
        consumer.close()


async def read_committed_aiokafka(bootstrap: str, expected: int) -> list[bytes]:
    from aiokafka import AIOKafkaConsumer, TopicPartition as ATP
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed",
                                enable_auto_commit=False, auto_offset_reset="earliest", fetch_max_wait_ms=100)
    await consumer.start()
    try:
        tp = ATP(TOPIC, 0)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        values: list[bytes] = []
        deadline, quiet_until = time.monotonic() + 20, None
        while time.monotonic() < deadline:
            for records in (await consumer.getmany(timeout_ms=200)).values():
                values += [r.value for r in records if r.value is not None]
            if len(values) >= expected:
                quiet_until = quiet_until or time.monotonic() + 1.0
                if time.monotonic() > quiet_until:
                    break
        return values
    finally:
        await consumer.stop()


async def leader(admin: Admin, not_on: int | None = None) -> int:
    deadline = time.monotonic() + 30
    while True:
        p = await admin.wait_for_leader(TopicPartition(TOPIC, 0), timeout_s=30)
        if p.leader != not_on:
            return int(p.leader)
        assert time.monotonic() < deadline, "the partition did not leave the killed broker"
        await asyncio.sleep(0.1)


async def test_read_committed_through_markers_a_move_and_a_kill(cluster: Any) -> None:
    ports = cluster.kafka_ports
    async with Admin(bootstrap_controllers=cluster.controller_bootstrap) as admin:
        await admin.create_topic(TOPIC, 1, assignments={0: [1]})
        owner = await leader(admin)
        assert owner == 1
        port = ports[owner]
        offsets = [await produce(port, v, pid, seq, txn) for v, pid, seq, txn in [
            (b"a0", A, 0, True), (b"b0", B, 0, True), (b"p0", -1, -1, False), (b"a1", A, 1, True),
            (b"b1", B, 1, True)]]
        assert offsets == [(0, 0), (0, 1), (0, 2), (0, 3), (0, 4)]
        hw, lso, aborted = await fetch_offsets(port, 1)
        assert (hw, lso, aborted) == (5, 0, [])  # A's transaction holds the stable offset at 0
        assert await marker(port, A, commit=False) == 0  # at 5
        assert await marker(port, B, commit=True) == 0  # at 6
        assert await produce(port, b"c0", C, 0) == (0, 7)
        assert await fetch_offsets(port, 1) == (8, 7, [(A, 0)])
        assert (await fetch_offsets(port, 0))[:2] == (8, 7)  # the LSO is reported at either level
        # a marker from an older coordinator is refused and writes nothing
        assert await marker(port, B, commit=True, coordinator_epoch=-1) == 52  # TRANSACTION_COORDINATOR_FENCED
        values, end = await asyncio.to_thread(read_committed, cluster.kafka_bootstrap, 3)
        assert (values, end) == ([b"b0", b"p0", b"b1"], 7)

        # a move: C's transaction is still open there, its retried batch is a duplicate
        await admin.move_partition(TopicPartition(TOPIC, 0), [2])
        await admin.wait_for_leader(TopicPartition(TOPIC, 0), leader=2, timeout_s=30)
        port = ports[2]
        assert await produce(port, b"c0", C, 0) == (0, 7)
        assert await fetch_offsets(port, 1) == (8, 7, [(A, 0)])
        assert await marker(port, C, commit=True) == 0  # at 8
        assert await produce(port, b"d0", D, 0) == (0, 9)
        assert await produce(port, b"p1", -1, -1, False) == (0, 10)
        values, end = await asyncio.to_thread(read_committed, cluster.kafka_bootstrap, 4)
        assert (values, end) == ([b"b0", b"p0", b"b1", b"c0"], 9)

        # SIGKILL of the owner: the next one rebuilds the state from the stream's tail
        cluster.kill_broker(2)
        owner = await leader(admin, not_on=2)
        port = ports[owner]
        for _ in range(100):  # the new owner may take a moment to serve
            try:
                state = await fetch_offsets(port, 1)
                break
            except AssertionError:
                await asyncio.sleep(0.1)
        assert state == (11, 9, [(A, 0)])
        assert await produce(port, b"d0", D, 0) == (0, 9)  # still a duplicate after the crash
        assert await marker(port, D, commit=False) == 0  # at 11
        assert await fetch_offsets(port, 1) == (12, 12, [(A, 0), (D, 9)])
    committed = [b"b0", b"p0", b"b1", b"c0", b"p1"]
    values, end = await asyncio.to_thread(read_committed, cluster.kafka_bootstrap, 5)
    assert (values, end) == (committed, 12)
    assert await asyncio.to_thread(read_committed_librdkafka, cluster.kafka_bootstrap, 5) == committed
    assert await read_committed_aiokafka(cluster.kafka_bootstrap, 5) == committed
    await markers_on_the_offsets_topic(cluster, alive=[b for b in ports if b != 2])


def commit_and_read_offset(bootstrap: str, offset: int | None) -> int | None:
    """Commit ``offset`` for group txn-g (None: only read it); the group's committed offset."""
    from kafka.structs import OffsetAndMetadata
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id="txn-g", enable_auto_commit=False)
    try:
        tp = KTP(TOPIC, 0)
        if offset is not None:
            consumer.commit({tp: OffsetAndMetadata(offset, "", -1)}, timeout_ms=20000)
        return consumer.committed(tp, timeout_ms=20000)  # type: ignore[no-any-return]
    finally:
        consumer.close()


async def markers_on_the_offsets_topic(cluster: Any, alive: list[int]) -> None:
    """A marker on the group's __consumer_offsets partition, then a move of that partition: the
    group coordinator's load there skips the marker and keeps the group's committed offset."""
    from broker.groups.partitioning import partition_for_group
    assert await asyncio.to_thread(commit_and_read_offset, cluster.kafka_bootstrap, 4) == 4
    async with Admin(bootstrap_controllers=cluster.controller_bootstrap) as admin:
        parts = (await admin.describe_topics(["__consumer_offsets"]))["__consumer_offsets"]
        p = partition_for_group("txn-g", len(parts))
        tp = TopicPartition("__consumer_offsets", p)
        owner = (await admin.wait_for_leader(tp)).leader
        assert await marker(cluster.kafka_ports[owner], 7100, commit=True, topic=tp.topic, partition=p) == 0
        target = next(b for b in alive if b != owner)
        await admin.move_partition(tp, [target])
        await admin.wait_for_leader(tp, leader=target, timeout_s=30)
    assert await asyncio.to_thread(commit_and_read_offset, cluster.kafka_bootstrap, None) == 4
