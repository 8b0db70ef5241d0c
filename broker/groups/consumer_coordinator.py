"""The consumer-protocol groups (KIP-848) of one ``__consumer_offsets`` partition, as a state machine.

It decides what Kafka's GroupMetadataManager decides for ConsumerGroupHeartbeat and
ConsumerGroupDescribe: members join with epoch 0, heartbeat with their member epoch and leave with
-1 (a static member with -2, keeping its place and partitions until its session expires). A new
member, a leaving or expired one, a changed subscription, or a change of the subscribed topics'
partitions bumps the group epoch; the next heartbeat then runs the server-side assignor
(``uniform`` or ``range``) into a new target assignment at that epoch, and every member is
reconciled toward its target (:func:`broker.groups.consumer_group.reconcile`).

No sockets, appends, clock or threads: every call takes ``now_ms`` and the topics it may need, and
returns the records to persist. Every change of state is made by emitting a record and replaying
it (:meth:`ConsumerGroups.replay`), so a coordinator loaded from the partition's records has
exactly the state of the one that wrote them.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Protocol

from broker.groups import consumer_group as cg
from broker.groups.consumer_assignors import ASSIGNORS, RANGE, UNIFORM, AssignorMember
from broker.groups.consumer_group import ConsumerGroup, reconcile
from broker.groups.consumer_records import (
    ConsumerCurrentRecord,
    ConsumerGroupRecord,
    ConsumerGroupValue,
    ConsumerMemberRecord,
    ConsumerMemberValue,
    ConsumerRecord,
    ConsumerTargetEpochRecord,
    ConsumerTargetRecord,
    CurrentAssignmentValue,
    Partitions,
    SubscribedTopic,
    normalize,
)
from broker.groups.timers import DeadlineQueue
from metadata_quorum.kernel.errors import ErrorCode
from metadata_quorum.ops.group_configs import ConsumerGroupTimeouts, consumer_group_timeouts

SESSION_TIMER = "session"
REVOCATION_TIMER = "revocation"


@dataclass(frozen=True)
class ConsumerGroupConfig:
    """Kafka's ``group.consumer.*`` defaults: ``session_timeout_ms`` (a member not heard from
    for this long is removed), ``heartbeat_interval_ms`` (told to members), ``max_size``, and
    the server-side ``assignors`` (the first is used when no member names one)."""

    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 5_000
    max_size: int = 2**31 - 1
    assignors: tuple[str, ...] = (UNIFORM, RANGE)

    def __post_init__(self) -> None:
        if self.session_timeout_ms < 1 or self.heartbeat_interval_ms < 1 or self.max_size < 1:
            raise ValueError(f"session_timeout_ms, heartbeat_interval_ms and max_size must be positive: {self}")
        if not self.assignors or any(a not in ASSIGNORS for a in self.assignors):
            raise ValueError(f"assignors must be a non-empty subset of {sorted(ASSIGNORS)}, got {self.assignors}")


class GroupConfigLookup(Protocol):
    """A group's own configs (ConfigResource GROUP, as the metadata log holds them): empty when
    none are set."""

    def __call__(self, group_id: str) -> Mapping[str, str]: ...


def _no_group_configs(group_id: str) -> Mapping[str, str]:
    return {}


@dataclass(frozen=True)
class TopicInfo:
    topic_id: str
    partitions: int


@dataclass(frozen=True)
class ConsumerHeartbeat:
    """ConsumerGroupHeartbeat. ``None`` fields did not change since the member's last heartbeat;
    ``owned`` is what the member owns (topic id -> partitions), ``None`` when not sent."""

    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: Partitions | None = None
    client_id: str = ""
    client_host: str = ""
    member_id_required: bool = True


@dataclass(frozen=True)
class ConsumerHeartbeatResult:
    error: ErrorCode
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: Partitions | None = None


@dataclass(frozen=True)
class DescribedConsumerMember:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    assignment: Partitions
    target_assignment: Partitions


@dataclass(frozen=True)
class DescribedConsumerGroup:
    group_id: str
    error: ErrorCode
    state: str = cg.DEAD
    group_epoch: int = 0
    assignment_epoch: int = 0
    assignor: str = ""
    members: tuple[DescribedConsumerMember, ...] = ()
    topic_names: Mapping[str, str] | None = None


def _error(error: ErrorCode, message: str, member_id: str | None = None) -> ConsumerHeartbeatResult:
    return ConsumerHeartbeatResult(error, message, member_id)


class ConsumerGroups:
    """Every consumer-protocol group of one coordinator partition."""

    def __init__(self, config: ConsumerGroupConfig, group_configs: GroupConfigLookup = _no_group_configs) -> None:
        self.config = config
        self.group_configs = group_configs
        self.groups: dict[str, ConsumerGroup] = {}
        self.timers: DeadlineQueue[tuple[str, str, str, int]] = DeadlineQueue()

    # ------------------------------------------------------------ replay
    def replay(self, record: ConsumerRecord) -> None:
        """Apply one record (from the log on load, or just emitted)."""
        group = self.groups.get(record.group_id)
        if group is None:
            if record.value is None:
                return
            group = self.groups[record.group_id] = ConsumerGroup(record.group_id)
        if isinstance(record, ConsumerGroupRecord):
            if record.value is None:
                del self.groups[record.group_id]
            else:
                group.epoch, group.topics = record.value.epoch, dict(record.value.topics)
        elif isinstance(record, ConsumerMemberRecord):
            if record.value is None:
                group.metas.pop(record.member_id, None)
                group.currents.pop(record.member_id, None)
                group.targets.pop(record.member_id, None)
            else:
                group.metas[record.member_id] = record.value
        elif isinstance(record, ConsumerTargetRecord):
            if record.value is None:
                group.targets.pop(record.member_id, None)
            else:
                group.targets[record.member_id] = normalize(record.value)
        elif isinstance(record, ConsumerTargetEpochRecord):
            group.assignment_epoch = 0 if record.value is None else record.value
        elif isinstance(record, ConsumerCurrentRecord):
            if record.value is None:
                group.currents.pop(record.member_id, None)
            else:
                group.currents[record.member_id] = record.value
        else:
            raise TypeError(f"not a consumer group record: {record!r}")

    def start(self, now_ms: int) -> None:
        """After a load: every member gets a full session (and revocation) timeout from now."""
        self.timers.clear()
        for group in self.groups.values():
            for member_id in group.metas:
                self._touch(group, member_id, now_ms)
                self._arm_revocation(group, member_id, now_ms)

    def _emit(self, record: ConsumerRecord, out: list[ConsumerRecord]) -> None:
        out.append(record)
        self.replay(record)

    # ------------------------------------------------------------ queries
    def timeouts(self, group_id: str) -> ConsumerGroupTimeouts:
        """The session timeout and heartbeat interval this group's members get: the group's
        ``consumer.session.timeout.ms`` / ``consumer.heartbeat.interval.ms`` when set (read at
        every heartbeat, so a change applies from each member's next one), else the defaults."""
        return consumer_group_timeouts(self.group_configs(group_id), self.config.session_timeout_ms,
                                       self.config.heartbeat_interval_ms)

    def has_group(self, group_id: str) -> bool:
        return group_id in self.groups

    def group(self, group_id: str) -> ConsumerGroup | None:
        return self.groups.get(group_id)

    def preferred_assignor(self, group: ConsumerGroup) -> str:
        """The assignor most members ask for (ties: the configured order), else the default."""
        votes: dict[str, int] = {}
        for meta in group.metas.values():
            if meta.server_assignor is not None:
                votes[meta.server_assignor] = votes.get(meta.server_assignor, 0) + 1
        if not votes:
            return self.config.assignors[0]
        return max(self.config.assignors, key=lambda a: (votes.get(a, 0), -self.config.assignors.index(a)))

    def describe(self, group_id: str) -> DescribedConsumerGroup:
        group = self.groups.get(group_id)
        if group is None:
            return DescribedConsumerGroup(group_id, ErrorCode.GROUP_ID_NOT_FOUND)
        members = tuple(
            DescribedConsumerMember(member_id, m.instance_id, m.rack_id, group.current(member_id).member_epoch,
                                    m.client_id, m.client_host, m.subscribed_topic_names, m.subscribed_topic_regex,
                                    group.current(member_id).assigned, group.target(member_id))
            for member_id, m in sorted(group.metas.items()))
        names = {t.topic_id: name for name, t in group.topics.items()}
        return DescribedConsumerGroup(group_id, ErrorCode.NONE, group.state(), group.epoch, group.assignment_epoch,
                                      self.preferred_assignor(group), members, names)

    def validate_commit(self, group_id: str, member_id: str, member_epoch: int) -> ErrorCode:
        """OffsetCommit to a consumer group: by a member at its current epoch, or (epoch < 0,
        no member id) by an admin or a consumer outside the group while the group is empty."""
        group = self.groups[group_id]
        if member_epoch < 0 and not member_id and not group.metas:
            return ErrorCode.NONE
        if member_id not in group.metas:
            return ErrorCode.UNKNOWN_MEMBER_ID
        current = group.current(member_id).member_epoch
        if member_epoch > current:
            return ErrorCode.FENCED_MEMBER_EPOCH
        if member_epoch < current:
            return ErrorCode.STALE_MEMBER_EPOCH
        return ErrorCode.NONE

    # ------------------------------------------------------------ heartbeat
    def heartbeat(self, req: ConsumerHeartbeat, topics: Mapping[str, TopicInfo], new_member_id: str,
                  now_ms: int) -> tuple[ConsumerHeartbeatResult, list[ConsumerRecord]]:
        out: list[ConsumerRecord] = []
        invalid = self._invalid(req)
        if invalid is not None:
            return _error(ErrorCode.INVALID_REQUEST, invalid, req.member_id), out
        if req.server_assignor is not None and req.server_assignor not in self.config.assignors:
            return _error(ErrorCode.UNSUPPORTED_ASSIGNOR,
                          f"assignor {req.server_assignor!r} is not one of {list(self.config.assignors)}"), out
        if req.member_epoch in (cg.LEAVE_EPOCH, cg.STATIC_LEAVE_EPOCH):
            return self._leave(req, now_ms, out), out
        group = self.groups.get(req.group_id)
        if group is None:
            if req.member_epoch != cg.JOIN_EPOCH:
                return _error(ErrorCode.GROUP_ID_NOT_FOUND, f"consumer group {req.group_id} not found"), out
            group = ConsumerGroup(req.group_id)
        member_id = req.member_id or new_member_id
        old_meta = group.metas.get(member_id)
        replaced: str | None = None
        if req.member_epoch == cg.JOIN_EPOCH:
            if req.instance_id is not None:
                holder = group.static_member(req.instance_id)
                if holder is not None and holder != member_id:
                    if group.current(holder).member_epoch != cg.STATIC_LEAVE_EPOCH:
                        return _error(ErrorCode.UNRELEASED_INSTANCE_ID,
                                      f"instance {req.instance_id} is still held by member {holder}"), out
                    replaced, old_meta = holder, group.metas[holder]
            if member_id not in group.metas and replaced is None and len(group.metas) >= self.config.max_size:
                return _error(ErrorCode.GROUP_MAX_SIZE_REACHED,
                              f"consumer group {req.group_id} has {len(group.metas)} members"), out
        else:
            error = self._check_member(group, req, member_id)
            if error is not None:
                return error, out
        meta = self._merged_meta(req, old_meta)
        if req.member_epoch == cg.JOIN_EPOCH and meta.subscribed_topic_regex is not None:
            try:
                re.compile(meta.subscribed_topic_regex)
            except re.error as exc:
                return _error(ErrorCode.INVALID_REQUEST, f"invalid topic regex: {exc}"), out
        if req.group_id not in self.groups:
            self.groups[req.group_id] = group
        bump = old_meta is None or (old_meta.subscribed_topic_names, old_meta.subscribed_topic_regex) != (
            meta.subscribed_topic_names, meta.subscribed_topic_regex)
        if replaced is not None:
            # a static member back under a new member id takes the old one's place and target
            target = group.target(replaced)
            self._remove_member(group, replaced, out)
            if target:
                self._emit(ConsumerTargetRecord(group.group_id, member_id, target), out)
        if meta != group.metas.get(member_id):
            self._emit(ConsumerMemberRecord(group.group_id, member_id, meta), out)
        before = group.current(member_id)
        if req.member_epoch == cg.JOIN_EPOCH and (member_id in group.currents):
            # a rejoin (epoch 0) owns nothing: what it held is free again
            self._emit(ConsumerCurrentRecord(group.group_id, member_id, None), out)
        self._refresh_epoch(group, topics, bump, out)
        self._maybe_assign(group, out)
        current = group.current(member_id)
        nxt = reconcile(current, group.assignment_epoch, group.target(member_id),
                        {} if req.member_epoch == cg.JOIN_EPOCH else req.owned, group.owners(member_id))
        if nxt != current or member_id not in group.currents:
            self._emit(ConsumerCurrentRecord(group.group_id, member_id, nxt), out)
        self._touch(group, member_id, now_ms)
        if nxt.state == cg.UNREVOKED_PARTITIONS and (before.state != cg.UNREVOKED_PARTITIONS
                                                     or before.member_epoch != nxt.member_epoch):
            self._arm_revocation(group, member_id, now_ms)
        send = (req.member_epoch == cg.JOIN_EPOCH or nxt.assigned != before.assigned
                or (req.owned is not None and normalize(req.owned) != nxt.assigned))
        return ConsumerHeartbeatResult(ErrorCode.NONE, None, member_id, nxt.member_epoch,
                                       self.timeouts(group.group_id).heartbeat_interval_ms,
                                       nxt.assigned if send else None), out

    def _invalid(self, req: ConsumerHeartbeat) -> str | None:
        """Kafka's request checks: the reason INVALID_REQUEST is answered, or None."""
        if not req.group_id:
            return "GroupId can't be empty."
        if req.instance_id == "":
            return "InstanceId can't be empty."
        if req.rack_id == "":
            return "RackId can't be empty."
        if req.member_epoch < cg.STATIC_LEAVE_EPOCH:
            return f"MemberEpoch {req.member_epoch} is invalid."
        if not req.member_id and (req.member_id_required or req.member_epoch != cg.JOIN_EPOCH):
            return "MemberId can't be empty."
        if req.member_epoch == cg.JOIN_EPOCH:
            if req.rebalance_timeout_ms <= 0:
                return "RebalanceTimeoutMs must be provided in first request."
            if req.owned is None or any(req.owned.values()):
                return "TopicPartitions must be empty when (re-)joining."
            if req.subscribed_topic_names is None and req.subscribed_topic_regex is None:
                return "SubscribedTopicNames or SubscribedTopicRegex must be set in first request."
        if req.member_epoch == cg.STATIC_LEAVE_EPOCH and req.instance_id is None:
            return "InstanceId can't be null when leaving a group with MemberEpoch -2."
        return None

    def _check_member(self, group: ConsumerGroup, req: ConsumerHeartbeat,
                      member_id: str) -> ConsumerHeartbeatResult | None:
        if member_id not in group.metas:
            return _error(ErrorCode.UNKNOWN_MEMBER_ID, f"member {member_id} is not in group {group.group_id}")
        if req.instance_id is not None and group.static_member(req.instance_id) != member_id:
            return _error(ErrorCode.FENCED_INSTANCE_ID, f"instance {req.instance_id} belongs to another member")
        current = group.current(member_id)
        if req.member_epoch > current.member_epoch:
            return _error(ErrorCode.FENCED_MEMBER_EPOCH,
                          f"epoch {req.member_epoch} is ahead of the member's {current.member_epoch}")
        if req.member_epoch < current.member_epoch:
            # the member may have missed the response that moved it on: accepted if it owns no more
            # than it is assigned at its current epoch
            if not (req.member_epoch == current.previous_member_epoch and req.owned is not None
                    and cg.is_subset(normalize(req.owned), current.assigned)):
                return _error(ErrorCode.FENCED_MEMBER_EPOCH,
                              f"epoch {req.member_epoch} is behind the member's {current.member_epoch}")
        return None

    def _merged_meta(self, req: ConsumerHeartbeat, old: ConsumerMemberValue | None) -> ConsumerMemberValue:
        regex = req.subscribed_topic_regex if req.subscribed_topic_regex is not None else (
            old.subscribed_topic_regex if old is not None else None)
        return ConsumerMemberValue(
            instance_id=req.instance_id if req.instance_id is not None else (old.instance_id if old else None),
            rack_id=req.rack_id if req.rack_id is not None else (old.rack_id if old else None),
            client_id=req.client_id, client_host=req.client_host,
            rebalance_timeout_ms=(req.rebalance_timeout_ms if req.rebalance_timeout_ms > 0
                                  else (old.rebalance_timeout_ms if old else 0)),
            subscribed_topic_names=(tuple(sorted(set(req.subscribed_topic_names)))
                                    if req.subscribed_topic_names is not None
                                    else (old.subscribed_topic_names if old else ())),
            subscribed_topic_regex=regex or None,
            server_assignor=req.server_assignor if req.server_assignor is not None else (
                old.server_assignor if old else None))

    # ------------------------------------------------------------ epochs and assignment
    def _subscribed(self, group: ConsumerGroup, topics: Mapping[str, TopicInfo]) -> dict[str, SubscribedTopic]:
        """The metadata of every existing topic some member subscribes to (by name or regex)."""
        names: set[str] = set()
        patterns = set()
        for meta in group.metas.values():
            names.update(meta.subscribed_topic_names)
            if meta.subscribed_topic_regex is not None:
                patterns.add(meta.subscribed_topic_regex)
        for pattern in patterns:
            compiled = re.compile(pattern)
            names.update(n for n in topics if compiled.fullmatch(n))
        return {n: SubscribedTopic(topics[n].topic_id, topics[n].partitions) for n in sorted(names) if n in topics}

    def _refresh_epoch(self, group: ConsumerGroup, topics: Mapping[str, TopicInfo] | None, bump: bool,
                       out: list[ConsumerRecord]) -> None:
        subscribed = dict(group.topics) if topics is None else self._subscribed(group, topics)
        if bump or subscribed != dict(group.topics):
            self._emit(ConsumerGroupRecord(group.group_id, ConsumerGroupValue(group.epoch + 1, subscribed)), out)

    def _maybe_assign(self, group: ConsumerGroup, out: list[ConsumerRecord]) -> None:
        if group.epoch <= group.assignment_epoch:
            return
        members = {}
        for member_id, meta in group.metas.items():
            ids = {t.topic_id for name, t in group.topics.items() if name in meta.subscribed_topic_names
                   or (meta.subscribed_topic_regex is not None
                       and re.fullmatch(meta.subscribed_topic_regex, name) is not None)}
            members[member_id] = AssignorMember(frozenset(ids), group.target(member_id))
        counts = {t.topic_id: t.partitions for t in group.topics.values()}
        result = ASSIGNORS[self.preferred_assignor(group)](members, counts)
        for member_id in sorted(members):
            if result[member_id] != group.target(member_id):
                self._emit(ConsumerTargetRecord(group.group_id, member_id, result[member_id] or None), out)
        self._emit(ConsumerTargetEpochRecord(group.group_id, group.epoch), out)

    # ------------------------------------------------------------ leaving
    def _leave(self, req: ConsumerHeartbeat, now_ms: int, out: list[ConsumerRecord]) -> ConsumerHeartbeatResult:
        group = self.groups.get(req.group_id)
        if group is None:
            return _error(ErrorCode.GROUP_ID_NOT_FOUND, f"consumer group {req.group_id} not found")
        member_id = req.member_id
        if req.instance_id is not None:
            holder = group.static_member(req.instance_id)
            if holder is None:
                return _error(ErrorCode.UNKNOWN_MEMBER_ID, f"instance {req.instance_id} is not in the group")
            if holder != member_id:
                return _error(ErrorCode.FENCED_INSTANCE_ID, f"instance {req.instance_id} belongs to another member")
        if member_id not in group.metas:
            return _error(ErrorCode.UNKNOWN_MEMBER_ID, f"member {member_id} is not in group {group.group_id}")
        if req.member_epoch == cg.STATIC_LEAVE_EPOCH:
            current = group.current(member_id)
            if current.member_epoch != cg.STATIC_LEAVE_EPOCH:
                self._emit(ConsumerCurrentRecord(group.group_id, member_id, replace(
                    current, member_epoch=cg.STATIC_LEAVE_EPOCH, previous_member_epoch=current.member_epoch)), out)
            self._touch(group, member_id, now_ms)
        else:
            self.fence(group, member_id, out)
        return ConsumerHeartbeatResult(ErrorCode.NONE, None, member_id, req.member_epoch, 0)

    def fence(self, group: ConsumerGroup, member_id: str, out: list[ConsumerRecord]) -> None:
        """Remove a member (left, session expired, or too slow to revoke) and bump the epoch."""
        self._remove_member(group, member_id, out)
        self._refresh_epoch(group, None, True, out)

    def _remove_member(self, group: ConsumerGroup, member_id: str, out: list[ConsumerRecord]) -> None:
        self._emit(ConsumerCurrentRecord(group.group_id, member_id, None), out)
        if member_id in group.targets:
            self._emit(ConsumerTargetRecord(group.group_id, member_id, None), out)
        self._emit(ConsumerMemberRecord(group.group_id, member_id, None), out)
        self.timers.cancel((SESSION_TIMER, group.group_id, member_id, 0))

    def delete(self, group_id: str) -> tuple[ErrorCode, list[ConsumerRecord]]:
        """DeleteGroups of a consumer group: only when it has no members."""
        out: list[ConsumerRecord] = []
        group = self.groups[group_id]
        if group.metas:
            return ErrorCode.NON_EMPTY_GROUP, out
        for member_id in sorted(group.targets):
            self._emit(ConsumerTargetRecord(group_id, member_id, None), out)
        self._emit(ConsumerTargetEpochRecord(group_id, None), out)
        self._emit(ConsumerGroupRecord(group_id, None), out)
        return ErrorCode.NONE, out

    # ------------------------------------------------------------ timers
    def _touch(self, group: ConsumerGroup, member_id: str, now_ms: int) -> None:
        self.timers.schedule((SESSION_TIMER, group.group_id, member_id, 0),
                             now_ms + self.timeouts(group.group_id).session_timeout_ms)

    def _arm_revocation(self, group: ConsumerGroup, member_id: str, now_ms: int) -> None:
        current = group.current(member_id)
        if current.state == cg.UNREVOKED_PARTITIONS:
            timeout_ms = group.metas[member_id].rebalance_timeout_ms
            self.timers.schedule((REVOCATION_TIMER, group.group_id, member_id, current.member_epoch),
                                 now_ms + timeout_ms)

    def next_deadline_ms(self) -> int | None:
        return self.timers.next_deadline_ms()

    def tick(self, now_ms: int) -> list[ConsumerRecord]:
        """Expire sessions, and fence members still holding revoked partitions past their
        rebalance timeout."""
        out: list[ConsumerRecord] = []
        while (key := self.timers.pop_due(now_ms)) is not None:
            kind, group_id, member_id, epoch = key
            group = self.groups.get(group_id)
            if group is None or member_id not in group.metas:
                continue
            current: CurrentAssignmentValue = group.current(member_id)
            if kind == REVOCATION_TIMER and (current.state != cg.UNREVOKED_PARTITIONS or current.member_epoch != epoch):
                continue
            self.fence(group, member_id, out)
        return out

    def clear(self) -> None:
        self.groups.clear()
        self.timers.clear()
