"""Aggregate load samples in Spark: per partition the mean rates over the window, per broker the sums.

The rate of a partition is its bytes over the window divided by the time its samples cover
(``sum(bytes) / sum(interval_ms)``), so a missed sample does not bias it; its owner is the broker
of its latest sample (a partition that moved during the window is counted where it is now).
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Iterator, Sequence, cast

import numpy as np
import pandas as pd

from metadata_quorum.kernel.errors import ErrorCode, FerryError
from tools.rebalance.model import ClusterLoad, make_cluster_load

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

    from stream_storage.config import S3Config

SAMPLE_SCHEMA_DDL = ("ts_ms LONG, interval_ms LONG, broker_id INT, topic STRING, partition INT, bytes_in LONG, "
                     "bytes_out LONG, records_in LONG, records_out LONG, size_bytes LONG")


@dataclass
class Aggregated:
    cluster: ClusterLoad
    partitions: pd.DataFrame  # one row per partition: owner, rates per second, size, samples
    brokers: pd.DataFrame  # one row per broker: sums of its partitions' rates, partition count
    end_ms: int
    rows_in_window: int


def read_samples(spark: "SparkSession", paths: Sequence[str]) -> "DataFrame":
    if not paths:
        raise FerryError(ErrorCode.INVALID_REQUEST, "no load samples found: nothing to plan")
    return spark.read.schema(SAMPLE_SCHEMA_DDL).option("mode", "FAILFAST").json(list(paths))


def read_samples_s3(spark: "SparkSession", s3: "S3Config", keys: Sequence[str],
                    objects_per_task: int = 16) -> "DataFrame":
    """The sample objects ``keys`` read by the executors straight from S3.

    Only the key list travels from the driver; each task GETs its objects with boto3 and parses
    them with Arrow's JSON reader. So the job runs the same on ``local[2]`` and on any cluster whose
    executors reach the endpoint (credentials: boto3's chain on the executors, see
    docs/rebalance.md), and nothing is copied through the driver or a shared disk.
    """
    if not keys:
        raise FerryError(ErrorCode.INVALID_REQUEST, "no load samples found: nothing to plan")
    from pyspark.sql.types import StructType

    schema = cast(StructType, StructType.fromDDL(SAMPLE_SCHEMA_DDL))
    tasks = max(1, min(len(keys) // objects_per_task + 1, 4 * spark.sparkContext.defaultParallelism))
    key_frame = spark.createDataFrame([(k,) for k in sorted(keys)], "key STRING").repartition(tasks)
    return key_frame.mapInArrow(partial(_fetch_sample_objects, s3, SAMPLE_SCHEMA_DDL), schema)


def _fetch_sample_objects(s3: "S3Config", schema_ddl: str, batches: Iterator["pa.RecordBatch"]
                          ) -> Iterator["pa.RecordBatch"]:
    """Executor side of read_samples_s3: GET each object and parse its JSON lines with Arrow."""
    import io

    import pyarrow as pa
    from pyarrow import json as pa_json

    from stream_storage.s3_store import make_s3_client

    schema = pa.schema([pa.field(name, pa.string() if kind == "STRING" else (pa.int32() if kind == "INT"
                                                                             else pa.int64()))
                        for name, kind in (col.split() for col in schema_ddl.split(", "))])
    client = make_s3_client(s3)
    options = pa_json.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
    for batch in batches:
        for key in batch.column("key").to_pylist():
            body = client.get_object(Bucket=s3.bucket, Key=key)["Body"].read()
            if not body.strip():
                continue
            table = pa_json.read_json(io.BytesIO(body), parse_options=options).select(schema.names).cast(schema)
            yield from table.to_batches()


def aggregate_samples(spark: "SparkSession", samples: "DataFrame", window_ms: int, end_ms: int | None = None,
                      brokers: Sequence[int] | None = None) -> Aggregated:
    """Window the samples and aggregate them in Spark; collect only the per-partition and per-broker rows."""
    from pyspark.sql import functions as F

    if window_ms <= 0:
        raise FerryError(ErrorCode.INVALID_REQUEST, f"--window-ms must be positive, got {window_ms}")
    if end_ms is None:
        first = samples.agg(F.max("ts_ms")).first()
        newest = None if first is None else first[0]
        if newest is None:
            raise FerryError(ErrorCode.INVALID_REQUEST, "no load samples found: nothing to plan")
        end_ms = int(newest)
    windowed = samples.where((F.col("ts_ms") > F.lit(end_ms - window_ms)) & (F.col("ts_ms") <= F.lit(end_ms))
                             & (F.col("interval_ms") > 0))
    per_partition = (windowed.groupBy("topic", "partition").agg(
        F.max_by("broker_id", "ts_ms").alias("owner"),
        F.sum("bytes_in").alias("bytes_in"), F.sum("bytes_out").alias("bytes_out"),
        F.sum("records_in").alias("records_in"), F.sum("records_out").alias("records_out"),
        F.sum("interval_ms").alias("covered_ms"), F.max_by("size_bytes", "ts_ms").alias("size_bytes"),
        F.count(F.lit(1)).alias("samples"))
        .withColumn("net_in", F.col("bytes_in") * 1000.0 / F.col("covered_ms"))
        .withColumn("net_out", F.col("bytes_out") * 1000.0 / F.col("covered_ms"))
        .withColumn("records_in_per_s", F.col("records_in") * 1000.0 / F.col("covered_ms"))
        .withColumn("records_out_per_s", F.col("records_out") * 1000.0 / F.col("covered_ms"))
        .drop("bytes_in", "bytes_out", "records_in", "records_out")).cache()
    per_broker = (per_partition.groupBy("owner").agg(
        F.sum("net_in").alias("net_in"), F.sum("net_out").alias("net_out"),
        F.sum("size_bytes").alias("size_bytes"), F.count(F.lit(1)).alias("partition_count"))
        .orderBy("owner"))
    with warnings.catch_warnings():  # pyspark's notice about the pandas version, on every collect
        warnings.simplefilter("ignore", FutureWarning)
        partitions = cast(pd.DataFrame, per_partition.toPandas())
        broker_rows = cast(pd.DataFrame, per_broker.toPandas())
    rows = int(partitions["samples"].sum()) if len(partitions) else 0
    per_partition.unpersist()
    if partitions.empty:
        raise FerryError(ErrorCode.INVALID_REQUEST,
                         f"no load samples in the window ({window_ms} ms ending at {end_ms}): nothing to plan")
    cluster = make_cluster_load(partitions["topic"].to_numpy(dtype=object), partitions["partition"].to_numpy(),
                                partitions["owner"].to_numpy(), partitions["net_in"].to_numpy(np.float64),
                                partitions["net_out"].to_numpy(np.float64), partitions["size_bytes"].to_numpy(),
                                brokers=None if brokers is None else sorted(set(brokers)),
                                requests=(partitions["records_in_per_s"] + partitions["records_out_per_s"])
                                .to_numpy(np.float64))
    return Aggregated(cluster, partitions, broker_rows, end_ms, rows)


def warm_up(spark: "SparkSession", scratch_dir: str) -> float:
    """Run one tiny aggregation: the JVM's class loading and code generation are paid here, once per
    session, instead of inside the first real plan (seconds on a busy machine). Returns its seconds."""
    import time
    from pathlib import Path

    from tools.rebalance.samples import PartitionSample, encode_samples, write_samples_dir

    started = time.perf_counter()
    rows = [PartitionSample(1_000_000 + k * 1_000, 1_000, b, "warm-up", p, 100 * (p + 1), 50, 1, 1, 10)
            for k in range(2) for b in range(2) for p in range(b * 4, b * 4 + 4)]
    paths = [str(write_samples_dir(Path(scratch_dir), r.broker_id, r.ts_ms, encode_samples([r]))) for r in rows]
    aggregate_samples(spark, read_samples(spark, sorted(set(paths))), window_ms=10_000)
    return time.perf_counter() - started
