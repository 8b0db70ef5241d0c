"""Spark's own Kafka source and sink (``format("kafka")``, Kafka's Java client inside) on a real
Ferry cluster: the batch sink writes, a Structured Streaming query with a checkpoint copies the
topic through the streaming sink while a partition of each topic moves between brokers, and the
batch source reads both topics back; nothing is lost, nothing is duplicated, and every partition
is in order. Then two streams read a topic an idempotent producer writes while the broker leading
some of its partitions (and a partition the second stream writes) is killed with SIGKILL: the
first, into Spark's file sink, holds every acknowledged record exactly once and in order; the
second's copy through Spark's Kafka sink (at least once, as Spark documents it) loses nothing
and its duplicates are counted."""
from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pytest

from tools.admin import Admin
from tools.client import TopicPartition
from tools.cluster import LocalCluster
from tools.kafka_workload import KafkaLoad
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


# ------------------------------------------------------------------ through a kill -9
KILL_IN, KILL_OUT = "kill-in", "kill-out"
KILL_RATE_PER_S = 250.0  # the producer's pace: records of the killed broker's partitions keep coming
KILL_BEFORE, KILL_AFTER = 750, 2_250  # acknowledged records before each kill (at least), and after the last
KILL_TRIGGER = "250 milliseconds"
#: kills in one run: `make spark-kafka-kills` runs more, the two brokers in turn (each restarted
#: after its partitions failed over, so the next kill moves them back onto it)
KILLS = int(os.environ.get("FERRY_SPARK_KILLS", "1"))
#: Two settings of Kafka's 3.9 clients inside Spark's connector (docs/kafka.md, "Spark's Kafka
#: source and sink through a kill -9"). The source's offset listing (the driver's AdminClient) may
#: bind a ListOffsets to the killed leader just before the failover and then wait for a broker the
#: metadata no longer lists until ``default.api.timeout.ms`` (60 s) runs out, after which Spark
#: retries with a new AdminClient: 10 s bounds that wait (the AdminClient wants no request timeout
#: above it, so requests time out after 5 s instead of 30). With the two brokers killed in turn a
#: client can end up knowing only the broker just killed (Metadata names live brokers only, and a
#: restart is news to a client only at its next refresh); with the default recovery strategy
#: (none) it then has no broker to ask, ``rebootstrap`` (KIP-899, the default from Kafka's 4.0
#: clients) goes back to ``bootstrap.servers``. A single kill leaves the survivor known.
RECOVERY = {"kafka.metadata.recovery.strategy": "rebootstrap"} if KILLS > 1 else {}
SOURCE_OPTIONS = {"kafka.default.api.timeout.ms": "10000", "kafka.request.timeout.ms": "5000", **RECOVERY}
SINK_OPTIONS = RECOVERY


@dataclass
class Kill:
    broker: int
    partitions: set[int]  # the source partitions it led
    at_s: float  # wall clock, as Spark's progress reports are
    at_mono_s: float
    failover_s: float = 0.0  # until the controllers named the other broker leader of every partition


def create_kill_topics(cluster: LocalCluster) -> None:
    """Both topics, partition 0 of each led by the same broker (the first to be killed)."""

    async def run() -> None:
        async with Admin(bootstrap_controllers=cluster.controller_bootstrap) as admin:
            for topic in (KILL_IN, KILL_OUT):
                await admin.create_topic(topic, PARTITIONS)
                for p in range(PARTITIONS):
                    await admin.wait_for_leader(TopicPartition(topic, p), timeout_s=30)
            first = (await admin.wait_for_leader(TopicPartition(KILL_IN, 0), timeout_s=30)).leader
            out0 = TopicPartition(KILL_OUT, 0)
            if (await admin.wait_for_leader(out0, timeout_s=30)).leader != first:
                await admin.move_partition(out0, [first])
                await admin.wait_for_leader(out0, leader=first, timeout_s=30)

    asyncio.run(run())


def source_leaders(cluster: LocalCluster) -> dict[int, int]:
    async def run() -> dict[int, int]:
        async with Admin(bootstrap_controllers=cluster.controller_bootstrap) as admin:
            return {p: (await admin.wait_for_leader(TopicPartition(KILL_IN, p), timeout_s=30)).leader
                    for p in range(PARTITIONS)}

    return asyncio.run(run())


def wait_led_by(cluster: LocalCluster, broker: int, timeout_s: float = 60.0) -> None:
    """Until the controllers name ``broker`` the leader of every partition of both topics."""

    async def run() -> None:
        async with Admin(bootstrap_controllers=cluster.controller_bootstrap) as admin:
            for topic in (KILL_IN, KILL_OUT):
                for p in range(PARTITIONS):
                    await admin.wait_for_leader(TopicPartition(topic, p), leader=broker, timeout_s=timeout_s)

    asyncio.run(run())


def start_kill_streams(spark: Any, bootstrap: str, base: str) -> tuple[Any, Any]:
    """Two checkpointed queries on Spark's Kafka source: ``read`` keeps (partition, offset, value)
    in Spark's file sink (exactly once: a batch's files count only once its entry is in the sink's
    log), ``copy`` writes each record through Spark's Kafka sink to the same partition of the other
    topic, keyed by where it came from."""
    source = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap).options(**SOURCE_OPTIONS)
              .option("subscribe", KILL_IN).option("startingOffsets", "earliest").load())
    read = (source.selectExpr("partition", "offset", "CAST(value AS STRING) AS value")
            .writeStream.format("parquet").option("path", f"{base}/read")
            .option("checkpointLocation", f"{base}/read-checkpoint").trigger(processingTime=KILL_TRIGGER).start())
    copy = (source.selectExpr("CONCAT(CAST(partition AS STRING), ':', CAST(offset AS STRING)) AS key", "value",
                              "partition")
            .writeStream.format("kafka").option("kafka.bootstrap.servers", bootstrap).options(**SINK_OPTIONS)
            .option("topic", KILL_OUT).option("checkpointLocation", f"{base}/copy-checkpoint").trigger(processingTime=KILL_TRIGGER).start())
    return read, copy


def keep_progress(queries: list[Any], kept: list[dict[int, Any]]) -> None:
    """Every micro-batch's progress by batch id (``recentProgress`` holds only the last 100)."""
    for query, batches in zip(queries, kept, strict=True):
        for b in query.recentProgress:
            batches[b["batchId"]] = b


def wait_acknowledged(load: Any, count: int, queries: list[Any], kept: list[dict[int, Any]],
                      timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while load.acknowledged() + len(load.errors) < count:
        keep_progress(queries, kept)
        assert all(q.isActive for q in queries), [str(q.exception()) for q in queries]
        assert time.monotonic() < deadline, f"{load.acknowledged()} of {count} records acknowledged in {timeout_s} s"
        time.sleep(0.2)


def wait_progress_through(queries: list[Any], kept: list[dict[int, Any]], records: int, timeout_s: float = 30.0) -> None:
    """Until each query's progress reports a micro-batch ending at ``records`` in all (a batch's
    progress is posted a moment after ``processAllAvailable`` returns)."""
    deadline = time.monotonic() + timeout_s
    while True:
        keep_progress(queries, kept)
        ends = [max((sum(offsets_of(b["sources"][0]["endOffset"], KILL_IN).values()) for b in batches.values()
                     if b["sources"]), default=0) for batches in kept]
        if min(ends) >= records:
            return
        assert time.monotonic() < deadline, f"progress reports {ends} of {records} records after {timeout_s} s"
        time.sleep(0.1)


def offsets_of(source_offset: str | None, topic: str) -> dict[int, int]:
    parsed = json.loads(source_offset) if source_offset else None
    return {int(p): o for p, o in (parsed or {}).get(topic, {}).items()}


def batch_span_s(batch: Any) -> tuple[float, float]:
    """A micro-batch's start and end, wall-clock seconds."""
    started = datetime.fromisoformat(batch["timestamp"].replace("Z", "+00:00")).timestamp()
    return started, started + batch["durationMs"]["triggerExecution"] / 1000


def failover_seen_s(batches: dict[int, Any], partitions: set[int], kill_wall_s: float) -> float | None:
    """From the kill to the end of the first micro-batch started after it that read records of the
    killed broker's partitions: it asked the new owner for their offsets and fetched from it."""
    for batch_id in sorted(batches):
        b = batches[batch_id]
        started, ended = batch_span_s(b)
        if started < kill_wall_s or not b["sources"]:
            continue
        begin = offsets_of(b["sources"][0]["startOffset"], KILL_IN)
        end = offsets_of(b["sources"][0]["endOffset"], KILL_IN)
        if any(end.get(p, 0) > begin.get(p, 0) for p in partitions):
            return ended - kill_wall_s
    return None


def longest_batch(batches: dict[int, Any], after_s: float, before_s: float) -> Any:
    """The longest micro-batch among those that ended between a kill and the next (those it could hold up)."""
    return max((b for b in batches.values() if after_s < batch_span_s(b)[1] <= before_s),
               key=lambda b: b["durationMs"]["triggerExecution"])


def median_batch_s(batches: dict[int, Any]) -> float:
    """The median micro-batch of the run, the first left out (classes load, connections open)."""
    spans = sorted(end - start for start, end in (batch_span_s(batches[i]) for i in sorted(batches)[1:]))
    return spans[len(spans) // 2]


def acknowledged(load: Any) -> set[tuple[int, int, str]]:
    """(partition, offset, value) of every record the producer saw acknowledged."""
    return {(p, o, v.decode()) for p, records in load.acked.items() for o, v in records if o is not None}


def check_read_exactly_once(acked: set[tuple[int, int, str]], rows: list[tuple[int, int, str]]) -> None:
    """Spark's source through the kill: every acknowledged record once, at its offset, each
    partition in the order produced (values carry the sequence number; record ``n`` went to
    partition ``n % 3``)."""
    duplicated = len(rows) - len(set(rows))
    lost = acked - set(rows)
    unacknowledged = set(rows) - acked
    assert not lost, f"lost {len(lost)} acknowledged records, e.g. {sorted(lost)[:5]}"
    assert duplicated == 0, f"{duplicated} records read twice"
    assert not unacknowledged, f"read {len(unacknowledged)} records never acknowledged, e.g. {sorted(unacknowledged)[:5]}"
    for p in range(PARTITIONS):
        read = sorted((o, v) for q, o, v in rows if q == p)
        assert [o for o, _v in read] == list(range(len(read))), f"partition {p}: offsets not consecutive"
        sequence = [int(v[1:]) for _o, v in read]
        assert sequence == sorted(sequence) and all(n % PARTITIONS == p for n in sequence), f"partition {p} out of order"


def check_copied(acked: set[tuple[int, int, str]], copied: dict[int, list[tuple[int, str, str]]]) -> int:
    """Spark's Kafka sink through the kill: nothing lost, each partition copied into the same one
    in order (of first copies); returns the duplicates, which the sink allows (at least once)."""
    by_source = {(p, o): v for p, o, v in acked}
    seen: set[tuple[int, int]] = set()
    copies = 0
    for partition, records in copied.items():
        first_copies: list[int] = []
        for _offset, key, value in records:
            p, o = (int(x) for x in key.split(":"))
            assert p == partition and by_source.get((p, o)) == value, f"{key} copied as {value!r} into {partition}"
            if (p, o) not in seen:
                first_copies.append(o)
                seen.add((p, o))
            copies += 1
        assert first_copies == sorted(first_copies), f"partition {partition}: copied out of order"
    lost = set(by_source) - seen
    assert not lost, f"the sink lost {len(lost)} records, e.g. {sorted(lost)[:5]}"
    return copies - len(seen)


def test_spark_kafka_source_and_sink_through_a_kill(jars, spark, cluster, tmp_path):
    """kill -9 of the broker leading partition 0 of the topic two streams read and of the one
    the second writes, while an idempotent producer writes; the killed broker stays down until
    the streams have read everything (with ``FERRY_SPARK_KILLS`` > 1 it is restarted after each
    failover and the other is killed next)."""
    bootstrap = cluster.kafka_bootstrap
    create_kill_topics(cluster)
    load = KafkaLoad(bootstrap, KILL_IN, PARTITIONS, per_s=KILL_RATE_PER_S, members=0).start()
    read, copy = start_kill_streams(spark, bootstrap, str(tmp_path))
    queries = [read, copy]
    progress: list[dict[int, Any]] = [{}, {}]
    kills: list[Kill] = []
    try:
        for query in queries:
            wait_first_batch(query)
        mark = 0
        while len(kills) < KILLS:
            wait_acknowledged(load, mark + KILL_BEFORE, queries, progress)
            leaders = source_leaders(cluster)
            kill = Kill(leaders[0], {p for p, b in leaders.items() if b == leaders[0]}, time.time(), time.monotonic())
            cluster.kill_broker(kill.broker)
            wait_led_by(cluster, next(b for b in cluster.kafka_ports if b != kill.broker))
            kill.failover_s = time.monotonic() - kill.at_mono_s
            kills.append(kill)
            if len(kills) < KILLS:
                cluster.start_broker(kill.broker, wait=True)
            mark = load.acknowledged()
        wait_acknowledged(load, mark + KILL_AFTER, queries, progress)
        load.stop_producing()
        for query in queries:
            query.processAllAvailable()
        wait_progress_through(queries, progress, load.acknowledged())
    finally:
        load.stop_producing()
        for query in queries:
            query.stop()
    assert read.exception() is None and copy.exception() is None
    assert load.errors == [], load.errors[:5]
    acked = acknowledged(load)
    rows = [(r.partition, r.offset, r.value) for r in spark.read.parquet(f"{tmp_path}/read").collect()]
    check_read_exactly_once(acked, rows)
    duplicated = check_copied(acked, read_topic(spark, bootstrap, KILL_OUT))
    print(f"Spark through {len(kills)} kill -9: {len(acked)} acknowledged, read {len(rows)} once each "
          f"(0 lost, 0 duplicated); the sink copied {len(acked) + duplicated}: 0 lost, {duplicated} duplicated")
    print("  micro-batches: " + ", ".join(f"{name} {len(batches)}, median {median_batch_s(batches):.2f} s"
                                          for name, batches in zip(("read", "copy"), progress, strict=True)))
    for i, kill in enumerate(kills):
        seen_s = failover_seen_s(progress[0], kill.partitions, kill.at_s)
        assert seen_s is not None, f"no micro-batch read broker {kill.broker}'s partitions after its kill"
        window_s = (kills[i + 1].at_mono_s - kill.at_mono_s) if i + 1 < len(kills) else 30.0
        gap_ms = max(load.gap_ms(p, kill.at_mono_s, window_s=window_s) or 0.0 for p in kill.partitions)
        longest = [longest_batch(batches, kill.at_s, kill.at_s + window_s) for batches in progress]
        print(f"  kill -9 of broker {kill.broker} (source partitions {sorted(kill.partitions)}): the other broker "
              f"led after {kill.failover_s:.2f} s, the producer's longest silence {gap_ms / 1000:.2f} s, Spark "
              f"read the killed partitions again after {seen_s:.2f} s; longest micro-batch since: "
              + ", ".join(f"{name} {b['durationMs']['triggerExecution'] / 1000:.2f} s (latestOffset "
                          f"{b['durationMs'].get('latestOffset', 0)} ms, addBatch {b['durationMs'].get('addBatch', 0)} ms)"
                          for name, b in zip(("read", "copy"), longest, strict=True)))
    cluster.start_broker(kills[-1].broker, wait=True)
