"""Spark's own Kafka source and sink (``format("kafka")``, Kafka's Java client inside) on a real
Ferry cluster: the batch sink writes, a Structured Streaming query with a checkpoint copies the
topic through the streaming sink while a partition of each topic moves between brokers, and the
batch source reads both topics back; nothing is lost, nothing is duplicated, and every partition
is in order."""
from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

import pytest

from tools.admin import Admin
from tools.client import TopicPartition
from tools.cluster import LocalCluster
from tools.peer.spark_kafka import spark_kafka_jars, spark_kafka_jars_dir

pytestmark = [pytest.mark.integration, pytest.mark.spark]

SOURCE, SINK, PARTITIONS = "spark-in", "spark-out", 3
FIRST, SECOND, THIRD = 3_000, 3_000, 600  # records of each write, by sequence number
PER_TRIGGER = 1_500  # maxOffsetsPerTrigger: the stream reads in several micro-batches


@pytest.fixture(scope="session")  # the session's scope: asked first, it skips before Spark starts
def jars() -> None:
    if spark_kafka_jars() is None:
        print(f"Spark's Kafka connector jars are not in {spark_kafka_jars_dir()} (make spark-kafka-jars)")
        pytest.skip("Spark's Kafka connector jars are not installed (make spark-kafka-jars)")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, jars):
    c = LocalCluster(str(tmp_path_factory.mktemp("cluster")), brokers=2)
    c.start()

    async def create() -> None:
        async with Admin(bootstrap_controllers=c.controller_bootstrap) as admin:
            for topic in (SOURCE, SINK):
                await admin.create_topic(topic, PARTITIONS)
                for p in range(PARTITIONS):
                    await admin.wait_for_leader(TopicPartition(topic, p), timeout_s=30)

    asyncio.run(create())
    yield c
    c.stop(graceful=False)


def write_sequence(spark: Any, bootstrap: str, start: int, end: int) -> None:
    """Records ``start..end-1`` through Spark's batch Kafka sink: record ``i`` goes to partition
    ``i % 3`` with key ``k<i>`` and value ``<i>``, all written by one task in sequence order, so
    the order they must have in each partition is defined."""
    from pyspark.sql import functions as F

    seq = F.col("id")
    frame = spark.range(start, end, numPartitions=1).select(
        F.concat(F.lit("k"), seq.cast("string")).alias("key"), seq.cast("string").alias("value"),
        (seq % PARTITIONS).cast("int").alias("partition"))
    frame.write.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("topic", SOURCE).save()


def read_topic(spark: Any, bootstrap: str, topic: str) -> dict[int, list[tuple[int, str, str]]]:
    """Every record of ``topic`` through Spark's batch Kafka source: (offset, key, value) by partition."""
    rows = (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
            .option("startingOffsets", "earliest").option("endingOffsets", "latest").load()
            .selectExpr("partition", "offset", "CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value")
            .collect())
    by_partition: dict[int, list[tuple[int, str, str]]] = {}
    for r in rows:
        by_partition.setdefault(r.partition, []).append((r.offset, r.key, r.value))
    return {p: sorted(records) for p, records in by_partition.items()}


def check_exactly(got: dict[int, list[tuple[int, str, str]]], records: int) -> None:
    """Records ``0..records-1``, each once, at offsets 0, 1, 2... of its partition in sequence order."""
    for p in range(PARTITIONS):
        want = [str(i) for i in range(p, records, PARTITIONS)]
        values = [v for _o, _k, v in got.get(p, [])]
        lost = set(want) - set(values)
        assert not lost, f"partition {p} lost {len(lost)} records, e.g. {sorted(lost, key=int)[:5]}"
        assert len(values) == len(set(values)), f"partition {p} holds {len(values) - len(set(values))} duplicates"
        assert values == want, f"partition {p} out of order"
        assert [o for o, _k, _v in got[p]] == list(range(len(want)))
        assert all(k == f"k{v}" for _o, k, v in got[p])
    assert set(got) <= set(range(PARTITIONS))


def move_partitions(cluster: LocalCluster, done: threading.Event) -> None:
    """Partition 0 of both topics to the other broker, as the stream and the sink run."""

    async def run() -> None:
        async with Admin(bootstrap_controllers=cluster.controller_bootstrap) as admin:
            for topic in (SOURCE, SINK):
                tp = TopicPartition(topic, 0)
                owner = (await admin.wait_for_leader(tp, timeout_s=30)).leader
                target = 2 if owner == 1 else 1
                await admin.move_partition(tp, [target])
                await admin.wait_for_leader(tp, leader=target, timeout_s=30)

    try:
        asyncio.run(run())
    finally:
        done.set()


def start_stream(spark: Any, bootstrap: str, checkpoint: str) -> Any:
    """Spark's Kafka source from the earliest offsets into Spark's Kafka sink, partition for
    partition, checkpointed."""
    return (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", SOURCE).option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", str(PER_TRIGGER)).load()
            .selectExpr("key", "value", "partition")
            .writeStream.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("topic", SINK)
            .option("checkpointLocation", checkpoint).trigger(processingTime="200 milliseconds").start())


def check_source_options(spark: Any, bootstrap: str, total: int, third_from_ms: int) -> None:
    """The batch source's other ways in: ``assign`` with offset ranges, ``subscribePattern`` and
    ``startingTimestamp`` (ListOffsets by timestamp)."""
    def read(**options: str) -> list[tuple[str, int, int]]:
        frame = spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap).options(**options).load()
        return sorted((r.topic, r.partition, r.offset) for r in frame.select("topic", "partition", "offset").collect())

    per_partition = total // PARTITIONS
    ranged = read(assign=json.dumps({SOURCE: [0, 2]}), startingOffsets=json.dumps({SOURCE: {"0": 10, "2": -2}}),
                  endingOffsets=json.dumps({SOURCE: {"0": 20, "2": -1}}))
    assert ranged == [(SOURCE, 0, o) for o in range(10, 20)] + [(SOURCE, 2, o) for o in range(per_partition)]
    both = read(subscribePattern="spark-.*")
    assert both == sorted((t, p, o) for t in (SOURCE, SINK) for p in range(PARTITIONS) for o in range(per_partition))
    since = read(subscribe=SOURCE, startingTimestamp=str(third_from_ms))
    assert since == [(SOURCE, p, o) for p in range(PARTITIONS)
                     for o in range(per_partition - THIRD // PARTITIONS, per_partition)]


def wait_first_batch(query: Any, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not any(b["numInputRows"] for b in query.recentProgress):
        assert query.isActive and time.monotonic() < deadline, f"no micro-batch in {timeout_s} s: {query.exception()}"
        time.sleep(0.05)


def test_spark_kafka_sink_and_source_through_a_move(jars, spark, cluster, tmp_path):
    bootstrap = cluster.kafka_bootstrap
    timings: dict[str, float] = {}
    started = time.monotonic()
    write_sequence(spark, bootstrap, 0, FIRST)
    timings["batch write"] = time.monotonic() - started

    # The stream starts on the first write; once its first micro-batch is through, partition 0 of
    # both topics moves while the stream reads and writes and half of the second write goes
    # through the batch sink; the other half follows the move.
    checkpoint = str(tmp_path / "checkpoint")
    started = time.monotonic()
    query = start_stream(spark, bootstrap, checkpoint)
    moved = threading.Event()
    try:
        wait_first_batch(query)
        mover = threading.Thread(target=move_partitions, args=(cluster, moved))
        mover.start()
        write_sequence(spark, bootstrap, FIRST, FIRST + SECOND // 2)
        mover.join(90)
        assert moved.is_set() and not mover.is_alive()
        write_sequence(spark, bootstrap, FIRST + SECOND // 2, FIRST + SECOND)
        query.processAllAvailable()
        batches = query.recentProgress
    finally:
        query.stop()
    assert query.exception() is None
    timings["stream through a move"] = time.monotonic() - started
    assert sum(b["numInputRows"] for b in batches) == FIRST + SECOND
    assert max(b["numInputRows"] for b in batches) <= PER_TRIGGER

    # From its checkpoint the stream goes on with only what came since.
    third_from_ms = int(time.time() * 1000)
    write_sequence(spark, bootstrap, FIRST + SECOND, FIRST + SECOND + THIRD)
    started = time.monotonic()
    query = start_stream(spark, bootstrap, checkpoint)
    try:
        query.processAllAvailable()
        resumed = query.recentProgress
    finally:
        query.stop()
    assert query.exception() is None
    timings["stream resumed"] = time.monotonic() - started
    assert sum(b["numInputRows"] for b in resumed) == THIRD

    # The batch source reads both topics back: every record once, each partition in order.
    total = FIRST + SECOND + THIRD
    started = time.monotonic()
    check_exactly(read_topic(spark, bootstrap, SOURCE), total)
    timings["batch read"] = time.monotonic() - started
    check_exactly(read_topic(spark, bootstrap, SINK), total)
    check_source_options(spark, bootstrap, total, third_from_ms)
    print(f"Spark's Kafka connector on Ferry, {total} records: "
          + ", ".join(f"{name} {seconds:.1f} s" for name, seconds in timings.items()))
