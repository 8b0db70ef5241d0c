"""Automatic topic creation and Metadata's answers for unknown topics, without sockets: the pure
decision, then Metadata over the real controller operations (an in-process controller)."""
from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import pytest
from kafka.protocol.metadata.metadata import MetadataRequest

from broker.producer_ids import CountingProducerIds
from broker.kafka.auto_create import AutoTopicCreator, Decision, TopicDefaults, unknown_topic_decision
from broker.kafka.data_apis import DataApis
from broker.kafka.forwarding import Json
from metadata_quorum.kernel.errors import ErrorCode, FerryError
from metadata_quorum.image import MetadataImage
from metadata_quorum.local_controller import LocalController
from tests.kafka.test_admin_apis import InProcessController, cluster, request

ON = TopicDefaults(auto_create=True, num_partitions=3, replication_factor=2)


@pytest.mark.parametrize(("name", "defaults", "allows", "decision"), [
    ("fresh", ON, True, Decision.CREATE),
    ("fresh", ON, False, Decision.UNKNOWN),  # the request does not allow it
    ("fresh", TopicDefaults(auto_create=False), True, Decision.UNKNOWN),  # auto.create.topics.enable=false
    ("__consumer_offsets", ON, True, Decision.UNKNOWN),  # internal: only its coordinator creates it
    ("bad/name", ON, True, Decision.INVALID),
    ("bad/name", ON, False, Decision.INVALID),  # illegal whether or not creation is allowed, as Kafka
    ("..", ON, True, Decision.INVALID),
    ("a" * 250, TopicDefaults(auto_create=False), False, Decision.INVALID),
    (None, ON, True, Decision.INVALID),
])
def test_unknown_topic_decision(name: str | None, defaults: TopicDefaults, allows: bool, decision: Decision) -> None:
    assert unknown_topic_decision(name, defaults, allows) is decision


@dataclass
class Core:
    """What DataApis needs of a broker: broker 1 of the in-process cluster."""

    quorum: LocalController
    broker_id: int = 1
    cluster_id: str = "test-cluster"

    @property
    def image(self) -> MetadataImage | None:
        return self.quorum.image

    def __getattr__(self, name: str) -> Any:  # the data path is not used here
        raise AttributeError(name)


def metadata_apis(defaults: TopicDefaults = ON) -> tuple[DataApis, InProcessController]:
    _apis, controller, broker = cluster()
    return DataApis(Core(broker.quorum), CountingProducerIds(), auto_create=AutoTopicCreator(controller, defaults)), controller  # type: ignore[arg-type]


def metadata_request(names: list[str], allow: bool, version: int = 9) -> Any:
    T = MetadataRequest.MetadataRequestTopic
    return request(MetadataRequest[version](topics=[T(name=n) for n in names], allow_auto_topic_creation=allow),
                   version)


async def test_metadata_creates_an_unknown_topic_with_the_brokers_defaults_and_answers_it() -> None:
    apis, controller = metadata_apis()
    out = await apis.metadata(metadata_request(["fresh"], allow=True))
    [topic] = out.topics
    assert topic.error_code == 0 and len(topic.partitions) == 3
    assert all(len(p.replica_nodes) == 2 and p.leader_id in p.replica_nodes for p in topic.partitions)
    [(_kind, op, args, _timeout)] = controller.calls
    assert op == "create_topics" and args["topics"] == [{"name": "fresh", "num_partitions": 3,
                                                         "replication_factor": 2}]


@pytest.mark.parametrize("version", [4, 9, 12])
async def test_metadata_that_does_not_allow_creation_creates_nothing(version: int) -> None:
    apis, controller = metadata_apis()
    out = await apis.metadata(metadata_request(["fresh", "bad/name"], allow=False, version=version))
    assert [t.error_code for t in out.topics] == [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION.code,
                                                  ErrorCode.INVALID_TOPIC_EXCEPTION.code]
    assert controller.calls == [] and controller.quorum.image.topics.get("fresh") is None


async def test_metadata_before_v4_always_allows_creation_and_a_disabled_broker_never_creates() -> None:
    apis, controller = metadata_apis()
    out = await apis.metadata(metadata_request(["old"], allow=False, version=3))  # v0-3: no such flag
    assert out.topics[0].error_code == 0 and controller.quorum.image.topics.get("old") is not None
    apis, controller = metadata_apis(TopicDefaults(auto_create=False))
    out = await apis.metadata(metadata_request(["off"], allow=True))
    assert out.topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION.code and controller.calls == []


async def test_a_creation_that_fails_is_leader_not_available() -> None:
    apis, controller = metadata_apis(TopicDefaults(auto_create=True, replication_factor=4))  # 3 brokers
    out = await apis.metadata(metadata_request(["too-many"], allow=True))
    assert out.topics[0].error_code == ErrorCode.LEADER_NOT_AVAILABLE.code
    controller.fail_with = FerryError(ErrorCode.NOT_CONTROLLER, "electing")
    out = await apis.metadata(metadata_request(["later"], allow=True))
    assert out.topics[0].error_code == ErrorCode.LEADER_NOT_AVAILABLE.code


class SlowController:
    """A controller whose writes wait until released; counts the creations asked for."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.writes: list[Json] = []

    async def write(self, op: str, args: Json, timeout_ms: int) -> Json:
        self.writes.append(args)
        await self.release.wait()
        return {"topics": []}

    async def read(self, op: str, args: Json, timeout_ms: int) -> Json:
        raise AssertionError("not used")


async def test_one_creation_per_name_however_many_ask_and_the_wait_is_bounded() -> None:
    controller = SlowController()
    creator = AutoTopicCreator(controller, ON)
    started = asyncio.get_running_loop().time()
    await asyncio.gather(*(creator.create(["t"], wait_ms=50) for _ in range(5)))
    assert asyncio.get_running_loop().time() - started < 1 and len(controller.writes) == 1
    controller.release.set()
    await asyncio.sleep(0.01)
    await creator.create(["t"], wait_ms=50)  # the first finished: a later request asks again
    assert len(controller.writes) == 2
