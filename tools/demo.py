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
import statistics
import sys
import tempfile
import time
from typing import Any

from rich.console import Console
from rich.table import Table

from tools.admin import Admin
from tools.client import TopicPartition
from tools.cluster import ROOT, LocalCluster
from tools.move_workload import MoveResult, ProduceLoad, check_read_back, fetch_timeline, move_once, percentile

STEP_LEGEND = ("steps: 1 controller accepted → old owner saw it, 2 stopped produce, 3 meta persisted, "
               "4 force-uploaded and closed, 5 new leader elected, 6 new owner serving")


def fmt_ms(value: Any) -> str:
    return "-" if value is None else f"{float(value):.0f}"


def moves_table(results: list[MoveResult]) -> Table:
    table = Table(title="Partition moves: six-step timeline and client-observed unavailability (ms)",
                  title_justify="left", caption=STEP_LEGEND, caption_justify="left")
    table.add_column("#", justify="right")
    table.add_column("partition", no_wrap=True)
    table.add_column("move", no_wrap=True)
    for k in range(1, 7):
        table.add_column(str(k), justify="right")
    table.add_column("t0→t6", justify="right")
    table.add_column("unavailable", justify="right", style="bold")
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
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"version": 1, "partitions": [{"topic": tp.topic, "partition": tp.partition, "replicas": [dst]}]}, f)
    server = cluster.bootstrap_servers[0].removeprefix("http://")
    console.print(f"\nThe same with Kafka's tool and file format ({tp} {src} → {dst}):")
    await run_tool(console, ["reassign-partitions", "--bootstrap-server", server, "--execute",
                             "--reassignment-json-file", path])
    await admin.wait_for_leader(tp, dst, timeout_s=30)
    await asyncio.sleep(0.3)
    await run_tool(console, ["reassign-partitions", "--bootstrap-server", server, "--verify",
                             "--reassignment-json-file", path])


async def run_demo(cluster: LocalCluster, console: Console, moves: int, partitions: int) -> bool:
    async with Admin(bootstrap_controllers=cluster.controller_bootstrap) as admin:
        topic = "demo"
        brokers = sorted(cluster.broker_ports)
        await admin.create_topic(topic, partitions, assignments={p: [brokers[p % len(brokers)]] for p in range(partitions)})
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        for tp in tps:
            await admin.wait_for_leader(tp)
        console.print(f"Topic [bold]{topic}[/] with {partitions} partitions; producers running on every partition.")
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
                console.print(f"  move {i + 1:>2}: {tp} {src} → {dst}  unavailable "
                              f"{fmt_ms(result.unavailability_ms)} ms")
                await asyncio.sleep(0.3)
            await kafka_tool_move(cluster, admin, console, tps[0], brokers)
            await asyncio.sleep(0.5)
        finally:
            await load.stop()
        console.print(moves_table(results))
        gaps = [r.unavailability_ms for r in results if r.unavailability_ms is not None]
        if gaps:
            console.print(f"Client-observed unavailability: p50 {percentile(gaps, 50):.0f} ms, "
                          f"max {max(gaps):.0f} ms, mean {statistics.mean(gaps):.0f} ms "
                          f"(AutoMQ documents about 1,500 ms per move).")
        console.print("Reading every partition back from its start ...")
        report = await check_read_back(cluster.bootstrap_servers, load)
        failed = sum(load.failed.values())
        if report.ok:
            console.print(f"[bold green]OK[/]: {report.acknowledged} acknowledged records, each read back exactly once, "
                          f"in order, at its acknowledged offset ({failed} sends not acknowledged).")
        else:
            console.print(f"[bold red]FAILED[/]: {report.summary()}")
        return report.ok and len(results) == moves


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="ferry demo", description="the seconds-scale reassignment demo")
    parser.add_argument("--moves", type=int, default=10)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--state-dir", help="keep the cluster's state and logs here (default: a temporary dir)")
    args = parser.parse_args(argv)
    console = Console()
    state_dir = os.path.abspath(args.state_dir) if args.state_dir else tempfile.mkdtemp(prefix="ferry-demo-")
    console.print("[bold]Ferry demo[/]: moving partitions between stateless brokers under load")
    started = time.monotonic()
    cluster = LocalCluster(state_dir)
    ok = False
    try:
        cluster.start()
        console.print(f"Cluster up in {time.monotonic() - started:.1f} s: S3 at {cluster.s3_endpoint}, "
                      f"controllers {', '.join(cluster.controller_bootstrap)}, brokers {', '.join(cluster.bootstrap_servers)}"
                      f" (logs in {state_dir})")
        ok = asyncio.run(run_demo(cluster, console, args.moves, args.partitions))
    except Exception as exc:  # report, then still stop the cluster
        console.print(f"[bold red]Demo failed[/]: {type(exc).__name__}: {exc} (logs in {state_dir})")
        ok = False
    finally:
        cluster.stop()
        console.print(f"Cluster down. Total {time.monotonic() - started:.1f} s.")
    return 0 if ok else 1
