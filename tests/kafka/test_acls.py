"""ACLs: the ACL APIs' answers (a fake controller), then SASL principals held to ACLs by a real cluster."""
from __future__ import annotations

import json
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer, TopicCollection, TopicPartition
from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType, AdminClient,
                                   NewTopic, OffsetSpec, ResourcePatternType, ResourceType)
from kafka.protocol.admin.acl import CreateAclsRequest, DeleteAclsRequest, DescribeAclsRequest

from broker.producer_ids import CountingProducerIds
from broker.kafka.acl_apis import AclApis
from broker.kafka.authorization import Authorization
from broker.kafka.wire import Request
from metadata_quorum.authorizer import AuthorizerSettings
from metadata_quorum.image import EMPTY_IMAGE
from metadata_quorum.kernel.errors import ErrorCode
from tools.cluster import LocalCluster


class NoController:
    """A controller that must not be asked (a refused request changes nothing)."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    async def write(self, op: str, args: dict[str, Any], timeout_ms: int) -> dict[str, Any]:
        self.calls.append(op)
        raise AssertionError(f"{op} forwarded")

    async def read(self, op: str, args: dict[str, Any], timeout_ms: int) -> dict[str, Any]:
        raise AssertionError(f"{op} forwarded")


def request(body: Any, principal: str = "User:ANONYMOUS") -> Request:
    version = body.version if body.version is not None else 3
    return Request(int(body.API_KEY), version, 1, "c", body, 0, 0, "/127.0.0.1", principal)


def creation() -> Any:
    C = CreateAclsRequest.AclCreation
    return C(resource_type=2, resource_name="t", resource_pattern_type=3, principal="User:a", host="*", operation=3,
             permission_type=3)


def a_filter(cls: Any) -> Any:
    return cls(resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1, principal_filter=None,
               host_filter=None, operation=1, permission_type=1)


@pytest.mark.parametrize("settings, error", [
    (AuthorizerSettings(), ErrorCode.SECURITY_DISABLED),  # no authorizer, as Kafka without authorizer.class.name
    (AuthorizerSettings(enabled=True), ErrorCode.CLUSTER_AUTHORIZATION_FAILED),  # no ALTER/DESCRIBE on the cluster
])
async def test_acl_apis_refuse_without_an_authorizer_or_cluster_permission(settings: AuthorizerSettings,
                                                                          error: ErrorCode) -> None:
    controller = NoController()
    apis = AclApis(Authorization(settings, lambda: EMPTY_IMAGE), controller)
    created = await apis.create_acls(request(CreateAclsRequest(creations=[creation(), creation()])))
    assert [r.error_code for r in created.results] == [error.code] * 2  # type: ignore[attr-defined]
    deleted = await apis.delete_acls(request(DeleteAclsRequest(filters=[a_filter(DeleteAclsRequest.DeleteAclsFilter)])))
    assert [r.error_code for r in deleted.filter_results] == [error.code]  # type: ignore[attr-defined]
    described = await apis.describe_acls(request(a_filter(DescribeAclsRequest)))
    assert described.error_code == error.code and described.resources == []  # type: ignore[attr-defined]
    if error is ErrorCode.SECURITY_DISABLED:
        assert described.error_message == "No Authorizer is configured."  # type: ignore[attr-defined]
    assert controller.calls == []


@pytest.fixture(scope="module")
def acl_cluster(tmp_path_factory):  # type: ignore[no-untyped-def]
    root = tmp_path_factory.mktemp("acls")
    users = root / "users.json"
    users.write_text(json.dumps({"users": {"admin": "admin-secret", "alice": "alice-secret"}}))
    c = LocalCluster(str(root / "cluster"), broker_overrides={
        "sasl_users_file": str(users), "authorizer_enabled": True, "super_users": ["User:admin"]})
    c.start()
    yield c
    c.stop(graceful=False)


def sasl(c: LocalCluster, user: str) -> dict[str, str]:
    return {"bootstrap.servers": c.kafka_bootstrap, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
            "sasl.username": user, "sasl.password": f"{user}-secret"}


def produce(c: LocalCluster, user: str, topic: str) -> list[int]:
    """Error codes of one produce (empty: acknowledged)."""
    producer = Producer({**sasl(c, user), "message.timeout.ms": 10000})
    errors: list[int] = []
    producer.produce(topic, b"v", on_delivery=lambda err, _m: errors.append(err.code()) if err else None)
    assert producer.flush(20) == 0
    return errors


@pytest.mark.integration
def test_sasl_principals_are_held_to_the_acls(acl_cluster: LocalCluster) -> None:
    c = acl_cluster
    admin = AdminClient(sasl(c, "admin"))  # a super user: no ACL needed
    for f in admin.create_topics([NewTopic("open", 1, 1), NewTopic("closed", 1, 1)]).values():
        f.result(30)
    allow = AclBinding(ResourceType.TOPIC, "open", ResourcePatternType.LITERAL, "User:alice", "*",
                       AclOperation.WRITE, AclPermissionType.ALLOW)
    for f in admin.create_acls([allow]).values():
        f.result(30)

    assert produce(c, "alice", "open") == []
    assert produce(c, "alice", "closed") == [KafkaError.TOPIC_AUTHORIZATION_FAILED]  # no ACL: denied
    alice = AdminClient(sasl(c, "alice"))
    (described,) = alice.describe_topics(TopicCollection(["open"]), include_authorized_operations=True).values()
    assert set(described.result(30).authorized_operations) == {AclOperation.WRITE, AclOperation.DESCRIBE}

    # alice may not change the ACLs: refused, and nothing changed
    deny = AclBinding(ResourceType.TOPIC, "open", ResourcePatternType.LITERAL, "User:*", "*",
                      AclOperation.ALL, AclPermissionType.DENY)
    with pytest.raises(KafkaException) as refused:
        for f in alice.create_acls([deny]).values():
            f.result(30)
    assert refused.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    everything = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                                  AclPermissionType.ANY)
    assert admin.describe_acls(everything).result(30) == [allow]
    ends = admin.list_offsets({TopicPartition("closed", 0): OffsetSpec.latest()})
    assert ends[TopicPartition("closed", 0)].result(30).offset == 0  # the refused produce appended nothing

    # DENY beats ALLOW; deleting the bindings returns them
    for f in admin.create_acls([deny]).values():
        f.result(30)
    assert produce(c, "alice", "open") == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    (deleted,) = admin.delete_acls([everything]).values()
    assert sorted(map(str, deleted.result(30))) == sorted(map(str, [allow, deny]))
    assert admin.describe_acls(everything).result(30) == []


async def test_handlers_enforce_what_the_acls_say_and_change_nothing_when_refused() -> None:
    """Metadata, CreateTopics and CreateAcls over the real controller operations (in process)."""
    from kafka.protocol.admin.topics import CreateTopicsRequest
    from kafka.protocol.metadata.metadata import MetadataRequest

    from broker.kafka.admin_apis import AdminApis
    from broker.kafka.auto_create import AutoTopicCreator, TopicDefaults
    from broker.kafka.data_apis import DataApis
    from tests.kafka.test_admin_apis import cluster
    from tests.kafka.test_auto_create import Core

    _admin, controller, broker = cluster()
    auth = Authorization(AuthorizerSettings(enabled=True, super_users=frozenset({"User:admin"})),
                         lambda: broker.quorum.image)
    data = DataApis(Core(broker.quorum), CountingProducerIds(), auth=auth,  # type: ignore[arg-type]
                    auto_create=AutoTopicCreator(controller, TopicDefaults()))
    admin = AdminApis(broker, controller, auth=auth)
    acls = AclApis(auth, controller)
    CT = CreateTopicsRequest.CreatableTopic
    creations = CreateTopicsRequest(topics=[CT(name=n, num_partitions=1, replication_factor=1, assignments=[],
                                               configs=[]) for n in ("seen", "hidden")], timeout_ms=1000,
                                    validate_only=False)
    refused = await admin.create_topics(request(creations, "User:alice"))
    assert {t.error_code for t in refused.topics} == {ErrorCode.TOPIC_AUTHORIZATION_FAILED.code}  # type: ignore[attr-defined]
    assert broker.quorum.image.topics.by_name == {} and controller.calls == []
    created = await admin.create_topics(request(creations, "User:admin"))
    assert {t.error_code for t in created.topics} == {0}  # type: ignore[attr-defined]

    C = CreateAclsRequest.AclCreation
    allow = C(resource_type=2, resource_name="se", resource_pattern_type=4, principal="User:alice", host="*",
              operation=3, permission_type=3)  # READ on the topics prefixed "se": DESCRIBE implied
    assert [r.error_code for r in (await acls.create_acls(request(CreateAclsRequest(creations=[allow]),
                                                                  "User:alice"))).results] == [  # type: ignore[attr-defined]
        ErrorCode.CLUSTER_AUTHORIZATION_FAILED.code]
    assert broker.quorum.image.acls.by_id == {}
    assert [r.error_code for r in (await acls.create_acls(request(CreateAclsRequest(creations=[allow]),
                                                                  "User:admin"))).results] == [0]  # type: ignore[attr-defined]

    T = MetadataRequest.MetadataRequestTopic
    everything = await data.metadata(request(MetadataRequest[9](topics=None, allow_auto_topic_creation=False,
                                                                 include_topic_authorized_operations=True),
                                             "User:alice"))
    assert [(t.name, t.authorized_operations) for t in everything.topics] == [  # type: ignore[attr-defined]
        ("seen", {3, 8})]  # "hidden" is left out of all topics
    named = await data.metadata(request(MetadataRequest[9](topics=[T(name="hidden"), T(name="seen"), T(name="new")],
                                                           allow_auto_topic_creation=True), "User:alice"))
    assert [(t.name, t.error_code) for t in named.topics] == [  # type: ignore[attr-defined]
        ("hidden", ErrorCode.TOPIC_AUTHORIZATION_FAILED.code), ("seen", 0),
        ("new", ErrorCode.TOPIC_AUTHORIZATION_FAILED.code)]  # no CREATE: not created
    assert "new" not in broker.quorum.image.topics.by_name


async def test_find_coordinator_needs_describe_on_the_group_or_the_transactional_id() -> None:
    """As Kafka: a principal without DESCRIBE on the key's resource is refused with that
    resource's authorization error, before any coordinator is looked up."""
    from kafka.protocol.metadata.find_coordinator import FindCoordinatorRequest

    from broker.kafka.group_apis import GroupApis
    from tests.kafka.test_admin_apis import cluster
    from tests.kafka.test_auto_create import Core

    _admin, _controller, broker = cluster()
    auth = Authorization(AuthorizerSettings(enabled=True, super_users=frozenset({"User:admin"})),
                         lambda: broker.quorum.image)
    groups = GroupApis(Core(broker.quorum), auth=auth)  # type: ignore[arg-type]
    asked: list[str] = []

    async def find_txn(key: str) -> Any:
        asked.append(key)
        return ErrorCode.NONE, None, 1, "127.0.0.1", 9092
    groups.find_transaction_coordinator = find_txn
    for key_type, refused in ((0, ErrorCode.GROUP_AUTHORIZATION_FAILED),
                              (1, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)):
        answer = await groups.find_coordinator(request(FindCoordinatorRequest[4](key_type=key_type,
                                                                                 coordinator_keys=["k"]), "User:alice"))
        assert [(c.key, c.error_code) for c in answer.coordinators] == [("k", refused.code)]  # type: ignore[attr-defined]
    assert asked == []
    answer = await groups.find_coordinator(request(FindCoordinatorRequest[4](key_type=1, coordinator_keys=["k"]),
                                                   "User:admin"))
    assert [(c.error_code, c.node_id) for c in answer.coordinators] == [(0, 1)] and asked == ["k"]  # type: ignore[attr-defined]
