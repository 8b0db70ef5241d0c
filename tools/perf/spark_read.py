"""`ferry perf spark-read`: Spark reading a topic straight from S3 through the ``ferry`` data source,
against a raw parallel S3 GET of the same objects in the same run.

A local cluster (moto S3, 3 controllers, 3 brokers) takes ``--size-mb`` of 1 KiB records from a
librdkafka producer over ``--partitions`` partitions; once the last record is committed (the
freshness lag, measured too), the topic's objects are

1. **raw**: GET whole, 16 at a time, by one process with boto3 (the ceiling: bytes off the endpoint;
   the issue's target is a ratio to this);
1b. **raw ranged**: the data source's own requests (each object's index tail, then each
   partition's run of blocks), 16 at a time, no Spark and no decoding: what the endpoint charges
   for more, smaller requests. The embedded S3 (moto) reads and copies the whole object for every
   ranged GET, so there a stream-set object read by ~3 partitions costs ~3-4 times the server CPU
   of one whole GET, on the same 2 cores as Spark; S3 itself charges a ranged GET by its bytes;
2. **data source**: ``spark.read.format("ferry")`` on ``local[2]``, ``count`` and ``sum(length(value))``,
   which decodes every record into the Kafka source's columns and hands them to the JVM; once
   with the default layout (one input partition per topic-partition: each object is read by
   every partition it holds, after the driver read its index) and once with ``readBy=object``
   (each object GET whole, once);
3. **Spark floor**: the same query over a Python data source that yields the same number of rows
   of the same size from memory (one Arrow batch built per partition, handed over again and
   again): what Spark itself costs to take the rows from Python workers and aggregate them, with
   no S3 and no decoding. No Python data source can be faster than this.

MB/s is object bytes over wall time for every read. The brokers' object compaction is off, so the
objects stay the ones the brokers uploaded (stream-set objects of up to 8 MiB, each holding several
partitions' streams) and the raw GET and the data source read the same objects in every round
(with compaction on, objects older than a minute are rewritten and the replaced ones deleted in
the middle of a run). The CPU seconds each process spent (S3 server, the reader, Spark's JVM,
its Python workers) are reported per read, from /proc: on 2 cores the reads are CPU-bound, so
that is where the time goes. Spark's start-up and a first full read (JVM and Python worker
warm-up) are measured apart, and so is the fixed cost of a query (a one-record-per-partition
read: Spark starts Python workers to create the source and plan the read).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Iterator

from tools.admin import Admin
from tools.client import TopicPartition
from tools.cluster import LocalCluster
from tools.spark_read.offsets import PartitionStream
from tools.spark_read.source import ReadOptions, describe_streams

MiB = 1024 * 1024
RECORD_BYTES = 1024
TOPIC = "spark-read"
TARGET_RATIO = 0.5
RAW_GET_THREADS = 16


def produce(bootstrap: str, partitions: int, total_bytes: int, record_bytes: int) -> tuple[int, float, float]:
    """Records produced, MB/s, and the monotonic time the last acknowledgement arrived."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                         "batch.size": 256 * 1024, "linger.ms": 5, "compression.type": "none",
                         "queue.buffering.max.kbytes": 64 * 1024, "socket.nagle.disable": True})
    value = os.urandom(record_bytes)
    count = total_bytes // record_bytes
    failures: list[str] = []
    last_ack = [0.0]

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            failures.append(str(err))
        last_ack[0] = time.monotonic()

    started = time.monotonic()
    for i in range(count):
        key = f"key-{i % 1000}".encode()
        while True:
            try:
                producer.produce(TOPIC, value=value, key=key, partition=i % partitions, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.005)
        if i % 256 == 0:
            producer.poll(0)
    producer.flush(600)
    if failures:
        raise RuntimeError(f"{len(failures)} records failed: {failures[0]}")
    return count, count * record_bytes / MiB / (time.monotonic() - started), last_ack[0]


async def wait_committed(options: ReadOptions, records: int, timeout_s: float = 120.0) -> list[PartitionStream]:
    deadline = time.monotonic() + timeout_s
    while True:
        streams = await describe_streams(options)
        if sum(s.end_offset - s.start_offset for s in streams) >= records:
            return streams
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {sum(s.end_offset for s in streams)} of {records} records committed")
        await asyncio.sleep(0.02)


NO_COMPACTION = {"storage": {"compaction_interval_ms": 0}}
CLOCK_TICKS_PER_S = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _cpu_s(pid: int, with_children: bool = True) -> float:
    """CPU seconds of one process (user + system, plus its waited-for children's), from /proc."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return sum(int(x) for x in fields[11:15 if with_children else 13]) / CLOCK_TICKS_PER_S


def _children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.append(int(entry))
            except (OSError, ValueError, IndexError):
                continue
    return out


def _tree_cpu_s(pid: int) -> float:
    try:
        return _cpu_s(pid) + sum(_tree_cpu_s(c) for c in _children(pid))
    except OSError:
        return 0.0


class CpuMeter:
    """CPU seconds spent by named processes over a ``with`` block (Linux /proc; empty elsewhere).
    ``("tree", pid)`` counts a process with its descendants, ``("children", pid)`` only the
    descendants (Spark's Python workers under the JVM), ``("own", pid)`` the process alone, and
    ``("self", 0)`` this process's threads."""

    def __init__(self, processes: dict[str, tuple[str, int]]) -> None:
        self.processes = processes if os.path.isdir("/proc") else {}
        self.cpu_s: dict[str, float] = {}

    def _read(self) -> dict[str, float]:
        out = {}
        for name, (kind, pid) in self.processes.items():
            if kind == "self":
                out[name] = time.process_time()
            elif kind == "own":
                out[name] = _cpu_s(pid, with_children=False)
            elif kind == "children":
                out[name] = sum(_tree_cpu_s(c) for c in _children(pid))
            else:
                out[name] = _tree_cpu_s(pid)
        return out

    def __enter__(self) -> "CpuMeter":
        self._start = self._read()
        return self

    def __exit__(self, *exc: Any) -> None:
        end = self._read()
        self.cpu_s = {k: round(end[k] - self._start[k], 2) for k in end}


def spark_floor_source(rows_per_partition: int, partitions: int, value_bytes: int) -> Any:
    """A Python data source of ``partitions`` x ``rows_per_partition`` rows with the ferry source's
    columns and values of ``value_bytes``: one Arrow batch is built per partition and yielded over
    and over, so its read costs Spark's hand-off and the query only."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    from tools.spark_read.source import KAFKA_SCHEMA_DDL

    class FloorReader(DataSourceReader):
        def partitions(self) -> list[InputPartition]:
            return [InputPartition(p) for p in range(partitions)]

        def read(self, partition: InputPartition) -> Iterator[Any]:
            import numpy as np
            import pyarrow as pa

            n = min(10_000, rows_per_partition)
            value = os.urandom(value_bytes)
            batch = pa.RecordBatch.from_arrays(
                [pa.array([b"key-%d" % (i % 1000) for i in range(n)], pa.binary()), pa.array([value] * n, pa.binary()),
                 pa.array([TOPIC] * n, pa.string()), pa.array(np.full(n, partition.value, dtype=np.int32)),
                 pa.array(np.arange(n, dtype=np.int64)),
                 pa.array(np.full(n, 1_700_000_000_000_000, dtype=np.int64), pa.timestamp("us", tz="UTC")),
                 pa.array(np.zeros(n, dtype=np.int32))],
                names=["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"])
            for first in range(0, rows_per_partition, n):
                yield batch.slice(0, min(n, rows_per_partition - first))

    class FloorSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return "ferry-perf-floor"

        def schema(self) -> str:
            return KAFKA_SCHEMA_DDL

        def reader(self, schema: Any) -> DataSourceReader:
            return FloorReader()

    return FloorSource


def raw_get_mb_s(options: ReadOptions, keys: dict[str, int]) -> tuple[float, int]:
    """Every object GET whole, RAW_GET_THREADS at a time: MB/s and bytes."""
    from stream_storage.s3_store import make_s3_client

    client = make_s3_client(options.s3)

    def get(key: str) -> int:
        return len(client.get_object(Bucket=options.s3.bucket, Key=key)["Body"].read())

    started = time.perf_counter()
    with ThreadPoolExecutor(RAW_GET_THREADS) as pool:
        total = sum(pool.map(get, sorted(keys)))
    return total / MiB / (time.perf_counter() - started), total


def raw_ranged_get_mb_s(options: ReadOptions, object_bytes: int) -> float:
    """The data source's own requests without Spark or decoding: each object's index tail, then
    every partition's run of blocks per object (ranged GETs), RAW_GET_THREADS at a time. MB/s of
    object bytes. Against the whole-object GET this isolates what the endpoint charges for more,
    smaller requests: the embedded S3 (moto) reads and copies the whole object for a ranged GET,
    so on it a ranged GET costs about as much server CPU as a whole one; on S3 it does not."""
    from tools.spark_read.source import FerryInputPartition, FerryReader, get_range, s3_client

    client = s3_client(options.s3)
    started = time.perf_counter()
    partitions = FerryReader(options).partitions()  # the driver's plan: one index GET per object
    ranges = [(obj.object_key, blocks[0].position, blocks[-1].position + blocks[-1].size - 1)
              for part in partitions if isinstance(part, FerryInputPartition)
              for obj, blocks in zip(part.task.objects, part.blocks or (), strict=False)]
    with ThreadPoolExecutor(RAW_GET_THREADS) as pool:
        list(pool.map(lambda r: len(get_range(client, options.s3.bucket, *r)), ranges))
    return object_bytes / MiB / (time.perf_counter() - started)


def spark_read(spark: Any, opts: dict[str, str], fmt: str = "ferry") -> tuple[float, int, int]:
    """Seconds, records and value bytes of one full read through the data source."""
    from pyspark.sql import functions as F

    started = time.perf_counter()
    row = (spark.read.format(fmt).options(**opts).load()
           .agg(F.count(F.lit(1)).alias("n"), F.sum(F.length("value")).alias("bytes")).collect()[0])
    return time.perf_counter() - started, int(row["n"]), int(row["bytes"] or 0)


def run(size_mb: int, partitions: int, record_bytes: int, master: str, rounds: int) -> dict[str, Any]:
    warnings.filterwarnings("ignore", category=FutureWarning)
    from tools.rebalance.spark_session import spark_session
    from tools.spark_read import register

    with LocalCluster(brokers=3, broker_overrides=NO_COMPACTION) as cluster:
        async def create() -> None:
            async with Admin(bootstrap_controllers=cluster.controller_bootstrap) as admin:
                await admin.create_topic(TOPIC, partitions)
                for p in range(partitions):
                    await admin.wait_for_leader(TopicPartition(TOPIC, p), timeout_s=30)

        asyncio.run(create())
        opts = {"topic": TOPIC, "bootstrap.controller": ",".join(cluster.controller_bootstrap),
                "s3.endpoint": str(cluster.s3_endpoint), "s3.bucket": cluster.bucket}
        options = ReadOptions.parse(opts)
        records, produce_mb_s, last_ack = produce(cluster.kafka_bootstrap, partitions, size_mb * MiB, record_bytes)
        streams = asyncio.run(wait_committed(options, records))
        freshness_s = time.monotonic() - last_ack
        objects = {o.object_key: o.size for s in streams for o in s.objects}
        started = time.perf_counter()
        spark = spark_session(master, app_name="ferry-perf-spark-read")
        register(spark)
        floor = spark_floor_source(records // partitions, partitions, record_bytes)
        spark.dataSource.register(floor)
        startup_s = time.perf_counter() - started
        jvm = [c for c in _children(os.getpid()) if _is_java(c)]
        s3_pid = cluster.s3.process.pid if cluster.s3 is not None and cluster.s3.process is not None else None
        raw_cpu = CpuMeter({"reader": ("self", 0), **({"s3_server": ("tree", s3_pid)} if s3_pid else {})})
        spark_procs = {"s3_server": ("tree", s3_pid)} if s3_pid else {}
        if jvm:
            spark_procs.update({"spark_jvm": ("own", jvm[0]), "python_workers": ("children", jvm[0])})
        spark_cpu, floor_cpu = CpuMeter(spark_procs), CpuMeter(spark_procs)
        # one untimed full read: every Python worker imports, builds its S3 client and loads Arrow
        warm_s, _n, _b = spark_read(spark, opts)
        # the fixed cost of a query: Spark starts Python workers to create the source and plan
        # the read (imports, controller metadata) whatever the size; a one-record-per-partition read
        tiny = dict(opts, endingOffsets=json.dumps({TOPIC: {str(s.partition): s.start_offset + 1 for s in streams}}))
        overhead_s = min(spark_read(spark, tiny)[0] for _ in range(2))
        spark_read(spark, {}, floor.name())  # warm-up
        by_object = dict(opts, readBy="object")
        spark_read(spark, by_object)  # warm-up
        from tools.peer.spark_kafka import spark_kafka_jars

        # Spark's own Kafka source on the same topic through the brokers: what users pick today
        kafka_opts = {"subscribe": TOPIC, "kafka.bootstrap.servers": cluster.kafka_bootstrap,
                      "startingOffsets": "earliest", "endingOffsets": "latest"} if spark_kafka_jars() else None
        kafka_runs: list[float] = []
        if kafka_opts is not None:
            spark_read(spark, kafka_opts, "kafka")  # warm-up
        raw, ranged, spark_runs, object_runs, floor_runs = [], [], [], [], []
        raw_cpus, ranged_cpus, spark_cpus, object_cpus, floor_cpus = [], [], [], [], []
        ranged_cpu, object_cpu = CpuMeter(raw_cpu.processes), CpuMeter(spark_procs)
        total_bytes = 0
        for _ in range(rounds):
            with raw_cpu:
                mb_s, total_bytes = raw_get_mb_s(options, objects)
            raw.append(mb_s)
            raw_cpus.append(raw_cpu.cpu_s)
            with ranged_cpu:
                ranged.append(raw_ranged_get_mb_s(options, total_bytes))
            ranged_cpus.append(ranged_cpu.cpu_s)
            with spark_cpu:
                seconds, n, value_bytes = spark_read(spark, opts)
            if n != records or value_bytes != records * record_bytes:
                raise RuntimeError(f"the data source read {n} records ({value_bytes} value bytes), "
                                   f"expected {records} ({records * record_bytes})")
            spark_runs.append(total_bytes / MiB / seconds)
            spark_cpus.append(spark_cpu.cpu_s)
            with object_cpu:
                seconds, n, value_bytes = spark_read(spark, by_object)
            if n != records or value_bytes != records * record_bytes:
                raise RuntimeError(f"the data source (readBy=object) read {n} records ({value_bytes} value bytes), "
                                   f"expected {records} ({records * record_bytes})")
            object_runs.append(total_bytes / MiB / seconds)
            object_cpus.append(object_cpu.cpu_s)
            with floor_cpu:
                seconds, n, value_bytes = spark_read(spark, {}, floor.name())
            if n != records - records % partitions:
                raise RuntimeError(f"the floor source gave {n} rows, expected {records - records % partitions}")
            floor_runs.append(total_bytes / MiB / seconds)
            floor_cpus.append(floor_cpu.cpu_s)
            if kafka_opts is not None:
                seconds, n, value_bytes = spark_read(spark, kafka_opts, "kafka")
                if n != records:
                    raise RuntimeError(f"Spark's Kafka source read {n} records, expected {records}")
                kafka_runs.append(total_bytes / MiB / seconds)
        spark.stop()
    best_raw, best_spark, best_floor, best_ranged = max(raw), max(spark_runs), max(floor_runs), max(ranged)
    best_object = max(object_runs)
    cpu_s = {"raw_get": raw_cpus[raw.index(best_raw)], "raw_ranged_get": ranged_cpus[ranged.index(best_ranged)],
             "spark_read": spark_cpus[spark_runs.index(best_spark)],
             "spark_read_by_object": object_cpus[object_runs.index(best_object)],
             "spark_floor": floor_cpus[floor_runs.index(best_floor)]}
    raw_cpu_s = sum(cpu_s["raw_get"].values())
    best_s = total_bytes / MiB / best_spark
    # None when the whole read took no longer than a one-record read (a small --size-mb on a busy machine)
    streaming_mb_s = total_bytes / MiB / (best_s - overhead_s) if best_s > overhead_s else None
    return {
        "size_mb": size_mb, "partitions": partitions, "record_bytes": record_bytes, "records": records,
        "objects": len(objects), "object_bytes": total_bytes, "master": master,
        "produce_mb_s": produce_mb_s, "freshness_s": freshness_s,
        "spark_startup_s": startup_s, "spark_warmup_s": warm_s,
        "raw_get_mb_s": best_raw, "spark_read_mb_s": best_spark, "ratio": best_spark / best_raw,
        "spark_read_records_per_s": records * best_spark / (total_bytes / MiB),
        "spark_query_overhead_s": overhead_s, "spark_read_mb_s_after_overhead": streaming_mb_s,
        "ratio_after_overhead": None if streaming_mb_s is None else streaming_mb_s / best_raw,
        "raw_get_mb_s_runs": raw, "spark_read_mb_s_runs": spark_runs,
        "spark_read_by_object_mb_s": best_object, "ratio_by_object": best_object / best_raw,
        "spark_read_by_object_mb_s_runs": object_runs,
        "spark_floor_mb_s": best_floor, "floor_ratio": best_floor / best_raw, "spark_floor_mb_s_runs": floor_runs,
        "spark_read_vs_floor": best_spark / best_floor,
        # rows/s over the same rows: the ratio of MB/s; the better of the two layouts
        "kafka_source_mb_s": max(kafka_runs) if kafka_runs else None, "kafka_source_mb_s_runs": kafka_runs,
        "ferry_vs_kafka_source": max(best_spark, best_object) / max(kafka_runs) if kafka_runs else None,
        "raw_ranged_get_mb_s": best_ranged, "raw_ranged_get_mb_s_runs": ranged,
        "spark_read_vs_ranged": best_spark / best_ranged,
        "cpu_s": cpu_s,
        # the ratio the wall times would show if every read kept both cores busy: on a shared
        # machine the wall ratio also measures how the scheduler splits the cores between 16 GET
        # threads and Spark's few, the CPU seconds do not
        "cpu_ratio": {k: raw_cpu_s / max(1e-9, sum(v.values())) for k, v in cpu_s.items()},
        "load_avg_1m": os.getloadavg()[0],
        "layout": "objects as uploaded (compaction off)",
        "target_ratio": TARGET_RATIO, "meets_target": max(best_spark, best_object) / best_raw >= TARGET_RATIO,
    }


def _is_java(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return b"java" in f.read().split(b"\0")[0]
    except OSError:
        return False


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="ferry perf spark-read", description=__doc__.splitlines()[0])
    p.add_argument("--size-mb", type=int, default=1024, help="topic size (default 1024 = 1 GiB)")
    p.add_argument("--partitions", type=int, default=8)
    p.add_argument("--record-bytes", type=int, default=RECORD_BYTES)
    p.add_argument("--rounds", type=int, default=2, help="reads of each kind; the best is reported")
    p.add_argument("--master", default="local[2]")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    if args.size_mb <= 0 or args.partitions <= 0 or args.record_bytes <= 0 or args.rounds <= 0:
        print("Error: INVALID_REQUEST: sizes, partitions and rounds must be positive", file=sys.stderr)
        return 1
    result = run(args.size_mb, args.partitions, args.record_bytes, args.master, args.rounds)
    if args.json:
        print(json.dumps(result))
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"spark-read: {result['size_mb']} MiB, {result['records']:,} records of "
                        f"{result['record_bytes']} B, {result['partitions']} partitions, {result['objects']} objects")
    for col in ("read", "MB/s", "vs raw"):
        table.add_column(col)
    table.add_row(f"raw S3 GET ({RAW_GET_THREADS} threads)", f"{result['raw_get_mb_s']:.1f}", "1.00")
    table.add_row(f"raw ranged GETs of the data source's requests ({RAW_GET_THREADS} threads)",
                  f"{result['raw_ranged_get_mb_s']:.1f}",
                  f"{result['raw_ranged_get_mb_s'] / result['raw_get_mb_s']:.2f}")
    table.add_row(f"data source ({result['master']})", f"{result['spark_read_mb_s']:.1f}",
                  f"{result['ratio']:.2f} (target ≥ {TARGET_RATIO})")
    table.add_row(f"data source, readBy=object ({result['master']})", f"{result['spark_read_by_object_mb_s']:.1f}",
                  f"{result['ratio_by_object']:.2f} (target ≥ {TARGET_RATIO})")
    table.add_row(f"Spark floor: in-memory rows ({result['master']})", f"{result['spark_floor_mb_s']:.1f}",
                  f"{result['floor_ratio']:.2f}")
    if result["kafka_source_mb_s"] is not None:
        table.add_row(f"Spark's Kafka source through the brokers ({result['master']})",
                      f"{result['kafka_source_mb_s']:.1f}",
                      f"{result['kafka_source_mb_s'] / result['raw_get_mb_s']:.2f} (ferry / this: "
                      f"{result['ferry_vs_kafka_source']:.2f}, target ≥ 2.0)")
    Console().print(table)
    for name, cpu in result["cpu_s"].items():
        print(f"CPU seconds, {name}: " + ", ".join(f"{k} {v:.2f}" for k, v in cpu.items()) +
              f" (total {sum(cpu.values()):.2f}; raw GET's / this: {result['cpu_ratio'][name]:.2f})")
    print(f"load average (1 min) at the end: {result['load_avg_1m']:.1f} on {os.cpu_count()} cores")
    streaming = result["spark_read_mb_s_after_overhead"]
    print(f"fixed cost of a query (Python workers that create the source and plan the read): "
          f"{result['spark_query_overhead_s']:.1f} s; without it " +
          ("n/a (the read took no longer)" if streaming is None else
           f"{streaming:.1f} MB/s ({result['ratio_after_overhead']:.2f} x raw)"))
    print(f"produce {result['produce_mb_s']:.1f} MB/s; last record visible {result['freshness_s']:.2f} s after its "
          f"acknowledgement; Spark start-up {result['spark_startup_s']:.1f} s, warm-up read {result['spark_warmup_s']:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
