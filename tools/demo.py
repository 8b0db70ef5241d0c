"""`ferry demo` (= `make demo`): partitions moving in well under a second, under load, losing nothing.

Starts a local cluster (the embedded S3, 3 controllers, 3 brokers), creates a topic, keeps
producers running, moves partitions back and forth, prints each move's six-step timeline and the
client-observed unavailability, checks that every acknowledged record reads back exactly once and
in order, and stops the cluster. Exits 1 when the check fails.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Any

import aiohttp
from rich.console import Console
from rich.table import Table

from tools.admin import Admin
from tools.client import TopicPartition
from tools.cluster import ROOT, LocalCluster
from tools.kafka_workload import KafkaLoad
from tools.move_workload import MoveResult, ProduceLoad, check_read_back, fetch_timeline, move_once, percentile
from tools.peer.jars import kafka_jars_dir

# (column header, what the step is): t(k-1) -> t(k) of the six-step move, docs/broker-api.md "Moves".
STEPS = (
    ("1 notify", "the controller accepted the change → the old owner applied it"),
    ("2 stop", "the old owner stopped taking produce and drained in-flight appends"),
    ("3 meta", "it persisted the partition's meta"),
    ("4 upload", "it force-uploaded what its WAL buffered and closed the streams"),
    ("5 elect", "the controller elected the new owner"),
    ("6 serve", "the new owner opened the streams and serves"),
)
STEP_LEGEND = "\n".join(f"{head}: {text}" for head, text in STEPS) + (
    "\ntotal: t0 → t6 (controller accepted → new owner serving); unavailable: the producers' last "
    "acknowledgement from the old owner → their first from the new one")


def fmt_ms(value: Any) -> str:
    return "-" if value is None else f"{float(value):.0f}"


def moves_table(results: list[MoveResult]) -> Table:
    table = Table(title="Partition moves: each step of the six-step move, in ms",
                  title_justify="left", caption=STEP_LEGEND, caption_justify="left")
    table.add_column("#", justify="right")
    table.add_column("partition", no_wrap=True)
    table.add_column("brokers", no_wrap=True)
    for head, _text in STEPS:
        table.add_column(head.replace(" ", "\n"), justify="right")
    table.add_column("total\nms", justify="right")
    table.add_column("unavailable\nms", justify="right", style="bold")
    for i, r in enumerate(results, 1):
        steps = (r.timeline or {}).get("steps_ms") or {}
        table.add_row(str(i), str(r.tp), f"{r.from_broker}→{r.to_broker}",
                      *[fmt_ms(steps.get(str(k))) for k in range(1, 7)],
                      fmt_ms((r.timeline or {}).get("total_ms")), fmt_ms(r.unavailability_ms))
    return table


async def run_tool(console: Console, args: list[str]) -> None:
    """Run a `ferry` command as a user would and show what it prints."""
    console.print(f"[dim]$ ferry {' '.join(args)}[/]")
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "tools.cli", *args, cwd=ROOT,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    out, _ = await asyncio.wait_for(proc.communicate(), 60)
    console.print(out.decode(errors="replace").rstrip(), markup=False, highlight=False)


async def kafka_tool_move(cluster: LocalCluster, admin: Admin, console: Console, tp: TopicPartition,
                          brokers: list[int]) -> None:
    """One more move, with Kafka's reassignment tool and its JSON file, under the same load."""
    src = (await admin.wait_for_leader(tp)).leader
    dst = brokers[(brokers.index(src) + 1) % len(brokers)]
    path = os.path.join(cluster.state_dir, "reassignment.json")
    with open(path, "w", encoding="utf-8") as f:  # noqa: ASYNC230 - a small file written once, before the tool runs
        json.dump({"version": 1, "partitions": [{"topic": tp.topic, "partition": tp.partition, "replicas": [dst]}]}, f)
    server = cluster.bootstrap_servers[0].removeprefix("http://")
    console.print(f"\nThe same with Kafka's tool and file format ({tp} {src} → {dst}):")
    await run_tool(console, ["reassign-partitions", "--bootstrap-server", server, "--execute",
                             "--reassignment-json-file", path])
    await admin.wait_for_leader(tp, dst, timeout_s=30)
    await asyncio.sleep(0.3)
    await run_tool(console, ["reassign-partitions", "--bootstrap-server", server, "--verify",
                             "--reassignment-json-file", path])


@dataclass
class Outcome:
    """What the verdict line says."""

    moves_done: int = 0
    acknowledged: int = 0
    read_back_ok: bool = False
    p50_ms: float | None = None
    max_ms: float | None = None
    kafka_acknowledged: int = 0
    kafka_p50_ms: float | None = None
    kafka_max_ms: float | None = None
    problem: str = ""


async def run_demo(cluster: LocalCluster, console: Console, moves: int, partitions: int, outcome: Outcome) -> bool:
    async with Admin(bootstrap_controllers=cluster.controller_bootstrap) as admin:
        topic = "demo"
        brokers = sorted(cluster.broker_ports)
        await admin.create_topic(topic, partitions, assignments={p: [brokers[p % len(brokers)]] for p in range(partitions)})
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        for tp in tps:
            await admin.wait_for_leader(tp)
        console.print(f"Topic [bold]{topic}[/] with {partitions} partitions; producers running on every partition.")
        kafka_topic = "demo-kafka"
        await admin.create_topic(kafka_topic, partitions,
                                 assignments={p: [brokers[p % len(brokers)]] for p in range(partitions)})
        ktps = [TopicPartition(kafka_topic, p) for p in range(partitions)]
        for tp in ktps:
            await admin.wait_for_leader(tp)
        console.print(f"Topic [bold]{kafka_topic}[/]: a librdkafka producer (idempotent, acks=all) and a consumer "
                      f"group of two on bootstrap.servers={cluster.kafka_bootstrap}")
        kafka = KafkaLoad(cluster.kafka_bootstrap, kafka_topic, partitions).start()
        kafka_gaps: list[float] = []
        load = await ProduceLoad(cluster.bootstrap_servers, tps).start()
        results: list[MoveResult] = []
        try:
            for tp in tps:
                await load.wait_ack_from(tp, brokers[tp.partition % len(brokers)], 0, 30)
            await asyncio.sleep(1.0)
            for i in range(moves):
                tp = tps[i % partitions]
                src = (await admin.wait_for_leader(tp)).leader
                dst = brokers[(brokers.index(src) + 1) % len(brokers)]
                wall_ms = int(time.time() * 1000)
                result = await move_once(admin, load, tp, src, dst, timeout_s=30)
                result.timeline = await fetch_timeline(admin, tp, [src, dst], move_after_ms=wall_ms - 1000)
                results.append(result)
                ktp = ktps[i % partitions]
                ksrc = (await admin.wait_for_leader(ktp)).leader
                kdst = brokers[(brokers.index(ksrc) + 1) % len(brokers)]
                kstart = time.monotonic()
                await admin.move_partition(ktp, [kdst])
                await admin.wait_for_leader(ktp, kdst, timeout_s=30)
                await asyncio.sleep(1.0)
                kgap = kafka.gap_ms(ktp.partition, kstart)
                if kgap is not None:
                    kafka_gaps.append(kgap)
                console.print(f"  move {i + 1:>2}: {tp} from broker {src} to broker {dst}: HTTP producers saw "
                              f"{fmt_ms(result.unavailability_ms)} ms without an acknowledgement; {ktp} "
                              f"{ksrc}→{kdst}: the librdkafka producer saw {fmt_ms(kgap)} ms")
            await kafka_tool_move(cluster, admin, console, tps[0], brokers)
            await asyncio.sleep(0.5)
        finally:
            await load.stop()
            group_complete = await asyncio.to_thread(kafka.stop)
        console.print(moves_table(results))
        gaps = [r.unavailability_ms for r in results if r.unavailability_ms is not None]
        outcome.moves_done = len(results)
        if gaps:
            outcome.p50_ms, outcome.max_ms = percentile(gaps, 50), max(gaps)
            console.print(f"Client-observed unavailability: p50 {percentile(gaps, 50):.0f} ms, "
                          f"max {max(gaps):.0f} ms, mean {statistics.mean(gaps):.0f} ms "
                          f"(AutoMQ documents about 1,500 ms per move).")
        outcome.kafka_acknowledged = kafka.acknowledged()
        if kafka_gaps:
            outcome.kafka_p50_ms, outcome.kafka_max_ms = percentile(kafka_gaps, 50), max(kafka_gaps)
        console.print(f"Kafka clients: the librdkafka producer had {outcome.kafka_acknowledged} records acknowledged "
                      f"({len(kafka.errors)} errors), unavailability across its moves p50 "
                      f"{fmt_ms(outcome.kafka_p50_ms)} ms, max {fmt_ms(outcome.kafka_max_ms)} ms; the consumer group "
                      f"of two read {'every one of them' if group_complete else 'NOT all of them'}.")
        if kafka.errors or not group_complete:
            outcome.problem = f"Kafka clients: {kafka.errors[:1] or 'the group missed acknowledged records'}"
        console.print("Reading every partition back from its start ...")
        report = await check_read_back(cluster.bootstrap_servers, load)
        failed = sum(load.failed.values())
        outcome.acknowledged, outcome.read_back_ok = report.acknowledged, report.ok
        if report.ok:
            console.print(f"Read back: {report.acknowledged} acknowledged records, each exactly once, in order, at "
                          f"its acknowledged offset ({failed} sends not acknowledged).")
        else:
            outcome.problem = f"read-back check failed: {report.summary()}"
            console.print(f"[bold red]Read back FAILED[/]: {report.summary()}")
        if len(results) != moves:
            outcome.problem = outcome.problem or f"only {len(results)} of {moves} moves completed"
        if kafka_jars_dir() is not None:  # the real thing beside Ferry; the Python classic mode is the fallback
            classic_problem = await asyncio.to_thread(apache_kafka_move, console, outcome.p50_ms)
        else:
            classic_problem = await classic_move(cluster, admin, console, brokers, outcome.p50_ms)
        outcome.problem = outcome.problem or classic_problem
        return report.ok and len(results) == moves and not kafka.errors and group_complete and not classic_problem


CLASSIC_DEMO_BYTES = 64 * 1024 * 1024
CLASSIC_DEMO_TIMEOUT_S = 40


async def classic_move(cluster: LocalCluster, admin: Admin, console: Console, brokers: list[int],
                       ferry_p50_ms: float | None) -> str:
    """One classic move beside the Ferry moves: a storage=local replica (Kafka's replication, RF 2)
    of 64 MiB handed to another broker, which must copy the whole log before the move completes.
    Returns what went wrong ("" when the move completed and the new replica holds the whole log)."""
    from tools.perf.move import fill_partition
    from tools.perf.move_compare import replica_bytes, wait_complete

    topic = "demo-classic"
    tp = TopicPartition(topic, 0)
    src, keep, dst = brokers[0], brokers[1], brokers[2]
    await admin.create_topic(topic, 1, assignments={0: [src, keep]}, storage="local",
                             configs={"min.insync.replicas": "1"})
    await admin.wait_for_leader(tp, src)
    async with aiohttp.ClientSession() as session:
        await fill_partition(session, cluster.broker_url(src), tp, CLASSIC_DEMO_BYTES)
    log_bytes = replica_bytes(cluster, src, topic)
    started = time.monotonic()
    await admin.move_partition(tp, [dst, keep])
    try:
        await wait_complete(admin, tp, [dst, keep], CLASSIC_DEMO_TIMEOUT_S)
    except TimeoutError as exc:
        console.print(f"[bold red]Classic move FAILED[/]: {exc}")
        return f"classic move: {exc}"
    took_s = time.monotonic() - started
    copied = replica_bytes(cluster, dst, topic)
    if copied < log_bytes:
        console.print(f"[bold red]Classic move FAILED[/]: broker {dst} holds {copied} of {log_bytes} bytes")
        return f"classic move: broker {dst} holds {copied} of {log_bytes} bytes"
    console.print(f"\nFor comparison, a classic storage=local partition of {log_bytes / (1024 * 1024):.0f} MiB "
                  f"(Kafka's replication, RF 2) moved from broker {src} to broker {dst} in {took_s:.2f} s: the new "
                  f"replica copied the whole log ({copied} bytes) before the move completed (Ferry moves above: "
                  f"p50 {fmt_ms(ferry_p50_ms)} ms whatever the size; `ferry perf move --compare` measures both by "
                  f"size).")
    return ""


def apache_kafka_move(console: Console, ferry_p50_ms: float | None) -> str:
    """Apache Kafka's own copy reassignment beside the Ferry moves (when ``make kafka-jars`` has
    run): a KRaft cluster from the pinned jars, a partition of 64 MiB (RF 2) reassigned from broker
    1 to broker 3 under a paced producer, timed as ``ferry perf peer`` times it. Returns what went
    wrong ("" when the reassignment completed)."""
    from pathlib import Path

    from tools.peer.apache_kafka import ApacheKafkaCluster
    from tools.perf.peer import KafkaPeer, one_move

    jars = kafka_jars_dir()
    assert jars is not None
    console.print("\nStarting Apache Kafka (KRaft, 1 controller + 3 brokers) for comparison ...")
    peer = ApacheKafkaCluster(Path(tempfile.mkdtemp(prefix="ferry-demo-kafka-")), jars)
    try:
        peer.start()
        move = one_move(KafkaPeer(peer), "64MiB", CLASSIC_DEMO_BYTES, [1, 2], [3, 2], None, timeout_s=120)
    except Exception as exc:  # noqa: BLE001 - reported in the verdict
        console.print(f"[bold red]Apache Kafka move FAILED[/]: {exc}")
        return f"Apache Kafka move: {exc}"
    finally:
        peer.stop(graceful=False)
    console.print(f"Apache Kafka {peer.version}: a partition of 64 MiB (RF 2) reassigned from broker 1 to broker 3 "
                  f"in {move['move_s']:.2f} s, the new replica copying the whole log first; its producer's longest "
                  f"gap {fmt_ms(move['gap_ms'])} ms (Ferry moves above: p50 {fmt_ms(ferry_p50_ms)} ms whatever the "
                  f"size; `ferry perf peer` measures both by size).")
    return ""


def verdict(ok: bool, outcome: Outcome, leftover: list[int], elapsed_s: float) -> str:
    """The last line: OK or FAIL, and why, in one line."""
    if ok and not leftover:
        return (f"[bold green]OK[/]: {outcome.moves_done} moves under load, unavailability p50 "
                f"{fmt_ms(outcome.p50_ms)} ms / max {fmt_ms(outcome.max_ms)} ms, {outcome.acknowledged} acknowledged "
                f"records all read back exactly once in order; librdkafka: {outcome.kafka_acknowledged} acknowledged, "
                f"all read by the consumer group, unavailability p50 {fmt_ms(outcome.kafka_p50_ms)} ms; every process "
                f"stopped ({elapsed_s:.1f} s in all).")
    reasons = [outcome.problem or "the demo did not complete"] if not ok else []
    if leftover:
        reasons.append(f"processes still running: {', '.join(map(str, leftover))}")
    return f"[bold red]FAIL[/]: {'; '.join(reasons)} ({elapsed_s:.1f} s in all)."


def _cluster_pids(cluster: LocalCluster) -> list[int]:
    pids = [p.pid for p in cluster.broker_procs.values()]
    pids += [p.pid for p in (cluster.quorum.procs.values() if cluster.quorum else [])]
    if cluster.s3 is not None and cluster.s3.process is not None:
        pids.append(cluster.s3.process.pid)
    if cluster.console is not None:
        pids.append(cluster.console.pid)
    return pids


def _still_running(pids: list[int]) -> list[int]:
    left = []
    for pid in pids:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            continue
        except PermissionError:
            pass
        left.append(pid)
    return left


def _terminate_as_interrupt(_signum: int, _frame: Any) -> None:
    """SIGTERM stops the demo as Ctrl-C does: the cluster is still stopped on the way out."""
    raise KeyboardInterrupt


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="ferry demo", description=(
        "Start a local cluster (embedded S3, 3 controllers, 3 brokers), keep producers running, move partitions "
        "between brokers, print each move's six-step timeline and the unavailability the producers saw, check that "
        "every acknowledged record reads back exactly once and in order, stop the cluster. Exits 0 on OK, 1 on FAIL."))
    parser.add_argument("--moves", type=int, default=10, help="partition moves to make (default 10)")
    parser.add_argument("--partitions", type=int, default=3, help="partitions of the demo topic (default 3)")
    parser.add_argument("--state-dir", help="keep the cluster's state and logs here (default: a temporary dir)")
    parser.add_argument("--wal", choices=("local", "s3"), default="local",
                        help="the brokers' WAL: a file per log dir (default) or WAL objects in S3")
    parser.add_argument("--no-console", dest="console", action="store_false",
                        help="do not serve the web console (default: serve it on loopback and print its URL)")
    args = parser.parse_args(argv)
    if args.moves < 1 or args.partitions < 1:
        print("Error: --moves and --partitions must be at least 1 (INVALID_REQUEST)", file=sys.stderr)
        return 2
    # A pipe or a log file gets the width of the table (rich would pick 80 columns and squeeze it).
    console = Console(soft_wrap=True, width=None if sys.stdout.isatty() else 110)
    state_dir = os.path.abspath(args.state_dir) if args.state_dir else tempfile.mkdtemp(prefix="ferry-demo-")
    console.print("[bold]Ferry demo[/]: moving partitions between stateless brokers under load")
    started = time.monotonic()
    previous = signal.signal(signal.SIGTERM, _terminate_as_interrupt)
    cluster = LocalCluster(state_dir, wal_mode=args.wal)
    outcome = Outcome()
    ok = False
    pids: list[int] = []
    try:
        try:
            cluster.start()
            if args.console:
                try:
                    cluster.start_console()
                except RuntimeError as exc:  # the demo does not need it
                    console.print(f"[yellow]The web console did not start[/]: {exc}")
            pids = _cluster_pids(cluster)
            console.print(f"Cluster up in {time.monotonic() - started:.1f} s: S3 at {cluster.s3_endpoint}, "
                          f"controllers {', '.join(cluster.controller_bootstrap)}, brokers "
                          f"{', '.join(cluster.bootstrap_servers)} (logs in {state_dir})")
            if cluster.console_url:
                console.print(f"Web console: [bold]{cluster.console_url}[/] (open it to watch the moves live; "
                              "it stops with the demo)")
            ok = asyncio.run(run_demo(cluster, console, args.moves, args.partitions,
                                      outcome))
        except KeyboardInterrupt:
            outcome.problem = "interrupted"
            ok = False
        except Exception as exc:  # noqa: BLE001 - report, then still stop the cluster
            outcome.problem = f"{type(exc).__name__}: {exc} (logs in {state_dir})"
            ok = False
        finally:
            pids = pids or _cluster_pids(cluster)
            cluster.stop()
    finally:
        signal.signal(signal.SIGTERM, previous)
    leftover = _still_running(pids)
    console.print(f"Cluster down: {len(pids) - len(leftover)} of {len(pids)} processes stopped.")
    console.print(verdict(ok, outcome, leftover, time.monotonic() - started))
    return 0 if ok and not leftover else 1
