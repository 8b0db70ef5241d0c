"""The admin handlers without sockets: Kafka requests -> controller operations -> Kafka responses.

The controller is an in-process one (the real operations on a ``LocalController``) behind the
``ControllerCalls`` protocol, recording every call and able to fail like an unreachable or
overloaded quorum. Each response is also encoded at the request's version, so a field a version
lacks or a wrong type fails here rather than in a client.
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any, Mapping

import pytest
from kafka.protocol.admin.cluster import (AlterReplicaLogDirsRequest, DescribeClusterRequest,
                                          DescribeLogDirsRequest)
from kafka.protocol.admin.configs import AlterConfigsRequest, DescribeConfigsRequest, IncrementalAlterConfigsRequest
from kafka.protocol.admin.topics import (AlterPartitionReassignmentsRequest, CreatePartitionsRequest,
                                         CreateTopicsRequest, DeleteTopicsRequest, ElectLeadersRequest,
                                         ListPartitionReassignmentsRequest)
from kafka.protocol.api_message import ApiMessage

from broker.kafka.admin_apis import AdminApis, topic_id_text
from broker.kafka.apis import SUPPORTED_VERSIONS, check_table
from broker.kafka.broker_configs import StaticConfig
from broker.kafka.config_catalog import ConfigSource, ConfigType
from broker.kafka.data_apis import ZERO_UUID, topic_uuid
from broker.kafka.forwarding import Json, QuorumForwarder, forwarding_failure
from broker.kafka.wire import Request, encode_response
from broker.log_dirs_report import LogDirReport, ReplicaInDir, TopicFilter
from metadata_quorum.client import ControllerClient
from metadata_quorum.kernel.errors import ErrorCode, FerryError
from metadata_quorum.image import MetadataImage
from metadata_quorum.local_controller import LocalController
from tests.quorum.quorum_helpers import ManualClock, log_dirs

BROKER_ID = 1


class InProcessController:
    """``ControllerCalls`` answered by the real operations; ``fail_with`` makes every call fail."""

    def __init__(self, quorum: LocalController) -> None:
        self.quorum = quorum
        self.calls: list[tuple[str, str, Json, int]] = []
        self.fail_with: BaseException | None = None

    async def write(self, op: str, args: Json, timeout_ms: int) -> Json:
        self.calls.append(("write", op, args, timeout_ms))
        if self.fail_with is not None:
            raise self.fail_with
        return self.quorum.write(op, args)

    async def read(self, op: str, args: Json, timeout_ms: int) -> Json:
        self.calls.append(("read", op, args, timeout_ms))
        if self.fail_with is not None:
            raise self.fail_with
        return self.quorum.read(op, args)


@dataclass
class FakeBroker:
    """``AdminCore``: broker 1 of the in-process cluster, with one log dir."""

    quorum: LocalController
    broker_id: int = BROKER_ID
    cluster_id: str = "test-cluster"
    moved: list[tuple[str, int, str]] = field(default_factory=list)

    @property
    def image(self) -> MetadataImage | None:
        return self.quorum.image

    def static_configs(self) -> Mapping[str, StaticConfig]:
        return {"broker.id": StaticConfig(str(self.broker_id), ConfigType.INT, True, "id"),
                "log.dirs": StaticConfig("/data/b1/d0", ConfigType.LIST, True, "dirs"),
                "message.max.bytes": StaticConfig("8388608", ConfigType.INT, False, "max")}

    def log_dirs_report(self, wanted: TopicFilter) -> list[LogDirReport]:
        replicas = tuple(r for r in (ReplicaInDir("t", 0, 1234, 0, False), ReplicaInDir("t", 1, 10, 0, True))
                         if wanted(r.topic, r.partition))
        return [LogDirReport("/data/b1/d0", "ONLINE", None, 10_000, 4_000, replicas),
                LogDirReport("/data/b1/d1", "OFFLINE", ErrorCode.KAFKA_STORAGE_ERROR, 0, 0, ())]

    async def alter_replica_log_dirs(self, moves: list[tuple[str, int, str]]) -> list[FerryError | None]:
        self.moved += moves
        return [None if path == "/data/b1/d1" else FerryError(ErrorCode.LOG_DIR_NOT_FOUND, path)
                for _t, _p, path in moves]


def cluster() -> tuple[AdminApis, InProcessController, FakeBroker]:
    quorum = LocalController(ManualClock())
    for b in (1, 2, 3):
        epoch = quorum.write("register_broker", {
            "broker_id": b, "incarnation_id": f"inc-{b}", "log_dirs": log_dirs(b),
            "endpoints": [f"http://127.0.0.1:{9000 + b}", f"kafka://127.0.0.1:{9100 + b}"], "rack": f"r{b}"})
        quorum.write("broker_heartbeat", {"broker_id": b, "broker_epoch": epoch["broker_epoch"],
                                          "metadata_offset": quorum.image.offset})
    controller = InProcessController(quorum)
    broker = FakeBroker(quorum)
    return AdminApis(broker, controller), controller, broker


def request(body: ApiMessage, version: int) -> Request:
    return Request(body.API_KEY, version, 7, "test", body, 0)


def encoded(req: Request, response: ApiMessage) -> ApiMessage:
    """The response as a client decodes it at the request's version."""
    raw = encode_response(req, response)
    cls = type(response)
    return cls.decode(raw[4:], version=req.api_version, header=True)  # type: ignore[no-any-return]


def create(name: str, partitions: int = 1, rf: int = -1, configs: dict[str, str | None] | None = None,
           assignments: dict[int, list[int]] | None = None) -> Any:
    T = CreateTopicsRequest.CreatableTopic
    return T(name=name, num_partitions=partitions, replication_factor=rf,
             assignments=[T.CreatableReplicaAssignment(partition_index=p, broker_ids=b)
                          for p, b in (assignments or {}).items()],
             configs=[T.CreatableTopicConfig(name=k, value=v) for k, v in (configs or {}).items()])


def test_the_version_table_is_in_the_specs() -> None:
    check_table()
    assert SUPPORTED_VERSIONS[19] == (2, 7) and SUPPORTED_VERSIONS[20] == (1, 6)


# --------------------------------------------------------------------------- CreateTopics
@pytest.mark.parametrize("version", [2, 4, 5, 7])
async def test_create_topics_maps_each_topic_and_its_answer(version: int) -> None:
    apis, controller, _ = cluster()
    body = CreateTopicsRequest(topics=[create("t", 2, 1, {"retention.ms": "1000"}), create("t"),
                                       create("z", 0), create("both", 2, assignments={0: [1]})],
                               timeout_ms=5000, validate_only=False)
    req = request(body, version)
    out = encoded(req, await apis.create_topics(req))
    [(kind, op, args, timeout_ms)] = controller.calls
    assert (kind, op, timeout_ms) == ("write", "create_topics", 5000)
    assert [t["name"] for t in args["topics"]] == ["t", "t", "z"]  # "both" is refused before forwarding
    assert args["topics"][0] == {"name": "t", "num_partitions": 2, "replication_factor": 1,
                                 "default_num_partitions": 1, "default_replication_factor": 1,
                                 "configs": {"retention.ms": "1000"}}
    codes = [(t.name, t.error_code) for t in out.topics]
    assert codes == [("t", ErrorCode.INVALID_REQUEST.code), ("t", ErrorCode.INVALID_REQUEST.code),
                     ("z", ErrorCode.INVALID_PARTITIONS.code), ("both", ErrorCode.INVALID_REQUEST.code)]
    assert "Both numPartitions" in out.topics[3].error_message


async def test_create_topics_v7_reports_id_partitions_and_configs() -> None:
    apis, _, broker = cluster()
    req = request(CreateTopicsRequest(topics=[create("t", 3, -1, {"retention.ms": "1000"})], timeout_ms=0,
                                      validate_only=False), 7)
    [topic] = encoded(req, await apis.create_topics(req)).topics
    assert (topic.error_code, topic.num_partitions, topic.replication_factor) == (0, 3, 1)
    assert topic.topic_id == topic_uuid(broker.quorum.image.topics.by_name["t"])
    configs = {c.name: c for c in topic.configs}
    assert configs["retention.ms"].value == "1000"
    assert configs["retention.ms"].config_source == ConfigSource.DYNAMIC_TOPIC_CONFIG
    assert configs["segment.bytes"].config_source == ConfigSource.DEFAULT_CONFIG


async def test_create_topics_validate_only_and_manual_assignment() -> None:
    apis, controller, broker = cluster()
    req = request(CreateTopicsRequest(topics=[create("v", 2)], timeout_ms=1000, validate_only=True), 5)
    [topic] = encoded(req, await apis.create_topics(req)).topics
    assert topic.error_code == 0 and controller.calls[0][2]["validate_only"] is True
    assert "v" not in broker.quorum.image.topics.by_name
    req = request(CreateTopicsRequest(topics=[create("m", -1, -1, assignments={0: [3], 1: [2]})], timeout_ms=1000,
                                      validate_only=False), 5)
    [topic] = encoded(req, await apis.create_topics(req)).topics
    assert (topic.error_code, topic.num_partitions) == (0, 2)
    assert controller.calls[-1][2]["topics"][0]["assignments"] == {"0": [3], "1": [2]}


@pytest.mark.parametrize("exc,version,code,throttle_ms", [
    (FerryError(ErrorCode.THROTTLING_QUOTA_EXCEEDED, "busy", {"retry_after_ms": 250}), 6,
     ErrorCode.THROTTLING_QUOTA_EXCEEDED, 250),
    (FerryError(ErrorCode.THROTTLING_QUOTA_EXCEEDED, "busy", {"retry_after_ms": 250}), 5,
     ErrorCode.REQUEST_TIMED_OUT, 250),
    (FerryError(ErrorCode.NOT_CONTROLLER, "electing"), 7, ErrorCode.NOT_CONTROLLER, 0),
    (FerryError(ErrorCode.REPLICA_NOT_AVAILABLE, "loading"), 7, ErrorCode.NOT_CONTROLLER, 0),
    (FerryError(ErrorCode.REQUEST_TIMED_OUT, "no controller answered"), 7, ErrorCode.REQUEST_TIMED_OUT, 0),
    (ConnectionRefusedError("refused"), 7, ErrorCode.NOT_CONTROLLER, 0),
])
async def test_a_quorum_that_does_not_answer_fails_every_topic(exc: BaseException, version: int, code: ErrorCode,
                                                               throttle_ms: int) -> None:
    apis, controller, _ = cluster()
    controller.fail_with = exc
    req = request(CreateTopicsRequest(topics=[create("a"), create("b")], timeout_ms=1000, validate_only=False),
                  version)
    out = encoded(req, await apis.create_topics(req))
    assert [t.error_code for t in out.topics] == [code.code, code.code]
    assert out.throttle_time_ms == throttle_ms


class OffsetClientFake:
    async def write_with_offset(self, op: str, args: Json | None = None, timeout_ms: int | None = None,
                                retry_answers: bool = True) -> Json:
        return {"reply": {"op": op, "timeout_ms": timeout_ms}, "offset": 41}

    async def read(self, op: str, args: Json | None = None, timeout_ms: int | None = None,
                   leader: bool = True, retry_answers: bool = True) -> Json:
        return {"op": op, "leader": leader}


async def test_the_forwarder_answers_once_this_broker_has_the_write() -> None:
    waited: list[tuple[int, float]] = []

    async def wait_for_offset(offset: int, timeout_s: float) -> None:
        waited.append((offset, timeout_s))
        raise FerryError(ErrorCode.REQUEST_TIMED_OUT, "lagging")  # a lagging image does not fail the write

    forwarder = QuorumForwarder(OffsetClientFake(), wait_for_offset)
    assert await forwarder.write("create_topics", {}, 60_000) == {"op": "create_topics", "timeout_ms": 60_000}
    [(offset, timeout_s)] = waited
    assert offset == 41 and 4 < timeout_s <= 5  # bounded: never the whole admin timeout
    assert await forwarder.read("describe_configs", {}, 1000) == {"op": "describe_configs", "leader": True}


def test_bad_input_is_not_a_forwarding_failure() -> None:
    assert forwarding_failure(FerryError(ErrorCode.INVALID_CONFIG, "x")) is None
    assert forwarding_failure(ValueError("x")) is None


# --------------------------------------------------------------------------- DeleteTopics
@pytest.mark.parametrize("version", [1, 5, 6])
async def test_delete_topics_by_name(version: int) -> None:
    apis, controller, broker = cluster()
    broker.quorum.write("create_topics", {"topics": [{"name": "t"}]})
    if version >= 6:
        S = DeleteTopicsRequest.DeleteTopicState
        body = DeleteTopicsRequest(topics=[S(name="t", topic_id=ZERO_UUID), S(name="nope", topic_id=ZERO_UUID)],
                                   timeout_ms=1000)
    else:
        body = DeleteTopicsRequest(topic_names=["t", "nope"], timeout_ms=1000)
    req = request(body, version)
    out = encoded(req, await apis.delete_topics(req))
    assert controller.calls[0][2] == {"names": ["t", "nope"], "topic_ids": []}
    assert [(r.name, r.error_code) for r in out.responses] == [("t", 0), ("nope", 3)]
    assert "t" not in broker.quorum.image.topics.by_name


async def test_delete_topics_v6_by_id() -> None:
    apis, controller, broker = cluster()
    broker.quorum.write("create_topics", {"topics": [{"name": "t"}]})
    tid = topic_uuid(broker.quorum.image.topics.by_name["t"])
    S = DeleteTopicsRequest.DeleteTopicState
    unknown = uuid.uuid4()
    req = request(DeleteTopicsRequest(topics=[S(name=None, topic_id=tid), S(name=None, topic_id=unknown)],
                                      timeout_ms=1000), 6)
    out = encoded(req, await apis.delete_topics(req))
    assert controller.calls[0][2] == {"names": [], "topic_ids": [topic_id_text(tid), topic_id_text(unknown)]}
    assert [(r.name, r.topic_id, r.error_code) for r in out.responses] == [
        ("t", tid, 0), (None, unknown, ErrorCode.UNKNOWN_TOPIC_ID.code)]


# --------------------------------------------------------------------------- CreatePartitions
@pytest.mark.parametrize("version", [0, 1, 2, 3])
async def test_create_partitions(version: int) -> None:
    apis, controller, broker = cluster()
    broker.quorum.write("create_topics", {"topics": [{"name": "t", "num_partitions": 2}]})
    T = CreatePartitionsRequest.CreatePartitionsTopic
    body = CreatePartitionsRequest(topics=[
        T(name="t", count=4, assignments=[T.CreatePartitionsAssignment(broker_ids=[2]),
                                          T.CreatePartitionsAssignment(broker_ids=[3])]),
        T(name="nope", count=2, assignments=None)], timeout_ms=1000, validate_only=False)
    req = request(body, version)
    out = encoded(req, await apis.create_partitions(req))
    assert controller.calls[0][2]["topics"][0] == {"name": "t", "count": 4, "assignments": [[2], [3]]}
    assert [(r.name, r.error_code) for r in out.results] == [("t", 0), ("nope", 3)]
    topic = broker.quorum.image.topics.get("t")
    assert topic is not None and [topic.partitions[p].replicas for p in (2, 3)] == [(2,), (3,)]


# --------------------------------------------------------------------------- configs
def describe_configs(resources: list[tuple[int, str, list[str] | None]], synonyms: bool = False,
                     docs: bool = False) -> DescribeConfigsRequest:
    R = DescribeConfigsRequest.DescribeConfigsResource
    return DescribeConfigsRequest(resources=[R(resource_type=t, resource_name=n, configuration_keys=k)
                                             for t, n, k in resources],
                                  include_synonyms=synonyms, include_documentation=docs)


@pytest.mark.parametrize("version", [1, 2, 3, 4])
async def test_describe_topic_configs(version: int) -> None:
    apis, controller, broker = cluster()
    broker.quorum.write("create_topics", {"topics": [{"name": "t", "configs": {"retention.ms": "1000"}}]})
    req = request(describe_configs([(2, "t", None), (2, "nope", None), (2, "t", ["retention.ms", "x"])],
                                   synonyms=True, docs=True), version)
    out = encoded(req, await apis.describe_configs(req))
    assert all(c[1] == "describe_configs" and c[0] == "read" for c in controller.calls)
    everything, missing, some = out.results
    configs = {c.name: c for c in everything.configs}
    assert len(configs) > 30 and configs["retention.ms"].value == "1000"
    assert configs["retention.ms"].config_source == ConfigSource.DYNAMIC_TOPIC_CONFIG
    assert [(s.name, s.source) for s in configs["retention.ms"].synonyms] == [
        ("retention.ms", ConfigSource.DYNAMIC_TOPIC_CONFIG), ("log.retention.ms", ConfigSource.DEFAULT_CONFIG)]
    if version >= 3:
        assert configs["retention.ms"].config_type == 5 and configs["retention.ms"].documentation
    assert missing.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION.code and missing.configs == []
    assert [c.name for c in some.configs] == ["retention.ms"]


async def test_describe_broker_configs_for_this_broker_only() -> None:
    apis, _, broker = cluster()
    broker.quorum.write("alter_configs", {"resources": [
        {"type": "broker", "name": "1", "configs": {"leader.replication.throttled.rate": "100"}},
        {"type": "broker", "name": "", "configs": {"follower.replication.throttled.rate": "50"}}]})
    req = request(describe_configs([(4, "1", None), (4, "", None), (4, "2", None), (8, "1", None)], True), 4)
    mine, default, other, logger = encoded(req, await apis.describe_configs(req)).results
    configs = {c.name: c for c in mine.configs}
    assert configs["leader.replication.throttled.rate"].config_source == ConfigSource.DYNAMIC_BROKER_CONFIG
    assert configs["follower.replication.throttled.rate"].config_source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
    assert configs["broker.id"].read_only and configs["broker.id"].value == "1"
    assert [c.name for c in default.configs] == ["follower.replication.throttled.rate"]
    assert other.error_code == ErrorCode.INVALID_REQUEST.code and "Unexpected broker id" in other.error_message
    assert logger.error_code == ErrorCode.INVALID_REQUEST.code


@pytest.mark.parametrize("version", [0, 1])
async def test_incremental_alter_configs(version: int) -> None:
    apis, controller, broker = cluster()
    broker.quorum.write("create_topics", {"topics": [{"name": "t", "configs": {"retention.ms": "1000"}}]})
    R = IncrementalAlterConfigsRequest.AlterConfigsResource
    C = R.AlterableConfig
    body = IncrementalAlterConfigsRequest(resources=[
        R(resource_type=2, resource_name="t", configs=[C(name="retention.ms", config_operation=1, value=None),
                                                       C(name="cleanup.policy", config_operation=2, value="compact")]),
        R(resource_type=2, resource_name="t", configs=[C(name="retention.ms", config_operation=0, value="x")]),
        R(resource_type=2, resource_name="t", configs=[C(name="a", config_operation=0, value="1"),
                                                       C(name="a", config_operation=1, value=None)]),
        R(resource_type=2, resource_name="t", configs=[C(name="segment.ms", config_operation=9, value="1")]),
    ], validate_only=False)
    req = request(body, version)
    out = encoded(req, await apis.incremental_alter_configs(req))
    assert controller.calls[0][2] == {"resources": [{"type": "topic", "name": "t", "ops": [
        {"op": "delete", "key": "retention.ms", "value": None},
        {"op": "append", "key": "cleanup.policy", "value": "compact"}]}], "validate_only": False}
    assert [r.error_code for r in out.responses] == [0, ErrorCode.INVALID_CONFIG.code,
                                                     ErrorCode.INVALID_REQUEST.code, ErrorCode.INVALID_REQUEST.code]
    assert dict(broker.quorum.image.configs.get("topic", "t")) == {"cleanup.policy": "delete,compact"}


@pytest.mark.parametrize("version", [0, 1, 2])
async def test_alter_configs_replaces_the_topic_configs(version: int) -> None:
    apis, _, broker = cluster()
    broker.quorum.write("create_topics", {"topics": [{"name": "t", "configs": {"retention.ms": "1000"}}]})
    R = AlterConfigsRequest.AlterConfigsResource
    C = R.AlterableConfig
    req = request(AlterConfigsRequest(resources=[
        R(resource_type=2, resource_name="t", configs=[C(name="segment.ms", value="5000")]),
        R(resource_type=2, resource_name="t", configs=[C(name="segment.ms", value=None)])], validate_only=False),
        version)
    out = encoded(req, await apis.alter_configs(req))
    assert [r.error_code for r in out.responses] == [0, ErrorCode.INVALID_REQUEST.code]
    assert dict(broker.quorum.image.configs.get("topic", "t")) == {"segment.ms": "5000"}


async def test_group_configs_are_altered_and_described_before_the_group_exists() -> None:
    """ConfigResource GROUP (32): IncrementalAlterConfigs sets consumer.session.timeout.ms of a
    group nobody created; DescribeConfigs reports it as DYNAMIC_GROUP_CONFIG and the heartbeat
    interval as Kafka's default; a value outside group.consumer.min/max.* is INVALID_CONFIG."""
    apis, _, broker = cluster()
    R = IncrementalAlterConfigsRequest.AlterConfigsResource
    C = R.AlterableConfig
    req = request(IncrementalAlterConfigsRequest(resources=[
        R(resource_type=32, resource_name="g", configs=[C(name="consumer.session.timeout.ms", config_operation=0,
                                                          value="50000")]),
        R(resource_type=32, resource_name="g", configs=[C(name="consumer.session.timeout.ms", config_operation=0,
                                                          value="70000")]),
        R(resource_type=32, resource_name="g", configs=[C(name="share.session.timeout.ms", config_operation=0,
                                                          value="50000")])], validate_only=False), 1)
    out = encoded(req, await apis.incremental_alter_configs(req))
    assert [r.error_code for r in out.responses] == [0, ErrorCode.INVALID_CONFIG.code, ErrorCode.INVALID_CONFIG.code]
    assert "less than or equal to group.consumer.max.session.timeout.ms" in out.responses[1].error_message
    assert dict(broker.quorum.image.configs.get("group", "g")) == {"consumer.session.timeout.ms": "50000"}
    req = request(describe_configs([(32, "g", None), (32, "other", ["consumer.heartbeat.interval.ms"])],
                                   synonyms=True, docs=True), 4)
    mine, other = encoded(req, await apis.describe_configs(req)).results
    configs = {c.name: c for c in mine.configs}
    assert sorted(configs) == ["consumer.heartbeat.interval.ms", "consumer.session.timeout.ms"]
    session, heartbeat = configs["consumer.session.timeout.ms"], configs["consumer.heartbeat.interval.ms"]
    assert (session.value, session.config_source, session.read_only, session.config_type) == (
        "50000", ConfigSource.DYNAMIC_GROUP_CONFIG, False, 3)
    assert (heartbeat.value, heartbeat.config_source) == ("5000", ConfigSource.DEFAULT_CONFIG)
    assert other.error_code == 0 and [(c.name, c.value) for c in other.configs] == [
        ("consumer.heartbeat.interval.ms", "5000")]
    R2 = AlterConfigsRequest.AlterConfigsResource
    req = request(AlterConfigsRequest(resources=[R2(resource_type=32, resource_name="g", configs=[
        R2.AlterableConfig(name="consumer.heartbeat.interval.ms", value="6000")])], validate_only=False), 2)
    assert encoded(req, await apis.alter_configs(req)).responses[0].error_code == 0
    assert dict(broker.quorum.image.configs.get("group", "g")) == {"consumer.heartbeat.interval.ms": "6000"}


# --------------------------------------------------------------------------- DescribeCluster
@pytest.mark.parametrize("version", [0, 1, 2])
async def test_describe_cluster(version: int) -> None:
    apis, _, broker = cluster()
    reg = broker.quorum.image.cluster.brokers[3]
    broker.quorum.write("broker_heartbeat", {"broker_id": 3, "broker_epoch": reg.broker_epoch,
                                             "metadata_offset": broker.quorum.image.offset, "want_shutdown": True})
    req = request(DescribeClusterRequest(include_cluster_authorized_operations=True, endpoint_type=1,
                                         include_fenced_brokers=True), version)
    out = encoded(req, await apis.describe_cluster(req))
    ids = [(b.broker_id, b.host, b.port, b.rack) for b in out.brokers]
    expected = [(1, "127.0.0.1", 9101, "r1"), (2, "127.0.0.1", 9102, "r2")]
    assert ids == (expected + [(3, "127.0.0.1", 9103, "r3")] if version >= 2 else expected)
    assert out.controller_id == BROKER_ID and out.cluster_id == "test-cluster" and out.error_code == 0
    assert 7 in out.authorized_operations  # ALTER
    if version >= 1:
        req = request(DescribeClusterRequest(include_cluster_authorized_operations=False, endpoint_type=2,
                                             include_fenced_brokers=False), version)
        out = encoded(req, await apis.describe_cluster(req))
        assert (out.error_code, out.error_message) == (ErrorCode.MISMATCHED_ENDPOINT_TYPE.code, "The request was sent "
                                                       "to an endpoint of type BROKER, but we wanted an endpoint of "
                                                       "type CONTROLLER")
        req = request(DescribeClusterRequest(include_cluster_authorized_operations=False, endpoint_type=9,
                                             include_fenced_brokers=False), version)
        out = encoded(req, await apis.describe_cluster(req))
        assert (out.error_code, out.error_message) == (ErrorCode.UNSUPPORTED_ENDPOINT_TYPE.code,
                                                       "Unsupported endpoint type 9")


# --------------------------------------------------------------------------- reassignments and elections
async def test_alter_and_list_partition_reassignments() -> None:
    apis, controller, broker = cluster()
    broker.quorum.write("create_topics", {"topics": [{"name": "t", "assignments": {"0": [1], "1": [2]}}]})
    T = AlterPartitionReassignmentsRequest.ReassignableTopic
    P = T.ReassignablePartition
    body = AlterPartitionReassignmentsRequest(timeout_ms=2000, allow_replication_factor_change=False, topics=[
        T(name="t", partitions=[P(partition_index=0, replicas=[3]), P(partition_index=1, replicas=[2, 3]),
                                P(partition_index=7, replicas=[1])])])
    req = request(body, 1)
    out = encoded(req, await apis.alter_partition_reassignments(req))
    assert controller.calls[0][2] == {"reassignments": [
        {"topic": "t", "partition": 0, "replica_set": True, "replicas": [3]},
        {"topic": "t", "partition": 7, "replica_set": True, "replicas": [1]}]}
    [topic] = out.responses
    assert [(p.partition_index, p.error_code) for p in topic.partitions] == [
        (0, 0), (1, ErrorCode.INVALID_REPLICATION_FACTOR.code), (7, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION.code)]
    L = ListPartitionReassignmentsRequest.ListPartitionReassignmentsTopics
    req = request(ListPartitionReassignmentsRequest(timeout_ms=1000, topics=[L(name="t", partition_indexes=[0, 1])]), 0)
    out = encoded(req, await apis.list_partition_reassignments(req))
    assert controller.calls[-1][2] == {"partitions": [{"topic": "t", "partition": 0}, {"topic": "t", "partition": 1}]}
    [topic] = out.topics
    [moving] = topic.partitions
    assert (moving.partition_index, moving.replicas, moving.adding_replicas, moving.removing_replicas) == \
        (0, [3], [3], [1])


async def test_an_s3_partitions_replication_factor_is_its_assigned_brokers() -> None:
    apis, controller, broker = cluster()
    broker.quorum.write("create_topics", {"topics": [{"name": "s", "assignments": {"0": [1, 2, 3]}}]})
    T = AlterPartitionReassignmentsRequest.ReassignableTopic
    P = T.ReassignablePartition
    body = AlterPartitionReassignmentsRequest(timeout_ms=2000, allow_replication_factor_change=False, topics=[
        T(name="s", partitions=[P(partition_index=0, replicas=[2])])])
    out = encoded(request(body, 1), await apis.alter_partition_reassignments(request(body, 1)))
    assert out.responses[0].partitions[0].error_code == ErrorCode.INVALID_REPLICATION_FACTOR.code  # 3 -> 1
    body.topics[0].partitions[0].replicas = [3, 2, 1]
    out = encoded(request(body, 1), await apis.alter_partition_reassignments(request(body, 1)))
    assert out.responses[0].partitions[0].error_code == 0
    part = broker.quorum.image.topics.partition(broker.quorum.image.topics.by_name["s"], 0)
    assert part is not None and part.replicas == (1,)  # the owner is among them: it stays


async def test_reassignment_failure_is_a_top_level_error() -> None:
    apis, controller, _ = cluster()
    controller.fail_with = FerryError(ErrorCode.NOT_CONTROLLER, "no leader")
    T = AlterPartitionReassignmentsRequest.ReassignableTopic
    req = request(AlterPartitionReassignmentsRequest(timeout_ms=1000, topics=[
        T(name="t", partitions=[T.ReassignablePartition(partition_index=0, replicas=[2])])]), 0)
    out = encoded(req, await apis.alter_partition_reassignments(req))
    assert out.error_code == ErrorCode.NOT_CONTROLLER.code
    req = request(ListPartitionReassignmentsRequest(timeout_ms=1000, topics=None), 0)
    assert encoded(req, await apis.list_partition_reassignments(req)).error_code == ErrorCode.NOT_CONTROLLER.code


@pytest.mark.parametrize("version", [0, 1, 2])
async def test_elect_leaders(version: int) -> None:
    apis, controller, broker = cluster()
    broker.quorum.write("create_topics", {"topics": [{"name": "t", "num_partitions": 2}]})
    T = ElectLeadersRequest.TopicPartitions
    req = request(ElectLeadersRequest(election_type=0, topic_partitions=[T(topic="t", partitions=[0, 5])],
                                      timeout_ms=1000), version)
    out = encoded(req, await apis.elect_leaders(req))
    assert controller.calls[0][2] == {"election_type": "preferred", "partitions": [
        {"topic": "t", "partition": 0}, {"topic": "t", "partition": 5}]}
    [topic] = out.replica_election_results
    assert [(p.partition_id, p.error_code) for p in topic.partition_result] == [
        (0, ErrorCode.ELECTION_NOT_NEEDED.code), (5, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION.code)]


async def test_elect_leaders_unknown_type_and_failure() -> None:
    apis, controller, _ = cluster()
    T = ElectLeadersRequest.TopicPartitions
    req = request(ElectLeadersRequest(election_type=7, topic_partitions=[T(topic="t", partitions=[0])],
                                      timeout_ms=1000), 1)
    out = encoded(req, await apis.elect_leaders(req))
    assert out.error_code == ErrorCode.INVALID_REQUEST.code and controller.calls == []
    controller.fail_with = TimeoutError()
    req = request(ElectLeadersRequest(topic_partitions=[T(topic="t", partitions=[0])], timeout_ms=1000), 0)
    [topic] = encoded(req, await apis.elect_leaders(req)).replica_election_results
    assert topic.partition_result[0].error_code == ErrorCode.REQUEST_TIMED_OUT.code


# --------------------------------------------------------------------------- log dirs
@pytest.mark.parametrize("version", [1, 3, 4])
async def test_describe_log_dirs(version: int) -> None:
    apis, controller, _ = cluster()
    T = DescribeLogDirsRequest.DescribableLogDirTopic
    req = request(DescribeLogDirsRequest(topics=[T(topic="t", partitions=[0])]), version)
    online, offline = encoded(req, await apis.describe_log_dirs(req)).results
    assert controller.calls == []  # about this broker's own disks: never forwarded
    [topic] = online.topics
    [p] = topic.partitions
    assert (online.log_dir, topic.name, p.partition_index, p.partition_size, p.is_future_key) == \
        ("/data/b1/d0", "t", 0, 1234, False)
    assert offline.error_code == ErrorCode.KAFKA_STORAGE_ERROR.code
    if version >= 4:
        assert (online.total_bytes, online.usable_bytes) == (10_000, 4_000)
    req = request(DescribeLogDirsRequest(topics=None), version)
    online, _ = encoded(req, await apis.describe_log_dirs(req)).results
    assert [(p.partition_index, p.is_future_key) for p in online.topics[0].partitions] == [(0, False), (1, True)]


@pytest.mark.parametrize("version", [1, 2])
async def test_alter_replica_log_dirs(version: int) -> None:
    apis, _, broker = cluster()
    D = AlterReplicaLogDirsRequest.AlterReplicaLogDir
    T = D.AlterReplicaLogDirTopic
    req = request(AlterReplicaLogDirsRequest(dirs=[D(path="/data/b1/d1", topics=[T(name="t", partitions=[0, 1])]),
                                                   D(path="/nope", topics=[T(name="u", partitions=[0])])]), version)
    out = encoded(req, await apis.alter_replica_log_dirs(req))
    assert broker.moved == [("t", 0, "/data/b1/d1"), ("t", 1, "/data/b1/d1"), ("u", 0, "/nope")]
    assert [(r.topic_name, [(p.partition_index, p.error_code) for p in r.partitions]) for r in out.results] == [
        ("t", [(0, 0), (1, 0)]), ("u", [(0, ErrorCode.LOG_DIR_NOT_FOUND.code)])]


class AnsweringClient(ControllerClient):
    """The real controller client, its HTTP request answered by a list of errors in turn."""

    def __init__(self, errors: list[FerryError]) -> None:
        super().__init__(["http://127.0.0.1:1"], timeout_ms=5_000)
        self.errors = errors
        self.requests = 0

    async def request(self, method: str, url: str, path: str, body: Any = None, timeout_s: float = 10.0,
                      params: dict[str, Any] | None = None) -> Any:
        self.requests += 1
        if self.errors:
            raise self.errors.pop(0)
        return {"reply": {"ok": True}, "offset": 1}


async def test_the_forwarder_returns_an_operations_answer_at_once_and_retries_only_unavailability() -> None:
    async def no_wait(offset: int, timeout_s: float) -> None:
        return None

    missing = FerryError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "topic 'x' does not exist")  # retriable in Kafka
    client = AnsweringClient([missing])
    with pytest.raises(FerryError) as info:
        await QuorumForwarder(client, no_wait).read("describe_configs", {}, 30_000)
    assert info.value.error is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and client.requests == 1
    client = AnsweringClient([missing])
    with pytest.raises(FerryError):
        await QuorumForwarder(client, no_wait).write("alter_configs", {}, 30_000)
    assert client.requests == 1
    client = AnsweringClient([FerryError(ErrorCode.NOT_CONTROLLER, "electing"),
                              FerryError(ErrorCode.REQUEST_TIMED_OUT, "commit timed out")])
    assert await QuorumForwarder(client, no_wait).write("alter_configs", {}, 30_000) == {"ok": True}
    assert client.requests == 3
