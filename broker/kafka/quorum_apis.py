"""DescribeQuorum (API 55) on the brokers: the metadata quorum as Kafka's tools expect to see it.

Kafka's brokers forward DescribeQuorum to the active controller (``kafka-metadata-quorum
--bootstrap-server … describe --status | --replication``); Ferry's broker asks the active controller
the same through its controller client (``/v1/quorum/status`` and ``/v1/quorum/replication``) and
answers for the one partition Kafka's quorum has, ``__cluster_metadata``-0, with the quorum's real
figures: the Raft leader and its term as the leader epoch, the commit index as the high watermark,
each voter's log end offset and last fetch / caught-up times where the Raft leader knows them (-1
where it does not, as Kafka reports an unknown), and the brokers following the metadata log as the
observers. The mapping is a pure function of the two answers (:func:`describe_quorum_response`).
"""
from __future__ import annotations

import asyncio
import base64
import binascii
import uuid
from typing import Any, Protocol

from kafka.protocol.admin.cluster import DescribeQuorumRequest, DescribeQuorumResponse
from kafka.protocol.api_message import ApiMessage

from broker.kafka.admin_apis import failure_of
from broker.kafka.data_apis import ZERO_UUID
from broker.kafka.forwarding import Json
from broker.kafka.wire import Request
from metadata_quorum.kernel.errors import ErrorCode

METADATA_TOPIC = "__cluster_metadata"  # Kafka's name of the metadata log's one partition
CONTROLLER_LISTENER = "CONTROLLER"


class QuorumState(Protocol):
    """What DescribeQuorum needs of the controller quorum (the broker's ``ControllerClient``)."""

    async def quorum_status(self) -> Json: ...

    async def quorum_replication(self) -> Json: ...


def directory_uuid(text: str | None) -> uuid.UUID:
    """A directory id as Kafka's Uuid: Ferry writes controllers' in Kafka's base64 form and brokers'
    log dirs as hex; anything else (or none) is the zero Uuid."""
    if not text:
        return ZERO_UUID
    try:
        if len(text) == 32:
            return uuid.UUID(hex=text)
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        return uuid.UUID(bytes=raw) if len(raw) == 16 else ZERO_UUID
    except (ValueError, binascii.Error):
        return ZERO_UUID


def _endpoint(text: str) -> tuple[str, str, int] | None:
    """``NAME://host:port`` -> (name, host, port)."""
    name, sep, address = text.partition("://")
    host, colon, port = address.rpartition(":")
    if not sep or not colon or not port.isdigit():
        return None
    return name, host.strip("[]"), int(port)


def _asked(body: DescribeQuorumRequest) -> list[tuple[str, list[int]]]:
    return [(t.topic_name, [p.partition_index for p in t.partitions]) for t in body.topics]


def _replica(row: Json, version: int) -> Any:
    S = DescribeQuorumResponse.TopicData.PartitionData.ReplicaState
    return S(replica_id=int(row["node_id"]),
             replica_directory_id=directory_uuid(row.get("directory_id")) if version >= 2 else ZERO_UUID,
             log_end_offset=int(row.get("log_end_offset", -1)),
             last_fetch_timestamp=int(row.get("last_fetch_timestamp", -1)),
             last_caught_up_timestamp=int(row.get("last_caught_up_timestamp", -1)))


def describe_quorum_response(asked: list[tuple[str, list[int]]], status: Json, replication: Json,
                             version: int) -> DescribeQuorumResponse:
    """Kafka's answer from the active controller's status and replication reports."""
    T = DescribeQuorumResponse.TopicData
    P = T.PartitionData
    rows = list(replication.get("replicas", []))
    voters = [_replica(r, version) for r in rows if r.get("status") != "Observer"]
    observers = [_replica(r, version) for r in rows if r.get("status") == "Observer"]
    topics = []
    for name, partitions in asked:
        answers = []
        for index in partitions:
            if name != METADATA_TOPIC or index != 0:
                answers.append(P(partition_index=index, error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION.code,
                                 error_message=f"{name}-{index} is not the metadata log's partition "
                                               f"({METADATA_TOPIC}-0)",
                                 leader_id=-1, leader_epoch=-1, high_watermark=-1, current_voters=[], observers=[]))
                continue
            answers.append(P(partition_index=0, error_code=0, error_message=None,
                             leader_id=int(status.get("leader_id", -1)),
                             leader_epoch=int(status.get("leader_epoch", -1)),
                             high_watermark=int(status.get("high_watermark", -1)),
                             current_voters=voters, observers=observers))
        topics.append(T(topic_name=name, partitions=answers))
    nodes = []
    if version >= 2:
        for voter in status.get("current_voters", []):
            listeners = [DescribeQuorumResponse.Node.Listener(name=e[0], host=e[1], port=e[2])
                         for e in map(_endpoint, voter.get("endpoints", [])) if e is not None]
            nodes.append(DescribeQuorumResponse.Node(node_id=int(voter["id"]), listeners=listeners))
    return DescribeQuorumResponse(error_code=0, error_message=None, topics=topics, nodes=nodes)


class QuorumApis:
    def __init__(self, quorum: QuorumState | None) -> None:
        self.quorum = quorum

    async def describe_quorum(self, req: Request) -> ApiMessage:
        body: DescribeQuorumRequest = req.body
        if self.quorum is None:
            return DescribeQuorumResponse(error_code=ErrorCode.NOT_CONTROLLER.code,
                                          error_message="this broker has no controller client", topics=[], nodes=[])
        try:
            status, replication = await asyncio.gather(self.quorum.quorum_status(), self.quorum.quorum_replication())
        except Exception as exc:  # noqa: BLE001 - a top-level error the admin client retries or reports
            failure = failure_of(exc)
            return DescribeQuorumResponse(error_code=failure.error.code, error_message=failure.message, topics=[],
                                          nodes=[])
        return describe_quorum_response(_asked(body), status, replication, req.api_version)
