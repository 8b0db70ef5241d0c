"""Metadata records: the only way state changes (DESIGN.md §2).

Each record is a frozen dataclass. The encoding is versioned and self-describing:
``{"type": "Partition", "version": 1, "fields": {...}}`` as JSON. Decoding ignores unknown
fields and fills missing ones from defaults, so a newer writer and an older reader can coexist.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Callable, Union

NO_LEADER = -1
STORAGE_S3 = "s3"
STORAGE_LOCAL = "local"
STREAM_OPENED = "OPENED"
STREAM_CLOSED = "CLOSED"


@dataclass(frozen=True)
class LogDirSpec:
    """One of a broker's log dirs: a stable id and its absolute path."""

    dir_id: str
    path: str


@dataclass(frozen=True)
class RegisterBrokerRecord:
    broker_id: int
    incarnation_id: str
    broker_epoch: int
    endpoints: tuple[str, ...] = ()
    rack: str | None = None
    log_dirs: tuple[LogDirSpec, ...] = ()
    fenced: bool = True
    in_controlled_shutdown: bool = False


@dataclass(frozen=True)
class UnregisterBrokerRecord:
    broker_id: int
    broker_epoch: int


@dataclass(frozen=True)
class BrokerRegistrationChangeRecord:
    """Only the fields that change; None = unchanged.

    Log dirs (ids or registered paths) are applied in field order: ``online_log_dirs`` are online
    again, then ``saturated_log_dirs`` and ``offline_log_dirs`` each replace the whole set; a dir
    both offline and saturated is offline.
    """

    broker_id: int
    broker_epoch: int
    fenced: bool | None = None
    in_controlled_shutdown: bool | None = None
    online_log_dirs: tuple[str, ...] | None = None
    saturated_log_dirs: tuple[str, ...] | None = None
    offline_log_dirs: tuple[str, ...] | None = None


@dataclass(frozen=True)
class TopicRecord:
    name: str
    topic_id: str
    storage: str = STORAGE_S3


@dataclass(frozen=True)
class RemoveTopicRecord:
    topic_id: str


@dataclass(frozen=True)
class PartitionRecord:
    topic_id: str
    partition: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    removing_replicas: tuple[int, ...] = ()
    adding_replicas: tuple[int, ...] = ()
    leader: int = NO_LEADER
    leader_epoch: int = 0
    partition_epoch: int = 0
    directories: tuple[str, ...] = ()
    storage: str = STORAGE_S3
    reelection_deadline_ms: int = 0
    change_started_ms: int = 0


@dataclass(frozen=True)
class PartitionChangeRecord:
    """Only the fields that change (None = unchanged). ``leader = -1`` means no leader.

    Replay bumps ``partition_epoch`` on every change and ``leader_epoch`` when the leader changes
    or a reassignment removes a replica (KRaft's rules).
    """

    topic_id: str
    partition: int
    replicas: tuple[int, ...] | None = None
    isr: tuple[int, ...] | None = None
    removing_replicas: tuple[int, ...] | None = None
    adding_replicas: tuple[int, ...] | None = None
    leader: int | None = None
    directories: tuple[str, ...] | None = None
    reelection_deadline_ms: int | None = None
    change_started_ms: int | None = None


@dataclass(frozen=True)
class StreamRecord:
    """The whole state of a stream (an upsert).

    ``owner_epoch`` is the owner's broker epoch when it opened the stream (-1 = none), so a
    restarted broker (same id, new incarnation) is not mistaken for the one that opened it.
    ``wal_owners`` are the ``(broker_id, stream epoch)`` of earlier owners that lost the stream
    without closing it and whose WALs may still hold acknowledged records past ``end_offset``:
    an open that takes the stream over adds the owner it replaces, and only the owner that has
    recovered and committed their tails clears the list (``stream_recovered``). So an owner that
    dies before it recovered its predecessor's tail leaves both WALs to the next one.
    """

    stream_id: int
    epoch: int
    state: str
    owner: int
    start_offset: int = 0
    end_offset: int = 0
    owner_epoch: int = -1
    wal_owners: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True)
class RemoveStreamRecord:
    stream_id: int


@dataclass(frozen=True)
class StreamObjectRecord:
    """``[start_offset, end_offset)`` of ``stream_id`` lives in ``object_key`` (which may hold other streams too)."""

    object_key: str
    stream_id: int
    start_offset: int
    end_offset: int
    size: int
    epoch: int
    committed_ms: int = 0
    range_bytes: int = 0  # the stream's own bytes in the object (0: not given)


@dataclass(frozen=True)
class RemoveStreamObjectRecord:
    object_key: str
    stream_id: int


@dataclass(frozen=True)
class KVRecord:
    """A key/value pair; ``value = None`` deletes the key."""

    key: str
    value: str | None


@dataclass(frozen=True)
class ConfigRecord:
    """A dynamic config; ``resource_type`` is "broker", "topic", "cluster" or "group"; ``value = None`` deletes."""

    resource_type: str
    resource_name: str
    key: str
    value: str | None


@dataclass(frozen=True)
class UserScramCredentialRecord:
    """KRaft's UserScramCredentialRecord: a user's SCRAM credential for one mechanism (an upsert).
    ``mechanism`` is the SASL name (``SCRAM-SHA-256``, ``SCRAM-SHA-512``); salt and keys are
    base64: the password itself is never in the log."""

    name: str
    mechanism: str
    salt: str
    stored_key: str
    server_key: str
    iterations: int


@dataclass(frozen=True)
class RemoveUserScramCredentialRecord:
    name: str
    mechanism: str


@dataclass(frozen=True)
class AccessControlEntryRecord:
    """An ACL binding (KRaft's AccessControlEntryRecord); the enums are Kafka's names ("TOPIC",
    "LITERAL", "READ", "ALLOW"), ``acl_id`` the offset of this record when it was first written."""

    acl_id: int
    resource_type: str
    resource_name: str
    pattern_type: str
    principal: str
    host: str
    operation: str
    permission_type: str


@dataclass(frozen=True)
class RemoveAccessControlEntryRecord:
    acl_id: int


@dataclass(frozen=True)
class ProducerIdsRecord:
    """KRaft's ProducerIdsRecord: broker ``broker_id`` (at ``broker_epoch``) took the block of
    producer ids ending below ``next_producer_id``, the first id of the next block."""

    broker_id: int
    broker_epoch: int
    next_producer_id: int


@dataclass(frozen=True)
class NoOpRecord:
    """Written by a new leader so that its first commit fences the old leader's term."""

    term: int = 0
    leader_id: int = -1


Record = Union[
    RegisterBrokerRecord,
    UnregisterBrokerRecord,
    BrokerRegistrationChangeRecord,
    TopicRecord,
    RemoveTopicRecord,
    PartitionRecord,
    PartitionChangeRecord,
    StreamRecord,
    RemoveStreamRecord,
    StreamObjectRecord,
    RemoveStreamObjectRecord,
    KVRecord,
    ConfigRecord,
    UserScramCredentialRecord,
    RemoveUserScramCredentialRecord,
    AccessControlEntryRecord,
    RemoveAccessControlEntryRecord,
    ProducerIdsRecord,
    NoOpRecord,
]

RECORD_TYPES: dict[str, type] = {
    cls.__name__.removesuffix("Record"): cls for cls in typing.get_args(Record)
}
RECORD_VERSION: dict[str, int] = {name: 1 for name in RECORD_TYPES}
_NESTED: dict[str, type] = {"LogDirSpec": LogDirSpec}


def partition_stream_key(topic_id: str, partition: int, kind: str) -> str:
    """KV key mapping a partition to its stream id; ``kind`` is "data" or "meta"."""
    return f"partition/{topic_id}/{partition}/{kind}"


def record_type(record: Record) -> str:
    return type(record).__name__.removesuffix("Record")


_SCALARS = frozenset({int, str, bool, float, type(None)})


_FIELD_NAMES: dict[type, tuple[str, ...] | None] = {}


def _field_names(cls: type) -> tuple[str, ...] | None:
    """A dataclass's field names (None for other types), looked up once per class: encoding
    thousands of records per command made ``dataclasses.fields`` a visible cost."""
    if cls not in _FIELD_NAMES:
        _FIELD_NAMES[cls] = tuple(f.name for f in dataclasses.fields(cls)) if dataclasses.is_dataclass(cls) else None
    return _FIELD_NAMES[cls]


def _to_plain(value: Any) -> Any:
    cls = type(value)
    if cls in _SCALARS:
        return value
    if cls is tuple or cls is list:
        return [_to_plain(v) for v in value]
    if cls is dict:
        return {k: _to_plain(v) for k, v in value.items()}
    names = _field_names(cls)
    if names is not None:
        return {name: _to_plain(getattr(value, name)) for name in names}
    if isinstance(value, (tuple, list)):
        return [_to_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _to_plain(v) for k, v in value.items()}
    return value


def _identity(value: Any) -> Any:
    return value


def _int_of(value: Any) -> Any:
    return int(value) if isinstance(value, bool) else value


Convert = Callable[[Any], Any]
_CONVERTERS: dict[Any, Convert] = {}


def _converter(tp: Any) -> Convert:
    """How a JSON value becomes a value of type ``tp`` (None stays None), worked out once per type:
    a broker decodes every record of the metadata log, and looking at each field's type for each
    value was most of the cost of following a large move."""
    conv = _CONVERTERS.get(tp)
    if conv is None:
        conv = _CONVERTERS[tp] = _make_converter(tp)
    return conv


def _make_converter(tp: Any) -> Convert:
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return _converter(args[0]) if len(args) == 1 else _identity
    if origin is tuple:
        item = _converter(typing.get_args(tp)[0])
        if item is _identity:
            return lambda value: None if value is None else tuple(value)
        return lambda value: None if value is None else tuple(item(v) for v in value)
    if origin is dict:
        return lambda value: None if value is None else dict(value)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return lambda value: None if value is None else _build(tp, value)
    if tp is int:
        return _int_of
    return _identity


def _from_plain(tp: Any, value: Any) -> Any:
    return _converter(tp)(value)


@functools.lru_cache(maxsize=None)
def _field_converters(cls: type) -> tuple[tuple[str, Convert], ...]:
    """(name, converter) of each field; resolving string annotations is slow, so once per class."""
    hints = typing.get_type_hints(cls, globalns=globals() | _NESTED)
    return tuple((f.name, _converter(hints[f.name])) for f in dataclasses.fields(cls))


def _build(cls: type, data: dict[str, Any]) -> Any:
    return cls(**{name: conv(data[name]) for name, conv in _field_converters(cls) if name in data})


def encode_record(record: Record) -> dict[str, Any]:
    """The self-describing JSON-ready form of a record."""
    name = record_type(record)
    return {"type": name, "version": RECORD_VERSION[name], "fields": _to_plain(record)}


def decode_record(data: dict[str, Any]) -> Record:
    """Inverse of :func:`encode_record`; raises ValueError on an unknown type or a newer version."""
    name = data.get("type")
    cls = RECORD_TYPES.get(str(name))
    if cls is None:
        raise ValueError(f"unknown record type {name!r}")
    version = int(data.get("version", 1))
    if version > RECORD_VERSION[str(name)]:
        raise ValueError(f"record {name} version {version} is newer than supported {RECORD_VERSION[str(name)]}")
    return typing.cast(Record, _build(cls, dict(data.get("fields", {}))))


def encode_record_bytes(record: Record) -> bytes:
    return json.dumps(encode_record(record), separators=(",", ":"), sort_keys=True).encode()


def decode_record_bytes(raw: bytes) -> Record:
    return decode_record(json.loads(raw))


__all__ = [name for name in list(globals()) if name.endswith("Record") or name in {
    "LogDirSpec", "Record", "RECORD_TYPES", "encode_record", "decode_record", "encode_record_bytes",
    "decode_record_bytes", "partition_stream_key", "record_type", "NO_LEADER", "STORAGE_S3",
    "STORAGE_LOCAL", "STREAM_OPENED", "STREAM_CLOSED"}]
_ = field
