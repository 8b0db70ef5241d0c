"""Committed offsets of a group: who may commit, what a fetch returns, what retention expires
(Kafka's OffsetMetadataManager rules for classic groups)."""
from __future__ import annotations

from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription

from broker.groups.group import ClassicGroup
from broker.groups.messages import (
    NO_LEADER_EPOCH,
    NO_OFFSET,
    FetchedOffset,
    GroupState,
    OffsetCommitRequest,
    OffsetDeleteResult,
    PartitionResult,
    TopicPartition,
)
from broker.groups.records import OffsetCommitRecord, OffsetValue
from metadata_quorum.kernel.errors import ErrorCode


def validate_offset_commit(group: ClassicGroup, request: OffsetCommitRequest) -> ErrorCode:
    """Whether this commit may be stored.

    A commit without group management (generation < 0) is accepted while the group is empty:
    manual-assignment consumers and admin tools use the group only to store offsets. Otherwise
    the member must belong to the current generation; during CompletingRebalance the member has
    a generation but no assignment yet, so it is told REBALANCE_IN_PROGRESS. PreparingRebalance
    still accepts the previous generation's commits, so a consumer can commit before rejoining.
    """
    if group.state is GroupState.DEAD:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if request.generation_id < 0 and group.state is GroupState.EMPTY:
        return ErrorCode.NONE
    if request.generation_id >= 0 or request.member_id or request.group_instance_id is not None:
        error = group.validate_member(request.member_id, request.group_instance_id)
        if error is not ErrorCode.NONE:
            return error
        if request.generation_id != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
    else:
        return ErrorCode.UNKNOWN_MEMBER_ID
    if group.state is GroupState.COMPLETING_REBALANCE:
        return ErrorCode.REBALANCE_IN_PROGRESS
    return ErrorCode.NONE


CONSUMER_PROTOCOL_TYPE = "consumer"
_VERSION_BYTES = 2


def subscribed_topics(group: ClassicGroup) -> frozenset[str] | None:
    """The topics the members of a consumer group subscribe to, from their metadata for the
    group's protocol; None when the group is no consumer group, has no members or protocol yet,
    or a member's metadata does not parse.

    As Kafka's GroupMetadata.computeSubscribedTopics, each subscription is read as version 0,
    which every version of ConsumerProtocolSubscription starts with, whatever version it says.
    """
    if group.protocol_type != CONSUMER_PROTOCOL_TYPE or group.protocol_name is None or not group.members:
        return None
    topics: set[str] = set()
    for member in group.members.values():
        try:
            subscription = ConsumerProtocolSubscription.decode(member.metadata(group.protocol_name)[_VERSION_BYTES:],
                                                               version=0, header=False)
        except Exception:  # noqa: BLE001 - any malformed subscription: no topic set, as Kafka's SchemaException
            return None
        topics.update(subscription.topics)
    return frozenset(topics)


def delete_offsets(group: ClassicGroup | None, partitions: tuple[TopicPartition, ...]
                   ) -> tuple[OffsetDeleteResult, list[OffsetCommitRecord]]:
    """OffsetDelete (KIP-496) as Kafka's classic-group coordinator decides it: the answer and the
    tombstones to write.

    No group (or a dead one): GROUP_ID_NOT_FOUND. An empty group: every asked partition's offset
    goes. A consumer group with members: partitions of topics a member subscribes to answer
    GROUP_SUBSCRIBED_TO_TOPIC and keep their offsets, the others go. Any other group with
    members (not the consumer protocol): NON_EMPTY_GROUP. A partition without a committed offset
    answers NONE, as in Kafka.
    """
    if group is None or group.state is GroupState.DEAD:
        return OffsetDeleteResult(ErrorCode.GROUP_ID_NOT_FOUND), []
    subscribed: frozenset[str] = frozenset()
    if group.state is not GroupState.EMPTY:
        if group.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return OffsetDeleteResult(ErrorCode.NON_EMPTY_GROUP), []
        subscribed = subscribed_topics(group) or frozenset()
    results: list[PartitionResult] = []
    tombstones: list[OffsetCommitRecord] = []
    for tp in partitions:
        if tp.topic in subscribed:
            results.append(PartitionResult(tp.topic, tp.partition, ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC))
            continue
        results.append(PartitionResult(tp.topic, tp.partition, ErrorCode.NONE))
        if (tp.topic, tp.partition) in group.offsets:
            tombstones.append(OffsetCommitRecord(group.group_id, tp.topic, tp.partition, None))
    return OffsetDeleteResult(ErrorCode.NONE, tuple(results)), tombstones


def fetch_offsets(group: ClassicGroup | None, partitions: tuple[TopicPartition, ...] | None) -> tuple[FetchedOffset, ...]:
    """The committed offsets asked for (all of them when ``partitions`` is None, sorted by topic
    and partition); -1 for a partition without one, as Kafka answers."""
    offsets = group.offsets if group is not None else {}
    if partitions is None:
        return tuple(
            FetchedOffset(topic, partition, v.offset, v.leader_epoch, v.metadata)
            for (topic, partition), v in sorted(offsets.items())
        )
    result: list[FetchedOffset] = []
    for tp in partitions:
        v = offsets.get((tp.topic, tp.partition))
        if v is None:
            result.append(FetchedOffset(tp.topic, tp.partition, NO_OFFSET, NO_LEADER_EPOCH, ""))
        else:
            result.append(FetchedOffset(tp.topic, tp.partition, v.offset, v.leader_epoch, v.metadata))
    return tuple(result)


def expired_offsets(group: ClassicGroup, now_ms: int, retention_ms: int) -> list[OffsetCommitRecord]:
    """Tombstones for the offsets retention removes.

    A group that uses group management keeps its offsets while it has members; once empty, they
    expire ``retention_ms`` after it became empty (or after the commit, for a group loaded from
    a record without that time). A group without a protocol type only stores offsets; each
    expires ``retention_ms`` after it was committed. (Kafka also expires, in a stable consumer
    group, offsets of topics no member subscribes to; that needs the consumer protocol parsed
    and is not done here.)
    """
    if group.protocol_type is not None and group.state is not GroupState.EMPTY:
        return []
    tombstones: list[OffsetCommitRecord] = []
    for (topic, partition), value in sorted(group.offsets.items()):
        if group.protocol_type is not None and group.state_timestamp_ms is not None:
            base_ms = group.state_timestamp_ms
        else:
            base_ms = value.commit_timestamp_ms
        if now_ms - base_ms >= retention_ms:
            tombstones.append(OffsetCommitRecord(group.group_id, topic, partition, None))
    return tombstones


def apply_offset_record(group: ClassicGroup, record: OffsetCommitRecord) -> None:
    key = (record.topic, record.partition)
    if record.value is None:
        group.offsets.pop(key, None)
    else:
        group.offsets[key] = record.value


def offset_record(group_id: str, topic: str, partition: int, offset: int, leader_epoch: int,
                  metadata: str | None, now_ms: int) -> OffsetCommitRecord:
    return OffsetCommitRecord(group_id, topic, partition, OffsetValue(offset, leader_epoch, metadata or "", now_ms))
