"""Where partitions go and who leads them: the placement and election rules shared by the operations.

``RecordBuilder`` lets an operation emit records while reading its own effects (it replays each
record into a scratch delta), so a multi-step operation such as ``tick`` decides each step on the
state the previous steps produced. ``Placement`` counts partitions per broker and per log dir so
new replicas go to the least-loaded active broker and, on it, to the log dir with the fewest
partitions (DESIGN.md §4).
"""
from __future__ import annotations

from typing import Iterable

from metadata_quorum.controller_result import OpContext
from metadata_quorum.delta import MetadataDelta
from metadata_quorum.image import MetadataImage, PartitionRegistration
from metadata_quorum.records import (NO_LEADER, STORAGE_S3, KVRecord, NoOpRecord, PartitionChangeRecord,
                                     PartitionRecord, Record, RemoveStreamObjectRecord, RemoveStreamRecord,
                                     RemoveTopicRecord, StreamObjectRecord, StreamRecord, TopicRecord)

# Records that cannot change which brokers may take partitions (broker, dir and config records can).
_BROKER_NEUTRAL = (TopicRecord, RemoveTopicRecord, PartitionRecord, PartitionChangeRecord, StreamRecord,
                   RemoveStreamRecord, StreamObjectRecord, RemoveStreamObjectRecord, KVRecord, NoOpRecord)


class RecordBuilder:
    """Records of one operation plus the view they produce (the base image is never touched)."""

    def __init__(self, image: MetadataImage) -> None:
        self.image = image
        self.view = MetadataDelta(image)
        self.records: list[Record] = []
        self._placeable: list[int] | None = None

    def add(self, record: Record) -> None:
        self.records.append(record)
        self.view.replay(record)
        if self._placeable is not None and not isinstance(record, _BROKER_NEUTRAL):
            self._placeable = None

    def is_active(self, broker_id: int) -> bool:
        reg = self.view.broker(broker_id)
        return reg is not None and reg.is_active

    def active_broker_ids(self) -> list[int]:
        return sorted(b for b in self.view.broker_ids() if self.is_active(b))

    def placeable_broker_ids(self) -> list[int]:
        """Active brokers with an online log dir: the ones new partitions may go to (KIP-928:
        a broker whose dirs are all saturated or offline gets none)."""
        if self._placeable is None:  # asked once per partition placed: cached until a broker changes
            self._placeable = sorted(b for b in self.view.broker_ids()
                                     if (reg := self.view.broker(b)) is not None and reg.can_take_new_partitions())
        return list(self._placeable)

    def result_image(self) -> MetadataImage:
        return self.view.apply()


class Placement:
    """Per-broker and per-log-dir partition counts, updated as an operation places replicas."""

    def __init__(self, image: MetadataImage) -> None:
        self.broker_load: dict[int, int] = dict(image.topics.replica_counts)
        self.dir_load: dict[str, int] = dict(image.topics.dir_counts)

    def least_loaded(self, candidates: Iterable[int]) -> int | None:
        ordered = sorted(candidates, key=lambda b: (self.broker_load.get(b, 0), b))
        return ordered[0] if ordered else None

    def pick_dir(self, builder: RecordBuilder, broker_id: int) -> str:
        """The online log dir of ``broker_id`` holding the fewest partitions; for a broker named
        explicitly whose dirs are all unusable, its least-loaded saturated dir (the broker refuses
        writes there until space is freed), never an offline one; "" when there is none."""
        reg = builder.view.broker(broker_id)
        if reg is None:
            return ""
        dirs = reg.usable_log_dirs() or tuple(d for d in reg.log_dirs if d.dir_id not in reg.offline_log_dirs)
        if not dirs:
            return ""
        best = min(dirs, key=lambda d: (self.dir_load.get(d.dir_id, 0), d.path))
        return best.dir_id

    def assign(self, broker_id: int, dir_id: str) -> None:
        self.broker_load[broker_id] = self.broker_load.get(broker_id, 0) + 1
        if dir_id:
            self.dir_load[dir_id] = self.dir_load.get(dir_id, 0) + 1


def election_candidate(builder: RecordBuilder, part: PartitionRegistration, unclean: bool = False) -> int:
    """The replica that should lead: for s3 the first active replica; for local the first active
    replica in the ISR (or, unclean, any active replica). NO_LEADER when there is none."""
    if part.storage == STORAGE_S3:  # the rule brokers name the owner-to-be by (image.named_leader)
        return part.first_active_replica(builder.is_active)
    for replica in part.replicas:
        if builder.is_active(replica) and replica in part.isr:
            return replica
    if unclean and part.storage != STORAGE_S3:
        for replica in part.replicas:
            if builder.is_active(replica):
                return replica
    return NO_LEADER


def elect(builder: RecordBuilder, part: PartitionRegistration, leader: int) -> None:
    """Record ``leader`` as the partition's leader, finishing any s3 reassignment in progress."""
    change = PartitionChangeRecord(topic_id=part.topic_id, partition=part.partition, leader=leader,
                                   reelection_deadline_ms=0)
    if part.storage == STORAGE_S3:
        change = PartitionChangeRecord(
            topic_id=part.topic_id, partition=part.partition, leader=leader, reelection_deadline_ms=0,
            adding_replicas=(), removing_replicas=(),
        )
    elif leader not in part.isr:  # unclean: the new leader's log is the truth now
        change = PartitionChangeRecord(
            topic_id=part.topic_id, partition=part.partition, leader=leader, isr=(leader,),
            reelection_deadline_ms=0,
        )
    builder.add(change)


def move_s3_partition(builder: RecordBuilder, placement: Placement, part: PartitionRegistration,
                      exclude: set[int], now_ms: int, elect_now: bool, ctx: OpContext) -> int:
    """Give an s3 partition to the least-loaded active broker outside ``exclude``.

    ``elect_now``: the old owner is gone, so the new one leads at once (it opens with a higher
    epoch and recovers). Otherwise the old owner must close first: no leader and a re-election
    deadline. Returns the new owner, or NO_LEADER when no broker can take it (the partition is
    then left leaderless with a deadline so ``tick`` retries).
    """
    target = placement.least_loaded(b for b in builder.placeable_broker_ids() if b not in exclude)
    if target is None:
        if part.leader != NO_LEADER or part.reelection_deadline_ms == 0:
            builder.add(PartitionChangeRecord(
                topic_id=part.topic_id, partition=part.partition, leader=NO_LEADER,
                reelection_deadline_ms=max(1, now_ms + (0 if elect_now else ctx.reelection_timeout_ms)),
                change_started_ms=now_ms,
            ))
        return NO_LEADER
    dir_id = placement.pick_dir(builder, target)
    placement.assign(target, dir_id)
    original = part.original_replicas
    builder.add(PartitionChangeRecord(
        topic_id=part.topic_id,
        partition=part.partition,
        replicas=(target,),
        isr=(target,),
        adding_replicas=() if elect_now else tuple(r for r in (target,) if r not in original),
        removing_replicas=() if elect_now else tuple(r for r in original if r != target),
        leader=target if elect_now else NO_LEADER,
        directories=(dir_id,),
        reelection_deadline_ms=0 if elect_now else now_ms + ctx.reelection_timeout_ms,
        change_started_ms=now_ms,
    ))
    return target


def remove_from_isr(builder: RecordBuilder, part: PartitionRegistration, gone: set[int]) -> None:
    """A local partition loses replicas ``gone`` from its ISR; a lost leader is replaced by the
    first active ISR member, or none (the last ISR member is kept so a clean election stays possible)."""
    new_isr = tuple(r for r in part.isr if r not in gone)
    leader = part.leader
    if leader in gone or (leader != NO_LEADER and not builder.is_active(leader)):
        leader = next((r for r in part.replicas if r in new_isr and builder.is_active(r)), NO_LEADER)
    if not new_isr:
        new_isr = part.isr
    if new_isr == part.isr and leader == part.leader:
        return
    builder.add(PartitionChangeRecord(topic_id=part.topic_id, partition=part.partition,
                                      isr=new_isr if new_isr != part.isr else None,
                                      leader=leader if leader != part.leader else None))


def evacuate(builder: RecordBuilder, placement: Placement, broker_id: int, mode: str, ctx: OpContext) -> None:
    """Take leadership away from ``broker_id``.

    ``mode`` "dead": it stopped heartbeating — its s3 partitions go to live brokers and are led
    there at once. "shutdown": controlled shutdown — its s3 partitions are reassigned with no
    leader and a re-election deadline, so it closes them first. "restart": a new incarnation
    replaced it — its s3 partitions wait leaderless until the deadline (it may re-take them once
    unfenced). In every mode it leaves the ISR of its storage=local partitions.
    """
    topics = builder.image.topics
    if topics.leader_counts.get(broker_id, 0) == 0 and topics.replica_counts.get(broker_id, 0) == 0:
        return  # nothing to take away (the common case for heartbeats during a controlled shutdown)
    for _topic, part in topics.all_partitions():
        current = builder.view.partition(part.topic_id, part.partition)
        if current is None or broker_id not in current.replicas and current.leader != broker_id:
            continue
        if current.storage == STORAGE_S3:
            if current.leader != broker_id:
                continue
            if mode == "dead":
                move_s3_partition(builder, placement, current, {broker_id}, ctx.wall_now_ms, True, ctx)
            elif mode == "shutdown":
                move_s3_partition(builder, placement, current, {broker_id}, ctx.wall_now_ms, False, ctx)
            else:
                builder.add(PartitionChangeRecord(
                    topic_id=current.topic_id, partition=current.partition, leader=NO_LEADER,
                    reelection_deadline_ms=ctx.wall_now_ms + ctx.reelection_timeout_ms,
                    change_started_ms=ctx.wall_now_ms,
                ))
        else:  # local: it leaves every ISR (KRaft does so for controlled shutdown too)
            remove_from_isr(builder, current, {broker_id})
