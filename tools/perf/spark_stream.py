"""`ferry perf spark-stream`: how fresh a Structured Streaming query's rows are, through moves.

A producer writes timestamped records at a steady rate to a 2-partition topic on a local cluster
(default upload cap, 10 s) while its partitions move six times; a streaming query with a 1 s
trigger reads it, and a ``foreachBatch`` sink on the driver notes when each record arrived.
Freshness is arrival minus produce time, after a warm-up second of records (the first
micro-batch with rows starts the executors' Python workers; reported apart as ``warm_up_s``). Measured for the ``ferry`` source (S3 for what is
uploaded, the brokers for the tail) and, in the same run, for Spark's own Kafka source reading
the same topic through the brokers' Kafka listener (when `make spark-kafka-jars` cached it). Each
source's rows are also checked: every acknowledged record exactly once.

Target (issue): ``stream_freshness_p99_ms`` ≤ 1,500 with the 10 s upload cap; 0 lost, 0 duplicated.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import threading
import time
from collections import Counter
from typing import Any

from tools.admin import Admin
from tools.client import Producer, TopicPartition
from tools.cluster import LocalCluster

TOPIC = "perf-stream"


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * (len(ordered) - 1) + 0.5))] if ordered else float("nan")


async def _produce_and_move(cluster: LocalCluster, seconds: float, per_s: float, moves: int,
                            acked: list[bytes]) -> list[str]:
    moved: list[str] = []
    brokers = sorted(cluster.kafka_ports)
    async with Producer(cluster.bootstrap_servers) as producer, \
            Admin(bootstrap_controllers=cluster.controller_bootstrap) as admin:
        started, n, pending = time.monotonic(), 0, []
        next_move = seconds / (moves + 1)
        while time.monotonic() - started < seconds:
            value = b"%d:%d" % (n, time.time_ns() // 1_000_000)
            pending.append((value, await producer.send(TOPIC, value, partition=n % 2)))
            n += 1
            if moves and time.monotonic() - started >= next_move and len(moved) < moves:
                tp = TopicPartition(TOPIC, len(moved) % 2)
                owner = int((await admin.wait_for_leader(tp)).leader)
                to = brokers[(brokers.index(owner) + 1) % len(brokers)]
                await admin.move_partition(tp, [to])
                moved.append(f"{tp}->{to}")
                next_move += seconds / (moves + 1)
            await asyncio.sleep(max(0.0, started + n / per_s - time.monotonic()))
        await producer.flush()
        acked += [v for v, f in pending if not f.exception()]
    return moved


def measure(spark: Any, cluster: LocalCluster, source: str, seconds: float, per_s: float, moves: int,
            work: str) -> dict[str, Any]:
    """One source: start the query, produce and move, wait until every acknowledged record arrived."""
    arrived: dict[bytes, list[float]] = {}
    lock = threading.Lock()

    def sink(frame: Any, _batch_id: int) -> None:
        now_ms = time.time() * 1000
        rows = frame.select("value").collect()
        with lock:
            for row in rows:
                arrived.setdefault(bytes(row["value"]), []).append(now_ms)

    reader = spark.readStream.format(source).option("startingOffsets", "latest")
    if source == "ferry":
        reader = reader.option("topic", TOPIC).option("bootstrap.servers", ",".join(cluster.bootstrap_servers))
    else:
        reader = reader.option("subscribe", TOPIC).option("kafka.bootstrap.servers", cluster.kafka_bootstrap)
    query = (reader.load().writeStream.foreachBatch(sink).trigger(processingTime="1 second")
             .option("checkpointLocation", f"{work}/ckpt-{source}").start())
    acked: list[bytes] = []
    warm: list[bytes] = []
    try:
        time.sleep(3.0)  # the query's first (empty) batch has run: startingOffsets=latest is before the records
        # warm-up, not measured: the first micro-batch with rows starts the executors' Python
        # workers (the ferry source's readers; Spark's Kafka source reads in the JVM)
        started = time.monotonic()
        asyncio.run(_produce_and_move(cluster, 1.0, per_s, 0, warm))
        while time.monotonic() - started < 120:
            with lock:
                if all(v in arrived for v in warm):
                    break
            time.sleep(0.2)
        warm_up_s = time.monotonic() - started
        with lock:
            arrived.clear()
        moved = asyncio.run(_produce_and_move(cluster, seconds, per_s, moves, acked))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with lock:
                if all(v in arrived for v in acked):
                    break
            time.sleep(0.5)
    finally:
        query.stop()
    counts = Counter({v: len(ts) for v, ts in arrived.items()})
    fresh = [arrived[v][0] - int(v.split(b":")[1]) for v in acked if v in arrived]
    return {"records": len(acked), "moves": moved, "warm_up_s": round(warm_up_s, 1), "lost": sum(1 for v in acked if v not in arrived),
            "duplicated": sum(n - 1 for n in counts.values() if n > 1),
            "freshness_p50_ms": round(_percentile(fresh, 0.5), 1), "freshness_p99_ms": round(_percentile(fresh, 0.99), 1),
            "freshness_max_ms": round(max(fresh, default=float("nan")), 1)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="ferry perf spark-stream", description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=30.0, help="how long records are produced (default 30)")
    p.add_argument("--rate", type=float, default=200.0, help="records per second (default 200)")
    p.add_argument("--moves", type=int, default=6)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    from tools.peer.spark_kafka import spark_kafka_jars
    from tools.rebalance.spark_session import spark_session
    from tools.spark_read import register

    with tempfile.TemporaryDirectory(prefix="ferry-perf-stream-") as work:
        cluster = LocalCluster(f"{work}/cluster", brokers=2)
        cluster.start()
        try:
            async def create() -> None:
                async with Admin(bootstrap_controllers=cluster.controller_bootstrap) as admin:
                    await admin.create_topic(TOPIC, 2)
            asyncio.run(create())
            spark = spark_session("local[2]", app_name="ferry-perf-stream")
            register(spark)
            results = {"ferry": measure(spark, cluster, "ferry", args.seconds, args.rate, args.moves, work)}
            if spark_kafka_jars() is not None:
                results["kafka"] = measure(spark, cluster, "kafka", args.seconds, args.rate, args.moves, work)
        finally:
            cluster.stop(graceful=False)
    ferry = results["ferry"]
    out: dict[str, Any] = {"stream_freshness_p99_ms": ferry["freshness_p99_ms"], "stream_lost": ferry["lost"],
                           "stream_duplicated": ferry["duplicated"], "by_source": results}
    if "kafka" in results:
        out["freshness_p99_vs_kafka_source"] = round(ferry["freshness_p99_ms"] / results["kafka"]["freshness_p99_ms"], 2)
    if args.json:
        print(json.dumps(out))
        return 0
    print(f"{'source':<8} {'records':>8} {'lost':>5} {'dup':>5} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} "
          f"{'warm-up s':>9}  moves")
    for name, r in results.items():
        print(f"{name:<8} {r['records']:>8} {r['lost']:>5} {r['duplicated']:>5} {r['freshness_p50_ms']:>8} "
              f"{r['freshness_p99_ms']:>8} {r['freshness_max_ms']:>8} {r['warm_up_s']:>9}  {len(r['moves'])}")
    if "freshness_p99_vs_kafka_source" in out:
        print(f"ferry p99 / Spark's Kafka source p99: {out['freshness_p99_vs_kafka_source']}")
    return 0
