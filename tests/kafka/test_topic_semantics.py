"""Kafka's topic and config semantics on a real cluster, with unmodified clients: automatic topic
creation, illegal names, replication factors of storage=s3 topics, configs written back as
described, and errors on a missing topic answered at once."""
from __future__ import annotations

import socket
import struct
import time
from typing import Any

import pytest
from kafka.protocol.metadata.metadata import MetadataRequest, MetadataResponse

from tests.kafka.test_wire import frame

pytestmark = pytest.mark.integration


def metadata(port: int, topics: list[str], allow_auto_create: bool, version: int = 9) -> Any:
    """One raw Metadata request to the broker at ``port`` (a client sets the flag as it likes)."""
    T = MetadataRequest.MetadataRequestTopic
    req = MetadataRequest[version](topics=[T(name=t) for t in topics], allow_auto_topic_creation=allow_auto_create)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(frame(req, version, correlation_id=5))
        (size,) = struct.unpack(">i", s.recv(4, socket.MSG_WAITALL))
        body = bytearray()
        while len(body) < size:
            body += s.recv(size - len(body))
    return MetadataResponse.decode(bytes(body), version=version, header=True)


def port_of(cluster: Any) -> int:
    return int(cluster.kafka_ports[min(cluster.kafka_ports)])


def test_a_producer_to_a_fresh_topic_creates_it_and_succeeds_at_once(shared_cluster) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient

    producer = Producer({"bootstrap.servers": shared_cluster.kafka_bootstrap, "linger.ms": 0})
    delivered: list[Any] = []
    started = time.monotonic()
    producer.produce("auto-fresh", b"first", callback=lambda err, msg: delivered.append((err, msg)))
    assert producer.flush(30) == 0
    elapsed_s = time.monotonic() - started
    [(err, msg)] = delivered
    assert err is None and msg.offset() == 0
    print(f"first record to a fresh topic acknowledged after {elapsed_s * 1000:.0f} ms")
    assert elapsed_s < 5
    md = AdminClient({"bootstrap.servers": shared_cluster.kafka_bootstrap}).list_topics("auto-fresh", timeout=10)
    partitions = md.topics["auto-fresh"].partitions
    assert len(partitions) == 1 and len(partitions[0].replicas) == 1  # num.partitions, default.replication.factor


def test_metadata_that_does_not_allow_creation_creates_nothing(shared_cluster) -> None:
    port = port_of(shared_cluster)
    out = metadata(port, ["auto-not-wanted"], allow_auto_create=False)
    assert [t.error_code for t in out.topics] == [3]  # UNKNOWN_TOPIC_OR_PARTITION
    time.sleep(0.5)
    again = metadata(port, ["auto-not-wanted"], allow_auto_create=False)
    assert [t.error_code for t in again.topics] == [3]
    created = metadata(port, ["auto-wanted"], allow_auto_create=True)
    [topic] = created.topics
    assert topic.error_code == 0 and len(topic.partitions) == 1 and topic.partitions[0].leader_id >= 0


@pytest.mark.parametrize("name", ["bad/name", "a" * 250, "..", "__consumer_offsets_no"])
def test_illegal_topic_names_are_invalid_topic_exception(shared_cluster, name: str) -> None:
    port = port_of(shared_cluster)
    for allow in (False, True):
        [topic] = metadata(port, [name], allow_auto_create=allow).topics
        if name.startswith("__"):  # a legal name: allowed it is created, refused it is unknown
            assert topic.error_code in ((0,) if allow else (3,))
        else:
            assert topic.error_code == 17, (name, allow)  # INVALID_TOPIC_EXCEPTION, and nothing created


def test_s3_topics_take_any_replication_factor_up_to_the_brokers(shared_cluster) -> None:
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": shared_cluster.kafka_bootstrap})
    admin.create_topics([NewTopic("rf3", 3, 3)], request_timeout=20)["rf3"].result(timeout=30)
    assignment = [[2, 3, 1], [3, 1, 2]]
    admin.create_topics([NewTopic("rf-assigned", num_partitions=2, replica_assignment=assignment)],
                        request_timeout=20)["rf-assigned"].result(timeout=30)
    with pytest.raises(KafkaException) as info:
        admin.create_topics([NewTopic("rf4", 1, 4)], request_timeout=20)["rf4"].result(timeout=30)
    assert info.value.args[0].code() == KafkaError.INVALID_REPLICATION_FACTOR
    md = admin.list_topics(timeout=10)
    for p in md.topics["rf3"].partitions.values():
        assert sorted(p.replicas) == [1, 2, 3] and sorted(p.isrs) == [1, 2, 3] and p.leader in p.replicas
    for index, p in md.topics["rf-assigned"].partitions.items():
        assert p.replicas == assignment[index] and p.leader == assignment[index][0]

    from confluent_kafka import Consumer, Producer, TopicPartition
    producer = Producer({"bootstrap.servers": shared_cluster.kafka_bootstrap})
    for i in range(6):
        producer.produce("rf3", str(i).encode(), partition=i % 3)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": shared_cluster.kafka_bootstrap, "group.id": "rf3-read",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition("rf3", p, 0) for p in range(3)])
    got = []
    deadline = time.monotonic() + 30
    while len(got) < 6 and time.monotonic() < deadline:
        msg = consumer.poll(1)
        if msg is not None and msg.error() is None:
            got.append(msg.value())
    consumer.close()
    assert sorted(got) == [str(i).encode() for i in range(6)]


def test_described_topic_configs_write_back_unchanged(shared_cluster) -> None:
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

    admin = AdminClient({"bootstrap.servers": shared_cluster.kafka_bootstrap})
    admin.create_topics([NewTopic("write-back", 1, 1)], request_timeout=20)["write-back"].result(timeout=30)
    resource = ConfigResource(ConfigResource.Type.TOPIC, "write-back")
    described = admin.describe_configs([resource], request_timeout=20)[resource].result(timeout=30)
    values = {name: entry.value for name, entry in described.items()}
    assert values["follower.replication.throttled.replicas"] == "" and values["max.message.bytes"] == "8388608"
    whole = ConfigResource(ConfigResource.Type.TOPIC, "write-back", set_config=values)
    admin.alter_configs([whole], request_timeout=20)[whole].result(timeout=30)
    entries = [ConfigEntry(n, v, incremental_operation=AlterConfigOpType.SET) for n, v in values.items()]
    incremental = ConfigResource(ConfigResource.Type.TOPIC, "write-back", incremental_configs=entries)
    admin.incremental_alter_configs([incremental], request_timeout=20)[incremental].result(timeout=30)
    after = admin.describe_configs([resource], request_timeout=20)[resource].result(timeout=30)
    assert {name: entry.value for name, entry in after.items()} == values


def test_configs_of_a_missing_topic_are_unknown_at_once(shared_cluster) -> None:
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

    admin = AdminClient({"bootstrap.servers": shared_cluster.kafka_bootstrap})
    missing = ConfigResource(ConfigResource.Type.TOPIC, "no-such-topic")
    calls = [
        lambda: admin.describe_configs([missing], request_timeout=20)[missing].result(timeout=30),
        lambda: admin.alter_configs([ConfigResource(ConfigResource.Type.TOPIC, "no-such-topic",
                                                    set_config={"retention.ms": "1000"})], request_timeout=20),
        lambda: admin.incremental_alter_configs([ConfigResource(
            ConfigResource.Type.TOPIC, "no-such-topic",
            incremental_configs=[ConfigEntry("retention.ms", "1000", incremental_operation=AlterConfigOpType.SET)])],
            request_timeout=20),
    ]
    for call in calls:
        started = time.monotonic()
        with pytest.raises(KafkaException) as info:
            result = call()
            if isinstance(result, dict):
                for future in result.values():
                    future.result(timeout=30)
        assert info.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART
        assert time.monotonic() - started < 3  # not retried for the request's timeout


def test_the_reported_max_message_bytes_is_the_limit_enforced(shared_cluster) -> None:
    from confluent_kafka import KafkaError, Producer
    from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

    admin = AdminClient({"bootstrap.servers": shared_cluster.kafka_bootstrap})
    created = admin.create_topics([NewTopic("limits", 1, 1),
                                   NewTopic("limits-own", 1, 1, config={"max.message.bytes": "100000"})],
                                  request_timeout=20)
    for future in created.values():
        future.result(timeout=30)
    producer = Producer({"bootstrap.servers": shared_cluster.kafka_bootstrap, "message.max.bytes": 32 * 1024 * 1024,
                         "linger.ms": 0, "retries": 0})
    for topic in ("limits", "limits-own"):
        resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
        limit = int(admin.describe_configs([resource], request_timeout=20)[resource].result(timeout=30)
                    ["max.message.bytes"].value)
        outcomes: list[Any] = []
        # a batch is the record plus ~80 bytes of framing: just under the limit passes, at the limit does not
        for size in (limit - 200, limit):
            producer.produce(topic, b"v" * size, callback=lambda err, _msg, outcomes=outcomes: outcomes.append(err))
            assert producer.flush(30) == 0
        assert outcomes[0] is None and outcomes[1] is not None, (topic, limit, outcomes)
        assert outcomes[1].code() == KafkaError.MSG_SIZE_TOO_LARGE
    assert limit == 100000
    refused = admin.alter_configs([ConfigResource(ConfigResource.Type.TOPIC, "limits",
                                                  set_config={"max.message.bytes": str(16 * 1024 * 1024)})],
                                  request_timeout=20)
    with pytest.raises(Exception) as info:
        for future in refused.values():
            future.result(timeout=30)
    assert info.value.args[0].code() == KafkaError.INVALID_CONFIG  # above what the brokers accept
