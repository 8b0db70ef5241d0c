"""What one micro-batch of ``spark.readStream.format("ferry")`` reads, and from where. Pure.

Offsets are Spark's Kafka source's JSON, ``{"topic": {"0": 23}}``: each partition's next offset.
A micro-batch reads ``[start, end)`` per partition, where ``end`` is the partition's high
watermark when Spark asked (capped by ``maxRecordsPerTrigger``). The part below the end of the
partition's committed objects (*settled*) is read from S3 as a batch read is; the rest, written
but not yet uploaded, from the partition's broker, so that a row's freshness does not wait for
the upload cap. A high watermark is durable (acknowledged writes only), so a record below it is
the same record whichever owner serves it after a move: the split never skips nor repeats one.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from metadata_quorum.kernel.errors import ErrorCode, FerryError

TopicPartitionKey = tuple[str, int]


def to_json_offsets(offsets: Mapping[TopicPartitionKey, int]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = int(offset)
    return out


def from_json_offsets(offsets: Mapping[str, Any]) -> dict[TopicPartitionKey, int]:
    """Strict: a checkpoint that does not read as offsets is an error, not an empty start."""
    out: dict[TopicPartitionKey, int] = {}
    for topic, parts in offsets.items():
        if not isinstance(parts, Mapping):
            raise FerryError(ErrorCode.INVALID_REQUEST, f"offsets of topic {topic!r} are not an object: {parts!r}")
        for partition, offset in parts.items():
            if not str(partition).isdigit() or not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
                raise FerryError(ErrorCode.INVALID_REQUEST, f"bad offset {topic}-{partition}: {offset!r}")
            out[(str(topic), int(partition))] = offset
    return out


def capped_end(start: Mapping[TopicPartitionKey, int], latest: Mapping[TopicPartitionKey, int],
               max_rows: int | None) -> dict[TopicPartitionKey, int]:
    """The end of the next micro-batch: ``latest``, or with ``max_rows`` at most that many offsets
    in all, shared in proportion to each partition's backlog (as Spark's Kafka source shares
    ``maxOffsetsPerTrigger``), at least one offset for the partition furthest behind so a batch
    always progresses. A partition new since ``start`` starts at 0."""
    backlog = {tp: max(0, end - start.get(tp, 0)) for tp, end in latest.items()}
    total = sum(backlog.values())
    if max_rows is None or total <= max_rows:
        return dict(latest)
    share = {tp: lag * max_rows // total for tp, lag in backlog.items()}
    if not any(share.values()):
        furthest = max(backlog, key=lambda tp: (backlog[tp], tp))
        share[furthest] = 1
    return {tp: start.get(tp, 0) + share[tp] for tp in latest}


def split_range(start: int, end: int, settled: int) -> tuple[tuple[int, int] | None, tuple[int, int] | None]:
    """``[start, end)`` as (the part in committed objects, the part only the broker holds)."""
    if start >= end:
        return None, None
    from_s3 = (start, min(end, settled)) if start < settled else None
    from_broker = (max(start, settled), end) if end > settled else None
    return from_s3, from_broker


__all__ = ["TopicPartitionKey", "capped_end", "from_json_offsets", "split_range", "to_json_offsets"]
