"""Retention: which log start offset a partition's topic configs ask for (pure), and the loop
that applies it on the partitions this broker leads.

Kafka deletes whole segments; Ferry deletes whole committed objects of the data stream, oldest
first, through the stream's trim: the controller moves the stream's start offset and removes the
object records below it, and the broker deletes from S3 the objects no other stream still names.

* ``retention.bytes`` (per partition, -1 = unlimited): objects go while what remains is still at
  least ``retention.bytes`` (Kafka's rule: the partition never drops below the limit).
* ``retention.ms`` (-1 = unlimited): objects whose records are all older than ``now - retention.ms``
  go. Record time comes from the partition's time index (running maximum of batch timestamps), so
  an object goes only once every batch in it is known to be older.
* ``cleanup.policy`` without ``delete`` (``compact``): neither applies.

Only committed objects are ever trimmed: what is still in the WAL, not yet in S3, stays.
"""
from __future__ import annotations

import asyncio
import bisect
import logging
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Protocol, Sequence

from metadata_quorum.kernel.clock import wall_ms
from metadata_quorum.kernel.errors import ErrorCode, FerryError
from stream_storage.control import ObjectRef

log = logging.getLogger("ferry.broker.retention")

DEFAULT_RETENTION_MS = 604_800_000  # Kafka's log.retention.hours=168
UNLIMITED = -1


@dataclass(frozen=True)
class RetentionConfig:
    retention_ms: int = DEFAULT_RETENTION_MS
    retention_bytes: int = UNLIMITED
    delete_policy: bool = True

    @classmethod
    def from_topic_configs(cls, configs: Mapping[str, str]) -> "RetentionConfig":
        """The topic's settings (Kafka's defaults where unset); INVALID_CONFIG on a bad value."""
        def number(name: str, default: int) -> int:
            raw = configs.get(name)
            if raw is None:
                return default
            try:
                value = int(str(raw))
            except ValueError:
                raise FerryError(ErrorCode.INVALID_CONFIG, f"{name}={raw!r} is not an integer") from None
            if value < -1:
                raise FerryError(ErrorCode.INVALID_CONFIG, f"{name}={value} must be -1 or more")
            return value

        policy = str(configs.get("cleanup.policy", "delete"))
        return cls(number("retention.ms", DEFAULT_RETENTION_MS), number("retention.bytes", UNLIMITED),
                   "delete" in {p.strip() for p in policy.split(",")})


def _object_bytes(obj: ObjectRef) -> int:
    return obj.range_bytes if obj.range_bytes > 0 else obj.size


def expired_below(time_index: Sequence[tuple[int, int]], cutoff_ms: int) -> int | None:
    """An offset below which every record is older than ``cutoff_ms``, from the time index's
    (running max timestamp, batch base offset) entries; None when nothing is known to be older.
    The first entry whose running maximum reaches the cutoff starts the first batch that may hold
    a record at or after it; every batch before it is older."""
    if not time_index:
        return None
    keys = [ts for ts, _ in time_index]
    i = bisect.bisect_left(keys, cutoff_ms)
    if i == 0:
        return None
    if i >= len(time_index):
        return 1 << 62  # every indexed batch is older, and later ones set no new maximum
    return int(time_index[i][1])


def retention_start(objects: Sequence[ObjectRef], start_offset: int, time_index: Sequence[tuple[int, int]],
                    now_ms: int, config: RetentionConfig) -> int:
    """The start offset retention asks for: ``start_offset`` or the end of a committed object."""
    if not config.delete_policy:
        return start_offset
    live = [o for o in objects if o.end_offset > start_offset]
    new_start = start_offset
    if config.retention_bytes >= 0:
        excess = sum(_object_bytes(o) for o in live) - config.retention_bytes
        for obj in live:
            if excess - _object_bytes(obj) < 0:
                break
            excess -= _object_bytes(obj)
            new_start = max(new_start, obj.end_offset)
    if config.retention_ms >= 0:
        bound = expired_below(time_index, now_ms - config.retention_ms)
        if bound is not None:
            for obj in live:
                if obj.end_offset > bound:
                    break
                new_start = max(new_start, obj.end_offset)
    return new_start


class RetainedPartition(Protocol):
    """What the loop needs of a partition this broker leads (a Replica)."""

    topic: str
    log_start_offset: int
    closed: bool
    fenced: bool

    async def committed_objects(self) -> Sequence[ObjectRef]: ...

    def time_index_entries(self) -> Sequence[tuple[int, int]]: ...

    async def delete_records_before(self, offset: int) -> int: ...


async def apply_retention(partitions: Iterable[RetainedPartition], configs_of: Callable[[str], Mapping[str, str]],
                          now_ms: int) -> int:
    """One pass: trims every partition whose retention asks for it; returns how many were trimmed."""
    trimmed = 0
    for part in partitions:
        if part.closed or part.fenced:
            continue
        try:
            config = RetentionConfig.from_topic_configs(configs_of(part.topic))
        except FerryError as exc:
            log.warning("topic %s: retention skipped: %s", part.topic, exc)
            continue
        if not config.delete_policy or (config.retention_ms < 0 and config.retention_bytes < 0):
            continue
        try:
            target = retention_start(await part.committed_objects(), part.log_start_offset,
                                     part.time_index_entries(), now_ms, config)
            if target <= part.log_start_offset:
                continue
            await part.delete_records_before(target)
            trimmed += 1
        except FerryError as exc:  # moved away, fenced, or the controller unreachable: next pass
            log.info("topic %s: retention failed: %s", part.topic, exc)
    return trimmed


async def retention_loop(interval_ms: int, partitions: Callable[[], list[Any]],
                         configs_of: Callable[[str], Mapping[str, str]]) -> None:
    """Kafka's ``log.retention.check.interval.ms`` loop."""
    while True:
        await asyncio.sleep(interval_ms / 1000)
        try:
            await apply_retention(partitions(), configs_of, wall_ms())  # record timestamps are wall time
        except Exception:  # one failed pass must not stop retention for good
            log.exception("retention pass failed")

