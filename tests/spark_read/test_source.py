"""The ``ferry`` data source against a real cluster: records produced through brokers, read by
Spark straight from the S3 endpoint, each acknowledged record exactly once and in order."""
from __future__ import annotations

import asyncio
import json
import time
from collections import Counter

import pytest

from tools.client import Producer, TopicPartition
from tools.cluster import LocalCluster
from tools.spark_read import register
from tools.spark_read.source import ReadOptions, describe_streams

pytestmark = [pytest.mark.integration, pytest.mark.spark]

TOPIC = "events"
PARTITIONS = 3
KEYS = [f"user-{i}".encode() for i in range(17)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    # A 1 s upload cap: the records are in S3 for the data source within a second (default 10 s).
    c = LocalCluster(str(tmp_path_factory.mktemp("cluster")), brokers=2,
                     broker_overrides={"storage": {"upload_interval_ms": 1_000}})
    c.start()
    yield c
    c.stop(graceful=False)


def options(cluster: LocalCluster, **extra: str) -> dict[str, str]:
    return {"topic": TOPIC, "bootstrap.controller": ",".join(cluster.controller_bootstrap),
            "s3.endpoint": cluster.s3_endpoint, "s3.bucket": cluster.bucket, **extra}


async def wait_committed(opts: dict[str, str], ends: dict[int, int], timeout_s: float = 30.0) -> float:
    """Seconds until the committed objects reach ``ends`` (what the data source can see)."""
    started = time.monotonic()
    while True:
        streams = await describe_streams(ReadOptions.parse(opts))
        if all(s.end_offset >= ends.get(s.partition, 0) for s in streams):
            return time.monotonic() - started
        assert time.monotonic() - started < timeout_s, f"not committed after {timeout_s} s: {streams}"
        await asyncio.sleep(0.05)


@pytest.fixture(scope="module")
def produced(cluster):
    """3,000 acknowledged records over 3 partitions: keys from a small set, some null keys and
    values, headers on every fifth."""

    async def run() -> tuple[list[tuple[int, int, bytes | None, bytes | None, list]], float]:
        from tools.admin import Admin

        async with Admin(bootstrap_controllers=cluster.controller_bootstrap) as admin:
            await admin.create_topic(TOPIC, PARTITIONS)
            for p in range(PARTITIONS):
                await admin.wait_for_leader(TopicPartition(TOPIC, p), timeout_s=30)
        acked = []
        async with Producer(cluster.bootstrap_servers, linger_ms=5) as producer:
            futures = []
            for i in range(3_000):
                key = None if i % 97 == 0 else KEYS[i % len(KEYS)]
                value = None if i % 101 == 0 else f"record-{i}".encode() * (1 + i % 7)
                headers = [("n", str(i).encode()), ("empty", b"")] if i % 5 == 0 else []
                fut = await producer.send(TOPIC, value, key=key, partition=i % PARTITIONS, headers=headers or None)
                futures.append((fut, key, value, headers))
            for fut, key, value, headers in futures:
                meta = await fut
                acked.append((meta.partition, meta.offset, key, value, headers))
        ends = {p: max(o for q, o, *_ in acked if q == p) + 1 for p in range(PARTITIONS)}
        visible_after_s = await wait_committed(options(cluster), ends)
        return acked, visible_after_s

    return asyncio.run(run())


def test_reads_every_acknowledged_record_once_in_order_with_kafka_columns(spark, cluster, produced):
    acked, _visible_after_s = produced
    register(spark)
    frame = spark.read.format("ferry").options(**options(cluster)).load()
    assert frame.columns == ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]
    assert frame.rdd.getNumPartitions() == PARTITIONS  # one input partition per topic-partition
    rows = frame.orderBy("partition", "offset").collect()
    got = [(r.partition, r.offset, None if r.key is None else bytes(r.key), None if r.value is None else bytes(r.value))
           for r in rows]
    want = sorted((p, o, k, v) for p, o, k, v, _h in acked)
    assert got == want  # every acknowledged record, once, at its offset
    assert {r.topic for r in rows} == {TOPIC} and {r.timestampType for r in rows} == {0}
    now = time.time()
    assert all(now - 600 < r.timestamp.timestamp() <= now + 1 for r in rows)
    counts = {(None if r["key"] is None else bytes(r["key"])): r["count"]
              for r in frame.groupBy("key").count().collect()}
    assert counts == Counter(k for _p, _o, k, _v, _h in acked)


def test_headers_offset_ranges_and_min_partitions(spark, cluster, produced):
    acked, _ = produced
    register(spark)
    with_headers = spark.read.format("ferry").options(**options(cluster, includeHeaders="true")).load()
    assert with_headers.columns[-1] == "headers"
    headers = {(r.partition, r.offset): [(h.key, bytes(h.value)) for h in r.headers]
               for r in with_headers.select("partition", "offset", "headers").collect()}
    assert headers == {(p, o): [(k, v) for k, v in h] for p, o, _k, _v, h in acked}
    opts = options(cluster, startingOffsets='{"events": {"0": 100, "1": -2, "2": 999}}',
                   endingOffsets='{"events": {"0": 250, "1": 7, "2": -1}}', minPartitions="7")
    ranged = spark.read.format("ferry").options(**opts).load()
    assert ranged.rdd.getNumPartitions() >= 7
    got = sorted((r.partition, r.offset) for r in ranged.select("partition", "offset").collect())
    assert got == sorted([(0, o) for o in range(100, 250)] + [(1, o) for o in range(7)] + [(2, 999)])


def test_read_by_object_gives_every_record_once_each_partition_in_offset_order(spark, cluster, produced):
    """readBy=object: each object fetched once, by one input partition holding every partition's
    records in it; the same rows as the default read, each topic-partition's in offset order
    within an input partition; headers and offset ranges as in the default read."""
    acked, _ = produced
    register(spark)
    frame = spark.read.format("ferry").options(**options(cluster, readBy="object")).load()
    per_input = frame.select("partition", "offset").rdd.glom().collect()
    for rows in per_input:
        for p in range(PARTITIONS):
            offsets = [r.offset for r in rows if r.partition == p]
            assert offsets == sorted(offsets)
    got = sorted((r.partition, r.offset) for rows in per_input for r in rows)
    assert got == sorted((p, o) for p, o, *_ in acked)  # every acknowledged record, once
    ranges = {"startingOffsets": '{"events": {"0": 100, "1": -2, "2": 999}}',
              "endingOffsets": '{"events": {"0": 250, "1": 7, "2": -1}}'}
    rows = spark.read.format("ferry").options(**options(cluster, readBy="object", includeHeaders="true",
                                                        **ranges)).load().collect()
    want = {(p, o): (k, v, [(hk, hv) for hk, hv in h]) for p, o, k, v, h in acked
            if (p == 0 and 100 <= o < 250) or (p == 1 and o < 7) or (p == 2 and o >= 999)}
    got = {(r.partition, r.offset): (None if r.key is None else bytes(r.key),
                                     None if r.value is None else bytes(r.value),
                                     [(h.key, bytes(h.value)) for h in r.headers]) for r in rows}
    assert got == want
    assert len(rows) == len(want)


@pytest.mark.parametrize("extra, message", [
    ({"topic": "nope"}, "UNKNOWN_TOPIC_OR_PARTITION"),
    ({"startingOffsets": "latest"}, "startingOffsets for events-0 is latest"),
    ({"endingOffsets": '{"events": {"0": 5000, "1": -1, "2": -1}}'}, "OFFSET_OUT_OF_RANGE"),
    ({"minPartitions": "0"}, "option minPartitions must be a positive integer"),
])
def test_bad_options_fail_with_kafka_error_names(spark, cluster, produced, extra, message):
    register(spark)
    with pytest.raises(Exception) as err:
        spark.read.format("ferry").options(**{**options(cluster), **extra}).load().count()
    assert message in str(err.value)


def test_key_counts_example_job(spark, cluster, produced, capsys):
    from tools.spark_read import key_counts

    acked, _ = produced
    argv = ["--topic", TOPIC, "--bootstrap-controller", ",".join(cluster.controller_bootstrap),
            "--s3-endpoint", cluster.s3_endpoint, "--bucket", cluster.bucket]
    assert key_counts.main(argv + ["--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    want = Counter(None if k is None else k.decode() for _p, _o, k, _v, _h in acked)
    assert report["records"] == len(acked) and {c["key"]: c["records"] for c in report["counts"]} == want
    counts = [c["records"] for c in report["counts"]]
    assert counts == sorted(counts, reverse=True)
    assert key_counts.main(argv + ["--top", "3"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{len(acked)} records, {len(want)} distinct keys") and len(out.splitlines()) == 5
    assert key_counts.main(argv[:1] + ["missing-topic"] + argv[2:]) == 1
    assert "Error: UNKNOWN_TOPIC_OR_PARTITION: topic 'missing-topic' does not exist" in capsys.readouterr().err


def test_an_object_gone_since_the_plan_is_read_from_the_streams_objects_now(cluster, produced):
    """An executor whose planned object no longer exists (compaction replaced and deleted it) asks
    the controllers for the stream's objects again and reads the rest from there: the real S3
    endpoint's NoSuchKey, the real controllers, every record of the partition once and in order."""
    from dataclasses import replace

    from tools.spark_read.offsets import ObjectSpan
    from tools.spark_read.source import FerryInputPartition, FerryReader

    acked, _visible = produced
    reader = FerryReader(ReadOptions.parse(options(cluster)))
    planned = next(p for p in reader.partitions() if p.task.partition == 1)
    first = planned.task.objects[0]
    gone = ObjectSpan(first.object_key + "-compacted-away", first.start_offset, first.end_offset, first.size)
    stale = FerryInputPartition(replace(planned.task, objects=(gone, *planned.task.objects[1:])), planned.blocks)
    offsets = [o for batch in reader.read(stale) for o in batch.column("offset").to_pylist()]
    assert offsets == sorted(o for p, o, *_ in acked if p == 1)


def test_key_counts_from_the_installed_command_with_only_topic_and_a_broker(cluster, produced):
    """As a newcomer runs it: ``.venv/bin/ferry key-counts`` with only ``--topic`` and
    ``--bootstrap-server``, no Spark environment set; the S3 endpoint and bucket come from the cluster."""
    import os
    import subprocess
    import sys

    acked, _ = produced
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK", "SPARK_"))}
    ferry = os.path.join(os.path.dirname(sys.executable), "ferry")
    done = subprocess.run([ferry, "key-counts", "--topic", TOPIC, "--bootstrap-server", cluster.bootstrap_servers[0],
                           "--json"], capture_output=True, text=True, env=env, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1])["records"] == len(acked)
