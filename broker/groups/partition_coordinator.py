"""The group coordinator of one ``__consumer_offsets`` partition: classic groups and
consumer-protocol (KIP-848) groups side by side, as Kafka's GroupCoordinatorShard hosts both.

It is the classic :class:`~broker.groups.coordinator.GroupCoordinator` (whose decisions it keeps)
plus a :class:`~broker.groups.consumer_coordinator.ConsumerGroups`, and it settles what crosses
the two: a group id belongs to one protocol at a time (a classic JoinGroup to a consumer group, or
a ConsumerGroupHeartbeat to a classic group that has members, gets INCONSISTENT_GROUP_PROTOCOL; an
empty classic group, e.g. one that only stores offsets, may become a consumer group). Committed
offsets of both kinds live in the classic offsets store (one record per partition, as Kafka's);
a consumer group's OffsetCommit is checked against its member epochs first and then stored as a
commit outside group management.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TypeVar

from broker.groups import consumer_group as cg
from broker.groups.config import GroupCoordinatorConfig
from broker.groups.consumer_coordinator import (
    ConsumerGroupConfig,
    ConsumerGroups,
    ConsumerHeartbeat,
    ConsumerHeartbeatResult,
    DescribedConsumerGroup,
    GroupConfigLookup,
    TopicInfo,
)
from broker.groups.consumer_records import CONSUMER_RECORD_TYPES, AnyGroupRecord, ConsumerRecord
from broker.groups.coordinator import GroupCoordinator
from broker.groups.messages import (
    DeletedGroup,
    DescribedGroup,
    Effects,
    GroupState,
    JoinRequest,
    ListedGroup,
    OffsetCommitRequest,
    OffsetCommitResult,
    OffsetDeleteResult,
    PartitionResult,
    Token,
    TopicPartition,
)
from broker.groups.rebalance import Outbox, join_error
from metadata_quorum.kernel.errors import ErrorCode

R = TypeVar("R")
CLASSIC = "classic"
CONSUMER = "consumer"


@dataclass(frozen=True)
class ListedAnyGroup:
    """A ListGroups entry: ``group_type`` is "classic" or "consumer" (ListGroups v5)."""

    group_id: str
    protocol_type: str
    state: str
    group_type: str


class PartitionCoordinator(GroupCoordinator):
    def __init__(self, config: GroupCoordinatorConfig, now_ms: int,
                 consumer_config: ConsumerGroupConfig | None = None,
                 group_configs: GroupConfigLookup | None = None) -> None:
        self._consumer = ConsumerGroups(consumer_config or ConsumerGroupConfig())
        if group_configs is not None:
            self._consumer.group_configs = group_configs
        self._expired: list[ConsumerRecord] = []  # consumer groups deleted by offsets retention in a tick
        super().__init__(config, now_ms)

    @classmethod
    def load_partition(cls, records: Iterable[AnyGroupRecord], config: GroupCoordinatorConfig, now_ms: int,
                       consumer_config: ConsumerGroupConfig | None = None,
                       group_configs: GroupConfigLookup | None = None) -> PartitionCoordinator:
        """Replay the partition's records of both kinds (see GroupCoordinator.load); consumer
        group members get a full session from ``now_ms``."""
        coordinator = cls.load(records, config, now_ms)  # type: ignore[arg-type]
        assert isinstance(coordinator, PartitionCoordinator)
        if consumer_config is not None:
            coordinator._consumer.config = consumer_config
        if group_configs is not None:
            coordinator._consumer.group_configs = group_configs
        coordinator._consumer.start(now_ms)
        return coordinator

    def _replay(self, record: AnyGroupRecord) -> None:
        if isinstance(record, CONSUMER_RECORD_TYPES):
            self._consumer.replay(record)
        else:
            super()._replay(record)

    @property
    def consumer_groups(self) -> ConsumerGroups:
        return self._consumer

    # ------------------------------------------------------------ the consumer protocol
    def consumer_heartbeat(self, request: ConsumerHeartbeat, topics: Mapping[str, TopicInfo], new_member_id: str,
                           now_ms: int) -> Effects[ConsumerHeartbeatResult]:
        if self._unloaded:
            return self._with(ConsumerHeartbeatResult(ErrorCode.NOT_COORDINATOR, None, request.member_id), [])
        if self.group_state(request.group_id) not in (GroupState.EMPTY, GroupState.DEAD):
            return self._with(ConsumerHeartbeatResult(
                ErrorCode.INCONSISTENT_GROUP_PROTOCOL, f"group {request.group_id} is a classic group with members",
                request.member_id), [])
        reply, records = self._consumer.heartbeat(request, topics, new_member_id, now_ms)
        return self._with(reply, records)

    def consumer_describe(self, group_id: str) -> DescribedConsumerGroup:
        if self._unloaded:
            return DescribedConsumerGroup(group_id, ErrorCode.NOT_COORDINATOR)
        if not group_id:
            return DescribedConsumerGroup(group_id, ErrorCode.INVALID_GROUP_ID)
        return self._consumer.describe(group_id)

    # ------------------------------------------------------------ classic APIs, protocol-aware
    def join(self, request: JoinRequest, token: Token, new_member_id: str, now_ms: int) -> Effects[None]:
        if not self._unloaded and self._consumer.has_group(request.group_id):
            out = Outbox()
            out.complete(token, join_error(request.member_id, ErrorCode.INCONSISTENT_GROUP_PROTOCOL))
            return self._effects(None, out)
        return super().join(request, token, new_member_id, now_ms)

    def commit_offsets(self, request: OffsetCommitRequest, now_ms: int) -> Effects[OffsetCommitResult]:
        if self._unloaded or not self._consumer.has_group(request.group_id):
            return super().commit_offsets(request, now_ms)
        error: ErrorCode = self._consumer.validate_commit(request.group_id, request.member_id,
                                                           request.generation_id)
        if error is not ErrorCode.NONE:
            return self._with(OffsetCommitResult(tuple(PartitionResult(p.topic, p.partition, error)
                                                       for p in request.offsets)), [])
        return super().commit_offsets(replace(request, member_id="", generation_id=-1, group_instance_id=None),
                                      now_ms)

    def check_txn_offset_commit(self, request: OffsetCommitRequest) -> ErrorCode:
        if self._unloaded or not self._consumer.has_group(request.group_id):
            return super().check_txn_offset_commit(request)
        if request.generation_id < 0 and not request.member_id:
            return ErrorCode.NONE
        return self._consumer.validate_commit(request.group_id, request.member_id, request.generation_id)

    def delete_offsets(self, group_id: str, partitions: Sequence[TopicPartition],
                       now_ms: int) -> Effects[OffsetDeleteResult]:
        """OffsetDelete of a consumer group, as Kafka decides it: partitions of topics a member
        subscribes to (by name, or matched by its regular expression) keep their offsets and
        answer GROUP_SUBSCRIBED_TO_TOPIC; the others' offsets go."""
        group = None if self._unloaded else self._consumer.group(group_id)
        if group is None:
            return super().delete_offsets(group_id, partitions, now_ms)
        subscribed = {n for m in group.metas.values() for n in m.subscribed_topic_names}
        if group.metas:
            subscribed |= set(group.topics)
        free = [tp for tp in partitions if tp.topic not in subscribed]
        deleted: dict[tuple[str, int], ErrorCode] = {}
        records: tuple[AnyGroupRecord, ...] = ()
        if free and self.group_state(group_id) is GroupState.EMPTY:  # the offsets are in the classic store
            inner = super().delete_offsets(group_id, free, now_ms)
            deleted = {(r.topic, r.partition): r.error for r in inner.reply.partitions}
            records = inner.records
        return self._with(OffsetDeleteResult(ErrorCode.NONE, tuple(
            PartitionResult(tp.topic, tp.partition, ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC if tp.topic in subscribed
                            else deleted.get((tp.topic, tp.partition), ErrorCode.NONE))
            for tp in partitions)), records)

    def describe(self, group_ids: Sequence[str]) -> tuple[DescribedGroup, ...]:
        """DescribeGroups (the classic API) does not describe consumer groups: Dead, as Kafka
        answers v0-v5 (ConsumerGroupDescribe describes them)."""
        out = []
        for group_id, d in zip(group_ids, super().describe(group_ids), strict=True):
            if not self._unloaded and self._consumer.has_group(group_id):
                d = DescribedGroup(group_id, ErrorCode.NONE, GroupState.DEAD, "", "")
            out.append(d)
        return tuple(out)

    def list_groups(self, states: Iterable[GroupState] | None = None) -> tuple[ListedGroup, ...]:
        """Classic groups only (a consumer group's offsets-only shadow is not one)."""
        return tuple(x for x in super().list_groups(states) if not self._consumer.has_group(x.group_id))

    def list_all_groups(self, states: frozenset[str] | None = None,
                        types: frozenset[str] | None = None) -> tuple[ListedAnyGroup, ...]:
        """ListGroups with v4's states filter and v5's types filter (both case-insensitive, as
        Kafka matches them)."""
        if self._unloaded:
            return ()
        listed = [ListedAnyGroup(x.group_id, x.protocol_type, x.state.value, CLASSIC) for x in self.list_groups()]
        listed += [ListedAnyGroup(group_id, CONSUMER, group.state(), CONSUMER)
                   for group_id, group in sorted(self._consumer.groups.items())]
        lower_states = None if states is None else {s.lower() for s in states}
        lower_types = None if types is None else {t.lower() for t in types}
        return tuple(x for x in sorted(listed, key=lambda x: x.group_id)
                     if (lower_states is None or x.state.lower() in lower_states)
                     and (lower_types is None or x.group_type in lower_types))

    def delete_groups(self, group_ids: Sequence[str], now_ms: int) -> Effects[tuple[DeletedGroup, ...]]:
        results: list[DeletedGroup] = []
        records: list[AnyGroupRecord] = []
        for group_id in dict.fromkeys(group_ids):
            if self._unloaded or not self._consumer.has_group(group_id):
                classic = super().delete_groups([group_id], now_ms)
                results += classic.reply
                records += classic.records
                continue
            error, consumer_records = self._consumer.delete(group_id)
            records += consumer_records
            if error is ErrorCode.NONE and self.group_state(group_id) is GroupState.EMPTY:
                records += super().delete_groups([group_id], now_ms).records  # its offsets
            results.append(DeletedGroup(group_id, error))
        return self._with(tuple(results), records)

    # ------------------------------------------------------------ timers and plumbing
    def tick(self, now_ms: int) -> Effects[None]:
        classic = super().tick(now_ms)
        consumer = [] if self._unloaded else self._consumer.tick(now_ms)
        expired, self._expired = self._expired, []
        return Effects(None, tuple(classic.records) + tuple(expired) + tuple(consumer), classic.completed,
                       self.next_deadline_ms())

    def _expire_offsets(self, now_ms: int, out: Outbox) -> None:
        """Offsets retention with consumer groups: a consumer group with members keeps its
        offsets (its commits are stored outside group management, which the classic rule would
        expire by commit time); once it is empty they expire as such commits do, and a consumer
        group left with no members and no offsets is deleted, as Kafka deletes it."""
        shielded = {group_id: self._groups.pop(group_id) for group_id in list(self._groups)
                    if (group := self._consumer.group(group_id)) is not None and group.metas}
        try:
            super()._expire_offsets(now_ms, out)
        finally:
            self._groups.update(shielded)
        for group_id in sorted(self._consumer.groups):
            group = self._consumer.groups[group_id]
            if not group.metas and group_id not in self._groups:
                self._expired.extend(self._consumer.delete(group_id)[1])

    def unload(self, now_ms: int) -> Effects[None]:
        self._consumer.clear()
        return super().unload(now_ms)

    def next_deadline_ms(self) -> int | None:
        deadlines = [d for d in (super().next_deadline_ms(), self._consumer.next_deadline_ms()) if d is not None]
        return min(deadlines) if deadlines else None

    def group_ids(self) -> list[str]:
        return sorted(set(super().group_ids()) | set(self._consumer.groups))

    def _effects(self, reply: R, out: Outbox) -> Effects[R]:
        return Effects(reply=reply, records=tuple(out.records), completed=dict(out.completed),
                       next_deadline_ms=self.next_deadline_ms())

    def _with(self, reply: R, records: Sequence[AnyGroupRecord | ConsumerRecord]) -> Effects[R]:
        return Effects(reply=reply, records=tuple(records), next_deadline_ms=self.next_deadline_ms())


__all__ = ["CLASSIC", "CONSUMER", "ListedAnyGroup", "PartitionCoordinator", "cg"]
