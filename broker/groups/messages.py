"""What the Kafka listener hands the group coordinator and what it gets back.

One dataclass per Kafka request and response, with only the fields the coordinator decides on;
the listener maps wire versions onto them (e.g. JoinGroup v0 has no rebalance timeout: pass the
session timeout, as Kafka does). Errors are Kafka's codes in an ``error`` field, because every
one of these responses carries its error as data rather than failing the request.

The coordinator answers JoinGroup and SyncGroup late (Kafka parks them in purgatory until the
rebalance reaches the right phase), so every call that changes state returns an :class:`Effects`:
the records to persist, the parked requests it completed, and when to tick next.
"""
from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Generic, TypeVar, Union

from broker.groups.consumer_records import AnyGroupRecord
from metadata_quorum.kernel.errors import ErrorCode

UNKNOWN_MEMBER_ID = ""
NO_GENERATION = -1
NO_LEADER_EPOCH = -1
NO_OFFSET = -1

Token = Hashable
"""The listener's handle for a parked JoinGroup or SyncGroup (e.g. connection and correlation id)."""


class GroupState(Enum):
    """Kafka's classic group states, named as DescribeGroups and ListGroups report them.

    Empty: no members (possibly offsets). PreparingRebalance: waiting for members to (re)join.
    CompletingRebalance: joined, waiting for the leader's assignment in SyncGroup. Stable:
    assignment handed out. Dead: removed (deleted or unloaded); a group that does not exist is
    described as Dead.
    """

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True)
class JoinProtocol:
    """One protocol a member supports (for consumers: an assignor name and the subscription)."""

    name: str
    metadata: bytes


@dataclass(frozen=True)
class JoinRequest:
    """JoinGroup. ``member_id`` is "" for a member that has none yet.

    ``require_known_member_id`` is true for JoinGroup v4+ (KIP-394): a new dynamic member first
    gets MEMBER_ID_REQUIRED with its id and must join again with it, so that a retried join does
    not leave a ghost member behind. ``supports_skip_assignment`` is true for v9+ (a static member
    that replaces itself while the group is stable may be told it leads without reassigning).
    """

    group_id: str
    member_id: str
    protocol_type: str
    protocols: tuple[JoinProtocol, ...]
    session_timeout_ms: int
    rebalance_timeout_ms: int
    group_instance_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    require_known_member_id: bool = True
    supports_skip_assignment: bool = False
    reason: str | None = None


@dataclass(frozen=True)
class JoinedMember:
    """A member as the leader sees it in its JoinGroup response."""

    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True)
class JoinResult:
    """JoinGroup response. ``members`` is non-empty only for the leader."""

    error: ErrorCode
    member_id: str
    generation_id: int = NO_GENERATION
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    members: tuple[JoinedMember, ...] = ()
    skip_assignment: bool = False


@dataclass(frozen=True)
class SyncRequest:
    """SyncGroup. Only the leader sends ``assignments`` (member id to assignment bytes).
    ``protocol_type``/``protocol_name`` are sent by v5+ and checked against the group's."""

    group_id: str
    member_id: str
    generation_id: int
    group_instance_id: str | None = None
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignments: Mapping[str, bytes] = field(default_factory=dict)


@dataclass(frozen=True)
class SyncResult:
    error: ErrorCode
    assignment: bytes = b""
    protocol_type: str | None = None
    protocol_name: str | None = None


@dataclass(frozen=True)
class HeartbeatRequest:
    group_id: str
    member_id: str
    generation_id: int
    group_instance_id: str | None = None


@dataclass(frozen=True)
class HeartbeatResult:
    error: ErrorCode


@dataclass(frozen=True)
class LeaveMember:
    """One member leaving. An admin may remove a static member by ``group_instance_id`` alone
    (``member_id`` "")."""

    member_id: str
    group_instance_id: str | None = None
    reason: str | None = None


@dataclass(frozen=True)
class LeaveRequest:
    """LeaveGroup; v0-v2 carry one member, v3+ (KIP-345) a batch."""

    group_id: str
    members: tuple[LeaveMember, ...]


@dataclass(frozen=True)
class LeaveMemberResult:
    member_id: str
    group_instance_id: str | None
    error: ErrorCode


@dataclass(frozen=True)
class LeaveResult:
    """``error`` is the request's error (v0-v2 have nothing else); ``members`` the per-member ones."""

    error: ErrorCode
    members: tuple[LeaveMemberResult, ...] = ()


@dataclass(frozen=True)
class TopicPartition:
    topic: str
    partition: int


@dataclass(frozen=True)
class OffsetCommitPartition:
    topic: str
    partition: int
    offset: int
    leader_epoch: int = NO_LEADER_EPOCH
    metadata: str | None = None


@dataclass(frozen=True)
class OffsetCommitRequest:
    """OffsetCommit. A consumer outside group management (manual assignment, admin tools)
    sends ``generation_id`` -1 and ``member_id`` ""; that is accepted while the group is empty."""

    group_id: str
    offsets: tuple[OffsetCommitPartition, ...]
    member_id: str = UNKNOWN_MEMBER_ID
    generation_id: int = NO_GENERATION
    group_instance_id: str | None = None


@dataclass(frozen=True)
class PartitionResult:
    topic: str
    partition: int
    error: ErrorCode


@dataclass(frozen=True)
class OffsetCommitResult:
    partitions: tuple[PartitionResult, ...]


@dataclass(frozen=True)
class OffsetDeleteResult:
    """OffsetDelete: a group-wide error (then no partitions), else one result per partition."""

    error: ErrorCode
    partitions: tuple[PartitionResult, ...] = ()


@dataclass(frozen=True)
class FetchedOffset:
    """A committed offset; ``offset`` -1 (and metadata "") when none is committed."""

    topic: str
    partition: int
    offset: int
    leader_epoch: int
    metadata: str
    error: ErrorCode = ErrorCode.NONE


@dataclass(frozen=True)
class OffsetFetchResult:
    error: ErrorCode
    partitions: tuple[FetchedOffset, ...] = ()


@dataclass(frozen=True)
class DescribedMember:
    """``metadata`` and ``assignment`` are filled only while the group is Stable, as in Kafka."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True)
class DescribedGroup:
    """DescribeGroups entry. A group that does not exist is reported Dead with error NONE, as
    DescribeGroups v0-v5 do; v6+ listeners answer GROUP_ID_NOT_FOUND for it."""

    group_id: str
    error: ErrorCode
    state: GroupState
    protocol_type: str
    protocol_data: str
    members: tuple[DescribedMember, ...] = ()


@dataclass(frozen=True)
class ListedGroup:
    group_id: str
    protocol_type: str
    state: GroupState


@dataclass(frozen=True)
class DeletedGroup:
    group_id: str
    error: ErrorCode


CompletedResult = Union[JoinResult, SyncResult]
R = TypeVar("R")


@dataclass(frozen=True)
class Effects(Generic[R]):
    """What one call on the coordinator asks of the shell around it.

    - ``records``: append them, in order and as one batch, to the coordinator's
      ``__consumer_offsets`` partition.
    - ``reply``: the call's own response (``None`` for JoinGroup and SyncGroup, whose responses
      arrive through ``completed`` like those of any parked request).
    - ``completed``: responses for parked JoinGroup/SyncGroup requests, keyed by the token the
      shell passed with them. One call may complete many (the last member joining completes every
      member's JoinGroup; the leader's SyncGroup completes every follower's).
    - ``next_deadline_ms``: call :meth:`GroupCoordinator.tick` at this time (or earlier; an early
      tick is harmless); ``None`` when nothing is scheduled.

    The contract: send ``reply`` and every ``completed`` response only after ``records`` are
    durable in the partition. A committed offset or a SyncGroup assignment that a client has
    seen must survive a crash of this broker; when ``records`` is empty, answer at once. The
    coordinator's memory already includes the change, so if the append fails the shell must not
    answer with success: it drops this coordinator (answering NOT_COORDINATOR meanwhile) and loads
    a new one from the partition, which then holds only what was durable. Calls run one at a time;
    a read made while an append is in flight sees the change it is appending.
    """

    reply: R
    records: tuple[AnyGroupRecord, ...] = ()
    completed: Mapping[Token, CompletedResult] = field(default_factory=dict)
    next_deadline_ms: int | None = None
