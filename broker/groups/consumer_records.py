"""The records of consumer-protocol groups (KIP-848) in ``__consumer_offsets``.

Kafka persists such a group as five record types, and so does Ferry, as canonical JSON beside the
classic group's records (:mod:`broker.groups.records`) in the same compacted partition:

- ``consumer_group``: the group epoch and the metadata of the subscribed topics it was computed
  for (Kafka's ConsumerGroupMetadata and ConsumerGroupPartitionMetadata);
- ``consumer_member``: a member's subscription and client details (ConsumerGroupMemberMetadata);
- ``consumer_target``: a member's target assignment (ConsumerGroupTargetAssignmentMember);
- ``consumer_target_epoch``: the epoch of the target assignment (ConsumerGroupTargetAssignmentMetadata);
- ``consumer_current``: a member's epoch, reconciliation state, owned partitions and partitions
  pending revocation (ConsumerGroupCurrentMemberAssignment).

Each is keyed by group (and member), so compaction keeps the latest; a tombstone removes it.
Decoding is strict, as for the classic records: anything unexpected raises
:class:`~broker.groups.records.GroupRecordError` and the coordinator refuses to load.
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Union

from broker.groups.records import (
    GroupRecord,
    GroupRecordError,
    _canonical,
    _Fields,
    _parse_json,
    decode_group_record,
)

KEY_VERSION = 1
VALUE_VERSION = 1

Partitions = Mapping[str, frozenset[int]]
"""Topic id -> partition numbers; topics with no partitions are left out."""


def normalize(parts: Mapping[str, Any]) -> dict[str, frozenset[int]]:
    return {t: frozenset(ps) for t, ps in sorted(parts.items()) if ps}


@dataclass(frozen=True)
class SubscribedTopic:
    topic_id: str
    partitions: int


@dataclass(frozen=True)
class ConsumerGroupValue:
    epoch: int
    topics: Mapping[str, SubscribedTopic]


@dataclass(frozen=True)
class ConsumerGroupRecord:
    group_id: str
    value: ConsumerGroupValue | None


@dataclass(frozen=True)
class ConsumerMemberValue:
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    server_assignor: str | None


@dataclass(frozen=True)
class ConsumerMemberRecord:
    group_id: str
    member_id: str
    value: ConsumerMemberValue | None


@dataclass(frozen=True)
class ConsumerTargetRecord:
    group_id: str
    member_id: str
    value: Partitions | None


@dataclass(frozen=True)
class ConsumerTargetEpochRecord:
    group_id: str
    value: int | None


@dataclass(frozen=True)
class CurrentAssignmentValue:
    member_epoch: int
    previous_member_epoch: int
    state: str
    assigned: Partitions
    pending_revocation: Partitions


@dataclass(frozen=True)
class ConsumerCurrentRecord:
    group_id: str
    member_id: str
    value: CurrentAssignmentValue | None


ConsumerRecord = Union[ConsumerGroupRecord, ConsumerMemberRecord, ConsumerTargetRecord, ConsumerTargetEpochRecord,
                       ConsumerCurrentRecord]
AnyGroupRecord = Union[GroupRecord, ConsumerRecord]
CONSUMER_RECORD_TYPES = (ConsumerGroupRecord, ConsumerMemberRecord, ConsumerTargetRecord, ConsumerTargetEpochRecord,
                         ConsumerCurrentRecord)

_KINDS = {ConsumerGroupRecord: "consumer_group", ConsumerMemberRecord: "consumer_member",
          ConsumerTargetRecord: "consumer_target", ConsumerTargetEpochRecord: "consumer_target_epoch",
          ConsumerCurrentRecord: "consumer_current"}


def _parts_json(parts: Partitions) -> dict[str, list[int]]:
    return {t: sorted(ps) for t, ps in sorted(parts.items()) if ps}


def _value_json(record: ConsumerRecord) -> dict[str, Any] | None:
    v = record.value
    if v is None:
        return None
    if isinstance(v, ConsumerGroupValue):
        return {"epoch": v.epoch, "topics": {name: {"id": t.topic_id, "partitions": t.partitions}
                                             for name, t in sorted(v.topics.items())}}
    if isinstance(v, ConsumerMemberValue):
        return {"instance_id": v.instance_id, "rack_id": v.rack_id, "client_id": v.client_id,
                "client_host": v.client_host, "rebalance_timeout_ms": v.rebalance_timeout_ms,
                "subscribed_topic_names": list(v.subscribed_topic_names),
                "subscribed_topic_regex": v.subscribed_topic_regex, "server_assignor": v.server_assignor}
    if isinstance(v, CurrentAssignmentValue):
        return {"member_epoch": v.member_epoch, "previous_member_epoch": v.previous_member_epoch, "state": v.state,
                "assigned": _parts_json(v.assigned), "pending_revocation": _parts_json(v.pending_revocation)}
    if isinstance(v, int):
        return {"assignment_epoch": v}
    return {"partitions": _parts_json(v)}


def encode_consumer_record(record: ConsumerRecord) -> tuple[bytes, bytes | None]:
    """The (key, value) bytes of a record; value ``None`` is a tombstone."""
    key: dict[str, Any] = {"kind": _KINDS[type(record)], "version": KEY_VERSION, "group": record.group_id}
    if isinstance(record, (ConsumerMemberRecord, ConsumerTargetRecord, ConsumerCurrentRecord)):
        key["member"] = record.member_id
    value = _value_json(record)
    if value is None:
        return _canonical(key), None
    value["version"] = VALUE_VERSION
    return _canonical(key), _canonical(value)


def _req_parts(f: _Fields, name: str) -> dict[str, frozenset[int]]:
    raw = f._get(name)
    if not isinstance(raw, dict):
        raise GroupRecordError(f"{name} must be an object of topic id -> partitions, got {raw!r}")
    out: dict[str, frozenset[int]] = {}
    for topic_id, ps in raw.items():
        if not isinstance(ps, list) or not ps or any(not isinstance(p, int) or isinstance(p, bool) or p < 0
                                                     for p in ps):
            raise GroupRecordError(f"{name}[{topic_id!r}] must be a non-empty list of partitions, got {ps!r}")
        if len(set(ps)) != len(ps):
            raise GroupRecordError(f"{name}[{topic_id!r}] lists a partition twice: {ps}")
        out[topic_id] = frozenset(ps)
    return out


def _decode_value(kind: str, what: str, data: bytes) -> Any:
    f = _Fields(_parse_json(data, what), what)
    f.version(VALUE_VERSION)
    value: Any
    if kind == "consumer_group":
        epoch = f.req_int("epoch", minimum=0)
        raw = f._get("topics")
        if not isinstance(raw, dict):
            raise GroupRecordError(f"{what}.topics must be an object, got {raw!r}")
        topics: dict[str, SubscribedTopic] = {}
        for name, t in raw.items():
            tf = _Fields(t, f"{what}.topics[{name!r}]")
            topics[name] = SubscribedTopic(tf.req_str("id"), tf.req_int("partitions", minimum=0))
            tf.done()
        value = ConsumerGroupValue(epoch, topics)
    elif kind == "consumer_member":
        names = f.req_list("subscribed_topic_names")
        if any(not isinstance(n, str) for n in names):
            raise GroupRecordError(f"{what}.subscribed_topic_names must be strings, got {names!r}")
        value = ConsumerMemberValue(
            instance_id=f.opt_str("instance_id"), rack_id=f.opt_str("rack_id"), client_id=f.req_str("client_id"),
            client_host=f.req_str("client_host"), rebalance_timeout_ms=f.req_int("rebalance_timeout_ms", minimum=0),
            subscribed_topic_names=tuple(names), subscribed_topic_regex=f.opt_str("subscribed_topic_regex"),
            server_assignor=f.opt_str("server_assignor"))
    elif kind == "consumer_target":
        value = _req_parts(f, "partitions")
    elif kind == "consumer_target_epoch":
        value = f.req_int("assignment_epoch", minimum=0)
    else:
        value = CurrentAssignmentValue(
            member_epoch=f.req_int("member_epoch", minimum=-2),
            previous_member_epoch=f.req_int("previous_member_epoch", minimum=-2), state=f.req_str("state"),
            assigned=_req_parts(f, "assigned"), pending_revocation=_req_parts(f, "pending_revocation"))
    f.done()
    return value


def decode_consumer_record(key: bytes, value: bytes | None) -> ConsumerRecord:
    """Inverse of :func:`encode_consumer_record`; raises GroupRecordError on anything else."""
    k = _Fields(_parse_json(key, "record key"), "record key")
    k.version(KEY_VERSION)
    kind = k.req_str("kind")
    group_id = k.req_str("group")
    member_id = k.req_str("member") if kind in ("consumer_member", "consumer_target", "consumer_current") else None
    k.done()
    if kind not in _KINDS.values():
        raise GroupRecordError(f"record key has unknown kind {kind!r}")
    what = f"{kind} value of {group_id!r}" + (f" member {member_id!r}" if member_id is not None else "")
    v = None if value is None else _decode_value(kind, what, value)
    if kind == "consumer_group":
        return ConsumerGroupRecord(group_id, v)
    if kind == "consumer_target_epoch":
        return ConsumerTargetEpochRecord(group_id, v)
    assert member_id is not None
    if kind == "consumer_member":
        return ConsumerMemberRecord(group_id, member_id, v)
    if kind == "consumer_target":
        return ConsumerTargetRecord(group_id, member_id, v)
    return ConsumerCurrentRecord(group_id, member_id, v)


def decode_any_group_record(key: bytes, value: bytes | None) -> AnyGroupRecord:
    """A record of a coordinator partition, classic or consumer-protocol."""
    try:
        kind = json.loads(bytes(key).decode("utf-8")).get("kind")
    except (UnicodeDecodeError, json.JSONDecodeError, AttributeError):
        kind = None
    if isinstance(kind, str) and kind.startswith("consumer_"):
        return decode_consumer_record(key, value)
    return decode_group_record(key, value)
