"""``spark.readStream.format("ferry")``: a topic as a Structured Streaming source.

Each trigger, the driver asks the partitions' brokers for their high watermarks
(``latestOffset``; ``maxRecordsPerTrigger`` caps a micro-batch), and plans the micro-batch
(``partitions``) with :mod:`tools.spark_read.stream_plan`: the settled part of each partition's
range is read from S3 by the executors exactly as a batch read (``source.read_resuming``), the
part not yet uploaded from the partition's leader over Ferry's HTTP fetch (following it through
moves). Once a query keeps up (every range starts at or past the end of the committed objects
last seen, and is short), a micro-batch is read from the leaders alone and the controllers are not asked: a
leader serves any offset, and a trigger then costs one watermark look-up per partition. Offsets are Spark's Kafka source's JSON, kept in the query's checkpoint, so a query
restarted from its checkpoint goes on from the next record.

Options beyond the batch read's (``source.py``): ``startingOffsets`` (``earliest``, ``latest`` or
JSON; where a new query starts) and ``maxRecordsPerTrigger``.
"""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any, Iterator, Mapping, Sequence

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows

from metadata_quorum.kernel.errors import ErrorCode, FerryError
from tools.spark_read.offsets import EARLIEST, LATEST, PartitionStream, plan_read_tasks
from tools.spark_read.records import Columns, decode_batches, to_arrow
from tools.spark_read.source import (
    FerryInputPartition, ReadOptions, _positive_int, blocks_for_task, describe_stream_objects, describe_streams,
    read_indexes, read_resuming, read_task, s3_client,
)
from tools.spark_read.stream_plan import TopicPartitionKey, capped_end, from_json_offsets, split_range, to_json_offsets

# a micro-batch of at most this many records per partition, past the committed end last seen,
# is read from the leaders alone; a larger one (a backlog) asks where the objects end again
LEADER_ONLY_MAX_RECORDS = 50_000
TAIL_READ_TIMEOUT_S = 60.0  # a partition that has no leader this long fails the micro-batch (Spark retries it)


@dataclass(frozen=True)
class FerryTailPartition(InputPartition):
    """Offsets ``[start_offset, end_offset)`` of a partition not uploaded yet: read from its leader."""

    topic: str
    partition: int
    start_offset: int
    end_offset: int
    brokers: tuple[str, ...]


async def broker_urls(options: ReadOptions) -> list[str]:
    """Where the brokers' HTTP APIs are: given, or the controllers' registered brokers."""
    if options.bootstrap_servers:
        return [s for s in options.bootstrap_servers.split(",") if s]
    from tools.admin import Admin

    async with Admin(None, options.bootstrap_controllers) as admin:
        return sorted((await admin.brokers()).values())


async def high_watermarks(options: ReadOptions, brokers: Sequence[str]) -> dict[TopicPartitionKey, int]:
    """Every partition's high watermark now (its leader's): the partitions from a broker's
    metadata, the watermarks from their leaders, concurrently."""
    from tools.client import Consumer, TopicPartition

    async with Consumer(list(brokers), max_wait_ms=0) as consumer:
        assert consumer.metadata is not None
        tps: list[TopicPartition] = []
        for name in options.topics:
            found = consumer.metadata.current.topic_partitions(name)
            if not found:
                raise FerryError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
            tps += found
        ends = await asyncio.gather(*(consumer.list_offset(tp, "latest") for tp in tps))
    return {(tp.topic, tp.partition): end for tp, end in zip(tps, ends, strict=True)}


async def fetch_tail(brokers: Sequence[str], topic: str, partition: int, start: int, end: int,
                     timeout_s: float = TAIL_READ_TIMEOUT_S) -> list[bytes]:
    """The stored batches holding ``[start, end)``, from the partition's leader (whole batches)."""
    from stream_storage import batches
    from tools.client import Consumer, TopicPartition

    tp = TopicPartition(topic, partition)
    out: list[bytes] = []
    position = start
    deadline = time.monotonic() + timeout_s
    async with Consumer(list(brokers), max_wait_ms=0) as consumer:
        while position < end:
            data, _hw = await consumer.fetch_raw(tp, position)
            if data:
                out.append(data)
                position = max(position, max(b.next_offset for b in batches.iter_batches(data)))
                continue
            if time.monotonic() > deadline:
                raise FerryError(ErrorCode.REQUEST_TIMED_OUT, f"{topic}-{partition}: offsets {position}..{end} "
                                 f"were not served within {timeout_s:.0f} s")
            await asyncio.sleep(0.05)
    return out


def read_tail(part: FerryTailPartition, include_headers: bool, max_rows: int) -> Iterator[Any]:
    columns = Columns(include_headers)
    name = f"{part.topic}-{part.partition} (broker)"
    reached = part.start_offset
    for data in asyncio.run(fetch_tail(part.brokers, part.topic, part.partition, part.start_offset, part.end_offset)):
        reached = max(reached, decode_batches(data, part.start_offset, part.end_offset, columns, name))
    if reached < part.end_offset:
        raise FerryError(ErrorCode.CORRUPT_MESSAGE, f"{name}: served up to {reached}, not {part.end_offset}")
    if len(columns):
        batch = to_arrow(columns, part.topic, part.partition)
        for first in range(0, batch.num_rows, max_rows):
            yield batch.slice(first, max_rows)


class FerryStreamReader(DataSourceStreamReader):
    def __init__(self, options: ReadOptions, raw: Mapping[str, str]) -> None:
        self.options = options
        self._brokers: tuple[str, ...] | None = None
        # each partition's end of committed objects when last asked: a range starting at or past
        # it is read from the leader alone (it serves any offset), without asking the controllers
        self._settled: dict[TopicPartitionKey, int] = {}
        self.max_records_per_trigger = _positive_int({k.lower(): v for k, v in raw.items()},
                                                     "maxRecordsPerTrigger", None)
        if isinstance(options.ending, dict) or options.ending != LATEST:
            raise FerryError(ErrorCode.INVALID_REQUEST, "option endingOffsets is for batch queries only")

    def initialOffset(self) -> dict[str, dict[str, int]]:  # noqa: N802 - Spark's name
        starting = self.options.starting
        if starting == LATEST:
            return to_json_offsets(asyncio.run(high_watermarks(self.options, self.brokers())))
        streams = asyncio.run(describe_streams(self.options))
        if starting == EARLIEST:
            return to_json_offsets({(s.topic, s.partition): s.start_offset for s in streams})
        assert isinstance(starting, dict)
        out: dict[TopicPartitionKey, int] = {}
        for s in streams:
            given = starting.get(s.topic, {}).get(s.partition)
            if given is None:
                raise FerryError(ErrorCode.INVALID_REQUEST, f"startingOffsets does not name {s.topic}-{s.partition}")
            out[(s.topic, s.partition)] = s.start_offset if given == EARLIEST else given
        return to_json_offsets(out)

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802 - Spark's name
        n = self.max_records_per_trigger
        return ReadMaxRows(n) if n else ReadAllAvailable()

    def brokers(self) -> tuple[str, ...]:
        if self._brokers is None:
            self._brokers = tuple(asyncio.run(broker_urls(self.options)))
        return self._brokers

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, dict[str, int]]:  # noqa: N802 - Spark's name
        latest = asyncio.run(high_watermarks(self.options, self.brokers()))
        cap = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        return to_json_offsets(capped_end(from_json_offsets(start), latest, cap))

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        first, last = from_json_offsets(start), from_json_offsets(end)
        brokers = self.brokers()
        if all(tp in self._settled and first.get(tp, 0) >= self._settled[tp]
               and stop - first.get(tp, 0) <= LEADER_ONLY_MAX_RECORDS for tp, stop in last.items()):
            # a micro-batch of what arrived since the last look: all from the leaders
            return [FerryTailPartition(tp[0], tp[1], first.get(tp, 0), stop, brokers)
                    for tp, stop in sorted(last.items()) if first.get(tp, 0) < stop]
        streams = {(s.topic, s.partition): s for s in asyncio.run(describe_streams(self.options))}
        self._settled = {tp: s.end_offset for tp, s in streams.items()}
        from_s3: list[tuple[PartitionStream, int, int]] = []
        tails: list[InputPartition] = []
        for tp, stop in sorted(last.items()):
            stream = streams.get(tp)
            if stream is None:
                continue  # the topic is gone
            begin = first.get(tp, 0)
            if begin < stream.start_offset:
                if self.options.fail_on_data_loss:
                    raise FerryError(ErrorCode.OFFSET_OUT_OF_RANGE, f"{tp[0]}-{tp[1]}: offsets {begin}.."
                                     f"{stream.start_offset} were deleted before they were read "
                                     "(failOnDataLoss=false skips them)")
                begin = stream.start_offset
            settled_part, broker_part = split_range(begin, stop, stream.end_offset)
            if settled_part is not None:
                from_s3.append((stream, *settled_part))
            if broker_part is not None:
                tails.append(FerryTailPartition(tp[0], tp[1], broker_part[0], broker_part[1], brokers))
        tasks = plan_read_tasks(from_s3)
        indexes = read_indexes(s3_client(self.options.s3), self.options.s3,
                               {o.object_key: o for t in tasks for o in t.objects}.values())
        return [FerryInputPartition(t, tuple(blocks_for_task(indexes[o.object_key], t, o) for o in t.objects))
                for t in tasks] + tails

    def read(self, partition: InputPartition) -> Iterator[Any]:
        options = self.options
        if isinstance(partition, FerryTailPartition):
            yield from read_tail(partition, options.include_headers, options.max_rows_per_batch)
            return
        assert isinstance(partition, FerryInputPartition)
        yield from read_resuming(
            partition.task, partition.blocks,
            lambda task, blocks: read_task(options.s3, task, options.include_headers, options.max_rows_per_batch,
                                           blocks),
            lambda task: asyncio.run(describe_stream_objects(options, task)))

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to release: what was read stays stored (retention, not the reader, trims it)."""


__all__ = ["FerryStreamReader", "FerryTailPartition"]
