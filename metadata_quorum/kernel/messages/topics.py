"""Messages of the topic operations (metadata_quorum/ops/topics.py)."""
# No ``from __future__ import annotations`` here: the TypedDicts must see ``NotRequired`` at class
# creation, or their __required_keys__ / __optional_keys__ are wrong at run time.

from typing import Mapping, NotRequired, TypedDict

from metadata_quorum.kernel.messages.common import ItemErrorFields


class NewTopic(TypedDict):
    name: str
    storage: NotRequired[str]  # "s3" (the default) or "local"
    configs: NotRequired[Mapping[str, str | None]]  # a None value is refused (INVALID_CONFIG)
    num_partitions: NotRequired[int]  # -1: default_num_partitions
    replication_factor: NotRequired[int]  # -1: default_replication_factor
    # partition (decimal text, a JSON object's key) -> broker ids; decides count and factor
    assignments: NotRequired[dict[str, list[int]]]
    default_num_partitions: NotRequired[int]
    default_replication_factor: NotRequired[int]


class CreateTopicsRequest(TypedDict):
    topics: list[NewTopic]
    validate_only: NotRequired[bool]


class CreatedTopic(ItemErrorFields):
    name: str | None
    topic_id: NotRequired[str]
    num_partitions: NotRequired[int]
    replication_factor: NotRequired[int]


class CreateTopicsReply(TypedDict):
    topics: list[CreatedTopic]


class DeleteTopicsRequest(TypedDict, total=False):
    names: list[str]
    topic_ids: list[str]


class DeletedTopic(ItemErrorFields):
    name: str | None
    topic_id: NotRequired[str]


class DeleteTopicsReply(TypedDict):
    topics: list[DeletedTopic]
    removed_objects: list[str]  # keys no stream names any more: the brokers delete them


class PartitionsIncrease(TypedDict):
    name: str
    count: int  # the new partition count
    assignments: NotRequired[list[list[int]] | None]  # the replicas of each new partition, in order


class CreatePartitionsRequest(TypedDict):
    topics: list[PartitionsIncrease]
    validate_only: NotRequired[bool]


class GrownTopic(ItemErrorFields):
    name: str | None
    topic_id: NotRequired[str]
    num_partitions: NotRequired[int]


class CreatePartitionsReply(TypedDict):
    topics: list[GrownTopic]


class DescribeCursor(TypedDict):
    """Where a paged description goes on (Kafka's DescribeTopicPartitions cursor, KIP-966)."""

    name: str
    partition: int


class DescribeTopicsRequest(TypedDict, total=False):
    names: list[str]  # absent: every topic
    partition_limit: int  # at most this many partitions in the reply (absent: all); see next_cursor
    cursor: DescribeCursor  # start at this topic's partition (a previous reply's next_cursor)


class PartitionDescription(TypedDict):
    partition: int
    leader: int
    leader_epoch: int
    partition_epoch: int
    replicas: list[int]
    isr: list[int]
    adding_replicas: list[int]
    removing_replicas: list[int]
    directories: list[str]
    reelection_deadline_ms: int
    change_started_ms: int
    streams: dict[str, int]  # "data"/"meta" -> stream id (s3 partitions)
    reported_replicas: list[int]  # what Kafka clients are told (s3_replicas.py)
    reported_isr: list[int]


class TopicDescription(ItemErrorFields):
    """A topic, or (``error`` set) a name that does not exist."""

    name: str
    topic_id: NotRequired[str]
    storage: NotRequired[str]
    partitions: NotRequired[list[PartitionDescription]]
    configs: NotRequired[dict[str, str]]


class DescribeTopicsReply(TypedDict):
    topics: list[TopicDescription]
    next_cursor: NotRequired[DescribeCursor]  # present when partition_limit cut the reply short
