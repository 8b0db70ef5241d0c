"""The classic group coordinator of one ``__consumer_offsets`` partition, as a state machine.

It decides what Kafka's GroupCoordinator decides (JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
OffsetCommit, OffsetFetch, DescribeGroups, ListGroups, DeleteGroups) and nothing else: no
sockets, no appends, no clock, no threads. Every call takes ``now_ms``; member ids come from the
caller; timeouts are deadlines the caller honours by calling :meth:`GroupCoordinator.tick`. What a
call asks of the world comes back as :class:`~broker.groups.messages.Effects` (records to append,
parked requests to answer once they are durable, when to tick next), so the same object runs
under the Kafka listener, in tests with a manual clock, and in a seeded simulation.

The partition's records are the only durable state. :meth:`GroupCoordinator.load` replays them
into a new coordinator after a move or a crash: committed offsets exactly, groups Empty or
Stable at their last persisted generation with session timers restarted, so members either
heartbeat on as before or rejoin, as after a Kafka coordinator failover.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TypeVar

from broker.groups.config import GroupCoordinatorConfig
from broker.groups.group import ClassicGroup, Member
from broker.groups.messages import (
    UNKNOWN_MEMBER_ID,
    DeletedGroup,
    DescribedGroup,
    DescribedMember,
    Effects,
    GroupState,
    HeartbeatRequest,
    HeartbeatResult,
    JoinRequest,
    LeaveMemberResult,
    LeaveRequest,
    LeaveResult,
    ListedGroup,
    OffsetCommitRequest,
    OffsetCommitPartition,
    OffsetCommitResult,
    OffsetDeleteResult,
    OffsetFetchResult,
    PartitionResult,
    SyncRequest,
    SyncResult,
    Token,
    TopicPartition,
)
from broker.groups.offsets import (
    apply_offset_record,
    delete_offsets,
    expired_offsets,
    fetch_offsets,
    offset_record,
    validate_offset_commit,
)
from broker.groups.rebalance import (
    HEARTBEAT_TIMER,
    JOIN_TIMER,
    OFFSETS_EXPIRY_TIMER,
    SYNC_TIMER,
    Outbox,
    Rebalancer,
    TimerKey,
    join_error,
    join_result,
)
from broker.groups.records import GroupMetadataRecord, GroupRecord, OffsetCommitRecord
from broker.groups.timers import DeadlineQueue
from metadata_quorum.kernel.errors import ErrorCode

R = TypeVar("R")


def kafka_member_id(client_id: str, group_instance_id: str | None, unique_suffix: str) -> str:
    """A member id shaped as Kafka makes them (``<instance id or client id>-<uuid>``), for the
    shell to pass as ``new_member_id``."""
    return f"{group_instance_id if group_instance_id is not None else client_id}-{unique_suffix}"


def _inconsistent(requested: str | None, current: str | None) -> bool:
    return requested is not None and current is not None and requested != current


class GroupCoordinator:
    """All classic groups whose coordinator is one ``__consumer_offsets`` partition."""

    def __init__(self, config: GroupCoordinatorConfig, now_ms: int) -> None:
        self._config = config
        self._groups: dict[str, ClassicGroup] = {}
        self._timers: DeadlineQueue[TimerKey] = DeadlineQueue()
        self._rebalancer = Rebalancer(config, self._timers)
        self._unloaded = False
        if config.offsets_retention_ms is not None:
            self._timers.schedule(TimerKey(OFFSETS_EXPIRY_TIMER), now_ms + config.offsets_retention_check_interval_ms)

    # ---------------------------------------------------------------- loading and unloading

    @classmethod
    def load(cls, records: Iterable[GroupRecord], config: GroupCoordinatorConfig, now_ms: int) -> GroupCoordinator:
        """Rebuild every group and its offsets from the partition's records, in log order.

        Members of a loaded Stable group get a full session timeout from ``now_ms`` to heartbeat
        again (with the generation they had) before they are removed.
        """
        coordinator = cls(config, now_ms)
        for record in records:
            coordinator._replay(record)
        for group in coordinator._groups.values():
            for member in group.members.values():
                coordinator._rebalancer.reschedule_heartbeat(group, member, now_ms)
            if len(group.members) > config.group_max_size:
                coordinator._rebalancer.prepare_rebalance(group, now_ms, Outbox())
        return coordinator

    def _replay(self, record: GroupRecord) -> None:
        if isinstance(record, OffsetCommitRecord):
            group = self._groups.get(record.group_id)
            if group is None:
                if record.value is None:
                    return
                group = self._groups[record.group_id] = ClassicGroup(record.group_id)
            apply_offset_record(group, record)
        elif isinstance(record, GroupMetadataRecord):
            existing = self._groups.get(record.group_id)
            offsets = existing.offsets if existing is not None else {}
            if record.value is None:
                if offsets:
                    self._groups[record.group_id] = ClassicGroup(record.group_id, offsets=offsets)
                else:
                    self._groups.pop(record.group_id, None)
                return
            group = ClassicGroup.from_record(record.group_id, record.value)
            group.offsets = offsets
            self._groups[record.group_id] = group
        else:
            raise TypeError(f"not a group coordinator record: {record!r}")

    def unload(self, now_ms: int) -> Effects[None]:
        """The partition moved away: answer every parked request NOT_COORDINATOR (clients look
        up the new coordinator and rejoin there) and refuse everything from now on."""
        out = Outbox()
        for group in self._groups.values():
            for member in group.members.values():
                if member.join_token is not None:
                    out.complete(member.join_token, join_error(member.member_id, ErrorCode.NOT_COORDINATOR))
                if member.sync_token is not None:
                    out.complete(member.sync_token, SyncResult(ErrorCode.NOT_COORDINATOR))
                member.join_token = member.sync_token = None
            group.transition_to(GroupState.DEAD, now_ms)
        self._groups.clear()
        self._timers.clear()
        self._unloaded = True
        return self._effects(None, out)

    # ---------------------------------------------------------------- queries

    def next_deadline_ms(self) -> int | None:
        return self._timers.next_deadline_ms()

    def group_ids(self) -> list[str]:
        return sorted(self._groups)

    def group_metadata(self, group_id: str) -> GroupMetadataRecord | None:
        """The group's metadata as it would be persisted now (None if there is no such group);
        for tests, tools and snapshots."""
        group = self._groups.get(group_id)
        return None if group is None else group.metadata_record()

    def group_state(self, group_id: str) -> GroupState:
        group = self._groups.get(group_id)
        return GroupState.DEAD if group is None else group.state

    def generation_id(self, group_id: str) -> int | None:
        group = self._groups.get(group_id)
        return None if group is None else group.generation_id

    def fetch_offsets(self, group_id: str, partitions: Sequence[TopicPartition] | None = None) -> OffsetFetchResult:
        """OffsetFetch: the asked partitions, or every committed one when ``partitions`` is None.
        A group that does not exist has no offsets (not an error), as in Kafka."""
        if self._unloaded:
            return OffsetFetchResult(ErrorCode.NOT_COORDINATOR)
        group = self._groups.get(group_id)
        return OffsetFetchResult(ErrorCode.NONE, fetch_offsets(group, None if partitions is None else tuple(partitions)))

    def describe(self, group_ids: Sequence[str]) -> tuple[DescribedGroup, ...]:
        """DescribeGroups. Member metadata and assignments are shown only when Stable."""
        result: list[DescribedGroup] = []
        for group_id in group_ids:
            if self._unloaded:
                result.append(DescribedGroup(group_id, ErrorCode.NOT_COORDINATOR, GroupState.DEAD, "", ""))
                continue
            group = self._groups.get(group_id)
            if group is None:
                result.append(DescribedGroup(group_id, ErrorCode.NONE, GroupState.DEAD, "", ""))
                continue
            protocol = group.protocol_name if group.state is GroupState.STABLE else None
            members = tuple(
                DescribedMember(
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    metadata=m.metadata(protocol) if protocol is not None else b"",
                    assignment=m.assignment if protocol is not None else b"",
                )
                for m in group.members.values()
            )
            result.append(DescribedGroup(group_id, ErrorCode.NONE, group.state, group.protocol_type or "",
                                         protocol or "", members))
        return tuple(result)

    def list_groups(self, states: Iterable[GroupState] | None = None) -> tuple[ListedGroup, ...]:
        """ListGroups, optionally only groups in ``states`` (ListGroups v4's filter)."""
        wanted = None if states is None else frozenset(states)
        return tuple(
            ListedGroup(g.group_id, g.protocol_type or "", g.state)
            for g in sorted(self._groups.values(), key=lambda g: g.group_id)
            if wanted is None or g.state in wanted
        )

    # ---------------------------------------------------------------- JoinGroup

    def join(self, request: JoinRequest, token: Token, new_member_id: str, now_ms: int) -> Effects[None]:
        """JoinGroup. The response arrives in ``completed[token]``, now (errors, MEMBER_ID_REQUIRED,
        a rejoin that changes nothing) or from a later call when the join phase completes.
        ``new_member_id`` is used only if the request has no member id yet."""
        if request.member_id == UNKNOWN_MEMBER_ID and not new_member_id:
            raise ValueError("a JoinGroup without a member id needs a non-empty new_member_id")
        out = Outbox()
        self._join(request, token, new_member_id, now_ms, out)
        return self._effects(None, out)

    def _join(self, req: JoinRequest, token: Token, new_member_id: str, now_ms: int, out: Outbox) -> None:
        cfg = self._config
        if self._unloaded:
            return out.complete(token, join_error(req.member_id, ErrorCode.NOT_COORDINATOR))
        if not req.group_id:
            return out.complete(token, join_error(req.member_id, ErrorCode.INVALID_GROUP_ID))
        if not cfg.group_min_session_timeout_ms <= req.session_timeout_ms <= cfg.group_max_session_timeout_ms:
            return out.complete(token, join_error(req.member_id, ErrorCode.INVALID_SESSION_TIMEOUT))
        unknown = req.member_id == UNKNOWN_MEMBER_ID
        group = self._groups.get(req.group_id)
        if group is None:
            if not unknown:
                return out.complete(token, join_error(req.member_id, ErrorCode.UNKNOWN_MEMBER_ID))
            if not req.protocol_type or not req.protocols:
                return out.complete(token, join_error(UNKNOWN_MEMBER_ID, ErrorCode.INCONSISTENT_GROUP_PROTOCOL))
            group = self._groups[req.group_id] = ClassicGroup(req.group_id, state_timestamp_ms=now_ms)
            out.records.append(group.metadata_record())
        if not self._accepts_joining_member(group, req.member_id):
            self._rebalancer.drop_member(group, req.member_id, out)
            return out.complete(token, join_error(UNKNOWN_MEMBER_ID, ErrorCode.GROUP_MAX_SIZE_REACHED))
        if unknown:
            self._join_new_member(group, req, token, new_member_id, now_ms, out)
        else:
            self._join_existing_member(group, req, token, now_ms, out)

    def _accepts_joining_member(self, group: ClassicGroup, member_id: str) -> bool:
        """While preparing a rebalance, count members already waiting (the group may be over a
        lowered limit, and the last to rejoin are the ones turned away); otherwise members."""
        limit = self._config.group_max_size
        if group.state in (GroupState.EMPTY, GroupState.DEAD):
            return True
        if group.state is GroupState.PREPARING_REBALANCE:
            member = group.members.get(member_id)
            waiting = sum(1 for m in group.members.values() if m.awaiting_join)
            return (member is not None and member.awaiting_join) or waiting < limit
        return member_id in group.members or len(group.members) < limit

    def _join_new_member(self, group: ClassicGroup, req: JoinRequest, token: Token, new_member_id: str,
                         now_ms: int, out: Outbox) -> None:
        if group.state is GroupState.DEAD:
            return out.complete(token, join_error(UNKNOWN_MEMBER_ID, ErrorCode.COORDINATOR_NOT_AVAILABLE))
        if not group.supports_protocols(req.protocol_type, [p.name for p in req.protocols]):
            return out.complete(token, join_error(UNKNOWN_MEMBER_ID, ErrorCode.INCONSISTENT_GROUP_PROTOCOL))
        if new_member_id in group.members or new_member_id in group.pending_join_members:
            raise ValueError(f"new_member_id {new_member_id!r} is already used in group {group.group_id}")
        if req.group_instance_id is not None:
            existing = group.static_members.get(req.group_instance_id)
            if existing is not None:
                return self._replace_static_member(group, req, token, existing, new_member_id, now_ms, out)
            return self._add_member_and_rebalance(group, req, token, new_member_id, now_ms, out)
        if req.require_known_member_id:
            group.pending_join_members.add(new_member_id)
            self._timers.schedule(TimerKey(HEARTBEAT_TIMER, group.group_id, new_member_id), now_ms + req.session_timeout_ms)
            return out.complete(token, join_error(new_member_id, ErrorCode.MEMBER_ID_REQUIRED))
        self._add_member_and_rebalance(group, req, token, new_member_id, now_ms, out)

    def _join_existing_member(self, group: ClassicGroup, req: JoinRequest, token: Token, now_ms: int,
                              out: Outbox) -> None:
        member_id = req.member_id
        if group.state is GroupState.DEAD:
            return out.complete(token, join_error(member_id, ErrorCode.COORDINATOR_NOT_AVAILABLE))
        if not group.supports_protocols(req.protocol_type, [p.name for p in req.protocols]):
            return out.complete(token, join_error(member_id, ErrorCode.INCONSISTENT_GROUP_PROTOCOL))
        if member_id in group.pending_join_members:
            if req.group_instance_id is not None:
                return out.complete(token, join_error(member_id, ErrorCode.UNKNOWN_MEMBER_ID))
            return self._add_member_and_rebalance(group, req, token, member_id, now_ms, out)
        error = group.validate_member(member_id, req.group_instance_id)
        if error is not ErrorCode.NONE:
            return out.complete(token, join_error(member_id, error))
        member = group.members[member_id]
        if group.state is GroupState.PREPARING_REBALANCE:
            self._update_member_and_rebalance(group, member, req, token, now_ms, out)
        elif group.state is GroupState.COMPLETING_REBALANCE:
            if member.matches(req.protocols):
                # The member lost its JoinGroup response: answer again with this generation.
                out.complete(token, join_result(group, member_id, with_members=group.leader_id == member_id))
            else:
                self._update_member_and_rebalance(group, member, req, token, now_ms, out)
        elif group.state is GroupState.STABLE:
            if group.leader_id == member_id or not member.matches(req.protocols):
                # A leader rejoins to make the group reassign (e.g. topics changed); anyone
                # whose subscription changed needs a new assignment too.
                self._update_member_and_rebalance(group, member, req, token, now_ms, out)
            else:
                out.complete(token, join_result(group, member_id, with_members=False))
        else:
            out.complete(token, join_error(member_id, ErrorCode.UNKNOWN_MEMBER_ID))

    def _add_member_and_rebalance(self, group: ClassicGroup, req: JoinRequest, token: Token, member_id: str,
                                  now_ms: int, out: Outbox) -> None:
        member = Member(
            member_id=member_id,
            group_instance_id=req.group_instance_id,
            client_id=req.client_id,
            client_host=req.client_host,
            rebalance_timeout_ms=req.rebalance_timeout_ms,
            session_timeout_ms=req.session_timeout_ms,
            protocol_type=req.protocol_type,
            protocols=req.protocols,
            join_token=token,
            is_new=True,
        )
        if group.state is GroupState.PREPARING_REBALANCE and group.previous_state is GroupState.EMPTY:
            group.new_member_added = True
        group.add(member)
        self._rebalancer.reschedule_heartbeat(group, member, now_ms, self._config.new_member_join_timeout_ms)
        self._rebalancer.maybe_prepare_rebalance_or_complete_join(group, now_ms, out)

    def _set_join_token(self, member: Member, token: Token, out: Outbox) -> None:
        """A member's newer JoinGroup supersedes a parked one (its client gave up on it)."""
        if member.join_token is not None and member.join_token != token:
            out.complete(member.join_token, join_error(member.member_id, ErrorCode.REBALANCE_IN_PROGRESS))
        member.join_token = token

    def _update_member_and_rebalance(self, group: ClassicGroup, member: Member, req: JoinRequest, token: Token,
                                     now_ms: int, out: Outbox) -> None:
        member.protocols = req.protocols
        member.rebalance_timeout_ms = req.rebalance_timeout_ms
        member.session_timeout_ms = req.session_timeout_ms
        self._set_join_token(member, token, out)
        self._rebalancer.maybe_prepare_rebalance_or_complete_join(group, now_ms, out)

    def _replace_static_member(self, group: ClassicGroup, req: JoinRequest, token: Token, old_member_id: str,
                               new_member_id: str, now_ms: int, out: Outbox) -> None:
        """A static member restarted (KIP-345): its new member id takes the old one's place, the
        old id is fenced, and a stable group keeps its generation and assignment unless the
        protocol the group would select changes."""
        assert req.group_instance_id is not None
        previous_leader = group.leader_id
        old = group.members[old_member_id]
        if old.join_token is not None:
            out.complete(old.join_token, join_error(old_member_id, ErrorCode.FENCED_INSTANCE_ID))
        if old.sync_token is not None:
            out.complete(old.sync_token, SyncResult(ErrorCode.FENCED_INSTANCE_ID))
        self._timers.cancel(TimerKey(HEARTBEAT_TIMER, group.group_id, old_member_id))
        member = group.replace_static_member(req.group_instance_id, old_member_id, new_member_id)
        self._rebalancer.reschedule_heartbeat(group, member, now_ms)
        member.protocols = req.protocols
        member.rebalance_timeout_ms = req.rebalance_timeout_ms
        member.session_timeout_ms = req.session_timeout_ms
        member.join_token = token
        if group.state is GroupState.STABLE:
            if group.protocol_name == group.select_protocol():
                member.join_token = None
                out.records.append(group.metadata_record())
                if req.supports_skip_assignment:
                    is_leader = group.leader_id == new_member_id
                    out.complete(token, join_result(group, new_member_id, with_members=is_leader,
                                                    skip_assignment=is_leader))
                else:
                    # The previous leader id keeps a restarted leader from reassigning: a stable
                    # group would not hand out a new assignment anyway.
                    out.complete(token, join_result(group, new_member_id, with_members=False,
                                                    leader=previous_leader))
            else:
                self._rebalancer.maybe_prepare_rebalance_or_complete_join(group, now_ms, out)
        elif group.state is GroupState.COMPLETING_REBALANCE:
            # The leader may already have assigned to the old id; only a new round is consistent.
            self._rebalancer.prepare_rebalance(group, now_ms, out)
        elif group.state is GroupState.PREPARING_REBALANCE:
            self._rebalancer.maybe_complete_join_phase(group, now_ms, out)
        else:
            raise AssertionError(f"group {group.group_id} has static members but is {group.state.value}")

    # ---------------------------------------------------------------- SyncGroup

    def sync(self, request: SyncRequest, token: Token, now_ms: int) -> Effects[None]:
        """SyncGroup. The leader's assignment is persisted and handed to every member that is
        waiting; followers that sync before the leader wait for it."""
        out = Outbox()
        self._sync(request, token, now_ms, out)
        return self._effects(None, out)

    def _sync(self, req: SyncRequest, token: Token, now_ms: int, out: Outbox) -> None:
        if self._unloaded:
            return out.complete(token, SyncResult(ErrorCode.NOT_COORDINATOR))
        if not req.group_id:
            return out.complete(token, SyncResult(ErrorCode.INVALID_GROUP_ID))
        group = self._groups.get(req.group_id)
        if group is None or group.state is GroupState.EMPTY:
            return out.complete(token, SyncResult(ErrorCode.UNKNOWN_MEMBER_ID))
        if group.state is GroupState.DEAD:
            return out.complete(token, SyncResult(ErrorCode.COORDINATOR_NOT_AVAILABLE))
        error = group.validate_member(req.member_id, req.group_instance_id)
        if error is ErrorCode.NONE and req.generation_id != group.generation_id:
            error = ErrorCode.ILLEGAL_GENERATION
        if error is ErrorCode.NONE and (
            _inconsistent(req.protocol_type, group.protocol_type) or _inconsistent(req.protocol_name, group.protocol_name)
        ):
            error = ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        if error is ErrorCode.NONE and group.state is GroupState.PREPARING_REBALANCE:
            error = ErrorCode.REBALANCE_IN_PROGRESS
        if error is not ErrorCode.NONE:
            return out.complete(token, SyncResult(error))
        member = group.members[req.member_id]
        self._rebalancer.remove_pending_sync(group, member.member_id)
        if group.state is GroupState.STABLE:
            self._rebalancer.reschedule_heartbeat(group, member, now_ms)
            return out.complete(token, SyncResult(ErrorCode.NONE, member.assignment, group.protocol_type,
                                                  group.protocol_name))
        if member.sync_token is not None and member.sync_token != token:
            out.complete(member.sync_token, SyncResult(ErrorCode.REBALANCE_IN_PROGRESS))
        member.sync_token = token
        if group.leader_id == member.member_id:
            for m in group.members.values():
                m.assignment = req.assignments.get(m.member_id, b"")
            group.transition_to(GroupState.STABLE, now_ms)
            out.records.append(group.metadata_record())
            self._rebalancer.propagate_assignment(group, ErrorCode.NONE, now_ms, out)

    # ---------------------------------------------------------------- Heartbeat and LeaveGroup

    def heartbeat(self, request: HeartbeatRequest, now_ms: int) -> Effects[HeartbeatResult]:
        """Heartbeat: keeps the member's session alive; REBALANCE_IN_PROGRESS tells it to rejoin."""
        error = self._heartbeat(request, now_ms)
        return self._effects(HeartbeatResult(error), Outbox())

    def _heartbeat(self, req: HeartbeatRequest, now_ms: int) -> ErrorCode:
        if self._unloaded:
            return ErrorCode.NOT_COORDINATOR
        if not req.group_id:
            return ErrorCode.INVALID_GROUP_ID
        group = self._groups.get(req.group_id)
        if group is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if group.state is GroupState.DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        error = group.validate_member(req.member_id, req.group_instance_id)
        if error is not ErrorCode.NONE:
            return error
        if req.generation_id != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        if group.state is GroupState.EMPTY:
            return ErrorCode.UNKNOWN_MEMBER_ID
        self._rebalancer.reschedule_heartbeat(group, group.members[req.member_id], now_ms)
        if group.state is GroupState.PREPARING_REBALANCE:
            return ErrorCode.REBALANCE_IN_PROGRESS
        # CompletingRebalance too: a member may heartbeat between its JoinGroup response and
        # its SyncGroup.
        return ErrorCode.NONE

    def leave(self, request: LeaveRequest, now_ms: int) -> Effects[LeaveResult]:
        """LeaveGroup for a batch of members; the group rebalances without them."""
        out = Outbox()
        result = self._leave(request, now_ms, out)
        return self._effects(result, out)

    def _leave(self, req: LeaveRequest, now_ms: int, out: Outbox) -> LeaveResult:
        if self._unloaded:
            return LeaveResult(ErrorCode.NOT_COORDINATOR)
        if not req.group_id:
            return LeaveResult(ErrorCode.INVALID_GROUP_ID)
        group = self._groups.get(req.group_id)
        if group is None:
            return LeaveResult(ErrorCode.UNKNOWN_MEMBER_ID)
        if group.state is GroupState.DEAD:
            return LeaveResult(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        results: list[LeaveMemberResult] = []
        left = False
        for ident in req.members:
            if ident.member_id == UNKNOWN_MEMBER_ID:
                current = None if ident.group_instance_id is None else group.static_members.get(ident.group_instance_id)
                if current is None:
                    error = ErrorCode.UNKNOWN_MEMBER_ID
                else:
                    self._rebalancer.drop_member(group, current, out)
                    error = ErrorCode.NONE
            elif ident.member_id in group.pending_join_members:
                self._rebalancer.drop_member(group, ident.member_id, out)
                error = ErrorCode.NONE
            else:
                error = group.validate_member(ident.member_id, ident.group_instance_id)
                if error is ErrorCode.NONE:
                    self._rebalancer.drop_member(group, ident.member_id, out)
            left = left or error is ErrorCode.NONE
            results.append(LeaveMemberResult(ident.member_id, ident.group_instance_id, error))
        if left:
            if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
                self._rebalancer.maybe_prepare_rebalance_or_complete_join(group, now_ms, out)
            elif group.state is GroupState.PREPARING_REBALANCE:
                self._rebalancer.maybe_complete_join_phase(group, now_ms, out)
        return LeaveResult(ErrorCode.NONE, tuple(results))

    # ---------------------------------------------------------------- offsets

    def commit_offsets(self, request: OffsetCommitRequest, now_ms: int) -> Effects[OffsetCommitResult]:
        """OffsetCommit. Each accepted partition becomes a record; answer after they are durable."""
        out = Outbox()

        def every(error: ErrorCode) -> Effects[OffsetCommitResult]:
            return self._effects(OffsetCommitResult(tuple(
                PartitionResult(p.topic, p.partition, error) for p in request.offsets)), out)

        if self._unloaded:
            return every(ErrorCode.NOT_COORDINATOR)
        group = self._groups.get(request.group_id)
        created = False
        if group is None:
            if request.generation_id >= 0:
                return every(ErrorCode.ILLEGAL_GENERATION)
            group = ClassicGroup(request.group_id)
            created = True
        error = validate_offset_commit(group, request)
        if error is not ErrorCode.NONE:
            return every(error)
        member = group.members.get(request.member_id)
        if member is not None and request.generation_id >= 0:
            self._rebalancer.reschedule_heartbeat(group, member, now_ms)
        results: list[PartitionResult] = []
        for p in request.offsets:
            if p.metadata is not None and len(p.metadata.encode("utf-8")) > self._config.offset_metadata_max_bytes:
                results.append(PartitionResult(p.topic, p.partition, ErrorCode.OFFSET_METADATA_TOO_LARGE))
                continue
            record = offset_record(group.group_id, p.topic, p.partition, p.offset, p.leader_epoch, p.metadata, now_ms)
            apply_offset_record(group, record)
            out.records.append(record)
            results.append(PartitionResult(p.topic, p.partition, ErrorCode.NONE))
        if created and out.records:
            self._groups[group.group_id] = group
        return self._effects(OffsetCommitResult(tuple(results)), out)

    def check_txn_offset_commit(self, request: OffsetCommitRequest) -> ErrorCode:
        """TxnOffsetCommit: may this producer's consumer (member, generation) commit these offsets?
        Checked when they are sent; they are stored when the transaction commits
        (:meth:`commit_txn_offsets`), whatever the group's generation is by then, as Kafka does."""
        if self._unloaded:
            return ErrorCode.NOT_COORDINATOR
        group = self._groups.get(request.group_id)
        if group is None:
            return ErrorCode.ILLEGAL_GENERATION if request.generation_id >= 0 else ErrorCode.NONE
        return validate_offset_commit(group, request)

    def commit_txn_offsets(self, group_id: str, offsets: Sequence[OffsetCommitPartition],
                           now_ms: int) -> Effects[OffsetCommitResult]:
        """A transaction's offsets, its commit marker written: from now on the group's committed
        offsets. Nothing to write: the offsets and the marker are already in the log, where a
        reload applies them (groups.txn_log)."""
        out = Outbox()
        if self._unloaded:
            return self._effects(OffsetCommitResult(()), out)
        group = self._groups.get(group_id)
        if group is None:
            group = self._groups[group_id] = ClassicGroup(group_id)
        for p in offsets:
            record = offset_record(group_id, p.topic, p.partition, p.offset, p.leader_epoch, p.metadata, now_ms)
            apply_offset_record(group, record)
        return self._effects(OffsetCommitResult(tuple(PartitionResult(p.topic, p.partition, ErrorCode.NONE)
                                                      for p in offsets)), out)

    def delete_offsets(self, group_id: str, partitions: Sequence[TopicPartition],
                       now_ms: int) -> Effects[OffsetDeleteResult]:
        """OffsetDelete: tombstones for the offsets that may go (see offsets.delete_offsets); an
        empty group left with no offsets is removed, as Kafka's cleanupGroupMetadata does."""
        out = Outbox()
        if self._unloaded:
            return self._effects(OffsetDeleteResult(ErrorCode.NOT_COORDINATOR), out)
        group = self._groups.get(group_id)
        result, tombstones = delete_offsets(group, tuple(partitions))
        if group is not None:
            for record in tombstones:
                apply_offset_record(group, record)
                out.records.append(record)
            if tombstones and group.state is GroupState.EMPTY and not group.offsets \
                    and not group.pending_join_members:
                self._remove_group(group, now_ms, out)
        return self._effects(result, out)

    def delete_groups(self, group_ids: Sequence[str], now_ms: int) -> Effects[tuple[DeletedGroup, ...]]:
        """DeleteGroups: only empty groups; their offsets and metadata get tombstones."""
        out = Outbox()
        results: list[DeletedGroup] = []
        for group_id in dict.fromkeys(group_ids):
            group = self._groups.get(group_id)
            if self._unloaded:
                error = ErrorCode.NOT_COORDINATOR
            elif group is None or group.state is GroupState.DEAD:
                error = ErrorCode.GROUP_ID_NOT_FOUND
            elif group.state is not GroupState.EMPTY:
                error = ErrorCode.NON_EMPTY_GROUP
            else:
                self._remove_group(group, now_ms, out)
                error = ErrorCode.NONE
            results.append(DeletedGroup(group_id, error))
        return self._effects(tuple(results), out)

    def _remove_group(self, group: ClassicGroup, now_ms: int, out: Outbox) -> None:
        for topic, partition in sorted(group.offsets):
            out.records.append(OffsetCommitRecord(group.group_id, topic, partition, None))
        group.offsets.clear()
        out.records.append(GroupMetadataRecord(group.group_id, None))
        for member_id in list(group.members) + sorted(group.pending_join_members):
            self._rebalancer.drop_member(group, member_id, out)
        self._timers.cancel(TimerKey(JOIN_TIMER, group.group_id))
        self._timers.cancel(TimerKey(SYNC_TIMER, group.group_id))
        group.transition_to(GroupState.DEAD, now_ms)
        del self._groups[group.group_id]

    # ---------------------------------------------------------------- timers

    def tick(self, now_ms: int) -> Effects[None]:
        """Fire every deadline at or before ``now_ms``, earliest first: initial-delay and
        rebalance timeouts end join phases, sync timeouts drop members that never synced,
        session timeouts drop silent members, and offsets past retention are deleted."""
        out = Outbox()
        while (key := self._timers.pop_due(now_ms)) is not None:
            if key.kind == OFFSETS_EXPIRY_TIMER:
                self._expire_offsets(now_ms, out)
                continue
            group = self._groups.get(key.group_id)
            if group is None or group.state is GroupState.DEAD:
                continue
            if key.kind == HEARTBEAT_TIMER:
                self._rebalancer.expire_session(group, key.member_id, now_ms, out)
            elif key.kind == JOIN_TIMER:
                self._rebalancer.join_timeout(group, now_ms, out)
            elif key.kind == SYNC_TIMER:
                self._rebalancer.sync_timeout(group, now_ms, out)
        return self._effects(None, out)

    def _expire_offsets(self, now_ms: int, out: Outbox) -> None:
        retention_ms = self._config.offsets_retention_ms
        if retention_ms is None:
            return
        for group in [self._groups[g] for g in sorted(self._groups)]:
            for record in expired_offsets(group, now_ms, retention_ms):
                apply_offset_record(group, record)
                out.records.append(record)
            if group.state is GroupState.EMPTY and not group.offsets and not group.pending_join_members:
                self._remove_group(group, now_ms, out)
        self._timers.schedule(TimerKey(OFFSETS_EXPIRY_TIMER), now_ms + self._config.offsets_retention_check_interval_ms)

    # ---------------------------------------------------------------- plumbing

    def _effects(self, reply: R, out: Outbox) -> Effects[R]:
        return Effects(
            reply=reply,
            records=tuple(out.records),
            completed=dict(out.completed),
            next_deadline_ms=self._timers.next_deadline_ms(),
        )
