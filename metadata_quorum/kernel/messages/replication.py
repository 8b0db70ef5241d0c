"""Messages of reassignments, elections and ISR changes (metadata_quorum/ops/replication.py)."""
# No ``from __future__ import annotations`` here: the TypedDicts must see ``NotRequired`` at class
# creation, or their __required_keys__ / __optional_keys__ are wrong at run time.

from typing import NotRequired, TypedDict

from metadata_quorum.kernel.messages.common import ItemErrorFields, TopicPartitionRef


class Reassignment(TypedDict):
    topic: str
    partition: int
    replicas: list[int] | None  # None: cancel the reassignment in progress
    log_dirs: NotRequired[list[str]]  # one absolute path or "any" per replica
    replica_set: NotRequired[bool]  # Kafka's semantics: one broker is replication factor 1


class AlterPartitionReassignmentsRequest(TypedDict):
    reassignments: list[Reassignment]


class ReassignmentResult(ItemErrorFields):
    topic: str
    partition: int


class AlterPartitionReassignmentsReply(TypedDict):
    responses: list[ReassignmentResult]


class ListPartitionReassignmentsRequest(TypedDict, total=False):
    partitions: list[TopicPartitionRef]  # absent: every partition


class OngoingReassignment(TypedDict):
    topic: str
    partition: int
    replicas: list[int]
    adding_replicas: list[int]
    removing_replicas: list[int]
    leader: int
    reelection_deadline_ms: int
    change_started_ms: int


class ListPartitionReassignmentsReply(TypedDict):
    reassignments: list[OngoingReassignment]


class ElectLeadersRequest(TypedDict, total=False):
    election_type: str  # "preferred" (the default) or "unclean"
    partitions: list[TopicPartitionRef] | None  # absent or None: every partition
    # elect only if the partition's streams are closed (an old owner's election behind its close)
    require_closed_streams: bool


class ElectionResult(ItemErrorFields):
    topic: str
    partition: int
    leader: NotRequired[int]
    leader_epoch: NotRequired[int]


class ElectLeadersReply(TypedDict):
    results: list[ElectionResult]


class AlterPartitionRequest(TypedDict):
    broker_id: int
    broker_epoch: int
    topic: str
    partition: int
    leader_epoch: int
    partition_epoch: int
    isr: list[int]


class AlterPartitionReply(TypedDict):
    leader: int
    leader_epoch: int
    partition_epoch: int
    isr: list[int]
    replicas: list[int]
