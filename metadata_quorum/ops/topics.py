"""Creating, deleting and describing topics (Kafka's CreateTopics / DeleteTopics / Metadata).

Batch requests answer item by item, as Kafka does: a bad topic gets its error in the reply and
the others proceed. Every storage=s3 partition gets a data and a meta stream, created CLOSED
with epoch -1 in the same batch, and found through ``partition_stream_key``.
"""
from __future__ import annotations

import base64
import bisect
import re
import uuid
import zlib
from collections import Counter
from typing import Any

from metadata_quorum.controller_result import ControllerResult, OpContext
from metadata_quorum.kernel.errors import ErrorCode, FerryError
from metadata_quorum.kernel.messages.topics import (CreatedTopic, CreatePartitionsReply, CreateTopicsReply, DeletedTopic,
                                                    DeleteTopicsReply, DescribeTopicsReply, GrownTopic,
                                                    PartitionDescription, TopicDescription)
from metadata_quorum.image import STREAM_ID_COUNTER_KEY, MetadataImage, TopicImage
from metadata_quorum.ops.configs import check_topic_config
from metadata_quorum.ops.placement import Placement, RecordBuilder
from metadata_quorum.ops.streams import new_stream_records
from metadata_quorum.kernel.validation import (
    INT16_MAX, INT32_MAX, MAX_PARTITIONS_PER_REQUEST, as_int, as_mapping, invalid, item_error, opt_bool, opt_int,
    opt_list, parse_decimal, req_list, str_list,
)
from metadata_quorum.records import (
    NO_LEADER,
    STORAGE_LOCAL,
    STORAGE_S3,
    ConfigRecord,
    KVRecord,
    PartitionRecord,
    Record,
    RemoveStreamRecord,
    RemoveTopicRecord,
    TopicRecord,
    partition_stream_key,
)
from metadata_quorum.s3_replicas import (assigned_replicas_key, encode_replicas, replication_factor, reported_isr,
                                         reported_replicas)

MAX_TOPIC_NAME_LENGTH = 249
_LEGAL_NAME = re.compile(r"^[a-zA-Z0-9._-]+$")
_TOPIC_ID_NAMESPACE = uuid.UUID("6f1c5c0e-9c55-4d8e-9b5e-5f2a1f0e7a11")


def validate_topic_name(name: Any) -> str:
    """Kafka's topic name rules (INVALID_TOPIC_EXCEPTION with Kafka's messages)."""
    if not isinstance(name, str) or not name:
        raise FerryError(ErrorCode.INVALID_TOPIC_EXCEPTION, "Topic name is illegal, it can't be empty")
    if name in (".", ".."):
        raise FerryError(ErrorCode.INVALID_TOPIC_EXCEPTION, "Topic name cannot be \".\" or \"..\"")
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise FerryError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                         f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME_LENGTH} characters, "
                         f"topic name: {name}")
    if not _LEGAL_NAME.match(name):
        raise FerryError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                         f"Topic name \"{name}\" is illegal, it contains a character other than ASCII "
                         "alphanumerics, '.', '_' and '-'")
    return name


def make_topic_id(name: str, offset: int) -> str:
    """A Kafka-style (base64, 22 chars) id derived from the name and the log offset, so every
    replay agrees and a re-created topic gets a new id."""
    raw = uuid.uuid5(_TOPIC_ID_NAMESPACE, f"{name}@{offset}").bytes
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _assignment_partition(key: Any) -> int:
    """A partition index keying ``assignments``: a JSON object's key is text, so plain decimal text."""
    try:
        return parse_decimal(key, "partition", maximum=INT32_MAX) if isinstance(key, str) \
            else as_int(key, "partition", 0, INT32_MAX)
    except FerryError:
        raise FerryError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"partition {str(key)[:80]!r} is not a number") from None


def _assignments(raw: Any, n_brokers_known: set[int], max_partitions: int) -> dict[int, tuple[int, ...]]:
    if not isinstance(raw, dict) or not raw:
        raise FerryError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, "assignments must map partition -> [broker ids]")
    if len(raw) > max_partitions:
        raise FerryError(ErrorCode.INVALID_PARTITIONS, f"Excessively large number of partitions per request: "
                         f"{len(raw)} (at most {max_partitions} more in this request: max_partitions_per_request).")
    out: dict[int, tuple[int, ...]] = {}
    for key, replicas in raw.items():
        partition = _assignment_partition(key)
        if not isinstance(replicas, (list, tuple)) or not replicas or len(replicas) > INT16_MAX:
            raise FerryError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                             "The manual partition assignment includes an empty replica list.")
        ids = tuple(as_int(r, "replica", 0, INT32_MAX) for r in replicas)
        seen: set[int] = set()
        for b in sorted(ids):  # KRaft's order: the lowest unknown or repeated id is the one named
            if b not in n_brokers_known:
                raise FerryError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                 f"The manual partition assignment includes broker {b}, but no such broker is registered.")
            if b in seen:
                raise FerryError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                 f"The manual partition assignment includes the broker {b} more than once.")
            seen.add(b)
        if out and len(ids) != len(next(iter(out.values()))):
            first = len(next(iter(out.values())))
            raise FerryError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                             f"The manual partition assignment includes a partition with {len(ids)} replica(s), but "
                             f"this is not consistent with previous partitions, which have {first} replica(s).")
        out[partition] = ids
    if sorted(out) != list(range(len(out))):
        raise FerryError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                         "partitions should be a consecutive 0-based integer sequence")
    return out


def _configs(raw: Any) -> dict[str, str]:
    """A new topic's configs: strings, each a topic config Kafka knows with a value that parses."""
    configs = dict(as_mapping(raw or {}, "configs"))
    nulls = [k for k, v in configs.items() if v is None]
    if nulls:
        raise FerryError(ErrorCode.INVALID_CONFIG,
                         f"Null value not supported for topic configs: {','.join(map(str, nulls))}")
    if not all(isinstance(k, str) and k and isinstance(v, str) for k, v in configs.items()):
        raise FerryError(ErrorCode.INVALID_CONFIG, "topic configs must map names to string values")
    for key, value in configs.items():
        check_topic_config(key, value)
    return configs


def _plan(builder: RecordBuilder, item: dict[str, Any], collisions: dict[str, str],
          ctx: OpContext, max_partitions: int) -> tuple[str, str, dict[int, tuple[int, ...]], dict[str, str]]:
    name = validate_topic_name(item.get("name"))
    if builder.view.topic_id_by_name(name) is not None:
        raise FerryError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
    other = collisions.get(name.replace(".", "_"))
    if other is not None and other != name:
        # Kafka refuses names equal but for '.' and '_': their metric names would collide.
        raise FerryError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"Topic '{name}' collides with existing topic: {other}")
    storage = item.get("storage") or STORAGE_S3
    if storage not in (STORAGE_S3, STORAGE_LOCAL):
        raise invalid(f"storage must be {STORAGE_S3!r} or {STORAGE_LOCAL!r}, got {storage!r}")
    configs = _configs(item.get("configs"))
    num_partitions = opt_int(item, "num_partitions", -1, -INT32_MAX - 1, INT32_MAX)
    rf = opt_int(item, "replication_factor", -1, -INT16_MAX - 1, INT16_MAX)
    if item.get("assignments"):
        # Explicit assignments decide the partition count and replication factor (Kafka's API
        # wants -1 for both then; callers passing their defaults are not refused for it).
        assignment = _assignments(item["assignments"], set(builder.image.cluster.brokers), max_partitions)
        return name, storage, assignment, configs
    num_partitions = opt_int(item, "default_num_partitions", 1, 1, INT32_MAX) if num_partitions == -1 \
        else num_partitions
    rf = opt_int(item, "default_replication_factor", 1, 1, INT16_MAX) if rf == -1 else rf
    if num_partitions > max_partitions:
        raise FerryError(ErrorCode.INVALID_PARTITIONS, f"Excessively large number of partitions per request: "
                         f"{num_partitions} (at most {max_partitions} more in this request: max_partitions_per_request).")
    if num_partitions < 1:
        raise FerryError(ErrorCode.INVALID_PARTITIONS, "Number of partitions must be larger than 0.")
    if rf < 1:
        raise FerryError(ErrorCode.INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0.")
    active = builder.placeable_broker_ids()
    if rf > len(active):
        raise FerryError(ErrorCode.INVALID_REPLICATION_FACTOR,
                         f"Unable to replicate the partition {rf} time(s): The target replication factor of {rf} "
                         f"cannot be reached because only {len(active)} broker(s) are registered and can take "
                         "new partitions (active, with an online log dir that is not full).")
    start = zlib.crc32(name.encode()) % len(active)
    assignment = {
        p: tuple(active[(start + p + j) % len(active)] for j in range(rf)) for p in range(num_partitions)
    }
    return name, storage, assignment, configs


def create_topics(image: MetadataImage, args: dict[str, Any], ctx: OpContext,
                  max_partitions_per_request: int = MAX_PARTITIONS_PER_REQUEST) -> ControllerResult:
    """Kafka's CreateTopics; each topic's partitions are bounded by ``max_partitions_per_request``
    (the controller's setting): one request must not build an unbounded number of records."""
    items = req_list(args, "topics")
    validate_only = opt_bool(args, "validate_only")
    names = Counter(name for i in items if isinstance(name := as_mapping(i, "topics[]").get("name"), str))
    duplicates = {n for n, count in names.items() if count > 1}
    partitions_left = max_partitions_per_request
    builder = RecordBuilder(image)
    placement = Placement(image)
    replies: list[CreatedTopic] = []
    collisions = {n.replace(".", "_"): n for n in image.topics.by_name}
    for item in items:
        name = item.get("name")
        if isinstance(name, str) and name in duplicates:
            replies.append({"name": name, "error": ErrorCode.INVALID_REQUEST.name, "code": ErrorCode.INVALID_REQUEST.code, "message": f"topic {name!r} appears more than once in the request"})
            continue
        try:
            name, storage, assignment, configs = _plan(builder, item, collisions, ctx, partitions_left)
        except FerryError as e:
            replies.append({"name": name if isinstance(name, str) else None, "error": e.error.name, "code": e.error.code, "message": e.message})
            continue
        partitions_left -= len(assignment)
        topic_id = make_topic_id(name, ctx.next_offset + len(builder.records))
        replies.append({"name": name, "topic_id": topic_id, "num_partitions": len(assignment),
                        "replication_factor": len(assignment[0])})
        collisions.setdefault(name.replace(".", "_"), name)
        if validate_only:
            continue
        _create(builder, placement, name, topic_id, storage, assignment, configs)
    reply: CreateTopicsReply = {"topics": replies}
    return ControllerResult(tuple(builder.records), reply)


def _create(builder: RecordBuilder, placement: Placement, name: str, topic_id: str, storage: str,
            assignment: dict[int, tuple[int, ...]], configs: dict[str, str]) -> None:
    builder.add(TopicRecord(name=name, topic_id=topic_id, storage=storage))
    _add_partitions(builder, placement, topic_id, storage, assignment)
    for key, value in sorted(configs.items()):
        builder.add(ConfigRecord(resource_type="topic", resource_name=name, key=key, value=value))


def _add_partitions(builder: RecordBuilder, placement: Placement, topic_id: str, storage: str,
                    assignment: dict[int, tuple[int, ...]]) -> None:
    """Partition records (and, for s3, their closed data and meta streams) of new partitions.

    An s3 partition's record names its owner alone, the first active broker of its assignment;
    an assignment of more than one broker is kept beside it for what clients are told
    (metadata_quorum/s3_replicas.py)."""
    for partition in sorted(assignment):
        replicas = assignment[partition]
        if storage == STORAGE_S3:
            if len(replicas) > 1:
                builder.add(KVRecord(key=assigned_replicas_key(topic_id, partition), value=encode_replicas(replicas)))
            replicas = (next((b for b in replicas if builder.is_active(b)), replicas[0]),)
        dirs = []
        for b in replicas:
            dir_id = placement.pick_dir(builder, b)
            placement.assign(b, dir_id)
            dirs.append(dir_id)
        leader = next((b for b in replicas if builder.is_active(b)), NO_LEADER)
        builder.add(PartitionRecord(
            topic_id=topic_id, partition=partition, replicas=replicas, isr=replicas, leader=leader,
            leader_epoch=0, partition_epoch=0, directories=tuple(dirs), storage=storage,
        ))
        if storage == STORAGE_S3:
            counter = builder.view.kv(STREAM_ID_COUNTER_KEY)
            next_id = max(int(counter or 0), builder.image.next_stream_id)
            records, (data_id, meta_id) = new_stream_records(next_id, 2)
            for record in records:
                builder.add(record)
            builder.add(KVRecord(key=partition_stream_key(topic_id, partition, "data"), value=str(data_id)))
            builder.add(KVRecord(key=partition_stream_key(topic_id, partition, "meta"), value=str(meta_id)))


def _new_assignment(builder: RecordBuilder, topic: TopicImage, count: int,
                    raw: Any) -> dict[int, tuple[int, ...]]:
    """Replicas of partitions ``len(topic.partitions)..count-1``: the ones named, checked as
    KRaft checks them, or placed round-robin over the placeable brokers as CreateTopics does."""
    current = len(topic.partitions)
    if count == current:
        raise FerryError(ErrorCode.INVALID_PARTITIONS, f"Topic already has {current} partition(s).")
    if count < current:
        raise FerryError(ErrorCode.INVALID_PARTITIONS, f"The topic {topic.name} currently has {current} "
                                                       f"partition(s); {count} would not be an increase.")
    additional = count - current
    if additional > MAX_PARTITIONS_PER_REQUEST:
        raise FerryError(ErrorCode.INVALID_PARTITIONS, f"Adding {additional} partitions exceeds the "
                         f"{MAX_PARTITIONS_PER_REQUEST} allowed in one request (max_partitions_per_request).")
    rf = replication_factor(builder.image.kv, topic.partitions[min(topic.partitions)]) if topic.partitions else 1
    if raw is not None:
        if not isinstance(raw, (list, tuple)) or len(raw) != additional:
            given = len(raw) if isinstance(raw, (list, tuple)) else 0
            raise FerryError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                             f"Attempted to add {additional} additional partition(s), but only {given} "
                             "assignment(s) were specified.")
        assignment = _assignments({str(i): replicas for i, replicas in enumerate(raw)},
                                  set(builder.image.cluster.brokers), MAX_PARTITIONS_PER_REQUEST)
        for replicas in assignment.values():
            if len(replicas) != rf:
                raise FerryError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                 f"The manual partition assignment includes a partition with {len(replicas)} "
                                 f"replica(s), but this is not consistent with previous partitions, which have "
                                 f"{rf} replica(s).")
        return {current + i: replicas for i, replicas in assignment.items()}
    active = builder.placeable_broker_ids()
    if rf > len(active):
        raise FerryError(ErrorCode.INVALID_REPLICATION_FACTOR,
                         f"Unable to replicate the partition {rf} time(s): only {len(active)} broker(s) are "
                         "registered and can take new partitions.")
    start = zlib.crc32(topic.name.encode()) % len(active)
    return {p: tuple(active[(start + p + j) % len(active)] for j in range(rf)) for p in range(current, count)}


def create_partitions(image: MetadataImage, args: dict[str, Any], ctx: OpContext) -> ControllerResult:
    """Grow topics to ``count`` partitions (Kafka's CreatePartitions), topic by topic: a topic
    that cannot grow gets its error and the others proceed. ``assignments`` (optional) lists the
    replicas of each new partition, in order."""
    items = [as_mapping(i, "topics[]") for i in req_list(args, "topics")]
    validate_only = opt_bool(args, "validate_only")
    names = [i.get("name") for i in items]
    builder = RecordBuilder(image)
    placement = Placement(image)
    replies: list[GrownTopic] = []
    for item in items:
        name = item.get("name")
        try:
            if names.count(name) > 1:
                raise FerryError(ErrorCode.INVALID_REQUEST, "Duplicate topic name.")
            topic = image.topics.get(name) if isinstance(name, str) else None
            if topic is None:
                raise FerryError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Unable to find a topic named {name}.")
            count = as_int(item.get("count"), "count")
            assignment = _new_assignment(builder, topic, count, item.get("assignments"))
        except FerryError as e:
            replies.append({"name": name, "error": e.error.name, "code": e.error.code, "message": e.message})
            continue
        replies.append({"name": name, "topic_id": topic.topic_id, "num_partitions": count})
        if not validate_only:
            _add_partitions(builder, placement, topic.topic_id, topic.storage, assignment)
    reply: CreatePartitionsReply = {"topics": replies}
    return ControllerResult(tuple(builder.records), reply)


def partition_streams(image: MetadataImage, topic_id: str, partition: int) -> dict[str, int]:
    """The stream ids of an s3 partition: {"data": id, "meta": id} (empty for local partitions)."""
    out = {}
    for kind in ("data", "meta"):
        value = image.kv.get(partition_stream_key(topic_id, partition, kind))
        if value is not None:
            out[kind] = int(value)
    return out


def delete_topics(image: MetadataImage, args: dict[str, Any], ctx: OpContext) -> ControllerResult:
    """Remove topics, their partitions' streams and stream keys. The reply lists the objects no
    stream references any more, which the brokers delete from object storage."""
    if "names" not in args and "topic_ids" not in args:
        raise invalid("delete_topics needs names or topic_ids")
    names = str_list(opt_list(args, "names") or [], "names")
    topic_ids = str_list(opt_list(args, "topic_ids") or [], "topic_ids")
    records: list[Record] = []
    replies: list[DeletedTopic] = []
    removed_streams: set[int] = set()
    seen: set[str] = set()
    wanted: list[tuple[Any, TopicImage | None, DeletedTopic]] = []
    for name in names:
        topic = image.topics.get(name) if isinstance(name, str) else None
        wanted.append((name, topic, {"name": name, "error": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION.name, "code": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION.code, "message": f"topic {name!r} does not exist"}))
    for topic_id in topic_ids:
        topic = image.topics.by_id.get(topic_id) if isinstance(topic_id, str) else None
        wanted.append((None if topic is None else topic.name, topic,
                       {"name": None, "topic_id": topic_id,
                        **item_error(ErrorCode.UNKNOWN_TOPIC_ID, f"topic id {topic_id!r} does not exist")}))
    for name, topic, missing in wanted:
        if topic is None or name in seen:
            replies.append({**missing, "name": name})
            continue
        seen.add(name)
        records.append(RemoveTopicRecord(topic_id=topic.topic_id))
        for partition in sorted(topic.partitions):
            for kind, stream_id in sorted(partition_streams(image, topic.topic_id, partition).items()):
                records.append(RemoveStreamRecord(stream_id=stream_id))
                records.append(KVRecord(key=partition_stream_key(topic.topic_id, partition, kind), value=None))
                removed_streams.add(stream_id)
            if assigned_replicas_key(topic.topic_id, partition) in image.kv:
                records.append(KVRecord(key=assigned_replicas_key(topic.topic_id, partition), value=None))
        for key in sorted(image.configs.get("topic", name)):
            records.append(ConfigRecord(resource_type="topic", resource_name=name, key=key, value=None))
        replies.append({"name": name, "topic_id": topic.topic_id})
    refs = image.streams.object_refs
    keys = {o.object_key for s in removed_streams for o in image.streams.streams[s].objects}
    orphaned = sorted(k for k in keys if set(refs.get(k, ())) <= removed_streams)
    reply: DeleteTopicsReply = {"topics": replies, "removed_objects": orphaned}
    return ControllerResult(tuple(records), reply)


MAX_DESCRIBE_PARTITION_LIMIT = 1_000_000


def describe_topic(image: MetadataImage, topic: TopicImage, first: int = 0,
                   limit: int | None = None) -> TopicDescription:
    """A topic and its partitions numbered ``first`` and up, at most ``limit`` of them."""
    numbers = sorted(topic.partitions)
    start = bisect.bisect_left(numbers, first)
    numbers = numbers[start:] if limit is None else numbers[start:start + limit]
    parts: list[PartitionDescription] = []
    for p in numbers:
        reg = topic.partitions[p]
        reported = reported_replicas(image.kv, reg)
        parts.append({
            "partition": p, "leader": reg.leader, "leader_epoch": reg.leader_epoch,
            "partition_epoch": reg.partition_epoch, "replicas": list(reg.replicas), "isr": list(reg.isr),
            "adding_replicas": list(reg.adding_replicas), "removing_replicas": list(reg.removing_replicas),
            "directories": list(reg.directories), "reelection_deadline_ms": reg.reelection_deadline_ms,
            "change_started_ms": reg.change_started_ms, "streams": partition_streams(image, topic.topic_id, p),
            # what Kafka clients are told (s3_replicas.py): an s3 partition's assigned brokers
            "reported_replicas": list(reported),
            "reported_isr": list(reported_isr(image.kv, reg, image.cluster.is_active, reported)),
        })
    return {"name": topic.name, "topic_id": topic.topic_id, "storage": topic.storage, "partitions": parts,
            "configs": dict(sorted(image.configs.get("topic", topic.name).items()))}


def describe_topics(image: MetadataImage, args: dict[str, Any]) -> DescribeTopicsReply:
    """Topics and their partitions; with ``partition_limit``, one page of them.

    A description of 100,000 partitions is tens of MB, built and sent in one piece; paged
    (Kafka's DescribeTopicPartitions, KIP-966), each reply holds at most ``partition_limit``
    partitions and a ``next_cursor`` to ask for the rest. A topic cut between two pages appears
    in both, each with its share of the partitions.
    """
    names = opt_list(args, "names")
    if names is None:
        names = sorted(image.topics.by_name)
    limit = None if args.get("partition_limit") is None else \
        opt_int(args, "partition_limit", 0, minimum=1, maximum=MAX_DESCRIBE_PARTITION_LIMIT)
    first_topic, first_partition = 0, 0
    if args.get("cursor") is not None:
        cursor = as_mapping(args["cursor"], "cursor")
        unknown = sorted(set(cursor) - {"name", "partition"})
        if unknown:
            raise invalid(f"cursor has unknown fields {unknown}")
        name = cursor.get("name")
        if not isinstance(name, str) or name not in names:
            raise invalid(f"cursor.name must be one of the topics asked for, got {name!r}")
        first_topic = names.index(name)
        first_partition = as_int(cursor.get("partition"), "cursor.partition", minimum=0)
    out: list[TopicDescription] = []
    reply: DescribeTopicsReply = {"topics": out}
    budget = limit
    for i, name in enumerate(names[first_topic:], start=first_topic):
        start = first_partition if i == first_topic else 0
        topic = image.topics.get(name) if isinstance(name, str) else None
        if topic is None:  # costs no partitions: told on this page
            out.append({"name": name, "error": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION.name, "code": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION.code, "message": f"topic {name!r} does not exist"})
            continue
        if budget == 0:
            reply["next_cursor"] = {"name": name, "partition": start}
            break
        described = describe_topic(image, topic, start, budget)
        out.append(described)
        if budget is not None:
            shown = described.get("partitions", [])
            budget -= len(shown)
            if budget == 0 and shown and shown[-1]["partition"] != max(topic.partitions):
                reply["next_cursor"] = {"name": name, "partition": shown[-1]["partition"] + 1}
                break
    return reply
