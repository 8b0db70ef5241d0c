"""`ferry perf txn [--json] [--quick] [--no-peer]`: transactions against idempotence, and beside Apache Kafka.

1. Produce MB/s of a confluent-kafka (librdkafka) transactional producer committing every 100 ms
   against the same producer idempotent (no transactions), 1 KiB records, acks=all, 4 partitions:
   ``txn_produce_mb_s / idempotent_produce_mb_s`` is what transactions cost.
2. ``commit_p99_ms``: EndTxn as the producer sees it (``commit_transaction()`` after the
   transaction's records are acknowledged), which on Ferry returns once every partition has its marker.
3. ``move_with_open_txn_gap_p99_ms``: the longest pause in acknowledgements across a move of a
   partition while a transaction is open on it, beside the same move under an idempotent producer
   (``plain_move_gap_p99_ms``).
4. With Kafka's jars (`make kafka-jars`), 1 and 2 against Apache Kafka (KRaft, 3 brokers) in the
   same run, as ratios: what a user would pick instead.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from rich.console import Console
from rich.table import Table

from tools.admin import Admin
from tools.client import TopicPartition
from tools.cluster import LocalCluster
from tools.move_workload import percentile as nearest_rank

MiB = 1024 * 1024
RECORD = b"x" * 1024
COMMIT_INTERVAL_S = 0.1
PARTITIONS = 4


def percentile(values: list[float], q: float) -> float:
    return nearest_rank(values, q) or 0.0


@dataclass
class Run:
    acked_bytes: int = 0
    elapsed_s: float = 0.0
    commits_ms: list[float] = field(default_factory=list)
    acked_at: list[float] = field(default_factory=list)

    @property
    def mb_s(self) -> float:
        return self.acked_bytes / MiB / self.elapsed_s if self.elapsed_s else 0.0


def produce(bootstrap: str, topic: str, seconds: float, transactional_id: str | None,
            during: Callable[[], None] | None = None, partition: int | None = None) -> Run:
    """Produce for ``seconds``; with a transactional id, one transaction per 100 ms. ``during``
    runs on a thread after a third of the time (a move)."""
    conf: dict[str, Any] = {"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5,
                            "batch.size": 64 * 1024}
    if transactional_id is not None:
        conf["transactional.id"] = transactional_id
    producer = Producer(conf)
    run = Run()

    def acked(err: Any, msg: Any) -> None:
        if err is None:
            run.acked_bytes += len(msg.value())
            run.acked_at.append(time.monotonic())
    if transactional_id is not None:
        producer.init_transactions(60)
    helper: threading.Thread | None = None
    started = time.monotonic()
    end = started + seconds
    while time.monotonic() < end:
        if transactional_id is not None:
            producer.begin_transaction()
        until = min(end, time.monotonic() + COMMIT_INTERVAL_S) if transactional_id is not None else end
        while time.monotonic() < until:
            if helper is None and during is not None and time.monotonic() > started + seconds / 3:
                helper = threading.Thread(target=during)
                helper.start()
            try:
                if partition is None:
                    producer.produce(topic, RECORD, on_delivery=acked)
                else:
                    producer.produce(topic, RECORD, partition=partition, on_delivery=acked)
            except BufferError:
                producer.poll(0.005)
            producer.poll(0)
        if transactional_id is not None:
            producer.flush(60)  # the records first: what is timed is EndTxn -> every marker written
            t0 = time.monotonic()
            producer.commit_transaction(60)
            run.commits_ms.append((time.monotonic() - t0) * 1000)
    producer.flush(60)
    run.elapsed_s = time.monotonic() - started
    if helper is not None:
        helper.join()
    return run


def max_gap_ms(times: list[float], after: float) -> float:
    """The longest pause between acknowledgements from ``after`` on (the move's start)."""
    later = sorted(t for t in times if t >= after - 0.05)
    return max(((b - a) * 1000 for a, b in zip(later, later[1:], strict=False)), default=0.0)


def _mover(cluster: LocalCluster, topic: str, moved_at: list[float]) -> Callable[[], None]:
    """Move partition 0 of ``topic`` to the next broker; note when the move was asked."""
    brokers = sorted(cluster.kafka_ports)

    async def go() -> None:
        async with Admin(bootstrap_controllers=cluster.controller_bootstrap) as admin:
            state = await admin.wait_for_leader(TopicPartition(topic, 0))
            to = brokers[(brokers.index(int(state.leader)) + 1) % len(brokers)]
            moved_at.append(time.monotonic())
            await admin.move_partition(TopicPartition(topic, 0), [to])
            await admin.wait_for_leader(TopicPartition(topic, 0), leader=to)
    return lambda: asyncio.run(go())


def move_gaps(cluster: LocalCluster, topic: str, moves: int, transactional: bool) -> list[float]:
    gaps: list[float] = []
    for i in range(moves):
        moved_at: list[float] = []
        run = produce(cluster.kafka_bootstrap, topic, 2.4, f"perf-move-{i}" if transactional else None,
                      during=_mover(cluster, topic, moved_at), partition=0)
        gaps.append(max_gap_ms(run.acked_at, moved_at[0]))
    return gaps


def measure(bootstrap: str, seconds: float, rounds: int, create: Callable[[str, int], None]) -> dict[str, Any]:
    create("perf-txn", PARTITIONS)
    txn_mb: list[float] = []
    idem_mb: list[float] = []
    commits: list[float] = []
    for r in range(rounds):  # interleaved
        idem_mb.append(produce(bootstrap, "perf-txn", seconds, None).mb_s)
        t = produce(bootstrap, "perf-txn", seconds, f"perf-txn-{r}")
        txn_mb.append(t.mb_s)
        commits += t.commits_ms
    txn_med, idem_med = sorted(txn_mb)[len(txn_mb) // 2], sorted(idem_mb)[len(idem_mb) // 2]
    return {"txn_produce_mb_s": round(txn_med, 2), "idempotent_produce_mb_s": round(idem_med, 2),
            "txn_over_idempotent": round(txn_med / idem_med, 3) if idem_med else None,
            "commit_p50_ms": round(percentile(commits, 50), 1), "commit_p99_ms": round(percentile(commits, 99), 1),
            "commits": len(commits)}


def ferry_side(state: Path, seconds: float, rounds: int, moves: int) -> dict[str, Any]:
    cluster = LocalCluster(str(state / "ferry"))
    cluster.start()
    try:
        def create(name: str, partitions: int) -> None:
            async def go() -> None:
                async with Admin(bootstrap_controllers=cluster.controller_bootstrap) as admin:
                    await admin.create_topic(name, partitions)
            asyncio.run(go())
        out = measure(cluster.kafka_bootstrap, seconds, rounds, create)
        create("perf-txn-move", 1)
        txn_gaps = move_gaps(cluster, "perf-txn-move", moves, transactional=True)
        plain_gaps = move_gaps(cluster, "perf-txn-move", moves, transactional=False)
        out.update({"move_with_open_txn_gap_p99_ms": round(percentile(txn_gaps, 99), 1),
                    "move_with_open_txn_gap_p50_ms": round(percentile(txn_gaps, 50), 1),
                    "plain_move_gap_p99_ms": round(percentile(plain_gaps, 99), 1),
                    "plain_move_gap_p50_ms": round(percentile(plain_gaps, 50), 1), "moves": moves})
        return out
    finally:
        cluster.stop(graceful=False)


def kafka_side(state: Path, seconds: float, rounds: int) -> dict[str, Any] | None:
    try:
        from tools.peer.apache_kafka import ApacheKafkaCluster
        from tools.peer.kafka_tools import jars_dir
        peer = ApacheKafkaCluster(state / "kafka", jars_dir())
    except Exception:  # noqa: BLE001 - no jars, no Java: Ferry alone, said in the output
        return None
    peer.start()
    try:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": peer.bootstrap})  # kept: its futures need it alive

        def create(name: str, partitions: int) -> None:
            for f in admin.create_topics([NewTopic(name, partitions, 3)]).values():
                f.result(60)
        return measure(peer.bootstrap, seconds, rounds, create)
    finally:
        peer.stop(graceful=False)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="ferry perf txn", description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--quick", action="store_true", help="1 round of 3 s, 3 moves")
    parser.add_argument("--no-peer", action="store_true", help="Ferry only, even with Kafka's jars")
    args = parser.parse_args(argv)
    seconds, rounds, moves = (3.0, 1, 3) if args.quick else (6.0, 3, 10)
    state = Path(tempfile.mkdtemp(prefix="ferry-perf-txn-"))
    out: dict[str, Any] = {"ferry": ferry_side(state, seconds, rounds, moves)}
    kafka = None if args.no_peer else kafka_side(state, seconds, rounds)
    out["apache_kafka"] = kafka
    if kafka is not None:
        f = out["ferry"]
        out["ratios"] = {
            "txn_produce_ferry_over_kafka": round(f["txn_produce_mb_s"] / kafka["txn_produce_mb_s"], 3)
            if kafka["txn_produce_mb_s"] else None,
            "commit_p99_ferry_over_kafka": round(f["commit_p99_ms"] / kafka["commit_p99_ms"], 3)
            if kafka["commit_p99_ms"] else None}
    if args.json:
        print(json.dumps(out, sort_keys=True))
        return 0
    table = Table(title="transactions (1 KiB records, acks=all, commit every 100 ms)")
    table.add_column("")
    table.add_column("Ferry", justify="right")
    table.add_column("Apache Kafka", justify="right")
    for key in ("txn_produce_mb_s", "idempotent_produce_mb_s", "txn_over_idempotent", "commit_p50_ms",
                "commit_p99_ms", "move_with_open_txn_gap_p50_ms", "move_with_open_txn_gap_p99_ms",
                "plain_move_gap_p50_ms", "plain_move_gap_p99_ms"):
        table.add_row(key, str(out["ferry"].get(key, "")), "" if kafka is None else str(kafka.get(key, "—")))
    Console().print(table)
    if kafka is None and not args.no_peer:
        print("Apache Kafka: not run (no jars: make kafka-jars)")
    return 0
