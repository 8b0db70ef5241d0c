"""The admin clients of confluent-kafka, aiokafka and kafka-python, unmodified, against a real cluster.

Each client creates, describes, reconfigures, grows, moves and deletes a topic through whichever
broker it picks as the controller; the broker forwards to the controller quorum. Each API a
client offers is exercised; a client that lacks an API (confluent-kafka has no reassignment or
log-dir calls, aiokafka no incremental configs) skips it.
"""
from __future__ import annotations

import time
from typing import Any, Callable

import pytest

pytestmark = pytest.mark.integration


def eventually(check: Callable[[], Any], timeout_s: float = 20.0, interval_s: float = 0.2) -> Any:
    """Retry ``check`` until it returns a truthy value without raising (metadata settles)."""
    deadline = time.monotonic() + timeout_s
    last: BaseException | None = None
    while time.monotonic() < deadline:
        try:
            result = check()
            if result:
                return result
        except (AssertionError, Exception) as exc:  # noqa: BLE001 - retried until the deadline
            last = exc
        time.sleep(interval_s)
    raise AssertionError(f"not reached in {timeout_s} s (last error: {last!r})")


# --------------------------------------------------------------------------- confluent-kafka
def test_confluent_admin_client(shared_cluster) -> None:
    from confluent_kafka import ElectionType, KafkaError, KafkaException, TopicCollection, TopicPartition
    from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource,
                                       NewPartitions, NewTopic)

    admin = AdminClient({"bootstrap.servers": shared_cluster.kafka_bootstrap})
    topic = "ck-admin"
    futures = admin.create_topics([NewTopic(topic, 2, 1, config={"retention.ms": "3600000"})], request_timeout=20)
    futures[topic].result(timeout=30)

    def error_of(new_topic: NewTopic) -> int:
        with pytest.raises(KafkaException) as info:
            admin.create_topics([new_topic], request_timeout=20)[new_topic.topic].result(timeout=30)
        return info.value.args[0].code()

    assert error_of(NewTopic(topic, 2, 1)) == KafkaError.TOPIC_ALREADY_EXISTS
    assert error_of(NewTopic("ck-zero", 0, 1)) == KafkaError.INVALID_PARTITIONS
    assert error_of(NewTopic("ck-badconf", 1, 1, config={"retention.ms": "soon"})) == KafkaError.INVALID_CONFIG
    validate = admin.create_topics([NewTopic("ck-validate", 1, 1)], validate_only=True, request_timeout=20)
    validate["ck-validate"].result(timeout=30)

    def exists(name: str) -> bool:
        try:
            admin.describe_topics(TopicCollection([name]), request_timeout=20)[name].result(timeout=30)
            return True
        except KafkaException as exc:
            assert exc.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART
            return False

    assert not exists("ck-validate")
    described = admin.describe_topics(TopicCollection([topic]), request_timeout=20)[topic].result(timeout=30)
    assert len(described.partitions) == 2
    assert len(admin.list_topics(timeout=30).topics[topic].partitions) == 2  # Metadata v12 with trailing bytes

    cluster = admin.describe_cluster(request_timeout=20).result(timeout=30)
    assert sorted(n.id for n in cluster.nodes) == [1, 2, 3]
    assert cluster.controller is not None and cluster.controller.id in {1, 2, 3}
    assert cluster.cluster_id

    resource = ConfigResource("topic", topic)
    configs = admin.describe_configs([resource], request_timeout=20)[resource].result(timeout=30)
    assert configs["retention.ms"].value == "3600000"
    assert configs["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert configs["segment.ms"].is_default

    change = ConfigResource("topic", topic, incremental_configs=[
        ConfigEntry("retention.ms", "7200000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND)])
    admin.incremental_alter_configs([change], request_timeout=20)[change].result(timeout=30)
    configs = admin.describe_configs([resource], request_timeout=20)[resource].result(timeout=30)
    assert configs["retention.ms"].value == "7200000"
    assert configs["cleanup.policy"].value == "delete,compact"

    admin.create_partitions([NewPartitions(topic, 4)], request_timeout=20)[topic].result(timeout=30)
    with pytest.raises(KafkaException) as info:
        admin.create_partitions([NewPartitions(topic, 3)], request_timeout=20)[topic].result(timeout=30)
    assert info.value.args[0].code() == KafkaError.INVALID_PARTITIONS
    eventually(lambda: len(admin.describe_topics(TopicCollection([topic]), request_timeout=20)[topic]
                           .result(timeout=30).partitions) == 4)

    elected = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic, 0)]).result(timeout=30)
    outcome = elected[TopicPartition(topic, 0)]
    assert outcome is None or outcome.code() == KafkaError.ELECTION_NOT_NEEDED

    admin.delete_topics([topic], request_timeout=20)[topic].result(timeout=30)
    eventually(lambda: not exists(topic))
    with pytest.raises(KafkaException) as info:
        admin.delete_topics([topic], request_timeout=20)[topic].result(timeout=30)
    assert info.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_confluent_list_offsets_max_timestamp_and_group_configs(shared_cluster) -> None:
    """ListOffsets v7 (-3, KIP-734) through confluent-kafka's list_offsets, before and after
    DeleteRecords removed the record holding the largest timestamp; a consumer group's configs
    (ConfigResource GROUP, KIP-848) described and altered before the group exists."""
    from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition
    from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource,
                                       NewTopic, OffsetSpec)

    admin = AdminClient({"bootstrap.servers": shared_cluster.kafka_bootstrap})
    topic = "ck-max-ts"
    admin.create_topics([NewTopic(topic, 1, 1)], request_timeout=20)[topic].result(timeout=30)
    producer = Producer({"bootstrap.servers": shared_cluster.kafka_bootstrap, "linger.ms": 50})
    for ts in (10_000_100, 10_000_400, 10_000_250, 9_000):  # librdkafka's 0081 case, and an older one
        producer.produce(topic, b"m", partition=0, timestamp=ts)
    assert producer.flush(30) == 0
    tp = TopicPartition(topic, 0)

    def offset_of(spec: OffsetSpec) -> tuple[int, int]:
        info = admin.list_offsets({tp: spec}, request_timeout=20)[tp].result(timeout=30)
        return info.offset, info.timestamp

    assert eventually(lambda: offset_of(OffsetSpec.max_timestamp()) == (1, 10_000_400))
    assert offset_of(OffsetSpec.earliest())[0] == 0 and offset_of(OffsetSpec.latest())[0] == 4
    [deleted] = admin.delete_records([TopicPartition(topic, 0, 2)], request_timeout=20).values()
    assert deleted.result(timeout=30).low_watermark == 2
    assert offset_of(OffsetSpec.max_timestamp()) == (2, 10_000_250)

    group = ConfigResource("group", "ck-configured-group")
    configs = admin.describe_configs([group], request_timeout=20)[group].result(timeout=30)
    assert configs["consumer.session.timeout.ms"].value == "45000" and configs["consumer.session.timeout.ms"].is_default
    assert configs["consumer.heartbeat.interval.ms"].value == "5000"
    change = ConfigResource("group", "ck-configured-group", incremental_configs=[
        ConfigEntry("consumer.session.timeout.ms", "50000", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([change], request_timeout=20)[change].result(timeout=30)
    configs = admin.describe_configs([group], request_timeout=20)[group].result(timeout=30)
    assert configs["consumer.session.timeout.ms"].value == "50000"
    assert configs["consumer.session.timeout.ms"].source == ConfigSource.GROUP_CONFIG.value
    too_long = ConfigResource("group", "ck-configured-group", incremental_configs=[
        ConfigEntry("consumer.session.timeout.ms", "60001", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException) as info:
        admin.incremental_alter_configs([too_long], request_timeout=20)[too_long].result(timeout=30)
    assert info.value.args[0].code() == KafkaError.INVALID_CONFIG
    configs = admin.describe_configs([group], request_timeout=20)[group].result(timeout=30)
    assert configs["consumer.session.timeout.ms"].value == "50000"


# --------------------------------------------------------------------------- aiokafka
async def test_aiokafka_admin_client(shared_cluster) -> None:
    from aiokafka.admin import AIOKafkaAdminClient, NewPartitions, NewTopic
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
    from aiokafka.errors import InvalidPartitionsError

    admin = AIOKafkaAdminClient(bootstrap_servers=shared_cluster.kafka_bootstrap, request_timeout_ms=30000)
    await admin.start()
    try:
        topic = "aio-admin"
        response = await admin.create_topics([NewTopic(topic, 2, 1, topic_configs={"retention.ms": "3600000"})])
        assert [(t[0], t[1]) for t in response.topic_errors] == [(topic, 0)]
        bad = await admin.create_topics([NewTopic(topic, 2, 1), NewTopic("aio-zero", 0, 1),
                                         NewTopic("aio-badconf", 1, 1, topic_configs={"segment.bytes": "x"})])
        assert [(t[0], t[1]) for t in bad.topic_errors] == [(topic, 36), ("aio-zero", 37), ("aio-badconf", 40)]

        assert topic in await admin.list_topics()
        described = (await admin.describe_topics([topic]))[0]
        assert described["topic"] == topic and len(described["partitions"]) == 2
        cluster = await admin.describe_cluster()
        assert sorted(b["node_id"] for b in cluster["brokers"]) == [1, 2, 3]
        assert cluster["controller_id"] in {1, 2, 3}

        resource = ConfigResource(ConfigResourceType.TOPIC, topic)
        [described_configs] = await admin.describe_configs([resource])
        values = {c[0]: c[1] for c in described_configs.resources[0][4]}
        assert values["retention.ms"] == "3600000" and values["cleanup.policy"] == "delete"

        # AlterConfigs (not incremental): the request's configs replace the topic's dynamic ones
        change = ConfigResource(ConfigResourceType.TOPIC, topic, configs={"segment.ms": "600000"})
        [altered] = await admin.alter_configs([change])
        assert [(r[0], r[3]) for r in altered.resources] == [(0, topic)]
        [described_configs] = await admin.describe_configs([resource])
        values = {c[0]: c[1] for c in described_configs.resources[0][4]}
        assert values["segment.ms"] == "600000" and values["retention.ms"] == "604800000"

        await admin.create_partitions({topic: NewPartitions(3)})
        with pytest.raises(InvalidPartitionsError):
            await admin.create_partitions({topic: NewPartitions(3)})

        deleted = await admin.delete_topics([topic, "aio-never"])
        assert sorted((t[0], t[1]) for t in deleted.topic_error_codes) == [(topic, 0), ("aio-never", 3)]
    finally:
        await admin.close()


# --------------------------------------------------------------------------- kafka-python
def test_kafka_python_admin_client(shared_cluster) -> None:
    import kafka.errors as Errors
    from kafka import KafkaAdminClient, TopicPartition
    from kafka.admin import ConfigResource, ConfigResourceType, NewPartitions
    from kafka.admin._configs import AlterConfigOp

    admin = KafkaAdminClient(bootstrap_servers=shared_cluster.kafka_bootstrap, request_timeout_ms=30000)
    try:
        topic = "kp-admin"
        created = admin.create_topics({topic: {"num_partitions": 2, "replication_factor": 1,
                                               "configs": {"retention.ms": "3600000"}}})
        [result] = created["topics"]
        assert result["error_code"] == 0 and result["num_partitions"] == 2 and result["replication_factor"] == 1
        assert result["configs"]["retention.ms"]["value"] == "3600000"
        with pytest.raises(Errors.TopicAlreadyExistsError):
            admin.create_topics({topic: {"num_partitions": 2}})
        with pytest.raises(Errors.InvalidPartitionsError):
            admin.create_topics({"kp-zero": {"num_partitions": 0}})
        with pytest.raises(Errors.InvalidConfigurationError):
            admin.create_topics({"kp-badconf": {"configs": {"no.such.config": "1"}}})

        assert topic in admin.list_topics()
        [described] = admin.describe_topics([topic])
        assert described["error_code"] == 0 and len(described["partitions"]) == 2
        cluster = admin.describe_cluster()
        assert sorted(b["broker_id"] for b in cluster["brokers"]) == [1, 2, 3]
        assert cluster["controller_id"] in {1, 2, 3} and cluster["cluster_id"]

        resource = ConfigResource(ConfigResourceType.TOPIC, topic)
        configs = admin.describe_configs([resource], include_synonyms=True)["topic"][topic]
        assert configs["retention.ms"]["value"] == "3600000"
        assert configs["retention.ms"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
        assert [s["source"] for s in configs["retention.ms"]["synonyms"]] == ["DYNAMIC_TOPIC_CONFIG", "DEFAULT_CONFIG"]
        everything = admin.describe_configs([resource], config_filter="all")["topic"][topic]
        assert everything["segment.bytes"]["value"] == "1073741824"
        assert everything["segment.bytes"]["config_source"] == "DEFAULT_CONFIG"

        outcome = admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic, configs={
            "retention.ms": (AlterConfigOp.DELETE, None), "cleanup.policy": (AlterConfigOp.APPEND, "compact")})])
        assert outcome == {"topic": {topic: "OK"}}
        configs = admin.describe_configs([resource])["topic"][topic]
        assert "retention.ms" not in configs and configs["cleanup.policy"]["value"] == "delete,compact"
        broker = admin.describe_configs([ConfigResource(ConfigResourceType.BROKER, "1")], config_filter="all")
        assert broker["broker"]["1"]["broker.id"]["value"] == "1"

        admin.create_partitions({topic: NewPartitions(3)})
        with pytest.raises(Errors.InvalidPartitionsError):
            admin.create_partitions({topic: NewPartitions(2)})
        eventually(lambda: len(admin.describe_topics([topic])[0]["partitions"]) == 3)

        tp = TopicPartition(topic, 0)
        owner = eventually(lambda: next(p["leader_id"] for p in admin.describe_topics([topic])[0]["partitions"]
                                        if p["partition_index"] == 0 and p["leader_id"] >= 0))
        target = owner % 3 + 1
        accepted = admin.alter_partition_reassignments({tp: [target]})
        assert accepted == {tp: None}
        listed = admin.list_partition_reassignments([tp])
        assert listed == {} or listed[tp]["replicas"] == [target]
        eventually(lambda: next(p["leader_id"] for p in admin.describe_topics([topic])[0]["partitions"]
                                if p["partition_index"] == 0) == target)
        # Metadata names the owner-to-be as leader as soon as the hand-over starts; the
        # reassignment is listed until it serves
        eventually(lambda: admin.list_partition_reassignments() == {})
        refused = admin.alter_partition_reassignments({TopicPartition(topic, 9): [target]})
        assert refused == {TopicPartition(topic, 9): Errors.UnknownTopicOrPartitionError}

        dirs = admin.describe_log_dirs(brokers=[target])
        [entry] = dirs
        hosted = [(t["name"], p["partition_index"]) for d in entry["log_dirs"] for t in d["topics"]
                  for p in t["partitions"]]
        assert (topic, 0) in hosted
        assert all(d["total_bytes"] > 0 and d["usable_bytes"] >= 0 for d in entry["log_dirs"])

        elected = admin.elect_leaders(0, {topic: [0]}, raise_errors=False)
        codes = [p.error_code for r in elected.replica_election_results for p in r.partition_result]
        assert codes in ([0], [Errors.ElectionNotNeededError.errno])

        deleted = admin.delete_topics([topic])
        assert [t["error_code"] for t in deleted["topics"]] == [0]
        with pytest.raises(Errors.UnknownTopicOrPartitionError):
            admin.delete_topics([topic])
    finally:
        admin.close()
