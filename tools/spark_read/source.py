"""The ``ferry`` Spark data source: a topic's committed records, read by the executors from S3.

On the driver, ``partitions()`` asks the controllers (``bootstrap.controller``, or brokers'
addresses in ``bootstrap.servers``) for each partition's data stream and its committed objects,
resolves ``startingOffsets`` / ``endingOffsets`` and cuts the read into input partitions
(``tools/spark_read/offsets.py``), then GETs each object's tail (footer and index) once and hands
every input partition the run of blocks it reads in each object. On the executors, ``read()``
makes one ranged GET per object, checks the block CRCs and decodes the batches into Arrow
(``records.py``), while the next objects download in the background. Brokers are never involved,
so a read does not load the cluster and sees only what was uploaded and committed. An object
that compaction replaced after the plan (and deleted) makes the executor ask the controllers for
the stream's objects again and go on from the last offset it handed to Spark.

Options (case-insensitive, as Spark passes them):

============================  =====================================================================
``topic`` / ``subscribe``      topic name, or several separated by commas (required)
``bootstrap.controller``       controller address(es) ``host:port[,host:port]`` (or ``bootstrap.servers``)
``s3.endpoint``                S3 endpoint URL (default: the cluster's, from a broker's metadata)
``s3.bucket``                  bucket of the stream objects (default: the cluster's)
``s3.region``                  region (default: the cluster's)
``startingOffsets``            ``earliest`` (default) or JSON, as Spark's Kafka source
``endingOffsets``              ``latest`` (default: the end of the committed objects) or JSON
``failOnDataLoss``             ``true`` (default): offsets outside what is stored are an error
``minPartitions``              at least this many input partitions (default: one per topic-partition)
``includeHeaders``             ``true`` adds the ``headers`` column (as Spark's Kafka source)
``maxRowsPerBatch``            rows per Arrow batch handed to Spark (default 10000)
``readBy``                     ``partition`` (default): one input partition per topic-partition offset
                               range, as Spark's Kafka source; ``object``: input partitions of whole
                               objects, each fetched once (``object_tasks.py``: fewer requests)
============================  =====================================================================
"""
from __future__ import annotations

import asyncio
import gc
import os
import re
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

from pyspark.sql.datasource import (DataSource, DataSourceReader, DataSourceStreamReader, DataSourceStreamWriter,
                                    DataSourceWriter, InputPartition)
from pyspark.sql.types import StructType

from metadata_quorum.kernel.errors import ErrorCode, FerryError
from stream_storage.config import S3Config
from stream_storage.object_format import (
    TAIL_READ_BYTES, IndexEntry, ObjectIndex, check_block, parse_index, parse_tail,
)
from tools.spark_read import FORMAT_NAME
from stream_storage.object_store import ObjectNotFound
from tools.spark_read.offsets import (
    EARLIEST, LATEST, ObjectSpan, OffsetSpec, PartitionStream, ReadTask, covering_objects, parse_offsets, parse_stream,
    plan_read_tasks,
    resolve_ranges,
)
from tools.spark_read.object_tasks import ObjectRead, ObjectTask, StreamSlice, plan_object_tasks
from tools.spark_read.records import Columns, decode_batches, to_arrow

KAFKA_SCHEMA_DDL = ("key BINARY, value BINARY, topic STRING, partition INT, offset LONG, timestamp TIMESTAMP, "
                    "timestampType INT")
HEADERS_DDL = ", headers ARRAY<STRUCT<key: STRING, value: BINARY>>"
PREFETCH_OBJECTS = 4
MAX_BATCH_BUFFER_BYTES = 64 * 1024 * 1024  # fetched bytes behind one Arrow batch: bounds its memory


def _bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    """Option ``name`` (spelled as documented; looked up lower-case, as Spark passes options)."""
    text = options.get(name.lower())
    if text is None:
        return default
    if text.strip().lower() not in ("true", "false"):
        raise FerryError(ErrorCode.INVALID_REQUEST, f"option {name} must be true or false, got {text!r}")
    return text.strip().lower() == "true"


def _positive_int(options: Mapping[str, str], name: str, default: int | None) -> int | None:
    text = options.get(name.lower())
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise FerryError(ErrorCode.INVALID_REQUEST, f"option {name} must be a positive integer, got {text!r}")
    return value


READ_BY_PARTITION, READ_BY_OBJECT = "partition", "object"


def _read_by(options: Mapping[str, str]) -> str:
    text = options.get("readby", READ_BY_PARTITION).strip().lower()
    if text not in (READ_BY_PARTITION, READ_BY_OBJECT):
        raise FerryError(ErrorCode.INVALID_REQUEST, f"option readBy must be {READ_BY_PARTITION} or "
                         f"{READ_BY_OBJECT}, got {options['readby']!r}")
    return text


@dataclass(frozen=True)
class ReadOptions:
    """The data source's options, parsed and checked on the driver."""

    topics: tuple[str, ...]
    bootstrap_controllers: str | None
    bootstrap_servers: str | None
    s3: S3Config
    starting: OffsetSpec
    ending: OffsetSpec
    fail_on_data_loss: bool
    min_partitions: int | None
    include_headers: bool
    max_rows_per_batch: int
    read_by: str = READ_BY_PARTITION

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> "ReadOptions":
        lower = {str(k).lower(): str(v) for k, v in options.items()}
        names = lower.get("topic") or lower.get("subscribe") or ""
        topics = tuple(t.strip() for t in names.split(",") if t.strip())
        if not topics:
            raise FerryError(ErrorCode.INVALID_REQUEST, "option topic is required: .option(\"topic\", \"name\")")
        controllers, servers = lower.get("bootstrap.controller"), lower.get("bootstrap.servers")
        if not (controllers or servers):
            raise FerryError(ErrorCode.INVALID_REQUEST, "option bootstrap.controller (or bootstrap.servers) is "
                             "required: where to find the topic's streams")
        s3 = S3Config(endpoint_url=lower.get("s3.endpoint"), bucket=lower.get("s3.bucket", "ferry"),
                      region=lower.get("s3.region", "us-east-1"))
        return cls(topics, controllers, servers, s3,
                   parse_offsets(lower.get("startingoffsets"), "startingOffsets", EARLIEST),
                   parse_offsets(lower.get("endingoffsets"), "endingOffsets", LATEST),
                   _bool(lower, "failOnDataLoss", True), _positive_int(lower, "minPartitions", None),
                   _bool(lower, "includeHeaders", False),
                   _positive_int(lower, "maxRowsPerBatch", 10_000) or 10_000, _read_by(lower))


async def cluster_object_store(options: ReadOptions) -> S3Config:
    """The S3 endpoint, bucket and region the cluster's brokers use (a broker's ``/v1/metadata``),
    where the options name none: a job needs only the topic and an address of the cluster."""
    import aiohttp

    from tools.admin import Admin

    if options.bootstrap_servers:
        brokers = [s for s in options.bootstrap_servers.split(",") if s]
    else:
        async with Admin(None, options.bootstrap_controllers) as admin:
            brokers = sorted((await admin.brokers()).values())
    from tools.client import normalize_url

    last: Exception | None = None
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        for url in brokers:
            try:
                async with session.get(f"{normalize_url(url)}/v1/metadata", params={"topics": ""}) as resp:
                    store = (await resp.json()).get("object_store")
                if isinstance(store, dict):
                    return replace(options.s3, endpoint_url=store.get("endpoint_url"),
                                   bucket=str(store.get("bucket") or options.s3.bucket),
                                   region=str(store.get("region") or options.s3.region))
            except (aiohttp.ClientError, OSError, ValueError) as exc:
                last = exc
    raise FerryError(ErrorCode.BROKER_NOT_AVAILABLE, f"no broker told where the cluster's objects are "
                     f"(give option s3.endpoint): {last}")


async def describe_streams(options: ReadOptions) -> list[PartitionStream]:
    """Each partition's data stream and committed objects, from the active controller's image."""
    from tools.admin import Admin

    async with Admin(options.bootstrap_servers, options.bootstrap_controllers) as admin:
        reply = await admin.api.describe_topics({"names": list(options.topics)})
        wanted: list[tuple[str, int, int]] = []
        for topic in reply["topics"]:
            if topic.get("error"):
                raise FerryError(ErrorCode[topic["error"]], str(topic.get("message", "")))
            if topic.get("storage", "s3") != "s3":
                raise FerryError(ErrorCode.INVALID_REQUEST, f"topic {topic['name']!r} is stored on local disks, "
                                 "not in S3: the ferry data source reads storage=s3 topics only")
            for part in topic["partitions"]:
                stream_id = part.get("streams", {}).get("data")
                if stream_id is None:
                    raise FerryError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                     f"{topic['name']}-{part['partition']} has no data stream")
                wanted.append((topic["name"], int(part["partition"]), int(stream_id)))
        described = await asyncio.gather(*(admin.api.describe_stream({"stream_id": sid})
                                           for _t, _p, sid in wanted))
    return [parse_stream(t, p, sid, d) for (t, p, sid), d in zip(wanted, described, strict=True)]


async def describe_stream_objects(options: ReadOptions, task: ReadTask) -> tuple[ObjectSpan, ...]:
    """The committed objects of the task's stream now (an executor re-planning a read)."""
    from tools.admin import Admin

    async with Admin(options.bootstrap_servers, options.bootstrap_controllers) as admin:
        described = await admin.api.describe_stream({"stream_id": task.stream_id})
    return parse_stream(task.topic, task.partition, task.stream_id, described).objects


@dataclass(frozen=True)
class FerryInputPartition(InputPartition):
    """One read task, with where its stream's blocks sit in each of its objects (read from the
    objects' indexes on the driver: one GET per object, not one per object and partition)."""

    task: ReadTask
    blocks: tuple[tuple[IndexEntry, ...], ...] | None = None


@dataclass(frozen=True)
class FerryObjectPartition(InputPartition):
    """A run of whole objects (``readBy=object``), each holding slices of the read's streams."""

    task: ObjectTask


class FerryReader(DataSourceReader):
    """Plans on the driver (``partitions``), reads on the executors (``read``)."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        streams = asyncio.run(describe_streams(self.options))
        ranges = resolve_ranges(streams, self.options.starting, self.options.ending, self.options.fail_on_data_loss)
        if self.options.read_by == READ_BY_OBJECT:
            return [FerryObjectPartition(t) for t in plan_object_tasks(ranges, self.options.min_partitions)]
        tasks = plan_read_tasks(ranges, self.options.min_partitions)
        indexes = read_indexes(s3_client(self.options.s3), self.options.s3,
                               {o.object_key: o for t in tasks for o in t.objects}.values())
        return [FerryInputPartition(t, tuple(blocks_for_task(indexes[o.object_key], t, o) for o in t.objects))
                for t in tasks]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, (FerryInputPartition, FerryObjectPartition))
        options = self.options

        def read(task: ReadTask, blocks: Sequence[Sequence[IndexEntry]] | None) -> Iterator[Any]:
            return read_task(options.s3, task, options.include_headers, options.max_rows_per_batch, blocks)

        def current_objects(task: ReadTask) -> Sequence[ObjectSpan]:
            return asyncio.run(describe_stream_objects(options, task))

        if isinstance(partition, FerryObjectPartition):
            def read_gone(task: ReadTask) -> Iterator[Any]:
                return read_resuming(task, None, read, current_objects)

            yield from read_object_task(options.s3, partition.task, options.include_headers,
                                        options.max_rows_per_batch, read_gone)
            return
        yield from read_resuming(partition.task, partition.blocks, read, current_objects)


class FerryDataSource(DataSource):
    """``spark.read.format("ferry")``: a batch read of committed records with the Kafka source's
    columns; ``spark.readStream`` (``stream.py``), ``df.write`` and ``writeStream`` (``writer.py``)."""

    @classmethod
    def name(cls) -> str:
        return FORMAT_NAME

    def schema(self) -> str:
        include = _bool({str(k).lower(): str(v) for k, v in self.options.items()}, "includeHeaders", False)
        return KAFKA_SCHEMA_DDL + (HEADERS_DDL if include else "")

    def _read_options(self) -> ReadOptions:
        options = ReadOptions.parse(self.options)
        if not any(str(k).lower() == "s3.endpoint" for k in self.options):
            options = replace(options, s3=asyncio.run(cluster_object_store(options)))
        return options

    def reader(self, schema: StructType) -> DataSourceReader:
        return FerryReader(self._read_options())

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:  # noqa: N802 - Spark's name
        from tools.spark_read.stream import FerryStreamReader

        return FerryStreamReader(self._read_options(), dict(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from tools.spark_read.writer import FerryWriter, WriteOptions

        return FerryWriter(WriteOptions.parse(self.options, schema))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:  # noqa: N802 - Spark's name
        from tools.spark_read.writer import FerryStreamWriter, WriteOptions

        return FerryStreamWriter(WriteOptions.parse(self.options, schema))


_SPARK_WRAPPED = re.compile(r"FerryError: ([A-Z_]+): (.*)")


def unwrap_spark_error(exc: BaseException) -> FerryError | None:
    """The FerryError a data source raised, out of the Spark exception that carries it as text
    (Spark re-raises a Python data source's errors as AnalysisException / PythonException)."""
    if isinstance(exc, FerryError):
        return exc
    match = _SPARK_WRAPPED.search(str(exc))
    if match is None or match.group(1) not in ErrorCode.__members__:
        return None
    return FerryError(ErrorCode[match.group(1)], match.group(2).strip())


# -- executor side ----------------------------------------------------------------------------------


def get_range(client: Any, bucket: str, key: str, first: int | None = None, last: int | None = None) -> bytes:
    """Bytes ``first..last`` of an object (all of it without a range); a missing object is
    ObjectNotFound (it may have been replaced by compaction after the read was planned: see
    :func:`read_resuming`)."""
    from botocore.exceptions import ClientError

    ranged = {} if first is None or last is None else {"Range": f"bytes={first}-{last}"}
    try:
        body: bytes = client.get_object(Bucket=bucket, Key=key, **ranged)["Body"].read()
    except ClientError as exc:
        if str(exc.response.get("Error", {}).get("Code", "")) in ("NoSuchKey", "404", "NotFound"):
            raise ObjectNotFound(key) from None
        raise
    return body


MAX_REPLANS = 3


def read_resuming(task: ReadTask, blocks: Sequence[Sequence[IndexEntry]] | None,
                  read: Callable[[ReadTask, Sequence[Sequence[IndexEntry]] | None], Iterator[Any]],
                  current_objects: Callable[[ReadTask], Sequence[ObjectSpan]],
                  max_replans: int = MAX_REPLANS) -> Iterator[Any]:
    """``read(task, blocks)``'s Arrow batches; when an object of the plan is gone, the rest of the
    task (after the last offset handed on) is re-planned on the stream's objects as they are now.

    A broker's compaction rewrites small objects into one and deletes the replaced ones
    ``compaction_delete_delay_ms`` (10 s) after the commit: a Spark job longer than that reads
    objects the controllers no longer list. The records are still stored, in the new object.
    Offsets no object holds any more (trimmed since) are OFFSET_OUT_OF_RANGE."""
    name = f"{task.topic}-{task.partition}"
    resume = task.start_offset
    for replans in range(max_replans + 1):
        try:
            for batch in read(task, blocks):
                if batch.num_rows:
                    resume = int(batch.column("offset")[batch.num_rows - 1].as_py()) + 1
                yield batch
            return
        except ObjectNotFound as gone:
            if replans == max_replans:
                raise FerryError(ErrorCode.OFFSET_OUT_OF_RANGE, f"{name}: object {gone.key!r} is gone, "
                                 f"{max_replans} times after re-planning; the stream is being rewritten") from None
            spans = covering_objects(current_objects(task), resume, task.end_offset)
            if spans is None:
                raise FerryError(ErrorCode.OFFSET_OUT_OF_RANGE, f"{name}: offsets {resume}..{task.end_offset} "
                                 "are no longer stored (trimmed after the read was planned)") from None
            task, blocks = replace(task, start_offset=resume, objects=spans), None


def read_index(client: Any, s3: S3Config, obj: ObjectSpan) -> ObjectIndex:
    """An object's index: a GET of its tail (footer and, nearly always, the index), a second GET
    when the index is over 64 KiB."""
    tail_start = max(0, obj.size - TAIL_READ_BYTES)
    tail = get_range(client, s3.bucket, obj.object_key, tail_start, obj.size - 1)
    parsed = parse_tail(tail, tail_start, obj.object_key)
    if isinstance(parsed, ObjectIndex):
        return parsed
    first, stop = parsed
    body = get_range(client, s3.bucket, obj.object_key, first, stop - 1)
    return parse_index(body, first, _index_crc(tail), obj.object_key)


INDEX_READ_THREADS = 16


def read_indexes(client: Any, s3: S3Config, objects: Iterable[ObjectSpan]) -> dict[str, ObjectIndex]:
    """The indexes of ``objects``, GET in parallel (on the driver, while planning)."""
    spans = list(objects)
    if not spans:
        return {}
    with ThreadPoolExecutor(min(INDEX_READ_THREADS, len(spans)), thread_name_prefix="ferry-index") as pool:
        return dict(zip((o.object_key for o in spans), pool.map(lambda o: read_index(client, s3, o), spans),
                        strict=True))


def blocks_for_task(index: ObjectIndex, task: ReadTask, obj: ObjectSpan) -> tuple[IndexEntry, ...]:
    """The blocks of ``obj`` holding the task's stream from ``max(task start, object start)`` up to
    the task's end: a contiguous run, read with one ranged GET. Pure."""
    start = max(task.start_offset, obj.start_offset)
    blocks = tuple(b for b in index.blocks_for(task.stream_id, start, 1 << 62) if b.start_offset < task.end_offset)
    if not blocks:
        raise FerryError(ErrorCode.CORRUPT_MESSAGE, f"object {obj.object_key!r} holds no block of stream "
                         f"{task.stream_id} at offset {start}, though the controllers list it there")
    return blocks


def fetch_blocks(client: Any, s3: S3Config, obj: ObjectSpan, blocks: Sequence[IndexEntry]) -> bytes:
    """A run of blocks of one object, one ranged GET, each block's CRC checked."""
    first, last = blocks[0].position, blocks[-1].position + blocks[-1].size
    data = get_range(client, s3.bucket, obj.object_key, first, last - 1)
    view = memoryview(data)
    for block in blocks:
        check_block(view[block.position - first: block.position - first + block.size], block, obj.object_key)
    return data


def fetch_stream_blocks(client: Any, s3: S3Config, obj: ObjectSpan, task: ReadTask,
                        blocks: Sequence[IndexEntry] | None = None) -> bytes:
    """The task's blocks of one object, CRC-checked: one GET when the blocks were located while
    planning, else the object's index first (two GETs, three when the index is over 64 KiB)."""
    if blocks is None:
        blocks = blocks_for_task(read_index(client, s3, obj), task, obj)
    return fetch_blocks(client, s3, obj, blocks)


def _index_crc(tail: bytes) -> int:
    from stream_storage.object_format import FOOTER_BYTES, parse_footer

    return parse_footer(tail[-FOOTER_BYTES:])[2]


_CLIENTS: dict[S3Config, Any] = {}
SPARK_REUSED_WORKER_ENV = "SPARK_REUSE_WORKER"  # set by Spark in the Python workers it reuses across tasks


def s3_client(s3: S3Config) -> Any:
    """One boto3 client per configuration per Python worker: building one loads botocore's service
    models (~0.1 s of JSON parsing), and Spark reuses its Python workers across tasks.

    In a reused Spark Python worker (``SPARK_REUSE_WORKER`` set, as Spark does when it reuses
    them), the objects the worker holds once the client is built (imported modules, the client's
    ~50,000 objects of service model) are then frozen out of the garbage collector
    (:func:`gc.freeze`): such a worker runs a full ``gc.collect()`` after every task, and the
    collector's oldest generation also runs as a read allocates, each walk over all of them taking
    ~0.1 s of CPU. They live as long as the worker; what the collector still sees is what a task
    allocates. Other processes (a driver, tests) are left as they are."""
    client = _CLIENTS.get(s3)
    if client is None:
        from stream_storage.s3_store import make_s3_client

        client = _CLIENTS[s3] = make_s3_client(s3)
        if os.environ.get(SPARK_REUSED_WORKER_ENV):
            gc.collect()  # garbage made so far is freed, not frozen
            gc.freeze()
    return client


def _batches_of(batch: Any, max_rows: int) -> Iterator[Any]:
    """``batch`` in zero-copy slices of at most ``max_rows`` rows (one fetched object may hold more)."""
    for first in range(0, batch.num_rows, max_rows):
        yield batch.slice(first, max_rows)


def read_task(s3: S3Config, task: ReadTask, include_headers: bool, max_rows: int,
              blocks: Sequence[Sequence[IndexEntry]] | None = None) -> Iterator[Any]:
    """One input partition's rows as Arrow batches, objects downloading ahead of the decoder.
    ``blocks``: per object of the task, its blocks (located while planning), else read here."""
    client = s3_client(s3)
    name = f"{task.topic}-{task.partition} (stream {task.stream_id})"
    columns = Columns(include_headers)
    with ThreadPoolExecutor(PREFETCH_OBJECTS, thread_name_prefix="ferry-spark-read") as pool:
        pending: list[Future[bytes]] = []
        located: Sequence[Sequence[IndexEntry] | None] = blocks if blocks is not None else [None] * len(task.objects)
        if len(located) != len(task.objects):
            raise FerryError(ErrorCode.INVALID_REQUEST, f"{len(located)} block lists for {len(task.objects)} objects")
        objects = iter(zip(task.objects, located, strict=True))

        def top_up() -> None:
            while len(pending) < PREFETCH_OBJECTS:
                item = next(objects, None)
                if item is None:
                    return
                pending.append(pool.submit(fetch_stream_blocks, client, s3, item[0], task, item[1]))

        top_up()
        expected = task.start_offset
        while pending:
            data = pending.pop(0).result()
            top_up()
            # the blocks' CRCs matched: the bytes are those the broker uploaded, whose batches were
            # checked when produced, so the batch CRCs need not be computed a second time
            expected = max(expected, decode_batches(data, task.start_offset, task.end_offset, columns, name,
                                                    check_batch_crc=False))
            if len(columns) >= max_rows or columns.buffer_bytes >= MAX_BATCH_BUFFER_BYTES:
                yield from _batches_of(to_arrow(columns, task.topic, task.partition), max_rows)
                columns = Columns(include_headers)
    if len(columns):
        yield from _batches_of(to_arrow(columns, task.topic, task.partition), max_rows)
    if expected < task.end_offset:
        raise FerryError(ErrorCode.CORRUPT_MESSAGE, f"{name}: the objects end at offset {expected}, before "
                         f"{task.end_offset}")


# -- readBy=object ----------------------------------------------------------------------------------


def index_of_object(data: bytes, key: str) -> ObjectIndex:
    """The index of a whole fetched object, from its own tail (no request)."""
    tail_start = max(0, len(data) - TAIL_READ_BYTES)
    tail = data[tail_start:]
    parsed = parse_tail(tail, tail_start, key)
    if isinstance(parsed, ObjectIndex):
        return parsed
    first, stop = parsed
    return parse_index(data[first:stop], first, _index_crc(tail), key)


def fetch_object(client: Any, s3: S3Config, read: ObjectRead) -> tuple[bytes, ObjectIndex]:
    """One whole object (one GET) and its index."""
    data = get_range(client, s3.bucket, read.object_key)
    if len(data) != read.size:
        raise FerryError(ErrorCode.CORRUPT_MESSAGE, f"object {read.object_key!r} has {len(data)} bytes, the "
                         f"controllers list {read.size}")
    return data, index_of_object(data, read.object_key)


def slice_range(data: bytes, index: ObjectIndex, read: ObjectRead, piece: StreamSlice) -> tuple[int, int]:
    """Where the blocks of one stream slice lie in a fetched object (first byte, end byte), their
    CRCs checked. Pure."""
    task = ReadTask(piece.topic, piece.partition, piece.stream_id, piece.start_offset, piece.end_offset, ())
    blocks = blocks_for_task(index, task, ObjectSpan(read.object_key, piece.start_offset, piece.end_offset,
                                                     read.size))
    first, last = blocks[0].position, blocks[-1].position + blocks[-1].size
    view = memoryview(data)
    for block in blocks:
        check_block(view[block.position: block.position + block.size], block, read.object_key)
    return first, last


def read_object_task(s3: S3Config, task: ObjectTask, include_headers: bool, max_rows: int,
                     read_gone: Callable[[ReadTask], Iterator[Any]]) -> Iterator[Any]:
    """One ``readBy=object`` input partition as Arrow batches, one per topic-partition at a time
    (the ``partition`` column is one value per batch), objects downloading ahead of the decoder.
    An object gone since the plan (compacted away) is read per slice the default way, from the
    stream's objects now (``read_gone``)."""
    client = s3_client(s3)
    columns: dict[tuple[str, int], Columns] = {}

    def flush(key: tuple[str, int]) -> Iterator[Any]:
        yield from _batches_of(to_arrow(columns.pop(key), key[0], key[1]), max_rows)

    with ThreadPoolExecutor(PREFETCH_OBJECTS, thread_name_prefix="ferry-spark-read") as pool:
        reads = iter(task.reads)
        pending: deque[tuple[ObjectRead, Future[tuple[bytes, ObjectIndex]]]] = deque()

        def top_up() -> None:
            while len(pending) < PREFETCH_OBJECTS:
                read = next(reads, None)
                if read is None:
                    return
                pending.append((read, pool.submit(fetch_object, client, s3, read)))

        top_up()
        while pending:
            read, fetched = pending.popleft()
            index: ObjectIndex | None
            try:
                data, index = fetched.result()
            except ObjectNotFound:
                data, index = b"", None
            top_up()
            for piece in read.slices:
                key = (piece.topic, piece.partition)
                if index is None:
                    if key in columns:
                        yield from flush(key)
                    yield from read_gone(ReadTask(piece.topic, piece.partition, piece.stream_id, piece.start_offset,
                                                  piece.end_offset, (ObjectSpan(read.object_key, piece.start_offset,
                                                                                piece.end_offset, read.size),)))
                    continue
                out = columns.setdefault(key, Columns(include_headers))
                name = f"{piece.topic}-{piece.partition} (stream {piece.stream_id})"
                first, last = slice_range(data, index, read, piece)
                reached = decode_batches(data, piece.start_offset, piece.end_offset, out, name, check_batch_crc=False,
                                         first_byte=first, end_byte=last)
                if reached < piece.end_offset:
                    raise FerryError(ErrorCode.CORRUPT_MESSAGE, f"{name}: object {read.object_key!r} ends at offset "
                                     f"{reached}, before {piece.end_offset}")
                if len(out) >= max_rows or out.buffer_bytes >= MAX_BATCH_BUFFER_BYTES:
                    yield from flush(key)
    for key in sorted(columns):
        yield from flush(key)
