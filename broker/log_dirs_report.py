"""DescribeLogDirs and AlterReplicaLogDirs of one broker, shared by its HTTP and Kafka front ends.

Both front ends answer from the same report and run moves through the same path, so
``ferry log-dirs --describe`` and a Kafka admin client's ``describe_log_dirs`` agree.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterable, Protocol

from metadata_quorum.kernel.errors import ErrorCode, FerryError

if TYPE_CHECKING:
    from broker.log_dirs_manager import LogDirsManager
    from broker.partition_manager import PartitionManager, Slot


@dataclass(frozen=True)
class ReplicaInDir:
    topic: str
    partition: int
    size_bytes: int
    offset_lag: int
    is_future: bool


@dataclass(frozen=True)
class LogDirReport:
    path: str
    state: str  # ONLINE, SATURATED or OFFLINE
    error: ErrorCode | None  # KAFKA_STORAGE_ERROR for an offline dir, as Kafka reports it
    total_bytes: int
    usable_bytes: int
    replicas: tuple[ReplicaInDir, ...]


TopicFilter = Callable[[str, int], bool]


class LocalLogDirMoves(Protocol):
    """The storage=local replicas' side (local_partitions.py): their moves run in the background."""

    def is_local(self, topic: str) -> bool: ...

    async def alter_log_dir(self, topic: str, partition: int, path: str) -> None: ...

    def future_replicas(self) -> list[tuple[str, int, str, int, int]]: ...


def log_dirs_report(log_dirs: "LogDirsManager", slots: Iterable["Slot"], wanted: TopicFilter,
                    local: LocalLogDirMoves | None = None) -> list[LogDirReport]:
    """Each log dir with its space and the replicas in it (a replica being moved appears twice:
    in its current dir, and as the future replica in its target dir). Replicas of s3 partitions
    hold no records locally and lag nothing: their size is the data they own."""
    per_dir: dict[str, list[ReplicaInDir]] = {d.path: [] for d in log_dirs.dirs}
    for slot in slots:
        if slot.log_dir is None or slot.replica is None or not wanted(slot.topic, slot.tp.partition):
            continue
        per_dir.setdefault(slot.log_dir, []).append(
            ReplicaInDir(slot.topic, slot.tp.partition, slot.replica.size_bytes, 0, False))
    for (topic, partition), path in log_dirs.future_moves().items():
        if wanted(topic, partition):
            per_dir.setdefault(path, []).append(ReplicaInDir(topic, partition, 0, 0, True))
    for topic, partition, path, size, lag in (local.future_replicas() if local is not None else ()):
        if wanted(topic, partition):  # a local replica's future log: its size and how far behind it is
            per_dir.setdefault(path, []).append(ReplicaInDir(topic, partition, size, lag, True))
    out = []
    for d in log_dirs.dirs:
        info = log_dirs.info(d.path)
        state = info.state.value
        out.append(LogDirReport(
            d.path, state, ErrorCode.KAFKA_STORAGE_ERROR if state == "OFFLINE" else None, info.total_bytes,
            info.usable_bytes, tuple(sorted(per_dir.get(d.path, []), key=lambda r: (r.topic, r.partition)))))
    return out


async def alter_replica_log_dirs(log_dirs: "LogDirsManager", manager: "PartitionManager",
                                 moves: list[tuple[str, int, str]],
                                 local: LocalLogDirMoves | None = None) -> list[FerryError | None]:
    """Move replicas (topic, partition, target path) one at a time in topic-partition order
    (KIP-113); the outcomes come back in request order (None = moved, or already there; for a
    storage=local replica: its copy started)."""
    outcome: dict[int, FerryError | None] = {}
    for i, (topic, partition, path) in sorted(enumerate(moves), key=lambda item: (item[1][0], item[1][1])):
        try:
            if local is not None and local.is_local(topic):
                await local.alter_log_dir(topic, partition, path)
            else:
                await alter_s3_replica_dir(log_dirs, manager, topic, partition, path)
            outcome[i] = None
        except FerryError as exc:
            outcome[i] = exc
    return [outcome[i] for i in range(len(moves))]


async def alter_s3_replica_dir(log_dirs: "LogDirsManager", manager: "PartitionManager", topic: str, partition: int,
                               path: str) -> None:
    """Move one storage=s3 replica's dir to ``path`` (validated first; nothing changes on bad input).
    A replica assigned here but not open yet is placed there when it opens."""
    target = log_dirs.validate_target(path)
    topic_id = manager.image.topics.by_name.get(topic)
    if topic_id is None or manager.image.topics.partition(topic_id, partition) is None:
        raise FerryError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown partition {topic}-{partition}")
    slot = manager.slot_by_name(topic, partition)
    if slot is None or slot.log_dir is None:
        reg = manager.image.topics.partition(topic_id, partition)
        if reg is None or manager.broker_id not in reg.replicas:
            raise FerryError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                             f"broker {manager.broker_id} hosts no replica of {topic}-{partition}")
        if slot is not None:
            slot.requested_dir = target  # placed there when it opens
        return
    if os.path.normpath(slot.log_dir) == target:  # noqa: ASYNC240 - normpath is string work, no I/O
        return
    async with log_dirs.future_move(topic, partition, target) as move_dir:
        await manager.move_replica(slot, target, move_dir)
