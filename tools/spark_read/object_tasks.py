"""Input partitions of whole objects (``readBy=object``): each object fetched once. Pure.

The default plan (``offsets.plan_read_tasks``) gives every topic-partition its own input
partition, as Spark's Kafka source does. A broker uploads the partitions it leads together, in
stream-set objects, so a topic of P partitions on B brokers has about P/B of them in each object:
every object is then fetched by P/B input partitions (one ranged GET each) after the driver read
its index (one more). The request count, not the bytes, is what an S3 endpoint charges most for,
in money on S3 and in CPU on a local one (the embedded moto server spends ~2-3 ms per request
whatever its size, the client as much again).

Here the objects holding the offsets read are ordered (each stream's in offset order) and cut
into runs of about equal bytes, one run per input partition; the task GETs each of its objects
whole, once (the object's own index is in its tail, so the driver reads no index), and returns the
rows of every topic-partition of the read that the object holds. A topic-partition's offsets are
thus spread over consecutive input partitions, each covering a contiguous range of them; within an
input partition, rows come object by object, in offset order per topic-partition. Whole-object
GETs read other topics' streams too: this layout pays when the topics read fill most of their
objects.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Sequence

from tools.spark_read.offsets import PartitionStream


@dataclass(frozen=True)
class StreamSlice:
    """Offsets ``[start_offset, end_offset)`` of one topic-partition's stream, held by one object."""

    topic: str
    partition: int
    stream_id: int
    start_offset: int
    end_offset: int


@dataclass(frozen=True)
class ObjectRead:
    """One object, GET whole, and the slices of the read that it holds."""

    object_key: str
    size: int
    committed_ms: int
    slices: tuple[StreamSlice, ...]


@dataclass(frozen=True)
class ObjectTask:
    """One Spark input partition: a run of objects in commit order."""

    reads: tuple[ObjectRead, ...]

    @property
    def size(self) -> int:
        return sum(r.size for r in self.reads)


def object_reads(ranges: Sequence[tuple[PartitionStream, int, int]]) -> list[ObjectRead]:
    """Every object holding an offset of the ranges, with the slices it holds (an offset is in
    exactly one: a stream's objects do not overlap), ordered so that each stream's objects come in
    offset order, ties in commit order (then key). Only a compaction that merged objects across
    streams out of step can leave no such order; then the earliest committed object goes first."""
    by_key: dict[str, tuple[int, int, list[StreamSlice]]] = {}
    after: dict[str, set[str]] = {}  # object key -> keys holding a later range of one of its streams
    for stream, start, end in ranges:
        previous = None
        for obj in sorted(stream.objects, key=lambda o: o.start_offset):
            lo, hi = max(start, obj.start_offset), min(end, obj.end_offset)
            if lo >= hi:
                continue
            size, committed, slices = by_key.setdefault(obj.object_key, (obj.size, obj.committed_ms, []))
            slices.append(StreamSlice(stream.topic, stream.partition, stream.stream_id, lo, hi))
            if previous is not None:
                after.setdefault(previous, set()).add(obj.object_key)
            previous = obj.object_key
    reads = {key: ObjectRead(key, size, committed, tuple(sorted(slices, key=lambda s: (s.topic, s.partition))))
             for key, (size, committed, slices) in by_key.items()}
    return _in_stream_order(reads, after)


def _in_stream_order(reads: dict[str, ObjectRead], after: dict[str, set[str]]) -> list[ObjectRead]:
    """Kahn's topological order of ``reads`` under ``after``, the ready object committed first."""
    waiting = {key: 0 for key in reads}
    for later in after.values():
        for key in later:
            waiting[key] += 1
    rank = {key: (r.committed_ms, key) for key, r in reads.items()}
    ready = [rank[k] for k, n in waiting.items() if n == 0]
    heapq.heapify(ready)
    out: list[ObjectRead] = []
    while len(out) < len(reads):
        if not ready:  # a cycle: break it at the earliest committed object left
            first = min(rank[k] for k, n in waiting.items() if n > 0)
            waiting[first[1]] = 0
            heapq.heappush(ready, first)
        _committed, key = heapq.heappop(ready)
        waiting[key] = -1  # placed
        out.append(reads[key])
        for successor in sorted(after.get(key, set())):
            if waiting[successor] > 0:
                waiting[successor] -= 1
                if waiting[successor] == 0:
                    heapq.heappush(ready, rank[successor])
    return out


def plan_object_tasks(ranges: Sequence[tuple[PartitionStream, int, int]], min_partitions: int | None = None
                      ) -> list[ObjectTask]:
    """The objects cut into consecutive runs of about equal bytes: as many runs as non-empty ranges
    (the default plan's input partitions), at least ``min_partitions``, at most one per object."""
    reads = object_reads(ranges)
    if not reads:
        return []
    wanted = max(sum(1 for _s, a, b in ranges if b > a), min_partitions or 0)
    pieces = min(len(reads), max(1, wanted))
    total = sum(max(1, r.size) for r in reads)
    tasks: list[ObjectTask] = []
    run: list[ObjectRead] = []
    done = 0  # bytes of the objects placed
    for i, read in enumerate(reads):
        size = max(1, read.size)
        boundary = total * (len(tasks) + 1) / pieces  # where the current run should end
        later_runs = pieces - len(tasks) - 1
        # close the run before an object whose middle lies past the boundary, or when every
        # object left is needed to give each later run one
        if run and later_runs > 0 and (done + size / 2 > boundary or len(reads) - i == later_runs):
            tasks.append(ObjectTask(tuple(run)))
            run = []
        run.append(read)
        done += size
    tasks.append(ObjectTask(tuple(run)))
    return tasks
