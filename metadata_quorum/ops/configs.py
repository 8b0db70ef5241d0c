"""Dynamic configs (Kafka's IncrementalAlterConfigs / DescribeConfigs) and the key/value store."""
from __future__ import annotations

from typing import Any

from metadata_quorum.controller_result import ControllerResult, OpContext
from metadata_quorum.errors import ErrorCode, FerryError
from metadata_quorum.image import MetadataImage
from metadata_quorum.ops.validation import as_mapping, invalid, opt_list, req_list, req_str
from metadata_quorum.records import ConfigRecord, KVRecord, Record

RESOURCE_TYPES = ("broker", "topic", "cluster")


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
    return rtype, name


def alter_configs(image: MetadataImage, args: dict[str, Any], ctx: OpContext) -> ControllerResult:
    """Set (value) or delete (null) config keys; every resource is checked before anything changes."""
    records: list[Record] = []
    for raw in req_list(args, "resources"):
        rtype, name = _resource(image, raw, check_exists=True)
        configs = as_mapping(as_mapping(raw, "resources[]").get("configs", {}), "configs")
        for key, value in configs.items():
            if not isinstance(key, str) or not key:
                raise FerryError(ErrorCode.INVALID_CONFIG, f"config names must be non-empty strings, got {key!r}")
            if value is not None and not isinstance(value, (str, int, float, bool)):
                raise FerryError(ErrorCode.INVALID_CONFIG, f"config {key!r} has an invalid value {value!r}")
            text = None if value is None else (str(value).lower() if isinstance(value, bool) else str(value))
            records.append(ConfigRecord(resource_type=rtype, resource_name=name, key=key, value=text))
    return ControllerResult(tuple(records), {})


def describe_configs(image: MetadataImage, args: dict[str, Any]) -> dict[str, Any]:
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
    return ControllerResult((KVRecord(key=key, value=value),), {})


def get_kv(image: MetadataImage, args: dict[str, Any]) -> dict[str, Any]:
    key = req_str(args, "key")
    return {"key": key, "value": image.kv.get(key)}
