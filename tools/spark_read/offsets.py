"""Which offsets a batch read covers, and how it is cut into Spark input partitions. Pure.

``startingOffsets`` / ``endingOffsets`` follow Spark's Kafka source for batch queries:
``"earliest"``, ``"latest"``, or JSON ``{"topic": {"0": 23, "1": -2}}`` with -2 for earliest and
-1 for latest. As in Spark, a starting offset may not be latest, an ending offset may not be
earliest, and a JSON value must name every partition of the topics read. Here *earliest* is the
partition's stream start and *latest* is the end of its **committed** objects: what brokers
still buffer (not yet uploaded) is not visible.

An input partition is a stream offset range ``[start, end)`` with the objects that hold it. By
default there is one per topic-partition (as in Spark); ``minPartitions`` splits the largest
ranges, preferably at object boundaries, until there are at least that many.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from itertools import pairwise
from typing import Any, Mapping, Sequence

from metadata_quorum.kernel.errors import ErrorCode, FerryError

EARLIEST = -2
LATEST = -1


@dataclass(frozen=True)
class ObjectSpan:
    """``[start_offset, end_offset)`` of a stream lives in ``object_key`` (``size``: whole object bytes;
    ``committed_ms``: when the controllers committed it, which orders a stream's objects)."""

    object_key: str
    start_offset: int
    end_offset: int
    size: int
    committed_ms: int = 0


@dataclass(frozen=True)
class PartitionStream:
    """A topic-partition's data stream as the controllers know it."""

    topic: str
    partition: int
    stream_id: int
    start_offset: int
    end_offset: int  # end of the committed objects
    objects: tuple[ObjectSpan, ...]


@dataclass(frozen=True)
class ReadTask:
    """One Spark input partition: offsets ``[start_offset, end_offset)`` of one stream."""

    topic: str
    partition: int
    stream_id: int
    start_offset: int
    end_offset: int
    objects: tuple[ObjectSpan, ...]


OffsetSpec = int | dict[str, dict[int, int]]  # EARLIEST, LATEST, or per topic and partition


def _bad(message: str) -> FerryError:
    return FerryError(ErrorCode.INVALID_REQUEST, message)


def parse_offsets(text: str | None, option: str, default: int) -> OffsetSpec:
    """``startingOffsets`` or ``endingOffsets`` as Spark's Kafka source takes them."""
    if text is None or not text.strip():
        return default
    word = text.strip().lower()
    if word == "earliest":
        return EARLIEST
    if word == "latest":
        return LATEST
    try:
        raw = json.loads(text)
    except ValueError:
        raise _bad(f"{option} must be earliest, latest or JSON like {{\"topic\":{{\"0\":23,\"1\":-2}}}}, "
                   f"got {text!r}") from None
    if not isinstance(raw, dict) or not raw:
        raise _bad(f"{option} JSON must be an object of topics, got {text!r}")
    out: dict[str, dict[int, int]] = {}
    for topic, parts in raw.items():
        if not isinstance(parts, dict) or not parts:
            raise _bad(f"{option}: topic {topic!r} must map partitions to offsets, got {parts!r}")
        out[topic] = {}
        for key, value in parts.items():
            try:
                partition = int(key)
            except ValueError:
                raise _bad(f"{option}: partition {key!r} of topic {topic!r} is not an integer") from None
            if not isinstance(value, int) or isinstance(value, bool) or value < EARLIEST:
                raise _bad(f"{option}: offset {value!r} of {topic}-{partition} must be an integer >= -2 "
                           "(-2 earliest, -1 latest)")
            out[topic][partition] = value
    return out


def _offset_for(spec: OffsetSpec, stream: PartitionStream, option: str) -> int:
    if isinstance(spec, int):
        return spec
    return spec[stream.topic][stream.partition]


def check_spec_covers(spec: OffsetSpec, streams: Sequence[PartitionStream], option: str) -> None:
    """A JSON spec names exactly the partitions read (Spark's rule for specific offsets)."""
    if isinstance(spec, int):
        return
    wanted = {(s.topic, s.partition) for s in streams}
    named = {(t, p) for t, parts in spec.items() for p in parts}
    missing, extra = sorted(wanted - named), sorted(named - wanted)
    if missing:
        raise _bad(f"{option} must specify every partition read; missing " +
                   ", ".join(f"{t}-{p}" for t, p in missing))
    if extra:
        raise FerryError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{option} names partitions that are not read: " +
                         ", ".join(f"{t}-{p}" for t, p in extra))


def resolve_ranges(streams: Sequence[PartitionStream], starting: OffsetSpec, ending: OffsetSpec,
                   fail_on_data_loss: bool = True) -> list[tuple[PartitionStream, int, int]]:
    """``(stream, start, end)`` per partition, checked against what is stored.

    A start below the stream's start (trimmed data) or an end above the committed end raises
    OFFSET_OUT_OF_RANGE, unless ``fail_on_data_loss`` is off: then they are clamped (Spark's
    ``failOnDataLoss``).
    """
    check_spec_covers(starting, streams, "startingOffsets")
    check_spec_covers(ending, streams, "endingOffsets")
    out = []
    for s in sorted(streams, key=lambda x: (x.topic, x.partition)):
        start, end = _offset_for(starting, s, "startingOffsets"), _offset_for(ending, s, "endingOffsets")
        name = f"{s.topic}-{s.partition}"
        if start == LATEST:
            raise _bad(f"startingOffsets for {name} is latest (-1): not allowed in a batch read")
        if end == EARLIEST:
            raise _bad(f"endingOffsets for {name} is earliest (-2): not allowed in a batch read")
        start = s.start_offset if start == EARLIEST else start
        end = s.end_offset if end == LATEST else end
        if start < s.start_offset or end > s.end_offset:
            if fail_on_data_loss:
                raise FerryError(ErrorCode.OFFSET_OUT_OF_RANGE,
                                 f"{name}: offsets {start}..{end} are outside the stored range "
                                 f"{s.start_offset}..{s.end_offset} (start: the earliest kept; end: the end of "
                                 "the committed objects). Set failOnDataLoss=false to read what is there")
            start, end = max(start, s.start_offset), min(end, s.end_offset)
        if start > end:
            if fail_on_data_loss:
                raise _bad(f"{name}: starting offset {start} is after ending offset {end}")
            start = end
        out.append((s, start, end))
    return out


def _objects_for(objects: Sequence[ObjectSpan], start: int, end: int) -> tuple[ObjectSpan, ...]:
    return tuple(o for o in objects if o.end_offset > start and o.start_offset < end)


def covering_objects(objects: Sequence[ObjectSpan], start: int, end: int) -> tuple[ObjectSpan, ...] | None:
    """The objects holding ``[start, end)`` back to back, or None when some offset of it is in none
    (trimmed, or the list is from before a rewrite). Pure."""
    spans = sorted(_objects_for(objects, start, end), key=lambda o: o.start_offset)
    reached = start
    for span in spans:
        if span.start_offset > reached:
            return None
        reached = max(reached, span.end_offset)
    return tuple(spans) if reached >= end else None


def _split_points(objects: Sequence[ObjectSpan], start: int, end: int, pieces: int) -> list[int]:
    """Cut ``[start, end)`` into ``pieces`` ranges of about equal offsets, moving each cut to the
    nearest object boundary when one is within a quarter piece (so few objects are read twice)."""
    size = end - start
    bounds = sorted({o.start_offset for o in objects if start < o.start_offset < end})
    cuts = []
    for k in range(1, pieces):
        ideal = start + size * k // pieces
        near = min(bounds, key=lambda b: (abs(b - ideal), b), default=None)
        cut = near if near is not None and abs(near - ideal) <= size / pieces / 4 else ideal
        cuts.append(cut)
    points = sorted({start, *cuts, end})
    return points


def plan_read_tasks(ranges: Sequence[tuple[PartitionStream, int, int]], min_partitions: int | None = None
                    ) -> list[ReadTask]:
    """The input partitions: one per non-empty range, the largest split until ``min_partitions``."""
    nonempty = [(s, a, b) for s, a, b in ranges if b > a]
    pieces = {(s.topic, s.partition): 1 for s, _a, _b in nonempty}
    if min_partitions and nonempty:
        total = sum(b - a for _s, a, b in nonempty)
        while sum(pieces.values()) < min_partitions:
            # give the next piece to the range with the most offsets per piece
            s, a, b = max(nonempty, key=lambda r: ((r[2] - r[1]) / pieces[(r[0].topic, r[0].partition)],
                                                  r[0].topic, -r[0].partition))
            key = (s.topic, s.partition)
            if (b - a) <= pieces[key] or total <= 0:
                break
            pieces[key] += 1
    tasks = []
    for s, a, b in nonempty:
        points = _split_points(s.objects, a, b, pieces[(s.topic, s.partition)])
        for lo, hi in pairwise(points):
            tasks.append(ReadTask(s.topic, s.partition, s.stream_id, lo, hi, _objects_for(s.objects, lo, hi)))
    return tasks


def parse_stream(topic: str, partition: int, stream_id: int, described: Mapping[str, Any]) -> PartitionStream:
    """A PartitionStream from the controllers' ``describe_stream`` reply."""
    objects = tuple(sorted((ObjectSpan(str(o["object_key"]), int(o["start_offset"]), int(o["end_offset"]),
                                       int(o.get("size", 0)), int(o.get("committed_ms", 0)))
                            for o in described.get("objects", [])), key=lambda o: o.start_offset))
    start = int(described.get("start_offset", 0))
    end = max([start, *(o.end_offset for o in objects)])
    return PartitionStream(topic, partition, stream_id, start, end, objects)
