"""A planner that stays warm: one Spark session and the window's samples kept for a process's life.

`ferry rebalance` reads a whole window of load samples and aggregates it in a fresh job, which is
right once but slow in a loop: the autoscaler and the balancer re-plan every few seconds, and
between two plans only a few sample objects are new (one per broker per metrics interval). So
this planner keeps the rows of every sample object of the window it has read, by key:

- a refresh lists the window's keys and reads only the **new** ones; objects that left the
  window are dropped. Many new objects (a cold start, a long pause) are read by the executors of
  the process's Spark session, which is started once and kept (``tools/rebalance/spark_session.py``);
  a few are fetched on the driver, where a handful of GETs cost less than scheduling a job;
- the aggregation over the window is the same as ``aggregate_samples`` (per partition
  ``sum(bytes) / sum(interval_ms)``, the owner and size of the latest sample), done on the
  driver over the rows kept — the window's rows are one per partition per interval;
- the plan is the driver's (``tools/rebalance/planner.py``), as in every mode.

Timings of each plan (read, aggregate, plan; objects read and whether Spark read them) are
returned with it, so a caller can report a warm plan's cost apart from the session's start.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol, Sequence, cast

import numpy as np
import pandas as pd

from metadata_quorum.kernel.errors import ErrorCode, FerryError
from tools.rebalance.model import ClusterLoad, make_cluster_load
from tools.rebalance.planner import Plan, PlannerConfig, plan, validate_modes
from tools.rebalance.samples import METRICS_PREFIX, SAMPLE_COLUMNS, decode_samples, keys_in_window

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

SPARK_MIN_OBJECTS = 64
"""New objects at or above this count are read by a Spark job; fewer are fetched on the driver."""

DRIVER_READERS = 8
"""Concurrent GETs when the driver reads the new objects itself."""

_SUM_COLUMNS = ["bytes_in", "bytes_out", "records_in", "records_out", "interval_ms"]


class SampleObjects(Protocol):
    """Where sample objects live: listing and reading on the driver, and reading in Spark."""

    def list(self, prefix: str) -> list[str]: ...

    def get(self, key: str) -> bytes: ...

    def spark_frame(self, spark: "SparkSession", keys: Sequence[str]) -> "DataFrame": ...


class S3Objects:
    """Samples in a bucket: the driver lists, Spark's executors GET (``read_samples_s3``)."""

    def __init__(self, endpoint_url: str, bucket: str, region: str = "us-east-1") -> None:
        from stream_storage.config import S3Config
        from tools.rebalance.samples import S3SampleSource

        self.source = S3SampleSource(endpoint_url, bucket, region)
        self.config = S3Config(endpoint_url=endpoint_url, bucket=bucket, region=region)

    def list(self, prefix: str) -> list[str]:
        return self.source.list(prefix)

    def get(self, key: str) -> bytes:
        return self.source.get(key)

    def spark_frame(self, spark: "SparkSession", keys: Sequence[str]) -> "DataFrame":
        from tools.rebalance.aggregate import read_samples_s3

        return read_samples_s3(spark, self.config, keys)


class LocalObjects:
    """Samples in a local directory laid out like the bucket (``ferry rebalance --input``)."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root).resolve()

    def list(self, prefix: str) -> list[str]:
        from tools.rebalance.samples import local_sample_files

        return [k for k in local_sample_files(self.root) if k.startswith(prefix)]

    def get(self, key: str) -> bytes:
        return (self.root / key).read_bytes()

    def spark_frame(self, spark: "SparkSession", keys: Sequence[str]) -> "DataFrame":
        from tools.rebalance.aggregate import read_samples

        return read_samples(spark, [str(self.root / k) for k in keys])


@dataclass
class WarmPlan:
    """One plan of the warm planner, with what it cost."""

    cluster: ClusterLoad
    result: Plan
    read_s: float
    aggregate_s: float
    plan_s: float
    new_objects: int
    window_objects: int
    spark_read: bool

    @property
    def total_s(self) -> float:
        return self.read_s + self.aggregate_s + self.plan_s


def decode_frame(body: bytes) -> pd.DataFrame:
    """One sample object's JSON lines as a frame of the sample columns."""
    if not body.strip():
        return pd.DataFrame({c: pd.Series(dtype="object" if c == "topic" else "int64") for c in SAMPLE_COLUMNS})
    samples = decode_samples(body)
    return pd.DataFrame({c: [getattr(s, c) for s in samples] for c in SAMPLE_COLUMNS})


def aggregate_rows(rows: pd.DataFrame, brokers: Sequence[int] | None = None) -> ClusterLoad:
    """The window's rows per partition, as ``aggregate_samples`` computes them in Spark."""
    rows = rows[rows["interval_ms"] > 0]
    if rows.empty:
        raise FerryError(ErrorCode.INVALID_REQUEST, "no load samples in the window: nothing to plan")
    ordered = rows.sort_values(["ts_ms", "broker_id"], kind="stable")
    groups = ordered.groupby(["topic", "partition"], sort=True)
    latest = groups[["broker_id", "size_bytes"]].last()
    sums = groups[_SUM_COLUMNS].sum()
    covered = sums["interval_ms"].to_numpy(np.float64)
    rate: Callable[[str], np.ndarray] = lambda col: sums[col].to_numpy(np.float64) * 1000.0 / covered  # noqa: E731
    index = sums.index
    return make_cluster_load(index.get_level_values("topic").to_numpy(dtype=object),
                             index.get_level_values("partition").to_numpy(np.int64),
                             latest["broker_id"].to_numpy(np.int64), rate("bytes_in"), rate("bytes_out"),
                             latest["size_bytes"].to_numpy(np.int64),
                             brokers=None if brokers is None else sorted(set(brokers)),
                             requests=rate("records_in") + rate("records_out"))


def with_owners(cluster: ClusterLoad, leaders: Mapping[tuple[str, int], int]) -> ClusterLoad:
    """The load with each partition owned by its current leader where known: a sample's owner lags
    a move by up to a metrics interval, and a plan must start from where partitions are now."""
    owners = np.array([leaders.get((str(t), int(p)), int(o)) if leaders.get((str(t), int(p)), -1) >= 0 else int(o)
                       for t, p, o in zip(cluster.topics, cluster.partitions, cluster.owners, strict=True)],
                      dtype=np.int64)
    return cluster.with_owners(owners)


@dataclass
class WarmPlanner:
    """Keeps the window's sample rows and a Spark session between plans (see the module docstring)."""

    objects: SampleObjects
    window_ms: int
    master: str = "local[2]"
    spark_min_objects: int = SPARK_MIN_OBJECTS
    _rows: dict[str, pd.DataFrame] = field(default_factory=dict)
    _spark: Any = None
    end_ms: int | None = None

    def session(self) -> "SparkSession":
        """The process's Spark session, started on first use and kept."""
        if self._spark is None:
            from tools.rebalance.spark_session import spark_session

            self._spark = spark_session(self.master)
        return cast("SparkSession", self._spark)

    def refresh(self, end_ms: int | None = None) -> tuple[int, bool]:
        """Read the window's new objects and forget those that left it: (objects read, by Spark?)."""
        keys, self.end_ms = keys_in_window(self.objects.list(METRICS_PREFIX), self.window_ms, end_ms)
        wanted = set(keys)
        for key in [k for k in self._rows if k not in wanted]:
            del self._rows[key]
        new = [k for k in keys if k not in self._rows]
        by_spark = len(new) >= self.spark_min_objects
        if by_spark:
            import warnings

            from tools.rebalance.samples import sample_key

            frame = self.objects.spark_frame(self.session(), new)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)
                rows = cast(pd.DataFrame, frame.select(*SAMPLE_COLUMNS).toPandas())
            # the object a row came from is its (broker, ts): Spark's readers do not keep the key
            rows["_key"] = [sample_key(int(b), int(t)) for b, t in zip(rows["broker_id"], rows["ts_ms"], strict=True)]
            for key, part in rows.groupby("_key", sort=False):
                self._rows[str(key)] = part.drop(columns=["_key"])
            for key in new:  # empty objects yield no rows: remember them as read all the same
                self._rows.setdefault(key, decode_frame(b""))
        elif new:
            # a few GETs, concurrently: on S3 each is a round trip (tens of ms behind a real endpoint)
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(max_workers=min(DRIVER_READERS, len(new))) as pool:
                bodies = list(pool.map(self.objects.get, new))
            for key, body in zip(new, bodies, strict=True):
                self._rows[key] = decode_frame(body)
        return len(new), by_spark

    def cluster(self, brokers: Sequence[int] | None = None) -> ClusterLoad:
        """The window's per-partition load (``brokers``: every broker that may hold partitions)."""
        frames = [f for f in self._rows.values() if not f.empty]
        if not frames:
            raise FerryError(ErrorCode.INVALID_REQUEST, "no load samples in the window: nothing to plan")
        return aggregate_rows(pd.concat(frames, ignore_index=True), brokers)

    @property
    def window_objects(self) -> int:
        return len(self._rows)

    def plan(self, config: PlannerConfig, brokers: Sequence[int] | None = None, end_ms: int | None = None,
             adjust: Callable[[ClusterLoad], ClusterLoad] | None = None,
             planner: Callable[[ClusterLoad, PlannerConfig], Plan] = plan) -> WarmPlan:
        """Refresh, aggregate and plan; every part timed. ``adjust``: applied to the window's load
        before planning (``with_owners``: the controllers' current leaders); ``planner``: the
        planning function (the autoscaler's is ``scale_out.plan_scale_out``)."""
        started = time.perf_counter()
        new, by_spark = self.refresh(end_ms)
        read = time.perf_counter()
        cluster = self.cluster(brokers)
        if adjust is not None:
            cluster = adjust(cluster)
        if config.add_brokers:
            cluster = cluster.with_brokers([b for b in cluster.brokers if b not in set(config.add_brokers)])
        aggregated = time.perf_counter()
        validate_modes(cluster, config)
        result = planner(cluster, config)
        planned = time.perf_counter()
        return WarmPlan(cluster, result, read - started, aggregated - read, planned - aggregated, new,
                        self.window_objects, by_spark)
