"""DescribeQuorum, the SCRAM credential APIs and read-only broker configs, without sockets.

The handlers run over the in-process controller of test_admin_apis.py; every response is encoded
at the request's version and decoded as a client would.
"""
from __future__ import annotations

import hashlib
from typing import Any

import pytest
from kafka.protocol.admin.client_quotas import DescribeClientQuotasRequest
from kafka.protocol.admin.cluster import DescribeQuorumRequest, DescribeQuorumResponse
from kafka.protocol.admin.configs import AlterConfigsRequest, IncrementalAlterConfigsRequest
from kafka.protocol.admin.users import AlterUserScramCredentialsRequest, DescribeUserScramCredentialsRequest

from broker.kafka.quota_apis import describe_client_quotas
from broker.kafka.quorum_apis import QuorumApis, describe_quorum_response, directory_uuid
from broker.kafka.scram_apis import ScramApis
from metadata_quorum.kernel.errors import ErrorCode, FerryError
from tests.kafka.test_admin_apis import cluster, encoded, request

# --------------------------------------------------------------------------- broker configs are read-only


@pytest.mark.parametrize("version", [0, 1])
async def test_incremental_alter_of_a_static_broker_config_is_refused_and_changes_nothing(version: int) -> None:
    apis, controller, broker = cluster()
    R = IncrementalAlterConfigsRequest.AlterConfigsResource
    C = R.AlterableConfig
    body = IncrementalAlterConfigsRequest(resources=[
        R(resource_type=4, resource_name="1", configs=[C(name="message.max.bytes", config_operation=0, value="1"),
                                                       C(name="log.dirs", config_operation=0, value="/x")]),
        R(resource_type=4, resource_name="", configs=[C(name="message.max.bytes", config_operation=0, value="1")]),
        # Kafka's dynamic broker configs are stored (the replication throttles are applied)
        R(resource_type=4, resource_name="1", configs=[
            C(name="leader.replication.throttled.rate", config_operation=0, value="1000"),
            C(name="sasl.kerberos.min.time.before.relogin", config_operation=0, value="58000")]),
        # deleting a static key stored earlier is allowed: it only cleans up
        R(resource_type=4, resource_name="1", configs=[C(name="message.max.bytes", config_operation=1, value=None)]),
    ], validate_only=False)
    req = request(body, version)
    out = encoded(req, await apis.incremental_alter_configs(req))
    assert [r.error_code for r in out.responses] == [ErrorCode.INVALID_REQUEST.code] * 2 + [0, 0]
    assert out.responses[0].error_message == "Cannot update these configs dynamically: [log.dirs, message.max.bytes]"
    assert dict(broker.quorum.image.configs.get("broker", "1")) == {
        "leader.replication.throttled.rate": "1000", "sasl.kerberos.min.time.before.relogin": "58000"}
    assert dict(broker.quorum.image.configs.get("broker", "")) == {}
    assert len(controller.calls) == 2  # the refused resources never reached the controller


@pytest.mark.parametrize("version", [0, 2])
async def test_alter_configs_of_a_static_broker_config_is_refused(version: int) -> None:
    apis, controller, broker = cluster()
    R = AlterConfigsRequest.AlterConfigsResource
    C = R.AlterableConfig
    req = request(AlterConfigsRequest(resources=[
        R(resource_type=4, resource_name="1", configs=[C(name="broker.id", value="7")]),
        R(resource_type=4, resource_name="1", configs=[C(name="follower.replication.throttled.rate", value="5")])],
        validate_only=False), version)
    out = encoded(req, await apis.alter_configs(req))
    assert [(r.error_code, r.error_message) for r in out.responses] == [
        (ErrorCode.INVALID_REQUEST.code, "Cannot update these configs dynamically: [broker.id]"), (0, None)]
    assert dict(broker.quorum.image.configs.get("broker", "1")) == {"follower.replication.throttled.rate": "5"}


# --------------------------------------------------------------------------- SCRAM credentials


def _upsertion(name: str, iterations: int = 8192, mechanism: int = 1) -> Any:
    U = AlterUserScramCredentialsRequest.ScramCredentialUpsertion
    salted = hashlib.pbkdf2_hmac("sha256" if mechanism == 1 else "sha512", b"pw", b"salt", iterations)
    return U(name=name, mechanism=mechanism, iterations=iterations, salt=b"salt", salted_password=salted)


async def test_alter_then_describe_user_scram_credentials() -> None:
    _apis, controller, broker = cluster()
    scram = ScramApis(broker, controller)
    D = DescribeUserScramCredentialsRequest.UserName
    describe = request(DescribeUserScramCredentialsRequest(users=[D(name="alice")]), 0)
    before = encoded(describe, await scram.describe_user_scram_credentials(describe))
    assert before.error_code == 0
    assert [(r.user, r.error_code) for r in before.results] == [("alice", ErrorCode.RESOURCE_NOT_FOUND.code)]

    Del = AlterUserScramCredentialsRequest.ScramCredentialDeletion
    alter = request(AlterUserScramCredentialsRequest(
        deletions=[Del(name="ghost", mechanism=1)],
        upsertions=[_upsertion("alice"), _upsertion("alice", mechanism=2), _upsertion("bob", 100),
                    _upsertion("carol", mechanism=2)]), 0)
    out = encoded(alter, await scram.alter_user_scram_credentials(alter))
    assert {r.user: r.error_code for r in out.results} == {
        "ghost": ErrorCode.RESOURCE_NOT_FOUND.code, "alice": ErrorCode.DUPLICATE_RESOURCE.code,
        "bob": ErrorCode.UNACCEPTABLE_CREDENTIAL.code, "carol": 0}
    everyone = request(DescribeUserScramCredentialsRequest(users=None), 0)
    after = encoded(everyone, await scram.describe_user_scram_credentials(everyone))
    assert [(r.user, r.error_code, [(c.mechanism, c.iterations) for c in r.credential_infos])
            for r in after.results] == [("carol", 0, [(2, 8192)])]


async def test_alter_scram_when_the_quorum_does_not_answer() -> None:
    _apis, controller, broker = cluster()
    controller.fail_with = FerryError(ErrorCode.NOT_CONTROLLER, "no leader")
    alter = request(AlterUserScramCredentialsRequest(deletions=[], upsertions=[_upsertion("a"), _upsertion("b")]), 0)
    out = encoded(alter, await ScramApis(broker, controller).alter_user_scram_credentials(alter))
    assert [(r.user, r.error_code) for r in out.results] == [("a", ErrorCode.NOT_CONTROLLER.code),
                                                            ("b", ErrorCode.NOT_CONTROLLER.code)]
    assert broker.quorum.image.scram.credentials == {}


# --------------------------------------------------------------------------- DescribeQuorum

STATUS = {"cluster_id": "c", "leader_id": 2, "leader_epoch": 7, "high_watermark": 120,
          "current_voters": [{"id": n, "directory_id": "", "endpoints": [f"CONTROLLER://127.0.0.1:{9000 + n}"]}
                             for n in (1, 2, 3)]}
REPLICATION = {"high_watermark": 120, "replicas": [
    {"node_id": 1, "directory_id": "AAAAAAAAAAAAAAAAAAAAAQ", "log_end_offset": 118, "last_fetch_timestamp": 5000,
     "last_caught_up_timestamp": 4900, "status": "Follower"},
    {"node_id": 2, "directory_id": "", "log_end_offset": 120, "last_fetch_timestamp": 5100,
     "last_caught_up_timestamp": 5100, "status": "Leader"},
    {"node_id": 3, "directory_id": "", "log_end_offset": -1, "last_fetch_timestamp": -1,
     "last_caught_up_timestamp": -1, "status": "Follower"},
    {"node_id": 101, "directory_id": "00000000000000000000000000000065", "log_end_offset": 120,
     "last_fetch_timestamp": 5050, "last_caught_up_timestamp": 5050, "status": "Observer"}]}


def _describe_request(*partitions: tuple[str, int]) -> DescribeQuorumRequest:
    T = DescribeQuorumRequest.TopicData
    return DescribeQuorumRequest(topics=[T(topic_name=t, partitions=[T.PartitionData(partition_index=p)])
                                         for t, p in partitions])


@pytest.mark.parametrize("version", [0, 1, 2])
def test_describe_quorum_reports_the_raft_figures(version: int) -> None:
    req = request(_describe_request(("__cluster_metadata", 0), ("other", 0)), version)
    out = encoded(req, describe_quorum_response([("__cluster_metadata", [0]), ("other", [0])], STATUS, REPLICATION,
                                                version))
    meta, other = out.topics
    (p,) = meta.partitions
    assert (p.error_code, p.leader_id, p.leader_epoch, p.high_watermark) == (0, 2, 7, 120)
    assert [(v.replica_id, v.log_end_offset) for v in p.current_voters] == [(1, 118), (2, 120), (3, -1)]
    assert [(o.replica_id, o.log_end_offset) for o in p.observers] == [(101, 120)]
    assert other.partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION.code
    if version >= 1:
        assert [(v.last_fetch_timestamp, v.last_caught_up_timestamp) for v in p.current_voters] == [
            (5000, 4900), (5100, 5100), (-1, -1)]
    if version >= 2:
        assert p.current_voters[0].replica_directory_id == directory_uuid("AAAAAAAAAAAAAAAAAAAAAQ")
        assert p.observers[0].replica_directory_id.int == 0x65
        assert [(n.node_id, [(li.name, li.host, li.port) for li in n.listeners]) for n in out.nodes] == [
            (1, [("CONTROLLER", "127.0.0.1", 9001)]), (2, [("CONTROLLER", "127.0.0.1", 9002)]),
            (3, [("CONTROLLER", "127.0.0.1", 9003)])]


class _Quorum:
    def __init__(self, error: BaseException | None = None) -> None:
        self.error = error

    async def quorum_status(self) -> dict[str, Any]:
        if self.error is not None:
            raise self.error
        return STATUS

    async def quorum_replication(self) -> dict[str, Any]:
        return REPLICATION


async def test_describe_quorum_asks_the_quorum_and_maps_its_failure() -> None:
    req = request(_describe_request(("__cluster_metadata", 0)), 2)
    ok = encoded(req, await QuorumApis(_Quorum()).describe_quorum(req))
    assert isinstance(ok, DescribeQuorumResponse) and ok.error_code == 0 and ok.topics[0].partitions[0].leader_id == 2
    down = encoded(req, await QuorumApis(_Quorum(FerryError(ErrorCode.NOT_CONTROLLER, "electing"))).describe_quorum(req))
    assert down.error_code == ErrorCode.NOT_CONTROLLER.code and down.topics == []


# --------------------------------------------------------------------------- DescribeClientQuotas


@pytest.mark.parametrize("version", [0, 1])
async def test_describe_client_quotas_answers_none_and_checks_the_filter(version: int) -> None:
    C = DescribeClientQuotasRequest.ComponentData
    ok = request(DescribeClientQuotasRequest(components=[C(entity_type="user", match_type=0, match="alice")],
                                             strict=False), version)
    out = encoded(ok, await describe_client_quotas(ok))
    assert (out.error_code, out.entries) == (0, [])
    for bad in ([C(entity_type="group", match_type=0, match="g")],
                [C(entity_type="user", match_type=1, match=None), C(entity_type="user", match_type=2, match=None)],
                [C(entity_type="user", match_type=7, match=None)],
                [C(entity_type="ip", match_type=2, match=None), C(entity_type="user", match_type=2, match=None)]):
        req = request(DescribeClientQuotasRequest(components=bad, strict=False), version)
        assert encoded(req, await describe_client_quotas(req)).error_code == ErrorCode.INVALID_REQUEST.code
