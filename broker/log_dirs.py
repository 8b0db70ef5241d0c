"""Log-dir policy (pure): placement, validation, KIP-113 dir names, KIP-928 saturation.

Kafka's JBOD rules: a new replica goes to the online, non-saturated dir hosting the fewest
partitions, unless a reassignment names a dir; a named dir must be an absolute path of one of
the broker's online dirs (LOG_DIR_NOT_FOUND otherwise). A replica moved between dirs
(AlterReplicaLogDirs) travels through ``<topic>-<partition>.<uid>-future`` and the old copy is
renamed ``…-delete`` before it is removed. A full dir is saturated (KIP-928), not offline: it
takes no new appends, but reads, retention and deletes go on.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from enum import Enum
from typing import Iterable, Mapping

from metadata_quorum.kernel.errors import ErrorCode, FerryError

MAX_DIR_NAME_CHARS = 255
FUTURE_SUFFIX = "-future"
DELETE_SUFFIX = "-delete"
ANY_LOG_DIR = "any"
_SUFFIXED = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)\.(?P<uid>[0-9a-f]{32})(?P<suffix>-future|-delete)$")
_PLAIN = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)$")


class LogDirState(Enum):
    ONLINE = "ONLINE"
    SATURATED = "SATURATED"
    OFFLINE = "OFFLINE"


@dataclass(frozen=True)
class LogDirInfo:
    """A log dir as the policy sees it: its path, state and free space."""

    path: str
    state: LogDirState = LogDirState.ONLINE
    usable_bytes: int = 0
    total_bytes: int = 0


def validate_log_dir(path: str, dirs: Iterable[LogDirInfo], allow_saturated: bool = False) -> LogDirInfo:
    """The broker's dir named ``path``; raise LOG_DIR_NOT_FOUND (or KAFKA_STORAGE_ERROR) otherwise."""
    if not isinstance(path, str) or not path:
        raise FerryError(ErrorCode.LOG_DIR_NOT_FOUND, "log dir must be a non-empty absolute path")
    if not os.path.isabs(path):
        raise FerryError(ErrorCode.LOG_DIR_NOT_FOUND, f"log dir {path!r} is not an absolute path")
    wanted = os.path.normpath(path)
    for d in dirs:
        if os.path.normpath(d.path) == wanted:
            if d.state is LogDirState.OFFLINE:
                raise FerryError(ErrorCode.LOG_DIR_NOT_FOUND, f"log dir {path} is offline")
            if d.state is LogDirState.SATURATED and not allow_saturated:
                raise FerryError(ErrorCode.KAFKA_STORAGE_ERROR, f"log dir {path} is full (saturated)")
            return d
    raise FerryError(ErrorCode.LOG_DIR_NOT_FOUND, f"log dir {path} is not one of this broker's log dirs",
                     {"log_dirs": [d.path for d in dirs]})


def choose_log_dir(dirs: Iterable[LogDirInfo], partitions_per_dir: Mapping[str, int], requested: str | None = None) -> str:
    """Where a new replica goes: the requested dir, else the usable dir with the fewest partitions.

    Ties go to the dir listed first, as Kafka's ``log.dirs`` order does.
    """
    dir_list = list(dirs)
    if requested and requested != ANY_LOG_DIR:
        return validate_log_dir(requested, dir_list).path
    usable = [d for d in dir_list if d.state is LogDirState.ONLINE]
    if not usable:
        raise FerryError(ErrorCode.KAFKA_STORAGE_ERROR, "no online log dir with free space on this broker")
    return min(usable, key=lambda d: (partitions_per_dir.get(d.path, 0), dir_list.index(d))).path


def partition_dir_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


def _suffixed_name(topic: str, partition: int, uid: str, suffix: str) -> str:
    if not re.fullmatch(r"[0-9a-f]{32}", uid):
        raise ValueError("uid must be 32 lowercase hex digits (a UUID without dashes)")
    tail = f"-{partition}.{uid}{suffix}"
    keep = max(0, min(len(topic), MAX_DIR_NAME_CHARS - len(tail)))
    return topic[:keep] + tail


def future_dir_name(topic: str, partition: int, uid: str) -> str:
    """``topic-partition.uid-future``, the topic cut so that the name fits in 255 characters."""
    return _suffixed_name(topic, partition, uid, FUTURE_SUFFIX)


def delete_dir_name(topic: str, partition: int, uid: str) -> str:
    """``topic-partition.uid-delete``, the topic cut so that the name fits in 255 characters."""
    return _suffixed_name(topic, partition, uid, DELETE_SUFFIX)


@dataclass(frozen=True)
class ParsedDirName:
    topic: str
    partition: int
    kind: str  # "current", "future" or "delete"
    uid: str | None = None


def parse_dir_name(name: str) -> ParsedDirName | None:
    """What a directory found in a log dir is; None for anything that is not a replica dir.

    A ``-future``/``-delete`` name may carry a cut topic; callers resolve the full name from the
    ``partition.metadata`` file inside it.
    """
    m = _SUFFIXED.match(name)
    if m:
        kind = "future" if m["suffix"] == FUTURE_SUFFIX else "delete"
        return ParsedDirName(m["topic"], int(m["partition"]), kind, m["uid"])
    m = _PLAIN.match(name)
    if m:
        return ParsedDirName(m["topic"], int(m["partition"]), "current")
    return None


@dataclass(frozen=True)
class RecoveryStep:
    """What start-up does with a leftover dir (KIP-113)."""

    action: str  # "delete", "promote" (future becomes current), "keep"
    name: str


def recovery_plan(names: Iterable[str]) -> list[RecoveryStep]:
    """KIP-113 start-up recovery of one log dir's entries.

    ``-delete`` dirs are removed. A ``-future`` dir whose current dir is gone finished its swap
    half-way: it is promoted. A ``-future`` dir beside a current dir is an unfinished move: the
    current copy stays authoritative and the future copy is removed (the move can be asked again).
    """
    all_names = list(names)
    current = {(p.topic, p.partition) for n in all_names if (p := parse_dir_name(n)) and p.kind == "current"}
    plan: list[RecoveryStep] = []
    for n in sorted(all_names):
        p = parse_dir_name(n)
        if p is None:
            continue
        if p.kind == "delete":
            plan.append(RecoveryStep("delete", n))
        elif p.kind == "future":
            plan.append(RecoveryStep("delete" if (p.topic, p.partition) in current else "promote", n))
        else:
            plan.append(RecoveryStep("keep", n))
    return plan


def next_dir_state(state: LogDirState, usable_bytes: int, reserved_bytes: int, io_error: bool = False,
                   disk_full: bool = False, min_free_bytes: int = 0) -> LogDirState:
    """KIP-928: a dir is saturated once its free space falls below the reserve or a write failed
    with ENOSPC (``disk_full``), and online again only when twice the reserve and at least
    ``min_free_bytes`` are free (the released reserve alone must not flip it back, nor the few
    bytes a failed write leaves); an I/O error makes it offline for good (until restart)."""
    if state is LogDirState.OFFLINE or io_error:
        return LogDirState.OFFLINE
    if disk_full or usable_bytes < reserved_bytes:
        return LogDirState.SATURATED
    if state is LogDirState.SATURATED and usable_bytes < max(2 * reserved_bytes, min_free_bytes):
        return LogDirState.SATURATED
    return LogDirState.ONLINE
