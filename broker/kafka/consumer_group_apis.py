"""ConsumerGroupHeartbeat and ConsumerGroupDescribe (KIP-848) over Kafka's protocol.

The decisions are :class:`broker.groups.partition_coordinator.PartitionCoordinator`'s; this is
their shell, on the same path as the classic group APIs (:mod:`broker.kafka.group_apis`): the
group's ``__consumer_offsets`` partition leader hosts it, each call's records are appended
(acks=all) before the answer goes out, and a move or a crash reloads the group from them. The
protocol speaks of topics by id, so the shell maps between the wire's UUIDs and Ferry's topic
ids (their base64 form) and gives the state machine a read-only view of the topics.
"""
from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping
from typing import Any

from kafka.protocol.api_message import ApiMessage

from broker.groups import GroupState
from broker.groups.consumer_coordinator import ConsumerHeartbeat, ConsumerHeartbeatResult, TopicInfo
from broker.groups.consumer_records import Partitions
from broker.kafka.consumer_group_messages import (ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse,
                                                  ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse)
from broker.kafka.data_apis import INTERNAL_TOPICS, topic_id_of, topic_uuid
from broker.kafka.group_apis import GroupApis, NotCoordinator
from broker.kafka.authorization import TOPIC
from broker.kafka.wire import Request
from metadata_quorum.acls import AclOperation
from metadata_quorum.kernel.errors import ErrorCode
from metadata_quorum.image import MetadataImage

MEMBER_TYPE_CONSUMER = 1


class ImageTopics(Mapping[str, TopicInfo]):
    """The user topics of a metadata image by name, as the state machine reads them."""

    def __init__(self, image: MetadataImage | None) -> None:
        self._image = image

    def __getitem__(self, name: str) -> TopicInfo:
        if self._image is None or name in INTERNAL_TOPICS:
            raise KeyError(name)
        topic = self._image.topics.get(name)
        if topic is None:
            raise KeyError(name)
        return TopicInfo(topic.topic_id, len(topic.partitions))

    def __iter__(self) -> Iterator[str]:
        if self._image is None:
            return iter(())
        return iter([n for n in self._image.topics.by_name if n not in INTERNAL_TOPICS])

    def __len__(self) -> int:
        return sum(1 for _ in self)


class ConsumerGroupApis:
    def __init__(self, groups: GroupApis) -> None:
        self.groups = groups

    async def heartbeat(self, req: Request) -> ApiMessage:
        body: ConsumerGroupHeartbeatRequest = req.body
        owned: Partitions | None = None
        if body.topic_partitions is not None:
            owned = {topic_id_of(t.topic_id): frozenset(t.partitions) for t in body.topic_partitions}
        request = ConsumerHeartbeat(
            group_id=body.group_id, member_id=body.member_id, member_epoch=body.member_epoch,
            instance_id=body.instance_id, rack_id=body.rack_id, rebalance_timeout_ms=body.rebalance_timeout_ms,
            subscribed_topic_names=None if body.subscribed_topic_names is None else tuple(body.subscribed_topic_names),
            subscribed_topic_regex=body.subscribed_topic_regex if req.api_version >= 1 else None,
            server_assignor=body.server_assignor, owned=owned, client_id=req.client_id or "",
            member_id_required=req.api_version >= 1)
        new_member_id = topic_id_of(uuid.uuid4())
        topics = ImageTopics(self.groups.core.image)
        try:
            if not body.group_id:  # Kafka's request check comes before any coordinator lookup
                raise NotCoordinator(ErrorCode.INVALID_REQUEST)
            groups = self.groups
            if groups._may(req, AclOperation.READ, body.group_id) and groups.auth.denied(
                    req, AclOperation.DESCRIBE, TOPIC, body.subscribed_topic_names or ()):
                raise NotCoordinator(ErrorCode.TOPIC_AUTHORIZATION_FAILED)  # any subscribed topic it may not see
            partition, hosted = await groups._coordinator(body.group_id,
                                                          groups._may(req, AclOperation.READ, body.group_id))
            result = await self.groups._run(partition, hosted, lambda c, now: c.consumer_heartbeat(
                request, topics, new_member_id, now))
        except NotCoordinator as exc:
            result = ConsumerHeartbeatResult(exc.error, "GroupId can't be empty." if not body.group_id else None)
        R = ConsumerGroupHeartbeatResponse
        assignment = None
        if result.assignment is not None:
            assignment = R.Assignment(topic_partitions=[
                R.Assignment.TopicPartitions(topic_id=topic_uuid(t), partitions=sorted(ps))
                for t, ps in sorted(result.assignment.items())])
        return R(throttle_time_ms=0, error_code=result.error.code, error_message=result.message,
                 member_id=result.member_id, member_epoch=result.member_epoch,
                 heartbeat_interval_ms=result.heartbeat_interval_ms, assignment=assignment)

    async def describe(self, req: Request) -> ApiMessage:
        body: ConsumerGroupDescribeRequest = req.body
        D = ConsumerGroupDescribeResponse.DescribedGroup
        out: list[Any] = []
        for group_id in body.group_ids:
            try:
                _p, hosted = await self.groups._coordinator(
                    group_id, self.groups._may(req, AclOperation.DESCRIBE, group_id))
            except NotCoordinator as exc:
                out.append(D(error_code=exc.error.code, group_id=group_id, group_state="", group_epoch=0,
                             assignment_epoch=0, assignor_name="", members=[]))
                continue
            d = hosted.coordinator.consumer_describe(group_id)
            if d.error is not ErrorCode.NONE:
                message = None
                if d.error is ErrorCode.GROUP_ID_NOT_FOUND:
                    message = (f"group {group_id} is not a consumer group"
                               if hosted.coordinator.group_state(group_id) is not GroupState.DEAD
                               else f"group {group_id} not found")
                out.append(D(error_code=d.error.code, error_message=message, group_id=group_id, group_state="",
                             group_epoch=0, assignment_epoch=0, assignor_name="", members=[]))
                continue
            names = d.topic_names or {}
            M = D.Member

            def assignment(parts: Partitions, member: Any = M, names: Mapping[str, str] = names) -> Any:
                A = member.Assignment
                return A(topic_partitions=[A.TopicPartitions(topic_id=topic_uuid(t), topic_name=names.get(t, ""),
                                                             partitions=sorted(ps))
                                           for t, ps in sorted(parts.items())])
            out.append(D(error_code=0, group_id=group_id, group_state=d.state, group_epoch=d.group_epoch,
                         assignment_epoch=d.assignment_epoch, assignor_name=d.assignor, members=[
                             M(member_id=m.member_id, instance_id=m.instance_id, rack_id=m.rack_id,
                               member_epoch=m.member_epoch, client_id=m.client_id, client_host=m.client_host,
                               subscribed_topic_names=list(m.subscribed_topic_names),
                               subscribed_topic_regex=m.subscribed_topic_regex,
                               assignment=assignment(m.assignment), target_assignment=assignment(m.target_assignment),
                               member_type=MEMBER_TYPE_CONSUMER)
                             for m in d.members]))
        return ConsumerGroupDescribeResponse(throttle_time_ms=0, groups=out)
