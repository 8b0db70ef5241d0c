"""A Spark Structured Streaming pipeline on Ferry, in and out: ``readStream.format("ferry")``
counts records per key and ``writeStream.format("ferry")`` writes each key's running count to
another topic, while records keep arriving and the input partitions move six times. The last
count of each key in the output equals the records produced with that key: none skipped, none
counted twice. Then the query stops and restarts from its checkpoint, more input arrives, and the
counts go on from where they were. A batch ``df.write`` with a bad row refuses it by name."""
from __future__ import annotations

import asyncio
import struct
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tools.admin import Admin
from tools.client import Producer, TopicPartition, read_all
from tools.cluster import LocalCluster
from tools.spark_read import FORMAT_NAME, register
from tools.spark_read.source import unwrap_spark_error

from pyspark.sql.streaming.datasource import ReadAllAvailable

pytestmark = [pytest.mark.integration, pytest.mark.spark]

KEYS = [f"k{i:02d}" for i in range(12)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: Any) -> Any:
    c = LocalCluster(str(tmp_path_factory.mktemp("cluster")), brokers=2)
    c.start()
    yield c
    c.stop(graceful=False)


def produce(cluster: LocalCluster, topic: str, start: int, count: int) -> Counter[str]:
    """``count`` records keyed round-robin over KEYS (value: the record's number)."""
    async def run() -> None:
        async with Producer(cluster.bootstrap_servers) as p:
            for i in range(start, start + count):
                await p.send(topic, b"%d" % i, key=KEYS[i % len(KEYS)].encode())
            await p.flush()
    asyncio.run(run())
    return Counter(KEYS[i % len(KEYS)] for i in range(start, start + count))


def last_counts(cluster: LocalCluster, topic: str, partitions: int) -> dict[str, int]:
    logs = asyncio.run(read_all(cluster.bootstrap_servers, [TopicPartition(topic, p) for p in range(partitions)]))
    out: dict[str, int] = {}
    for records in logs.values():
        for r in records:
            assert r.key is not None and r.value is not None
            out[r.key.decode()] = struct.unpack(">q", r.value)[0] if len(r.value) == 8 else int(r.value)
    return out


def move_inputs(cluster: LocalCluster, topic: str, partitions: int, moves: int, done: threading.Event,
                log: list[str]) -> None:
    async def run() -> None:
        brokers = sorted(cluster.kafka_ports)
        async with Admin(bootstrap_controllers=cluster.controller_bootstrap) as admin:
            for i in range(moves):
                tp = TopicPartition(topic, i % partitions)
                owner = int((await admin.wait_for_leader(tp)).leader)
                to = brokers[(brokers.index(owner) + 1) % len(brokers)]
                await admin.move_partition(tp, [to])
                await admin.wait_for_leader(tp, leader=to)
                log.append(f"{tp} -> {to}")
                await asyncio.sleep(0.7)
    try:
        asyncio.run(run())
    finally:
        done.set()


def wait_counts(cluster: LocalCluster, topic: str, expected: Counter[str], timeout_s: float = 90.0) -> dict[str, int]:
    deadline = time.monotonic() + timeout_s
    got: dict[str, int] = {}
    while time.monotonic() < deadline:
        got = last_counts(cluster, topic, 2)
        if got == dict(expected):
            return got
        time.sleep(0.5)
    return got


def restart_plan(cluster: LocalCluster, n: int) -> tuple[list[Any], Counter[str]]:
    """What a micro-batch from offset 0 to the end plans when the moves have uploaded part of the
    input (a move force-uploads) and a few records just produced are not (the upload cap is
    10 s): S3 for the settled part, the leaders for the rest. Returns the plan and those records."""
    from tools.spark_read.source import ReadOptions
    from tools.spark_read.stream import FerryStreamReader

    raw = {"topic": "st-in", "bootstrap.servers": ",".join(cluster.bootstrap_servers),
           "s3.endpoint": str(cluster.s3_endpoint), "s3.bucket": cluster.bucket}
    options = ReadOptions.parse(raw)
    more = produce(cluster, "st-in", n, 10)
    reader = FerryStreamReader(options, raw)
    end = reader.latestOffset({"st-in": {"0": 0, "1": 0}}, ReadAllAvailable())
    return list(reader.partitions({"st-in": {"0": 0, "1": 0}}, end)), more


def test_streaming_counts_through_moves_and_a_restart_are_exact(spark: Any, cluster: LocalCluster,
                                                                tmp_path: Path) -> None:
    from pyspark.sql import functions as F

    async def create() -> None:
        async with Admin(bootstrap_controllers=cluster.controller_bootstrap) as admin:
            await admin.create_topic("st-in", 2)
            await admin.create_topic("st-out", 2)
    asyncio.run(create())
    register(spark)
    expected = produce(cluster, "st-in", 0, 600)

    def start_query() -> Any:
        source = (spark.readStream.format(FORMAT_NAME)
                  .option("topic", "st-in").option("bootstrap.servers", ",".join(cluster.bootstrap_servers))
                  .option("maxRecordsPerTrigger", "500").load())
        counts = (source.groupBy("key").agg(F.count(F.lit(1)).alias("n"))
                  .select(F.col("key"), F.col("n").cast("string").alias("value")))
        return (counts.writeStream.format(FORMAT_NAME).outputMode("complete")
                .option("topic", "st-out").option("bootstrap.servers", ",".join(cluster.bootstrap_servers))
                .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(processingTime="1 second")
                .start())

    query = start_query()
    try:
        done, moved = threading.Event(), []
        mover = threading.Thread(target=move_inputs, args=(cluster, "st-in", 2, 6, done, moved))
        mover.start()
        n = 600
        while not done.is_set():  # records keep arriving while the partitions move
            expected += produce(cluster, "st-in", n, 50)
            n += 50
            time.sleep(0.2)
        mover.join()
        assert len(moved) == 6, moved
        got = wait_counts(cluster, "st-out", expected)
        assert got == dict(expected), {k: (expected[k], got.get(k)) for k in KEYS if expected[k] != got.get(k)}
    finally:
        query.stop()
    expected += produce(cluster, "st-in", n, 240)  # while stopped: read after the restart, once
    plan, more = restart_plan(cluster, n + 240)
    expected += more
    assert {type(p).__name__ for p in plan} == {"FerryInputPartition", "FerryTailPartition"}, plan
    query = start_query()
    try:
        got = wait_counts(cluster, "st-out", expected)
        assert got == dict(expected), {k: (expected[k], got.get(k)) for k in KEYS if expected[k] != got.get(k)}
    finally:
        query.stop()
    print(f"\nstreaming counts exact: {sum(expected.values())} records, moves {moved}, one restart")


def test_batch_write_produces_rows_and_refuses_a_bad_frame(spark: Any, cluster: LocalCluster) -> None:
    register(spark)

    async def create() -> None:
        async with Admin(bootstrap_controllers=cluster.controller_bootstrap) as admin:
            await admin.create_topic("bw-out", 1)
    asyncio.run(create())
    rows = spark.createDataFrame([(f"w{i}", f"value-{i}") for i in range(40)], "key string, value string")
    rows.write.format(FORMAT_NAME).mode("append").option("topic", "bw-out") \
        .option("bootstrap.servers", ",".join(cluster.bootstrap_servers)).save()
    logs = asyncio.run(read_all(cluster.bootstrap_servers, [TopicPartition("bw-out", 0)]))
    assert sorted(r.value for r in logs[TopicPartition("bw-out", 0)]) == sorted(b"value-%d" % i for i in range(40))
    with pytest.raises(Exception) as refused:
        spark.createDataFrame([(1,)], "n int").write.format(FORMAT_NAME).mode("append") \
            .option("topic", "bw-out").option("bootstrap.servers", ",".join(cluster.bootstrap_servers)).save()
    error = unwrap_spark_error(refused.value)
    assert error is not None and error.error.name == "INVALID_REQUEST" and "value column" in error.message
