"""Kafka semantics a client relies on, against a real cluster, by real clients and raw requests:
keyless records refused by a compacted topic (Kafka, HTTP), Fetch's byte limits (KIP-74),
OffsetDelete, authorized operations, and refusals of what Ferry does not offer that a client
understands at once."""
from __future__ import annotations

import asyncio
import logging
import struct
import time
from typing import Any

import aiohttp
import pytest
from kafka.protocol.api_message import ApiMessage
from kafka.protocol.consumer.fetch import FetchRequest, FetchResponse
from kafka.protocol.producer.produce import ProduceRequest, ProduceResponse

from stream_storage.batches import build_batch, iter_batches
from tests.kafka.test_wire import frame

pytestmark = pytest.mark.integration


async def kafka_call(port: int, request: ApiMessage, version: int, response_cls: Any, correlation_id: int = 7) -> Any:
    """One request on a fresh connection; the decoded answer."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(frame(request, version, correlation_id))
        await writer.drain()
        (size,) = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), 30))
        answer = response_cls.decode(await asyncio.wait_for(reader.readexactly(size), 30), version=version,
                                     header=True)
        assert answer.header.correlation_id == correlation_id
        return answer
    finally:
        writer.close()


def create_topic(bootstrap: str, name: str, partitions: int = 1, config: dict[str, str] | None = None) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1, config=config or {})])[name].result(30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        md = admin.list_topics(name, timeout=10).topics[name]
        if md.error is None and len(md.partitions) == partitions and all(p.leader >= 0
                                                                         for p in md.partitions.values()):
            return
        time.sleep(0.2)
    raise AssertionError(f"{name} has no leaders")


def leader_of(bootstrap: str, topic: str, partition: int) -> int:
    from confluent_kafka.admin import AdminClient
    return int(AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
               .topics[topic].partitions[partition].leader)


# --------------------------------------------------------------------------- compacted topics
async def test_a_compacted_topic_refuses_keyless_records_on_both_front_ends(shared_cluster) -> None:
    from confluent_kafka import KafkaError, Producer
    cluster = shared_cluster
    topic = "compacted-keys"
    await asyncio.to_thread(create_topic, cluster.kafka_bootstrap, topic, 1, {"cleanup.policy": "compact"})
    leader = await asyncio.to_thread(leader_of, cluster.kafka_bootstrap, topic, 0)
    message = f"Compacted topic cannot accept message without key in topic partition {topic}-0."
    # raw Produce v9: the batch is refused whole, each keyless record named by its index
    T = ProduceRequest.TopicProduceData
    batch = build_batch([(b"k0", b"a"), (None, b"b"), (b"k2", b"c"), (None, b"d")])
    request = ProduceRequest[9](transactional_id=None, acks=-1, timeout_ms=5000, topic_data=[
        T(name=topic, partition_data=[T.PartitionProduceData(index=0, records=batch)])])
    answer = await kafka_call(cluster.kafka_ports[leader], request, 9, ProduceResponse)
    part = answer.responses[0].partition_responses[0]
    assert part.error_code == 87  # INVALID_RECORD
    assert [(e.batch_index, e.batch_index_error_message) for e in part.record_errors] == [(1, message),
                                                                                          (3, message)]
    assert part.error_message.startswith("One or more records have been rejected due to 2 record errors")
    # the HTTP front end refuses the same batch the same way
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{cluster.broker_url(leader)}/v1/produce/{topic}/0", data=batch) as resp:
            body = await resp.json()
    assert resp.status == 400 and body["error"] == "INVALID_RECORD"
    assert body["details"]["record_errors"] == [{"batch_index": 1, "message": message},
                                                {"batch_index": 3, "message": message}]
    # librdkafka reports the error per message; a keyed record goes in, nothing keyless was stored
    reports: list[tuple[bytes | None, Any]] = []
    producer = Producer({"bootstrap.servers": cluster.kafka_bootstrap, "linger.ms": 0})
    producer.produce(topic, value=b"no key", partition=0, on_delivery=lambda err, msg: reports.append((None, err)))
    producer.flush(30)
    producer.produce(topic, key=b"k", value=b"keyed", partition=0,
                     on_delivery=lambda err, msg: reports.append((msg.key(), err)))
    producer.flush(30)
    assert reports[0][1] is not None and reports[0][1].code() == KafkaError.INVALID_RECORD
    assert reports[1] == (b"k", None)
    F = FetchRequest.FetchTopic
    fetch = FetchRequest[12](replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                             session_id=0, session_epoch=-1, topics=[F(topic=topic, partitions=[
                                 F.FetchPartition(partition=0, current_leader_epoch=-1, fetch_offset=0,
                                                  last_fetched_epoch=-1, log_start_offset=-1,
                                                  partition_max_bytes=1 << 20)])],
                             forgotten_topics_data=[], rack_id="")
    got = await kafka_call(cluster.kafka_ports[leader], fetch, 12, FetchResponse)
    stored = got.responses[0].partitions[0]
    assert stored.high_watermark == 1 and len(list(iter_batches(stored.records))) == 1


# --------------------------------------------------------------------------- Fetch byte limits
def fetch_request(topic: str, partitions: list[int], max_bytes: int, partition_max_bytes: int) -> ApiMessage:
    F = FetchRequest.FetchTopic
    return FetchRequest[12](replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=max_bytes, isolation_level=0,
                            session_id=0, session_epoch=-1, topics=[F(topic=topic, partitions=[
                                F.FetchPartition(partition=p, current_leader_epoch=-1, fetch_offset=0,
                                                 last_fetched_epoch=-1, log_start_offset=-1,
                                                 partition_max_bytes=partition_max_bytes) for p in partitions])],
                            forgotten_topics_data=[], rack_id="")


async def test_fetch_max_bytes_and_partition_max_bytes_bound_the_answer(shared_cluster) -> None:
    from confluent_kafka import Consumer, Producer
    cluster = shared_cluster
    topic = "fetch-limits"
    await asyncio.to_thread(create_topic, cluster.kafka_bootstrap, topic, 2)
    leaders = {p: await asyncio.to_thread(leader_of, cluster.kafka_bootstrap, topic, p) for p in (0, 1)}
    # librdkafka's 0082_fetch_max_bytes: ten ~900 KB records, fetch.max.bytes 1 MB,
    # max.partition.fetch.bytes 20 MB, and answers above receive.message.max.bytes fail the connection
    producer = Producer({"bootstrap.servers": cluster.kafka_bootstrap, "linger.ms": 0})
    for i in range(10):
        producer.produce(topic, value=bytes([i]) * 900_000, partition=0)
    producer.flush(60)
    for i in range(40):
        producer.produce(topic, value=b"%04d" % i * 250, partition=1)  # 1 KB records, ten per batch
        if i % 10 == 9:
            producer.flush(60)
    consumer = Consumer({"bootstrap.servers": cluster.kafka_bootstrap, "group.id": "fetch-limits",
                         "auto.offset.reset": "earliest", "fetch.max.bytes": 1_000_000,
                         "max.partition.fetch.bytes": 20_000_000, "receive.message.max.bytes": 1_000_512})
    consumer.subscribe([topic])
    got: dict[int, int] = {0: 0, 1: 0}
    errors = []
    deadline = time.monotonic() + 60
    while sum(got.values()) < 50 and time.monotonic() < deadline:
        msg = await asyncio.to_thread(consumer.poll, 0.5)
        if msg is None:
            continue
        if msg.error() is not None:
            errors.append(msg.error())
            continue
        got[msg.partition()] += 1
    consumer.close()
    assert errors == [] and got == {0: 10, 1: 40}
    # raw: the first batch of the first partition with data, whole, beyond every limit
    port = cluster.kafka_ports[leaders[0]]
    answer = await kafka_call(port, fetch_request(topic, [0], 1000, 1000), 12, FetchResponse)
    records = answer.responses[0].partitions[0].records
    assert [i.records_count for i in iter_batches(records)] == [1] and len(records) > 900_000
    # 1 MB: still one batch (two would exceed it); 2 MB: two
    for max_bytes, batches_wanted in ((1_000_000, 1), (2_000_000, 2)):
        answer = await kafka_call(port, fetch_request(topic, [0], max_bytes, 20_000_000), 12, FetchResponse)
        assert len(list(iter_batches(answer.responses[0].partitions[0].records))) == batches_wanted
    # partition_max_bytes: a partition's share stops at its last whole batch within the limit
    port1 = cluster.kafka_ports[leaders[1]]
    full = (await kafka_call(port1, fetch_request(topic, [1], 1 << 20, 1 << 20), 12, FetchResponse)) \
        .responses[0].partitions[0].records
    sizes = [i.size_bytes for i in iter_batches(full)]
    assert len(sizes) >= 2
    limit = sizes[0] + sizes[1] - 1
    part = (await kafka_call(port1, fetch_request(topic, [1], 1 << 20, limit), 12, FetchResponse)) \
        .responses[0].partitions[0]
    assert part.records == full[:sizes[0]] and part.error_code == 0
    if leaders[0] == leaders[1]:  # both partitions in one request: the second gets nothing once full
        answer = await kafka_call(port, fetch_request(topic, [0, 1], 1000, 1 << 20), 12, FetchResponse)
        parts = {p.partition_index: p for p in answer.responses[0].partitions}
        assert len(list(iter_batches(parts[0].records))) == 1 and parts[1].records in (b"", None)
        assert parts[1].high_watermark == 40


# --------------------------------------------------------------------------- OffsetDelete
def test_offset_delete_by_kafka_python_admin(shared_cluster) -> None:
    from confluent_kafka import Consumer, Producer
    from confluent_kafka import TopicPartition as CTP
    from kafka import TopicPartition
    from kafka.admin import KafkaAdminClient
    from kafka.errors import GroupIdNotFoundError, GroupSubscribedToTopicError, NoError, UnknownTopicOrPartitionError
    bootstrap = shared_cluster.kafka_bootstrap
    for topic in ("od-a", "od-b"):
        create_topic(bootstrap, topic)
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce("od-a", value=b"x", partition=0)
    producer.flush(30)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "od", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumer.subscribe(["od-a"])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            break
    consumer.commit(offsets=[CTP("od-a", 0, 1), CTP("od-b", 0, 5)], asynchronous=False)
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        a, b = TopicPartition("od-a", 0), TopicPartition("od-b", 0)
        assert admin.delete_group_offsets("od", [a, b]) == {a: GroupSubscribedToTopicError, b: NoError}
        assert set(admin.list_group_offsets("od")["od"]) == {a}
        missing = TopicPartition("no-such-topic", 0)
        assert admin.delete_group_offsets("od", [missing]) == {missing: UnknownTopicOrPartitionError}
        consumer.close()  # the group is empty now: its offsets may all go
        assert admin.delete_group_offsets("od", [a]) == {a: NoError}
        assert admin.list_group_offsets("od")["od"] == {}
        with pytest.raises(GroupIdNotFoundError):
            admin.delete_group_offsets("no-such-group", [a])
    finally:
        admin.close()


# --------------------------------------------------------------------------- authorized operations
def test_authorized_operations_list_everything_applicable_as_kafka_without_an_authorizer(shared_cluster) -> None:
    from confluent_kafka import Consumer, TopicCollection
    from confluent_kafka.admin import AclOperation, AdminClient
    from kafka.protocol.metadata.metadata import MetadataRequest, MetadataResponse
    bootstrap = shared_cluster.kafka_bootstrap
    create_topic(bootstrap, "authz")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    A = AclOperation
    topic_ops = {A.READ, A.WRITE, A.CREATE, A.DELETE, A.ALTER, A.DESCRIBE, A.DESCRIBE_CONFIGS, A.ALTER_CONFIGS}
    cluster_ops = {A.CREATE, A.ALTER, A.DESCRIBE, A.CLUSTER_ACTION, A.DESCRIBE_CONFIGS, A.ALTER_CONFIGS,
                   A.IDEMPOTENT_WRITE}
    (described,) = admin.describe_topics(TopicCollection(["authz"]), include_authorized_operations=True).values()
    assert set(described.result(30).authorized_operations) == topic_ops
    assert set(admin.describe_cluster(include_authorized_operations=True).result(30).authorized_operations) \
        == cluster_ops
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "authz", "auto.offset.reset": "earliest"})
    consumer.subscribe(["authz"])
    deadline = time.monotonic() + 30
    while not consumer.assignment() and time.monotonic() < deadline:
        consumer.poll(0.2)
    try:
        (group,) = admin.describe_consumer_groups(["authz"], include_authorized_operations=True).values()
        assert set(group.result(30).authorized_operations) == {A.READ, A.DESCRIBE, A.DELETE}
        (group,) = admin.describe_consumer_groups(["authz"]).values()
        assert group.result(30).authorized_operations is None  # not asked: not listed
    finally:
        consumer.close()
    # Metadata v10 carries the cluster's too (v11 dropped it for DescribeCluster); not asked, not sent
    T = MetadataRequest.MetadataRequestTopic
    for include in (True, False):
        request = MetadataRequest[10](topics=[T(name="authz", topic_id=None)], allow_auto_topic_creation=False,
                                      include_cluster_authorized_operations=include,
                                      include_topic_authorized_operations=include)
        answer = asyncio.run(kafka_call(shared_cluster.kafka_ports[1], request, 10, MetadataResponse))
        ops = (answer.authorized_operations, answer.topics[0].authorized_operations)
        assert ops == (({int(o.value) for o in cluster_ops}, {int(o.value) for o in topic_ops}) if include
                       else (None, None))


# --------------------------------------------------------------------------- incremental fetch sessions
def session_fetch(topic: str, session_id: int, epoch: int, offsets: dict[int, int],
                  forget: list[int] | None = None) -> ApiMessage:
    F = FetchRequest.FetchTopic
    topics = [F(topic=topic, partitions=[
        F.FetchPartition(partition=p, current_leader_epoch=-1, fetch_offset=o, last_fetched_epoch=-1,
                         log_start_offset=-1, partition_max_bytes=1 << 20) for p, o in offsets.items()])] \
        if offsets else []
    forgotten = [FetchRequest.ForgottenTopic(topic=topic, partitions=forget)] if forget else []
    return FetchRequest[12](replica_id=-1, max_wait_ms=50, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                            session_id=session_id, session_epoch=epoch, topics=topics,
                            forgotten_topics_data=forgotten, rack_id="")


def answered(response: Any) -> dict[int, int]:
    """partition -> number of record bytes, for the partitions the answer lists."""
    return {p.partition_index: len(p.records or b"") for t in response.responses for p in t.partitions}


async def test_incremental_fetch_sessions_raw_and_by_kafka_python(shared_cluster, caplog) -> None:
    from confluent_kafka import Producer

    from tools.admin import Admin
    from tools.client import TopicPartition
    cluster = shared_cluster
    topic = "sessions"
    async with Admin(bootstrap_controllers=cluster.controller_bootstrap) as admin:
        await admin.create_topic(topic, 3, assignments={p: [2] for p in range(3)})
        for p in range(3):
            await admin.wait_for_leader(TopicPartition(topic, p), 2)
    producer = Producer({"bootstrap.servers": cluster.kafka_bootstrap})

    def produce(partition: int, count: int) -> None:
        for i in range(count):
            producer.produce(topic, value=b"v%d" % i, partition=partition)
        producer.flush(30)

    await asyncio.to_thread(produce, 0, 3)
    port = cluster.kafka_ports[2]
    full = await kafka_call(port, session_fetch(topic, 0, 0, {0: 0, 1: 0}), 12, FetchResponse)
    assert full.error_code == 0 and full.session_id != 0
    sid = full.session_id
    got = answered(full)
    assert set(got) == {0, 1} and got[0] > 0 and got[1] == 0
    # epoch 1: the client moved past what it read; nothing new anywhere, so nothing listed
    inc = await kafka_call(port, session_fetch(topic, sid, 1, {0: 3}), 12, FetchResponse)
    assert (inc.error_code, inc.session_id, answered(inc)) == (0, sid, {})
    # records on partition 1 (named by no request since the session began) come back alone
    await asyncio.to_thread(produce, 1, 2)
    inc = await kafka_call(port, session_fetch(topic, sid, 2, {}), 12, FetchResponse)
    got = answered(inc)
    assert list(got) == [1] and got[1] > 0
    # a partition added incrementally, one forgotten
    await asyncio.to_thread(produce, 2, 1)
    inc = await kafka_call(port, session_fetch(topic, sid, 3, {2: 0}, forget=[1]), 12, FetchResponse)
    assert list(answered(inc)) == [2]
    # wrong epoch, unknown session: refused whole; closing (epoch -1) ends the session
    wrong = await kafka_call(port, session_fetch(topic, sid, 9, {}), 12, FetchResponse)
    assert (wrong.error_code, wrong.session_id, wrong.responses) == (71, 0, [])  # INVALID_FETCH_SESSION_EPOCH
    closing = await kafka_call(port, session_fetch(topic, sid, -1, {0: 0}), 12, FetchResponse)
    assert (closing.error_code, closing.session_id, list(answered(closing))) == (0, 0, [0])
    gone = await kafka_call(port, session_fetch(topic, sid, 4, {}), 12, FetchResponse)
    assert gone.error_code == 70  # FETCH_SESSION_ID_NOT_FOUND

    # kafka-python's consumer uses sessions by default (FetchSessionHandler): it reads everything
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP
    caplog.set_level(logging.DEBUG, logger="kafka.consumer.fetcher")

    def consume() -> int:
        consumer = KafkaConsumer(bootstrap_servers=cluster.kafka_bootstrap, auto_offset_reset="earliest",
                                 enable_auto_commit=False, fetch_max_wait_ms=100)
        consumer.assign([KTP(topic, p) for p in range(3)])
        seen = 0
        deadline = time.monotonic() + 30
        while seen < 6 + 20 and time.monotonic() < deadline:
            batch = consumer.poll(timeout_ms=200)
            seen += sum(len(records) for records in batch.values())
            if seen == 6:
                produce(1, 20)  # more arrives while the session runs
        consumer.close()
        return seen

    assert await asyncio.to_thread(consume) == 26
    text = caplog.text
    assert "created a new incremental fetch session" in text
    assert "sent an incremental fetch response for session" in text
    assert "unable to process the fetch request" not in text and "invalid" not in text.lower()


# --------------------------------------------------------------------------- producer ids
def test_producer_ids_come_from_controller_blocks_and_are_never_handed_out_twice(shared_cluster) -> None:
    """Each broker serves InitProducerId from its own block of 1,000 taken from the controllers:
    ids are distinct across brokers and consecutive within one broker's block; an epoch bump keeps
    the id (KIP-360)."""
    from kafka.protocol.producer.transaction import InitProducerIdRequest, InitProducerIdResponse

    async def init(port: int, producer_id: int = -1, epoch: int = -1) -> tuple[int, int, int]:
        answer = await kafka_call(port, InitProducerIdRequest[4](transactional_id=None, transaction_timeout_ms=60000,
                                                                 producer_id=producer_id, producer_epoch=epoch),
                                  4, InitProducerIdResponse)
        return answer.error_code, answer.producer_id, answer.producer_epoch

    ports = list(shared_cluster.kafka_ports.values())[:2]
    per_broker = [[asyncio.run(init(port)) for _ in range(3)] for port in ports]
    ids = [pid for answers in per_broker for _err, pid, _epoch in answers]
    assert all(err == 0 and epoch == 0 for answers in per_broker for err, _pid, epoch in answers)
    assert len(set(ids)) == len(ids)
    for answers in per_broker:
        first = answers[0][1]
        assert [pid for _e, pid, _ep in answers] == [first, first + 1, first + 2]
    blocks = {pid // 1000 for pid in ids}
    assert len(blocks) == 2  # one block per broker, from the controllers' log
    assert asyncio.run(init(ports[0], ids[0], 0)) == (0, ids[0], 1)
