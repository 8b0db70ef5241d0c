"""One classic group's state: members, generation, protocol, leader (Kafka's ClassicGroup).

Plain data with the rules that only look at the group itself: valid state transitions, which
protocols every member supports, the vote that picks the generation's protocol, who leads, and
whether a request's member/instance ids belong. Timers, parked requests and records are the
coordinator's business.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from broker.groups.messages import GroupState, JoinedMember, JoinProtocol, Token
from broker.groups.records import GroupMemberValue, GroupMetadataRecord, GroupMetadataValue, OffsetValue
from metadata_quorum.kernel.errors import ErrorCode

_VALID_PREVIOUS_STATES: dict[GroupState, frozenset[GroupState]] = {
    GroupState.DEAD: frozenset(GroupState),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.PREPARING_REBALANCE: frozenset(
        {GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY}
    ),
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
}


@dataclass
class Member:
    """A member. ``join_token``/``sync_token`` are its parked JoinGroup/SyncGroup, if any.
    ``is_new`` until its first JoinGroup completes: a new member cannot heartbeat yet, so its
    session is not satisfied by waiting in a rebalance."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: tuple[JoinProtocol, ...]
    assignment: bytes = b""
    join_token: Token | None = None
    sync_token: Token | None = None
    is_new: bool = False

    @property
    def awaiting_join(self) -> bool:
        return self.join_token is not None

    @property
    def awaiting_sync(self) -> bool:
        return self.sync_token is not None

    @property
    def protocol_names(self) -> list[str]:
        return [p.name for p in self.protocols]

    def metadata(self, protocol_name: str) -> bytes:
        for p in self.protocols:
            if p.name == protocol_name:
                return p.metadata
        raise ValueError(f"member {self.member_id} does not support protocol {protocol_name!r}")

    def matches(self, protocols: tuple[JoinProtocol, ...]) -> bool:
        """Same protocols, same metadata, same order: a rejoin that changes nothing."""
        return self.protocols == protocols

    def vote(self, candidates: set[str]) -> str:
        """The member's most preferred protocol among those every member supports."""
        for name in self.protocol_names:
            if name in candidates:
                return name
        raise ValueError(f"member {self.member_id} supports none of {sorted(candidates)}")

    def heartbeat_satisfied(self) -> bool:
        """A known member waiting in a rebalance counts as alive (it cannot heartbeat while its
        JoinGroup or SyncGroup is parked); a new one does not."""
        return not self.is_new and (self.awaiting_join or self.awaiting_sync)


@dataclass(frozen=True)
class InitialJoin:
    """The join timer of a group's first rebalance after being empty: fire after ``delay_ms``;
    if members arrived meanwhile and ``remaining_ms`` > 0, wait again."""

    delay_ms: int
    remaining_ms: int


@dataclass
class ClassicGroup:
    group_id: str
    state: GroupState = GroupState.EMPTY
    previous_state: GroupState = GroupState.DEAD
    state_timestamp_ms: int | None = None
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)
    pending_join_members: set[str] = field(default_factory=set)
    pending_sync_members: set[str] = field(default_factory=set)
    new_member_added: bool = False
    initial_join: InitialJoin | None = None
    offsets: dict[tuple[str, int], OffsetValue] = field(default_factory=dict)

    def transition_to(self, state: GroupState, now_ms: int) -> None:
        if self.state not in _VALID_PREVIOUS_STATES[state]:
            raise AssertionError(f"group {self.group_id}: no transition from {self.state.value} to {state.value}")
        self.previous_state = self.state
        self.state = state
        self.state_timestamp_ms = now_ms

    def can_rebalance(self) -> bool:
        return self.state in _VALID_PREVIOUS_STATES[GroupState.PREPARING_REBALANCE]

    def add(self, member: Member) -> None:
        if member.group_instance_id is not None:
            if member.group_instance_id in self.static_members:
                raise AssertionError(f"static member {member.group_instance_id} is already in group {self.group_id}")
            self.static_members[member.group_instance_id] = member.member_id
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        self.pending_join_members.discard(member.member_id)

    def remove(self, member_id: str) -> Member | None:
        """Drop a member (or a pending one); the leader passes to the first remaining member."""
        member = self.members.pop(member_id, None)
        if member is not None and member.group_instance_id is not None:
            if self.static_members.get(member.group_instance_id) == member_id:
                del self.static_members[member.group_instance_id]
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        self.pending_join_members.discard(member_id)
        self.pending_sync_members.discard(member_id)
        return member

    def replace_static_member(self, group_instance_id: str, old_member_id: str, new_member_id: str) -> Member:
        """A static member rejoining under a new member id takes over the old one's place,
        assignment and leadership (KIP-345); the caller fences the old id's parked requests."""
        old = self.members.pop(old_member_id)
        new = Member(
            member_id=new_member_id,
            group_instance_id=old.group_instance_id,
            client_id=old.client_id,
            client_host=old.client_host,
            rebalance_timeout_ms=old.rebalance_timeout_ms,
            session_timeout_ms=old.session_timeout_ms,
            protocol_type=old.protocol_type,
            protocols=old.protocols,
            assignment=old.assignment,
        )
        self.members[new_member_id] = new
        if self.leader_id == old_member_id:
            self.leader_id = new_member_id
        if old_member_id in self.pending_sync_members:
            self.pending_sync_members.discard(old_member_id)
            self.pending_sync_members.add(new_member_id)
        self.static_members[group_instance_id] = new_member_id
        return new

    def candidate_protocols(self) -> set[str]:
        """Protocols every member supports."""
        members = list(self.members.values())
        if not members:
            return set()
        common = set(members[0].protocol_names)
        for m in members[1:]:
            common &= set(m.protocol_names)
        return common

    def supports_protocols(self, protocol_type: str, protocol_names: list[str]) -> bool:
        """Whether a member with these protocols may join: any non-empty set while the group is
        empty; otherwise the group's protocol type and one protocol every member supports."""
        if self.state is GroupState.EMPTY:
            return bool(protocol_type) and bool(protocol_names)
        candidates = self.candidate_protocols()
        return self.protocol_type == protocol_type and any(n in candidates for n in protocol_names)

    def select_protocol(self) -> str:
        """Each member votes for its preferred protocol among those all support; most votes wins.
        Ties go to the protocol whose first vote came first, in member (join) order, so the
        choice is deterministic."""
        candidates = self.candidate_protocols()
        if not candidates:
            raise AssertionError(f"group {self.group_id} has no protocol all members support")
        votes: dict[str, int] = {}
        for m in self.members.values():
            name = m.vote(candidates)
            votes[name] = votes.get(name, 0) + 1
        best = max(votes.values())
        return next(name for name, count in votes.items() if count == best)

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def has_all_members_joined(self) -> bool:
        return not self.pending_join_members and all(m.awaiting_join for m in self.members.values())

    def not_yet_rejoined_members(self) -> list[Member]:
        return [m for m in self.members.values() if not m.awaiting_join]

    def maybe_elect_new_joined_leader(self) -> bool:
        """Keep the leader if it rejoined, else pick the first member that did. False when no
        member rejoined (or there is no leader)."""
        if self.leader_id is None:
            return False
        if self.members[self.leader_id].awaiting_join:
            return True
        for m in self.members.values():
            if m.awaiting_join:
                self.leader_id = m.member_id
                return True
        return False

    def init_next_generation(self, now_ms: int) -> None:
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.transition_to(GroupState.COMPLETING_REBALANCE, now_ms)
        else:
            self.protocol_name = None
            self.transition_to(GroupState.EMPTY, now_ms)
        self.pending_sync_members.clear()

    def validate_member(self, member_id: str, group_instance_id: str | None) -> ErrorCode:
        """FENCED_INSTANCE_ID when the instance id now belongs to another member id (a newer
        instance replaced this one); UNKNOWN_MEMBER_ID when the ids are not in the group."""
        if group_instance_id is not None:
            current = self.static_members.get(group_instance_id)
            if current is None:
                return ErrorCode.UNKNOWN_MEMBER_ID
            if current != member_id:
                return ErrorCode.FENCED_INSTANCE_ID
        if member_id not in self.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        return ErrorCode.NONE

    def joined_members(self) -> tuple[JoinedMember, ...]:
        """The member list the leader gets in its JoinGroup response."""
        assert self.protocol_name is not None
        return tuple(
            JoinedMember(m.member_id, m.group_instance_id, m.metadata(self.protocol_name))
            for m in self.members.values()
        )

    def metadata_record(self) -> GroupMetadataRecord:
        """The group as Kafka persists it: members with their subscription for the selected
        protocol and their assignment."""
        protocol = self.protocol_name
        return GroupMetadataRecord(
            self.group_id,
            GroupMetadataValue(
                protocol_type=self.protocol_type,
                generation_id=self.generation_id,
                protocol_name=protocol,
                leader_id=self.leader_id,
                current_state_timestamp_ms=self.state_timestamp_ms,
                members=tuple(
                    GroupMemberValue(
                        member_id=m.member_id,
                        group_instance_id=m.group_instance_id,
                        client_id=m.client_id,
                        client_host=m.client_host,
                        rebalance_timeout_ms=m.rebalance_timeout_ms,
                        session_timeout_ms=m.session_timeout_ms,
                        subscription=m.metadata(protocol) if protocol is not None else b"",
                        assignment=m.assignment,
                    )
                    for m in self.members.values()
                ),
            ),
        )

    @classmethod
    def from_record(cls, group_id: str, value: GroupMetadataValue) -> ClassicGroup:
        """A group as loaded: Stable with its last generation if it had members (they must
        heartbeat or rejoin), else Empty."""
        group = cls(
            group_id=group_id,
            state=GroupState.STABLE if value.members else GroupState.EMPTY,
            state_timestamp_ms=value.current_state_timestamp_ms,
            generation_id=value.generation_id,
            protocol_type=value.protocol_type,
            protocol_name=value.protocol_name,
        )
        for m in value.members:
            assert value.protocol_type is not None and value.protocol_name is not None
            group.add(
                Member(
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    rebalance_timeout_ms=m.rebalance_timeout_ms,
                    session_timeout_ms=m.session_timeout_ms,
                    protocol_type=value.protocol_type,
                    protocols=(JoinProtocol(value.protocol_name, m.subscription),),
                    assignment=m.assignment,
                )
            )
        group.leader_id = value.leader_id
        return group
