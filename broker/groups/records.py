"""The records a group coordinator appends to its ``__consumer_offsets`` partition.

Two kinds, as Kafka's GroupMetadataManager writes them: a group's metadata (protocol type,
generation, selected protocol, leader, and each member with the subscription it sent for that
protocol and the assignment the leader gave it) and one committed offset per (group, topic,
partition). The partition is compacted by key, so keys are canonical JSON (sorted keys, no spaces)
and a tombstone (value ``None``) deletes a group or an offset.

Decoding is strict: a key or value that is not exactly what this version writes (a missing or
unknown field, a wrong type, bad base64, a newer version, a member list that breaks a group's
invariants) raises :class:`GroupRecordError`. A coordinator that skipped a record would hand out
wrong offsets or generations after a move; refusing to load is the only safe answer.
"""
from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import Any, Union

KEY_VERSION = 1
VALUE_VERSION = 1

_KIND_OFFSET = "offset"
_KIND_GROUP = "group"


class GroupRecordError(ValueError):
    """A record of the group coordinator's partition that cannot be decoded."""


@dataclass(frozen=True)
class OffsetValue:
    """A committed offset. ``leader_epoch`` is -1 when the client did not send one; ``metadata``
    is the client's string ("" when it sent none)."""

    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp_ms: int


@dataclass(frozen=True)
class OffsetCommitRecord:
    """The committed offset of one partition for one group; ``value=None`` deletes it."""

    group_id: str
    topic: str
    partition: int
    value: OffsetValue | None


@dataclass(frozen=True)
class GroupMemberValue:
    """A member as persisted: its subscription for the group's selected protocol only (as Kafka
    stores it) and the assignment the leader gave it."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True)
class GroupMetadataValue:
    """A group as of its last stable or empty generation. ``current_state_timestamp_ms`` is when
    the group entered that state (offset retention of an empty group counts from it)."""

    protocol_type: str | None
    generation_id: int
    protocol_name: str | None
    leader_id: str | None
    current_state_timestamp_ms: int | None
    members: tuple[GroupMemberValue, ...]


@dataclass(frozen=True)
class GroupMetadataRecord:
    """A group's metadata; ``value=None`` deletes the group."""

    group_id: str
    value: GroupMetadataValue | None


GroupRecord = Union[OffsetCommitRecord, GroupMetadataRecord]


def _canonical(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def encode_group_record(record: GroupRecord) -> tuple[bytes, bytes | None]:
    """The (key, value) bytes of a record; value ``None`` is a tombstone."""
    if isinstance(record, OffsetCommitRecord):
        key = _canonical(
            {"kind": _KIND_OFFSET, "version": KEY_VERSION, "group": record.group_id,
             "topic": record.topic, "partition": record.partition}
        )
        if record.value is None:
            return key, None
        v = record.value
        return key, _canonical(
            {"version": VALUE_VERSION, "offset": v.offset, "leader_epoch": v.leader_epoch,
             "metadata": v.metadata, "commit_timestamp_ms": v.commit_timestamp_ms}
        )
    if isinstance(record, GroupMetadataRecord):
        key = _canonical({"kind": _KIND_GROUP, "version": KEY_VERSION, "group": record.group_id})
        if record.value is None:
            return key, None
        g = record.value
        return key, _canonical(
            {
                "version": VALUE_VERSION,
                "protocol_type": g.protocol_type,
                "generation_id": g.generation_id,
                "protocol_name": g.protocol_name,
                "leader_id": g.leader_id,
                "current_state_timestamp_ms": g.current_state_timestamp_ms,
                "members": [
                    {
                        "member_id": m.member_id,
                        "group_instance_id": m.group_instance_id,
                        "client_id": m.client_id,
                        "client_host": m.client_host,
                        "rebalance_timeout_ms": m.rebalance_timeout_ms,
                        "session_timeout_ms": m.session_timeout_ms,
                        "subscription": _b64(m.subscription),
                        "assignment": _b64(m.assignment),
                    }
                    for m in g.members
                ],
            }
        )
    raise TypeError(f"not a group coordinator record: {record!r}")


class _Fields:
    """Strict reader of one JSON object: every field must be read with the right type, and
    :meth:`done` refuses any field left unread."""

    def __init__(self, raw: Any, what: str) -> None:
        if not isinstance(raw, dict):
            raise GroupRecordError(f"{what} must be a JSON object, got {type(raw).__name__}")
        self._raw: dict[str, Any] = raw
        self._what = what
        self._read: set[str] = set()

    def _get(self, name: str) -> Any:
        if name not in self._raw:
            raise GroupRecordError(f"{self._what} has no field {name!r}")
        self._read.add(name)
        return self._raw[name]

    def req_int(self, name: str, minimum: int | None = None) -> int:
        value = self._get(name)
        if not isinstance(value, int) or isinstance(value, bool):
            raise GroupRecordError(f"{self._what}.{name} must be an integer, got {value!r}")
        if minimum is not None and value < minimum:
            raise GroupRecordError(f"{self._what}.{name} must be >= {minimum}, got {value}")
        return value

    def opt_int(self, name: str, minimum: int | None = None) -> int | None:
        if self._raw.get(name, 0) is None:
            self._read.add(name)
            return None
        return self.req_int(name, minimum)

    def req_str(self, name: str) -> str:
        value = self._get(name)
        if not isinstance(value, str):
            raise GroupRecordError(f"{self._what}.{name} must be a string, got {value!r}")
        return value

    def opt_str(self, name: str) -> str | None:
        if self._raw.get(name, "") is None:
            self._read.add(name)
            return None
        return self.req_str(name)

    def req_bytes(self, name: str) -> bytes:
        text = self.req_str(name)
        try:
            return base64.b64decode(text.encode("ascii"), validate=True)
        except (binascii.Error, UnicodeEncodeError) as e:
            raise GroupRecordError(f"{self._what}.{name} is not valid base64: {e}") from e

    def req_list(self, name: str) -> list[Any]:
        value = self._get(name)
        if not isinstance(value, list):
            raise GroupRecordError(f"{self._what}.{name} must be a list, got {value!r}")
        return value

    def version(self, supported: int) -> None:
        version = self.req_int("version", minimum=1)
        if version > supported:
            raise GroupRecordError(f"{self._what} has version {version}, newer than supported {supported}")

    def done(self) -> None:
        unknown = sorted(set(self._raw) - self._read)
        if unknown:
            raise GroupRecordError(f"{self._what} has unknown fields {unknown}")


def _parse_json(data: bytes, what: str) -> Any:
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise GroupRecordError(f"{what} must be bytes, got {type(data).__name__}")
    try:
        return json.loads(bytes(data).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise GroupRecordError(f"{what} is not UTF-8 JSON: {e}") from e


def _decode_member(raw: Any, index: int) -> GroupMemberValue:
    f = _Fields(raw, f"group value members[{index}]")
    member = GroupMemberValue(
        member_id=f.req_str("member_id"),
        group_instance_id=f.opt_str("group_instance_id"),
        client_id=f.req_str("client_id"),
        client_host=f.req_str("client_host"),
        rebalance_timeout_ms=f.req_int("rebalance_timeout_ms", minimum=0),
        session_timeout_ms=f.req_int("session_timeout_ms", minimum=0),
        subscription=f.req_bytes("subscription"),
        assignment=f.req_bytes("assignment"),
    )
    f.done()
    if not member.member_id:
        raise GroupRecordError(f"group value members[{index}] has an empty member_id")
    return member


def _decode_group_value(group_id: str, data: bytes) -> GroupMetadataValue:
    f = _Fields(_parse_json(data, f"value of group {group_id!r}"), f"value of group {group_id!r}")
    f.version(VALUE_VERSION)
    value = GroupMetadataValue(
        protocol_type=f.opt_str("protocol_type"),
        generation_id=f.req_int("generation_id", minimum=0),
        protocol_name=f.opt_str("protocol_name"),
        leader_id=f.opt_str("leader_id"),
        current_state_timestamp_ms=f.opt_int("current_state_timestamp_ms", minimum=0),
        members=tuple(_decode_member(m, i) for i, m in enumerate(f.req_list("members"))),
    )
    f.done()
    ids = [m.member_id for m in value.members]
    if len(set(ids)) != len(ids):
        raise GroupRecordError(f"group {group_id!r} lists a member twice: {ids}")
    instance_ids = [m.group_instance_id for m in value.members if m.group_instance_id is not None]
    if len(set(instance_ids)) != len(instance_ids):
        raise GroupRecordError(f"group {group_id!r} lists a group instance id twice: {instance_ids}")
    if value.members:
        if value.protocol_type is None or value.protocol_name is None:
            raise GroupRecordError(f"group {group_id!r} has members but no protocol type or protocol name")
        if value.leader_id not in ids:
            raise GroupRecordError(f"group {group_id!r} has leader {value.leader_id!r}, not one of its members {ids}")
    elif value.leader_id is not None:
        raise GroupRecordError(f"group {group_id!r} has no members but leader {value.leader_id!r}")
    return value


def decode_group_record(key: bytes, value: bytes | None) -> GroupRecord:
    """Inverse of :func:`encode_group_record`; raises :class:`GroupRecordError` on anything else."""
    k = _Fields(_parse_json(key, "record key"), "record key")
    k.version(KEY_VERSION)
    kind = k.req_str("kind")
    group_id = k.req_str("group")
    if kind == _KIND_OFFSET:
        topic = k.req_str("topic")
        partition = k.req_int("partition", minimum=0)
        k.done()
        if value is None:
            return OffsetCommitRecord(group_id, topic, partition, None)
        what = f"offset value of {group_id!r} {topic}-{partition}"
        f = _Fields(_parse_json(value, what), what)
        f.version(VALUE_VERSION)
        offset_value = OffsetValue(
            offset=f.req_int("offset"),
            leader_epoch=f.req_int("leader_epoch", minimum=-1),
            metadata=f.req_str("metadata"),
            commit_timestamp_ms=f.req_int("commit_timestamp_ms", minimum=0),
        )
        f.done()
        return OffsetCommitRecord(group_id, topic, partition, offset_value)
    if kind == _KIND_GROUP:
        k.done()
        if value is None:
            return GroupMetadataRecord(group_id, None)
        return GroupMetadataRecord(group_id, _decode_group_value(group_id, value))
    raise GroupRecordError(f"record key has unknown kind {kind!r}")
