"""Messages of the dynamic configs and the key/value store (metadata_quorum/ops/configs.py)."""
# No ``from __future__ import annotations`` here: the TypedDicts must see ``NotRequired`` at class
# creation, or their __required_keys__ / __optional_keys__ are wrong at run time.

from typing import Mapping, NotRequired, TypedDict

from metadata_quorum.kernel.messages.common import Empty


class ConfigOp(TypedDict):
    op: str  # set, delete, append or subtract
    key: str
    value: NotRequired[str | None]


class ConfigChanges(TypedDict, total=False):
    configs: Mapping[str, str | None]  # set a value, or delete (None)
    ops: list[ConfigOp]  # applied in order after ``configs``
    replace: bool  # delete every stored key not set here (Kafka's AlterConfigs)


class ConfigResourceChange(ConfigChanges):
    type: str  # broker, topic or cluster
    name: str  # a broker's id, "" for every broker's default, a topic name


class AlterConfigsRequest(TypedDict):
    resources: list[ConfigResourceChange]
    validate_only: NotRequired[bool]


AlterConfigsReply = Empty


class ConfigResource(TypedDict):
    type: str
    name: str


class DescribeConfigsRequest(TypedDict, total=False):
    resources: list[ConfigResource]  # absent: every resource with a stored config


class ConfigResourceDescription(TypedDict):
    type: str
    name: str
    configs: dict[str, str]


class DescribeConfigsReply(TypedDict):
    resources: list[ConfigResourceDescription]


class PutKvRequest(TypedDict):
    key: str
    value: str | None  # None deletes


PutKvReply = Empty


class GetKvRequest(TypedDict):
    key: str


class GetKvReply(TypedDict):
    key: str
    value: str | None
