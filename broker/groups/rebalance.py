"""The phases of a classic rebalance and the timeouts that drive them.

PreparingRebalance waits for every member to rejoin (or, for a group that was empty, for the
initial delay); the join phase then ends with a new generation, every parked JoinGroup answered
and the leader given the member list; CompletingRebalance waits for the leader's SyncGroup. A
member that does not rejoin within the rebalance timeout, does not sync within it, or stops
heartbeating for its session timeout is removed, and the group rebalances without it.

These steps are shared by every request that can start or finish a phase (JoinGroup, SyncGroup,
LeaveGroup, a timeout), so they live here, apart from the request handling in
:mod:`broker.groups.coordinator`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from broker.groups.config import GroupCoordinatorConfig
from broker.groups.group import ClassicGroup, InitialJoin, Member
from broker.groups.messages import UNKNOWN_MEMBER_ID, CompletedResult, GroupState, JoinResult, SyncResult, Token
from broker.groups.records import GroupRecord
from broker.groups.timers import DeadlineQueue
from metadata_quorum.kernel.errors import ErrorCode

JOIN_TIMER = "join"
SYNC_TIMER = "sync"
HEARTBEAT_TIMER = "heartbeat"
OFFSETS_EXPIRY_TIMER = "offsets-expiry"


class TimerKey(NamedTuple):
    """One deadline: a group's join or sync timeout, a member's (or pending member's) session,
    or the periodic offsets expiry (no group)."""

    kind: str
    group_id: str = ""
    member_id: str = ""


@dataclass
class Outbox:
    """Records and answered parked requests gathered during one call."""

    records: list[GroupRecord] = field(default_factory=list)
    completed: dict[Token, CompletedResult] = field(default_factory=dict)

    def complete(self, token: Token, result: CompletedResult) -> None:
        if token in self.completed:
            raise AssertionError(f"request {token!r} answered twice")
        self.completed[token] = result


def join_error(member_id: str, error: ErrorCode) -> JoinResult:
    return JoinResult(error=error, member_id=member_id)


def join_result(group: ClassicGroup, member_id: str, with_members: bool, leader: str | None = None,
                skip_assignment: bool = False) -> JoinResult:
    """A successful JoinGroup response for the group's current generation."""
    return JoinResult(
        error=ErrorCode.NONE,
        member_id=member_id,
        generation_id=group.generation_id,
        protocol_type=group.protocol_type,
        protocol_name=group.protocol_name,
        leader=(leader if leader is not None else group.leader_id) or "",
        members=group.joined_members() if with_members else (),
        skip_assignment=skip_assignment,
    )


class Rebalancer:
    def __init__(self, config: GroupCoordinatorConfig, timers: DeadlineQueue[TimerKey]) -> None:
        self._config = config
        self._timers = timers

    def reschedule_heartbeat(self, group: ClassicGroup, member: Member, now_ms: int, timeout_ms: int | None = None) -> None:
        """The member's session now expires ``timeout_ms`` (default: its session timeout) from now."""
        self._timers.schedule(
            TimerKey(HEARTBEAT_TIMER, group.group_id, member.member_id),
            now_ms + (member.session_timeout_ms if timeout_ms is None else timeout_ms),
        )

    def drop_member(self, group: ClassicGroup, member_id: str, out: Outbox) -> None:
        """Remove a member or pending member, answering its parked requests UNKNOWN_MEMBER_ID so
        that a client still waiting rejoins from scratch."""
        self._timers.cancel(TimerKey(HEARTBEAT_TIMER, group.group_id, member_id))
        member = group.remove(member_id)
        if member is None:
            return
        if member.join_token is not None:
            out.complete(member.join_token, join_error(UNKNOWN_MEMBER_ID, ErrorCode.UNKNOWN_MEMBER_ID))
        if member.sync_token is not None:
            out.complete(member.sync_token, SyncResult(ErrorCode.UNKNOWN_MEMBER_ID))

    def maybe_prepare_rebalance_or_complete_join(self, group: ClassicGroup, now_ms: int, out: Outbox) -> None:
        if group.can_rebalance():
            self.prepare_rebalance(group, now_ms, out)
        else:
            self.maybe_complete_join_phase(group, now_ms, out)

    def prepare_rebalance(self, group: ClassicGroup, now_ms: int, out: Outbox) -> None:
        """Enter PreparingRebalance: members waiting for an assignment are told to rejoin; an
        empty group waits the initial delay, any other completes as soon as all have rejoined or
        after the rebalance timeout."""
        if group.state is GroupState.COMPLETING_REBALANCE:
            for member in group.members.values():
                member.assignment = b""
            self.propagate_assignment(group, ErrorCode.REBALANCE_IN_PROGRESS, now_ms, out)
        group.pending_sync_members.clear()
        self._timers.cancel(TimerKey(SYNC_TIMER, group.group_id))
        initial = group.state is GroupState.EMPTY
        group.transition_to(GroupState.PREPARING_REBALANCE, now_ms)
        if initial:
            delay_ms = self._config.group_initial_rebalance_delay_ms
            group.initial_join = InitialJoin(delay_ms, max(group.rebalance_timeout_ms() - delay_ms, 0))
            self._timers.schedule(TimerKey(JOIN_TIMER, group.group_id), now_ms + delay_ms)
        elif group.has_all_members_joined():
            self.complete_join(group, now_ms, out)
        else:
            self._schedule_rebalance_timeout(group, now_ms)

    def _schedule_rebalance_timeout(self, group: ClassicGroup, now_ms: int) -> None:
        group.initial_join = None
        self._timers.schedule(TimerKey(JOIN_TIMER, group.group_id), now_ms + max(group.rebalance_timeout_ms(), 1))

    def maybe_complete_join_phase(self, group: ClassicGroup, now_ms: int, out: Outbox) -> None:
        """Complete the join phase once everyone has rejoined; the first rebalance of an empty
        group instead always waits out its initial delay."""
        if (
            group.state is GroupState.PREPARING_REBALANCE
            and group.previous_state is not GroupState.EMPTY
            and group.has_all_members_joined()
        ):
            self.complete_join(group, now_ms, out)

    def complete_join(self, group: ClassicGroup, now_ms: int, out: Outbox) -> None:
        """End the join phase: drop dynamic members that did not rejoin, start the next
        generation, answer every parked JoinGroup (the leader gets the member list) and wait up
        to the rebalance timeout for everyone's SyncGroup. A group left without members is
        persisted as Empty with its new generation."""
        self._timers.cancel(TimerKey(JOIN_TIMER, group.group_id))
        group.initial_join = None
        group.new_member_added = False
        for member in group.not_yet_rejoined_members():
            if member.group_instance_id is None:
                self.drop_member(group, member.member_id, out)
        if group.state is GroupState.DEAD:
            return
        if not group.maybe_elect_new_joined_leader() and group.members:
            # Only static members remain and none rejoined: wait for them or their sessions.
            self._schedule_rebalance_timeout(group, now_ms)
            return
        group.init_next_generation(now_ms)
        if group.state is GroupState.EMPTY:
            out.records.append(group.metadata_record())
            return
        for member in group.members.values():
            if member.join_token is not None:
                out.complete(member.join_token,
                             join_result(group, member.member_id, with_members=group.leader_id == member.member_id))
                member.join_token = None
            self.reschedule_heartbeat(group, member, now_ms)
            member.is_new = False
            group.pending_sync_members.add(member.member_id)
        self._timers.schedule(TimerKey(SYNC_TIMER, group.group_id), now_ms + max(group.rebalance_timeout_ms(), 1))

    def propagate_assignment(self, group: ClassicGroup, error: ErrorCode, now_ms: int, out: Outbox) -> None:
        """Answer every parked SyncGroup with the member's assignment (or the error)."""
        ok = error is ErrorCode.NONE
        for member in group.members.values():
            if member.sync_token is not None:
                out.complete(member.sync_token, SyncResult(
                    error=error,
                    assignment=member.assignment,
                    protocol_type=group.protocol_type if ok else None,
                    protocol_name=group.protocol_name if ok else None,
                ))
                member.sync_token = None
                # Its session was on hold while it waited; it restarts now.
                self.reschedule_heartbeat(group, member, now_ms)

    def remove_pending_sync(self, group: ClassicGroup, member_id: str) -> None:
        group.pending_sync_members.discard(member_id)
        if not group.pending_sync_members:
            self._timers.cancel(TimerKey(SYNC_TIMER, group.group_id))

    # ---------------------------------------------------------------- timeouts

    def expire_session(self, group: ClassicGroup, member_id: str, now_ms: int, out: Outbox) -> None:
        """A session (or a pending member's wait for its second JoinGroup) ran out."""
        if member_id in group.pending_join_members:
            self.drop_member(group, member_id, out)
            if group.state is GroupState.PREPARING_REBALANCE and group.has_all_members_joined():
                self.complete_join(group, now_ms, out)
            return
        member = group.members.get(member_id)
        if member is None or member.heartbeat_satisfied():
            return
        self.drop_member(group, member_id, out)
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self.maybe_prepare_rebalance_or_complete_join(group, now_ms, out)
        elif group.state is GroupState.PREPARING_REBALANCE and group.has_all_members_joined():
            self.complete_join(group, now_ms, out)

    def join_timeout(self, group: ClassicGroup, now_ms: int, out: Outbox) -> None:
        """The initial delay or the rebalance timeout ran out."""
        if group.state is not GroupState.PREPARING_REBALANCE:
            return
        initial = group.initial_join
        if initial is not None and group.new_member_added and initial.remaining_ms > 0:
            # Members are still arriving: wait another delay, within the rebalance timeout.
            group.new_member_added = False
            delay_ms = min(self._config.group_initial_rebalance_delay_ms, initial.remaining_ms)
            group.initial_join = InitialJoin(delay_ms, max(initial.remaining_ms - initial.delay_ms, 0))
            self._timers.schedule(TimerKey(JOIN_TIMER, group.group_id), now_ms + delay_ms)
            return
        self.complete_join(group, now_ms, out)

    def sync_timeout(self, group: ClassicGroup, now_ms: int, out: Outbox) -> None:
        """Members that got their JoinGroup response but never sent SyncGroup are removed."""
        if group.state not in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE) or not group.pending_sync_members:
            return
        for member_id in sorted(group.pending_sync_members):
            self.drop_member(group, member_id, out)
        self.prepare_rebalance(group, now_ms, out)
