"""Messages of the broker lifecycle operations (metadata_quorum/ops/cluster.py)."""
# No ``from __future__ import annotations`` here: the TypedDicts must see ``NotRequired`` at class
# creation, or their __required_keys__ / __optional_keys__ are wrong at run time.

from typing import Any, NotRequired, TypedDict

from metadata_quorum.kernel.messages.common import Empty


class LogDirEntry(TypedDict):
    dir_id: str
    path: str  # absolute


class BrokerAddresses(TypedDict):
    """What a broker states about itself when it registers, besides its id and incarnation."""

    endpoints: list[str]
    rack: str | None
    log_dirs: list[LogDirEntry]


class RegisterBrokerRequest(TypedDict):
    broker_id: int
    incarnation_id: str
    endpoints: NotRequired[list[str]]
    rack: NotRequired[str | None]
    log_dirs: NotRequired[list[LogDirEntry]]


class RegisterBrokerReply(TypedDict):
    broker_epoch: int  # the offset of the registration record
    # the session this controller fences on: it bounds the broker's lease (broker/heartbeat.py),
    # whatever the broker's own setting
    session_timeout_ms: int


class UnregisterBrokerRequest(TypedDict):
    broker_id: int


UnregisterBrokerReply = Empty


class BrokerHeartbeatRequest(TypedDict):
    broker_id: int
    broker_epoch: int
    metadata_offset: NotRequired[int]  # the broker's image offset (-1: none yet)
    want_shutdown: NotRequired[bool]
    saturated_log_dirs: NotRequired[list[str]]  # dir ids
    offline_log_dirs: NotRequired[list[str]]


class BrokerHeartbeatReply(TypedDict):
    is_fenced: bool
    is_caught_up: bool
    should_shut_down: bool
    metadata_high_watermark: int
    session_timeout_ms: int  # as in RegisterBrokerReply


class TickRequest(TypedDict):
    elect_leaderless: NotRequired[bool]
    leaderless_after: NotRequired[list[Any]]  # [topic_id, partition]: this scan goes on after it
    leaderless_max: NotRequired[int]  # leaderless partitions this scan looks at, at most


class ElectedLeader(TypedDict):
    topic_id: str
    partition: int
    leader: int


class TickReply(TypedDict):
    fenced_brokers: list[int]
    # broker id -> ms without a heartbeat, for each fenced broker (JSON turns the ids into text)
    silent_ms: dict[int, int]
    elected: list[ElectedLeader]
    # where the next scan goes on ([topic_id, partition]); absent once the scan reached the end
    leaderless_next: NotRequired[list[Any]]


class ReportBrokerDeadRequest(TypedDict):
    broker_id: int
    broker_epoch: int
    reporter_id: int
    reporter_epoch: int


class ReportBrokerDeadReply(TypedDict):
    fenced: bool
    why: str


DescribeClusterRequest = Empty


class BrokerDescription(TypedDict):
    broker_id: int
    incarnation_id: str
    broker_epoch: int
    endpoints: list[str]
    rack: str | None
    log_dirs: list[LogDirEntry]
    fenced: bool
    in_controlled_shutdown: bool
    online_log_dirs: list[str]
    saturated_log_dirs: list[str]
    offline_log_dirs: list[str]


class DescribeClusterReply(TypedDict):
    brokers: list[BrokerDescription]
    metadata_offset: int


class AllocateProducerIdsRequest(TypedDict):
    broker_id: int
    broker_epoch: int


class AllocateProducerIdsReply(TypedDict):
    """A block of producer ids: ``producer_id_start`` up to, not including, start + len."""

    producer_id_start: int
    producer_id_len: int
