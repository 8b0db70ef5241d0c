"""Reassignments, leader elections and ISR changes (Kafka's AlterPartitionReassignments,
ListPartitionReassignments, ElectLeaders and AlterPartition), with KRaft's epoch rules.

storage=s3 partitions have one owner and their data in object storage, so a reassignment is a
hand-over, not a copy (a target of several brokers names the partition's assigned replicas, of
which one owns it: s3_replicas.py): the target is written at once with no leader and a re-election deadline;
the old owner sees it lose the partition, closes its streams and asks for the election, or
``tick`` elects when the deadline passes. storage=local partitions keep Kafka's semantics:
replicas = target + removing while the adding replicas catch up, then completion once they are
all in the ISR.
"""
from __future__ import annotations

import os
from typing import Any, Mapping

from metadata_quorum.controller_result import ControllerResult, OpContext
from metadata_quorum.kernel.errors import ErrorCode, FerryError
from metadata_quorum.kernel.messages.replication import (AlterPartitionReassignmentsReply, AlterPartitionReply,
                                                         ElectionResult, ElectLeadersReply,
                                                         ListPartitionReassignmentsReply, OngoingReassignment,
                                                         ReassignmentResult)
from metadata_quorum.image import MetadataImage, PartitionRegistration, TopicImage
from metadata_quorum.ops.cluster import check_broker_epoch
from metadata_quorum.ops.placement import Placement, RecordBuilder, elect, election_candidate
from metadata_quorum.kernel.validation import (INT32_MAX, as_int, as_mapping, invalid, item_error, opt_bool, opt_list,
                                            req_int, req_list, req_str)
from metadata_quorum.records import (NO_LEADER, STORAGE_S3, STREAM_OPENED, KVRecord, PartitionChangeRecord,
                                     partition_stream_key)
from metadata_quorum.s3_replicas import assigned_replicas_key, encode_replicas

ANY_LOG_DIR = "any"


def _find(image: MetadataImage, topic_name: Any, partition: Any,
          for_election: bool = False) -> tuple[TopicImage, PartitionRegistration]:
    """The partition, or UNKNOWN_TOPIC_OR_PARTITION worded as KRaft's ReplicationControlManager
    words it for reassignments and, ``for_election``, for leader elections."""
    index = as_int(partition, "partition", 0, INT32_MAX)
    topic = image.topics.get(topic_name) if isinstance(topic_name, str) else None
    if topic is None:
        raise FerryError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"No such topic as {topic_name}" if for_election
                         else f"Unable to find a topic named {topic_name}.")
    part = topic.partitions.get(index)
    if part is None:
        raise FerryError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"No such partition as {topic_name}-{partition}"
                         if for_election else f"Unable to find partition {topic_name}:{partition}.")
    return topic, part


def _target(builder: RecordBuilder, raw: Any) -> tuple[int, ...]:
    if not isinstance(raw, (list, tuple)) or not raw:
        raise FerryError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                         "The manual partition assignment includes an empty replica list.")
    try:
        target = tuple(as_int(r, "replica", 0) for r in raw)
    except FerryError:
        raise FerryError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                         f"The manual partition assignment includes an invalid broker id: {raw}") from None
    # KRaft checks in broker id order: the lowest unknown or repeated id is the one named.
    seen: set[int] = set()
    for b in sorted(target):
        if builder.view.broker(b) is None:
            raise FerryError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                             f"The manual partition assignment includes broker {b}, but no such broker is registered.")
        if b in seen:
            raise FerryError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                             f"The manual partition assignment includes the broker {b} more than once.")
        seen.add(b)
    return target


def _directories(builder: RecordBuilder, placement: Placement, target: tuple[int, ...], raw: Any,
                 current: PartitionRegistration) -> tuple[str, ...]:
    """Each replica's log dir id: the one named (absolute path it registered), else its current
    dir if it already hosts the partition, else its least-loaded usable dir."""
    if raw is not None and (not isinstance(raw, (list, tuple)) or len(raw) != len(target)):
        raise invalid(f"log_dirs must list one dir per replica ({len(target)}), got {raw!r}")
    dirs: list[str] = []
    for i, broker_id in enumerate(target):
        wanted = ANY_LOG_DIR if raw is None else raw[i]
        reg = builder.view.broker(broker_id)
        if reg is None:  # an unregistered broker restored by a cancel: no dir to name
            dirs.append("")
            continue
        if wanted != ANY_LOG_DIR:
            spec = reg.log_dir_by_path(wanted) if isinstance(wanted, str) and os.path.isabs(wanted) else None
            if spec is None:
                raise FerryError(ErrorCode.LOG_DIR_NOT_FOUND,
                                 f"broker {broker_id} has no log dir {wanted!r}; expected \"any\" or one of "
                                 f"{[d.path for d in reg.log_dirs]}")
            if spec.dir_id in reg.offline_log_dirs:
                raise FerryError(ErrorCode.KAFKA_STORAGE_ERROR,
                                 f"log dir {spec.path} of broker {broker_id} is offline; name an online one or \"any\"")
            dirs.append(spec.dir_id)
            continue
        if broker_id in current.replicas and current.replicas.index(broker_id) < len(current.directories):
            existing = current.directories[current.replicas.index(broker_id)]
            if existing:
                dirs.append(existing)
                continue
        dir_id = placement.pick_dir(builder, broker_id)
        placement.assign(broker_id, dir_id)
        dirs.append(dir_id)
    return tuple(dirs)


def complete_local_reassignment(builder: RecordBuilder, part: PartitionRegistration) -> None:
    """Finish a local reassignment once every adding replica is in the ISR (Kafka's rule)."""
    if not (part.adding_replicas or part.removing_replicas):
        return
    target = tuple(r for r in part.replicas if r not in part.removing_replicas)
    if any(r not in part.isr for r in target):
        return
    isr = tuple(r for r in part.isr if r in target)
    leader = part.leader
    if leader not in target:
        leader = next((r for r in target if r in isr and builder.is_active(r)), NO_LEADER)
    dirs = tuple(d for r, d in zip(part.replicas, part.directories, strict=True) if r in target) \
        if len(part.directories) == len(part.replicas) else None
    builder.add(PartitionChangeRecord(
        topic_id=part.topic_id, partition=part.partition, replicas=target, isr=isr, adding_replicas=(),
        removing_replicas=(), leader=leader if leader != part.leader else None, directories=dirs,
        change_started_ms=0,
    ))


def _cancel(builder: RecordBuilder, placement: Placement, part: PartitionRegistration, ctx: OpContext) -> None:
    if not part.is_reassigning:
        raise FerryError(ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, "No partition reassignment is in progress.")
    original = part.original_replicas
    if part.storage == STORAGE_S3:
        dirs = _directories(builder, placement, original, None, part)
        builder.add(PartitionChangeRecord(
            topic_id=part.topic_id, partition=part.partition, replicas=original, isr=original,
            adding_replicas=(), removing_replicas=(), directories=dirs, leader=NO_LEADER,
            reelection_deadline_ms=ctx.wall_now_ms + ctx.reelection_timeout_ms, change_started_ms=ctx.wall_now_ms,
        ))
        return
    # If no original replica is in sync, the first one is put back in the ISR (an unclean revert).
    isr = tuple(r for r in part.isr if r in original) or original[:1]
    leader = part.leader if part.leader in isr else next(
        (r for r in original if r in isr and builder.is_active(r)), NO_LEADER)
    kept_dirs: tuple[str, ...] | None = tuple(d for r, d in zip(part.replicas, part.directories, strict=True)
                                              if r in original) \
        if len(part.directories) == len(part.replicas) else None
    builder.add(PartitionChangeRecord(
        topic_id=part.topic_id, partition=part.partition, replicas=original, isr=isr, adding_replicas=(),
        removing_replicas=(), leader=leader if leader != part.leader else None, directories=kept_dirs,
        change_started_ms=0,
    ))


def _s3_owner_target(builder: RecordBuilder, part: PartitionRegistration, target: tuple[int, ...],
                     log_dirs: Any, replica_set: bool) -> tuple[tuple[int, ...], Any, KVRecord | None]:
    """An s3 reassignment to N > 1 brokers: they become the partition's assigned replicas (what
    clients are told, s3_replicas.py) and one of them its owner, the only one that moves: the
    current owner stays when it is among them, else the first of them takes the partition. One
    broker is a move of the owner alone, the assignment kept (Ferry's moves, the rebalancer),
    unless ``replica_set`` (Kafka's AlterPartitionReassignments: the list is the replica set, so
    one broker is replication factor 1). Returns the owner as the one-broker target of the
    hand-over, with its log dir if named, and the change of the assigned brokers (recorded once
    the rest of the item is known to be valid)."""
    key = assigned_replicas_key(part.topic_id, part.partition)
    stored = builder.view.kv(key)
    wanted = encode_replicas(target) if len(target) > 1 else None if replica_set else stored
    change = KVRecord(key=key, value=wanted) if stored != wanted else None
    owner = part.original_replicas[0] if part.original_replicas else NO_LEADER
    chosen = owner if owner in target and not part.is_reassigning else target[0]
    if part.is_reassigning and part.replicas and part.replicas[0] in target:
        chosen = part.replicas[0]  # a hand-over under way to one of them goes on
    if log_dirs is not None and isinstance(log_dirs, (list, tuple)) and len(log_dirs) == len(target):
        log_dirs = [log_dirs[target.index(chosen)]]
    return (chosen,), log_dirs, change


def _reassign(builder: RecordBuilder, placement: Placement, part: PartitionRegistration, item: Mapping[str, Any],
              ctx: OpContext) -> None:
    target = _target(builder, item.get("replicas"))
    log_dirs = item.get("log_dirs")
    assigned: KVRecord | None = None
    if part.storage == STORAGE_S3:
        target, log_dirs, assigned = _s3_owner_target(builder, part, target, log_dirs, opt_bool(item, "replica_set"))
    dirs = _directories(builder, placement, target, log_dirs, part)
    if assigned is not None:
        builder.add(assigned)
    if target == part.replicas and not part.is_reassigning:
        current_dirs = part.directories if len(part.directories) == len(target) else ()
        if log_dirs is not None and tuple(dirs) != tuple(current_dirs):
            builder.add(PartitionChangeRecord(topic_id=part.topic_id, partition=part.partition, directories=dirs))
        return
    original = part.original_replicas
    if part.storage == STORAGE_S3:
        adding = tuple(r for r in target if r not in original)
        removing = tuple(r for r in original if r not in target)
        builder.add(PartitionChangeRecord(
            topic_id=part.topic_id, partition=part.partition, replicas=target, isr=target,
            adding_replicas=adding, removing_replicas=removing, leader=NO_LEADER, directories=dirs,
            reelection_deadline_ms=ctx.wall_now_ms + ctx.reelection_timeout_ms, change_started_ms=ctx.wall_now_ms,
        ))
        return
    # Kafka's rule: every replica hosting the partition now and not in the target is removing
    # (this also replaces a reassignment in progress); the targets not hosting it are adding.
    adding = tuple(r for r in target if r not in part.replicas)
    removing = tuple(r for r in part.replicas if r not in target)
    old_dirs = dict(zip(part.replicas, part.directories, strict=True)) \
        if len(part.directories) == len(part.replicas) else {}
    replicas = target + removing
    all_dirs = dirs + tuple(old_dirs.get(r, "") for r in removing)
    isr = tuple(r for r in part.isr if r in replicas) or part.isr
    builder.add(PartitionChangeRecord(
        topic_id=part.topic_id, partition=part.partition, replicas=replicas, isr=isr,
        adding_replicas=adding, removing_replicas=removing, directories=all_dirs, change_started_ms=ctx.wall_now_ms,
    ))
    updated = builder.view.partition(part.topic_id, part.partition)
    assert updated is not None
    complete_local_reassignment(builder, updated)


def alter_partition_reassignments(image: MetadataImage, args: dict[str, Any], ctx: OpContext) -> ControllerResult:
    builder = RecordBuilder(image)
    placement = Placement(image)
    responses: list[ReassignmentResult] = []
    for raw in req_list(args, "reassignments"):
        item = as_mapping(raw, "reassignments[]")
        # echoed as sent (a malformed item gets its error under the names it gave)
        topic_name: Any = item.get("topic")
        partition: Any = item.get("partition")
        reply: ReassignmentResult = {"topic": topic_name, "partition": partition}
        try:
            _topic, part = _find(image, topic_name, partition)
            current = builder.view.partition(part.topic_id, part.partition)
            assert current is not None
            if item.get("replicas") is None:
                _cancel(builder, placement, current, ctx)
            else:
                _reassign(builder, placement, current, item, ctx)
        except FerryError as e:
            reply = {**reply, **item_error(e.error, e.message)}
        responses.append(reply)
    answer: AlterPartitionReassignmentsReply = {"responses": responses}
    return ControllerResult(tuple(builder.records), answer)


def list_partition_reassignments(image: MetadataImage, args: dict[str, Any]) -> ListPartitionReassignmentsReply:
    wanted = opt_list(args, "partitions")
    if wanted is None:
        pairs = image.topics.all_partitions()
    else:
        pairs = []
        for raw in wanted:
            item = as_mapping(raw, "partitions[]")
            try:
                pairs.append(_find(image, item.get("topic"), item.get("partition")))
            except FerryError:
                continue
    out: list[OngoingReassignment] = []
    for topic, part in pairs:
        if not part.is_reassigning:
            continue
        out.append({
            "topic": topic.name, "partition": part.partition, "replicas": list(part.replicas),
            "adding_replicas": list(part.adding_replicas), "removing_replicas": list(part.removing_replicas),
            "leader": part.leader, "reelection_deadline_ms": part.reelection_deadline_ms,
            "change_started_ms": part.change_started_ms,
        })
    return {"reassignments": out}


def elect_leaders(image: MetadataImage, args: dict[str, Any], ctx: OpContext) -> ControllerResult:
    election_type = args.get("election_type", "preferred")
    if election_type not in ("preferred", "unclean"):
        raise invalid(f"election_type must be \"preferred\" or \"unclean\", got {election_type!r}")
    unclean = election_type == "unclean"
    # an old owner sends its election right behind the commit that closes the partition's streams
    # (one request, run in order): elect only if that commit did close them
    require_closed = opt_bool(args, "require_closed_streams")
    builder = RecordBuilder(image)
    wanted = opt_list(args, "partitions")
    items: list[tuple[Any, Any]]
    if wanted is None:
        items = [(t.name, p.partition) for t, p in image.topics.all_partitions()]
    else:
        items = [(as_mapping(r, "partitions[]").get("topic"), as_mapping(r, "partitions[]").get("partition"))
                 for r in wanted]
    results: list[ElectionResult] = []
    for topic_name, partition in items:
        result: ElectionResult = {"topic": topic_name, "partition": partition}
        try:
            _topic, found = _find(image, topic_name, partition, for_election=True)
            part = builder.view.partition(found.topic_id, found.partition)
            assert part is not None
            if require_closed:
                _check_streams_closed(builder, part)
            leader = _elect_one(builder, part, unclean)
            after = builder.view.partition(found.topic_id, found.partition)
            assert after is not None
            result["leader"] = leader
            result["leader_epoch"] = after.leader_epoch
        except FerryError as e:
            if wanted is None and e.error == ErrorCode.ELECTION_NOT_NEEDED:
                continue
            result = {**result, **item_error(e.error, e.message)}
        results.append(result)
    reply: ElectLeadersReply = {"results": results}
    return ControllerResult(tuple(builder.records), reply)


ELECTION_NOT_NEEDED_MESSAGE = "Leader election not needed for topic partition."


def _check_streams_closed(builder: RecordBuilder, part: PartitionRegistration) -> None:
    """STREAM_NOT_CLOSED while a stream of the partition is still held open by its owner."""
    for kind in ("data", "meta"):
        raw = builder.view.kv(partition_stream_key(part.topic_id, part.partition, kind))
        stream = builder.view.stream(int(raw)) if raw is not None else None
        if stream is not None and stream.state == STREAM_OPENED:
            raise FerryError(ErrorCode.STREAM_NOT_CLOSED,
                             f"the {kind} stream {stream.stream_id} is still opened by broker {stream.owner}; "
                             f"the partition is elected once its owner closed it")
PREFERRED_NOT_AVAILABLE_MESSAGE = "The preferred leader was not available."
ELIGIBLE_NOT_AVAILABLE_MESSAGE = "Eligible topic partition leaders are not available."


def _elect_one(builder: RecordBuilder, part: PartitionRegistration, unclean: bool) -> int:
    """KRaft's electLeader: its error messages, then (for the two "not available" errors) which
    replicas were considered, so a person sees why."""
    if unclean and part.leader != NO_LEADER and builder.is_active(part.leader):
        raise FerryError(ErrorCode.ELECTION_NOT_NEEDED, ELECTION_NOT_NEEDED_MESSAGE)
    if not unclean and part.storage != STORAGE_S3:
        # Kafka's preferred election: the first replica, if it is alive and in the ISR.
        preferred = part.replicas[0] if part.replicas else NO_LEADER
        if preferred == part.leader:
            raise FerryError(ErrorCode.ELECTION_NOT_NEEDED, ELECTION_NOT_NEEDED_MESSAGE)
        if not builder.is_active(preferred) or preferred not in part.isr:
            raise FerryError(ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
                             f"{PREFERRED_NOT_AVAILABLE_MESSAGE} Preferred replica {preferred} is not both active "
                             f"and in the ISR {list(part.isr)}.")
        elect(builder, part, preferred)
        return preferred
    candidate = election_candidate(builder, part, unclean=unclean)
    if candidate == NO_LEADER:
        if unclean:
            raise FerryError(ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE,
                             f"{ELIGIBLE_NOT_AVAILABLE_MESSAGE} No replica of {list(part.replicas)} is active.")
        raise FerryError(ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
                         f"{PREFERRED_NOT_AVAILABLE_MESSAGE} No replica of {list(part.replicas)} is both active "
                         f"and in the ISR {list(part.isr)}.")
    if candidate == part.leader:
        raise FerryError(ErrorCode.ELECTION_NOT_NEEDED, ELECTION_NOT_NEEDED_MESSAGE)
    elect(builder, part, candidate)
    return candidate


def alter_partition(image: MetadataImage, args: dict[str, Any], ctx: OpContext) -> ControllerResult:
    """A storage=local leader reports its new ISR (Kafka's AlterPartition); completes a
    reassignment once every adding replica has joined."""
    broker_id = req_int(args, "broker_id", 0)
    check_broker_epoch(image, broker_id, req_int(args, "broker_epoch"))
    _topic, part = _find(image, req_str(args, "topic"), req_int(args, "partition", 0))
    if part.leader != broker_id:
        raise FerryError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                         f"broker {broker_id} does not lead partition {part.partition} (leader {part.leader})")
    if req_int(args, "leader_epoch") != part.leader_epoch or req_int(args, "partition_epoch") != part.partition_epoch:
        raise FerryError(ErrorCode.FENCED_LEADER_EPOCH,
                         f"stale epochs for partition {part.partition}: current leader epoch {part.leader_epoch}, "
                         f"partition epoch {part.partition_epoch}")
    isr = tuple(as_int(r, "isr[]", 0) for r in req_list(args, "isr"))
    if broker_id not in isr or any(r not in part.replicas for r in isr) or len(set(isr)) != len(isr):
        raise invalid(f"isr {list(isr)} must be distinct replicas of {list(part.replicas)} including the leader")
    builder = RecordBuilder(image)
    if isr != part.isr:
        builder.add(PartitionChangeRecord(topic_id=part.topic_id, partition=part.partition, isr=isr))
    updated = builder.view.partition(part.topic_id, part.partition)
    assert updated is not None
    complete_local_reassignment(builder, updated)
    final = builder.view.partition(part.topic_id, part.partition)
    assert final is not None
    reply: AlterPartitionReply = {
        "leader": final.leader, "leader_epoch": final.leader_epoch, "partition_epoch": final.partition_epoch,
        "isr": list(final.isr), "replicas": list(final.replicas),
    }
    return ControllerResult(tuple(builder.records), reply)
