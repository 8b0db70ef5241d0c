"""Dynamic configs (Kafka's IncrementalAlterConfigs / DescribeConfigs) and the key/value store.

Topic configs are checked as Kafka's LogConfig checks them: a name Kafka does not know is refused
("Unknown topic config name: ..."), and a value must parse as its type and lie in its range, with
ConfigException's wording. Ferry stores and reports them; the brokers act on those they have the
mechanism for (docs/kafka.md). Group configs (resource type ``group``) are checked as Kafka's
GroupConfig checks them (``group_configs.py``) and applied by the consumer group coordinator.
"""
from __future__ import annotations

import math
import re
from typing import Any, Callable

from metadata_quorum.controller_result import ControllerResult, OpContext
from metadata_quorum.kernel.errors import ErrorCode, FerryError
from metadata_quorum.kernel.messages.configs import AlterConfigsReply, DescribeConfigsReply, GetKvReply, PutKvReply
from metadata_quorum.image import MetadataImage
from metadata_quorum.kernel.validation import as_mapping, invalid, opt_bool, opt_list, req_list, req_str
from metadata_quorum.ops.group_configs import check_group_configs, check_group_name
from metadata_quorum.records import ConfigRecord, KVRecord, Record

RESOURCE_TYPES = ("broker", "topic", "cluster", "group")

_INT_MIN, _INT_MAX = -(2 ** 31), 2 ** 31 - 1
_LONG_MIN, _LONG_MAX = -(2 ** 63), 2 ** 63 - 1
_JAVA_INTEGER = re.compile(r"^[+-]?[0-9]+$")
_JAVA_DOUBLE = re.compile(r"^[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?[dDfF]?$")

Validator = Callable[[str, str], None]


def _bad_value(name: str, value: str, reason: str) -> FerryError:
    return FerryError(ErrorCode.INVALID_CONFIG, f"Invalid value {value} for configuration {name}: {reason}")


def _range(name: str, value: str, number: float, minimum: float | None, maximum: float | None) -> None:
    if minimum is not None and number < minimum:
        raise _bad_value(name, value, f"Value must be at least {minimum}")
    if maximum is not None and number > maximum:
        raise _bad_value(name, value, f"Value must be no more than {maximum}")


def _integer(java_type: str, low: int, high: int, minimum: int | None = None,
             maximum: int | None = None) -> Validator:
    def check(name: str, value: str) -> None:
        text = value.strip()
        if not _JAVA_INTEGER.match(text) or not low <= int(text) <= high:
            raise _bad_value(name, value, f"Not a number of type {java_type}")
        _range(name, value, int(text), minimum, maximum)
    return check


def _int(minimum: int | None = None, maximum: int | None = None) -> Validator:
    return _integer("INT", _INT_MIN, _INT_MAX, minimum, maximum)


def _long(minimum: int | None = None) -> Validator:
    return _integer("LONG", _LONG_MIN, _LONG_MAX, minimum)


def _double(minimum: float, maximum: float) -> Validator:
    def check(name: str, value: str) -> None:
        text = value.strip()
        if not _JAVA_DOUBLE.match(text):
            raise _bad_value(name, value, "Not a number of type DOUBLE")
        number = float(text.rstrip("dDfF"))
        if math.isinf(number):
            raise _bad_value(name, value, "Not a number of type DOUBLE")
        _range(name, value, number, minimum, maximum)
    return check


def _boolean(name: str, value: str) -> None:
    if value.strip().lower() not in ("true", "false"):
        raise _bad_value(name, value, "Expected value to be either true or false")


def _one_of(*choices: str) -> Validator:
    def check(name: str, value: str) -> None:
        if value.strip() not in choices:
            raise _bad_value(name, value, f"String must be one of: {', '.join(choices)}")
    return check


def _list_of(*choices: str) -> Validator:
    """A comma-separated list, each item one of ``choices`` (Kafka's ValidList)."""
    def check(name: str, value: str) -> None:
        for item in re.split(r"\s*,\s*", value.strip()):
            if item not in choices:
                raise _bad_value(name, item, f"String must be one of: {', '.join(choices)}")
    return check


def _throttled_replicas(name: str, value: str) -> None:
    """Kafka's ThrottledReplicaListValidator: ``*``, or items each ``partition:broker`` or empty
    (so "" — the default, the empty list DescribeConfigs reports — is valid)."""
    items = [i.strip() for i in value.strip().split(",")] if value.strip() else []
    if "".join(items) == "*" or all(re.match(r"^(?:[0-9]+:[0-9]+)?$", i) for i in items):
        return
    raise _bad_value(name, value, f"{name} must be the literal '*' or a list of replicas in the following "
                                  "format: [partitionId]:[brokerId],[partitionId]:[brokerId],...")


# Kafka's topic config names (TopicConfig) with LogConfig's types and ranges.
TOPIC_CONFIGS: dict[str, Validator] = {
    "cleanup.policy": _list_of("compact", "delete"),
    "compression.gzip.level": _int(-1, 9),
    "compression.lz4.level": _int(1, 17),
    "compression.type": _one_of("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"),
    "compression.zstd.level": _int(-131072, 22),
    "delete.retention.ms": _long(0),
    "file.delete.delay.ms": _long(0),
    "flush.messages": _long(1),
    "flush.ms": _long(0),
    "follower.replication.throttled.replicas": _throttled_replicas,
    "index.interval.bytes": _int(0),
    "leader.replication.throttled.replicas": _throttled_replicas,
    "local.retention.bytes": _long(-2),
    "local.retention.ms": _long(-2),
    "max.compaction.lag.ms": _long(1),
    "max.message.bytes": _int(0),
    "message.timestamp.after.max.ms": _long(0),
    "message.timestamp.before.max.ms": _long(0),
    "message.timestamp.type": _one_of("CreateTime", "LogAppendTime"),
    "min.cleanable.dirty.ratio": _double(0, 1),
    "min.compaction.lag.ms": _long(0),
    "min.insync.replicas": _int(1),
    "preallocate": _boolean,
    "remote.log.copy.disable": _boolean,
    "remote.log.delete.on.disable": _boolean,
    "remote.storage.enable": _boolean,
    "retention.bytes": _long(),
    "retention.ms": _long(-1),
    "segment.bytes": _int(14),
    "segment.index.bytes": _int(4),
    "segment.jitter.ms": _long(0),
    "segment.ms": _long(1),
    "unclean.leader.election.enable": _boolean,
}


def check_topic_config(name: str, value: str | None) -> None:
    """Refuse (INVALID_CONFIG) a topic config name Kafka does not know or a value that does not
    parse for it; ``None`` (delete) is checked by the caller."""
    validator = TOPIC_CONFIGS.get(name)
    if validator is None:
        raise FerryError(ErrorCode.INVALID_CONFIG, f"Unknown topic config name: {name}")
    if value is not None:
        validator(name, value)


def _resource(image: MetadataImage, raw: Any, check_exists: bool) -> tuple[str, str]:
    item = as_mapping(raw, "resources[]")
    rtype = item.get("type")
    name = item.get("name", "")
    if rtype not in RESOURCE_TYPES:
        raise FerryError(ErrorCode.INVALID_CONFIG,
                         f"unknown resource type {rtype!r}; expected one of {', '.join(RESOURCE_TYPES)}")
    if not isinstance(name, str) and not (rtype == "broker" and isinstance(name, int)):
        raise invalid(f"resource name must be a string, got {name!r}")
    name = str(name)
    if rtype == "broker" and name != "" and not name.isdigit():
        raise FerryError(ErrorCode.INVALID_CONFIG, f"broker resource name must be a broker id or empty, got {name!r}")
    if rtype == "topic" and check_exists and image.topics.get(name) is None:
        raise FerryError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
    if rtype == "group":
        check_group_name(name)  # a group's configs may be set before the group exists, as in Kafka
    return rtype, name


# Topic configs of Kafka's LIST type with their defaults: the only ones APPEND and SUBTRACT apply to.
LIST_TOPIC_CONFIG_DEFAULTS: dict[str, str] = {
    "cleanup.policy": "delete",
    "follower.replication.throttled.replicas": "",
    "leader.replication.throttled.replicas": "",
}
LIST_OPS = ("append", "subtract")


def _list_op(op: str, key: str, current: str | None, value: str) -> str:
    """Kafka's APPEND (add the items not present) and SUBTRACT (remove the items) on a LIST config,
    starting from its default when it is not set."""
    if key not in LIST_TOPIC_CONFIG_DEFAULTS:
        raise FerryError(ErrorCode.INVALID_CONFIG, f"Config value {op} is not allowed for config key: {key}")
    base = LIST_TOPIC_CONFIG_DEFAULTS[key] if current is None else current
    items = [i.strip() for i in base.split(",") if i.strip()]
    given = [i.strip() for i in value.split(",") if i.strip()]
    if op == "append":
        items += [g for g in given if g not in items]
    else:
        items = [i for i in items if i not in given]
    return ",".join(items)


def _config_text(key: Any, value: Any) -> str | None:
    if not isinstance(key, str) or not key:
        raise FerryError(ErrorCode.INVALID_CONFIG, f"config names must be non-empty strings, got {key!r}")
    if value is not None and not isinstance(value, (str, int, float, bool)):
        raise FerryError(ErrorCode.INVALID_CONFIG, f"config {key!r} has an invalid value {value!r}")
    return None if value is None else (str(value).lower() if isinstance(value, bool) else str(value))


def _resource_changes(image: MetadataImage, rtype: str, name: str, item: Any) -> dict[str, str | None]:
    """The new value (None = delete) of every key a resource's alteration touches: ``configs``
    sets or deletes, ``ops`` ([{op: set|delete|append|subtract, key, value}]) apply in order after
    it, and ``replace`` deletes every stored key the request does not set (Kafka's AlterConfigs)."""
    stored = image.configs.get(rtype, name)
    changes: dict[str, str | None] = {k: None for k in stored} if opt_bool(item, "replace") else {}
    for key, value in as_mapping(item.get("configs", {}) or {}, "configs").items():
        changes[key] = _config_text(key, value)
    for raw_op in opt_list(item, "ops") or []:
        op = as_mapping(raw_op, "ops[]")
        kind, raw_key = op.get("op"), op.get("key")
        text = _config_text(raw_key, op.get("value"))
        key = str(raw_key)
        if kind not in ("set", "delete", *LIST_OPS):
            raise invalid(f"op must be set, delete, append or subtract, got {kind!r}")
        if kind == "delete":
            changes[key] = None
        elif text is None:
            raise FerryError(ErrorCode.INVALID_REQUEST, f"Null value not supported for : {key}")
        elif kind == "set":
            changes[key] = text
        else:
            if rtype != "topic":
                raise FerryError(ErrorCode.INVALID_CONFIG, f"Config value {kind} is not allowed for config key: {key}")
            changes[key] = _list_op(kind, key, changes[key] if key in changes else stored.get(key), text)
    if rtype == "topic":
        for key, text in changes.items():
            if not (text is None and key in stored):
                check_topic_config(key, text)  # deleting a stored key is always allowed
    if rtype == "group":  # the whole config after the change, as Kafka's GroupConfig.validate sees it
        merged = {**stored, **changes}
        check_group_configs({k: v for k, v in merged.items() if v is not None})
    return changes


def alter_configs(image: MetadataImage, args: dict[str, Any], ctx: OpContext) -> ControllerResult:
    """Set (value) or delete (null) config keys, or append to / subtract from list configs; every
    resource is checked before anything changes, and ``validate_only`` only checks."""
    records: list[Record] = []
    for raw in req_list(args, "resources"):
        rtype, name = _resource(image, raw, check_exists=True)
        changes = _resource_changes(image, rtype, name, as_mapping(raw, "resources[]"))
        records += [ConfigRecord(resource_type=rtype, resource_name=name, key=k, value=v) for k, v in changes.items()]
    reply: AlterConfigsReply = {}
    if opt_bool(args, "validate_only"):
        return ControllerResult((), reply)
    return ControllerResult(tuple(records), reply)


def describe_configs(image: MetadataImage, args: dict[str, Any]) -> DescribeConfigsReply:
    resources = opt_list(args, "resources")
    if resources is None:
        keys = sorted(image.configs.configs)
    else:
        keys = [_resource(image, raw, check_exists=True) for raw in resources]
    return {"resources": [
        {"type": rtype, "name": name, "configs": dict(sorted(image.configs.get(rtype, name).items()))}
        for rtype, name in keys
    ]}


def put_kv(image: MetadataImage, args: dict[str, Any], ctx: OpContext) -> ControllerResult:
    key = req_str(args, "key")
    value = args.get("value")
    if value is not None and not isinstance(value, str):
        raise invalid(f"value must be a string or null, got {value!r}")
    reply: PutKvReply = {}
    return ControllerResult((KVRecord(key=key, value=value),), reply)


def get_kv(image: MetadataImage, args: dict[str, Any]) -> GetKvReply:
    key = req_str(args, "key")
    return {"key": key, "value": image.kv.get(key)}
