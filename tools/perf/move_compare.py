"""`ferry perf move --compare [--json] [--quick]`: the same partition moved both ways, side by side.

For each size (1 MiB, 100 MiB, 1 GiB; ``--quick``: 1, 16, 64 MiB) under the same steady produce
load, on one cluster of 4 brokers:

- **classic** (``storage=local``, RF 3, ``min.insync.replicas=2``): replicas [1, 2, 3] reassigned
  to [4, 2, 3], as Kafka moves a replica: broker 4 fetches the whole log from the leader, the move
  completes once it is in the ISR, broker 1's copy is deleted and leadership moves off it;
- **Ferry** (``storage=s3``, RF 1): the partition handed from broker 1 to broker 2.

It reports each move's duration (request → the target serving/complete) and the unavailability the
producer saw (the longest gap between acknowledgements around the move), the ratio classic/Ferry
at the largest size, and the accuracy of a ``--throttle``d copy (the copy rate measured from the
new replica's files against the limit). A PNG plots move time against partition size, both modes.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
import time
from itertools import pairwise
from typing import Any, Sequence

import aiohttp
from rich.console import Console
from rich.table import Table

from broker import local_layout as lay
from metadata_quorum.kernel.messages.configs import ConfigResourceChange
from tools.admin import Admin
from tools.client import TopicPartition
from tools.cluster import LocalCluster
from tools.move_workload import Ack, ProduceLoad, move_once
from tools.perf.move import FILL_BATCH_BYTES, FULL_SIZES, QUICK_SIZES, MiB, fill_partition

THROTTLE_SIZE_BYTES = 32 * MiB
THROTTLE_RATE_BPS = 8 * 1000 * 1000
# small batches for the throttled copy: a follower fetches at least one whole batch, and a 4 MiB
# batch half-written when the copy is first seen skews a rate measured over a few seconds
THROTTLE_BATCH_BYTES = 64 * 1024
LOCAL_CONFIGS = {"min.insync.replicas": "2", "segment.bytes": str(256 * MiB)}


def max_gap_ms(acks: Sequence[Ack], start_s: float, end_s: float) -> float | None:
    """The longest time without an acknowledgement in [start_s, end_s] (its edges included):
    what a producer saw of the move."""
    times = [start_s] + [a.time_s for a in acks if start_s <= a.time_s <= end_s] + [end_s]
    if len(times) < 3:
        return None
    return max(b - a for a, b in pairwise(times)) * 1000


def summary(classic: dict[str, dict[str, Any]], s3: dict[str, dict[str, Any]], throttle: dict[str, Any]) -> dict[str, Any]:
    """The JSON object: both modes by size, the ratio at 1 GiB (or the largest size run)."""
    sizes = list(classic)
    largest = sizes[-1] if sizes else None

    def ratio(label: str | None) -> float | None:
        if label is None or label not in s3:
            return None
        c, f = classic[label].get("move_s"), s3[label].get("move_s")
        return round(c / f, 1) if c and f else None
    return {
        "classic_move_s_by_size": {k: v.get("move_s") for k, v in classic.items()},
        "s3_move_s_by_size": {k: v.get("move_s") for k, v in s3.items()},
        "classic_unavailability_ms_by_size": {k: v.get("unavailability_ms") for k, v in classic.items()},
        "s3_unavailability_ms_by_size": {k: v.get("unavailability_ms") for k, v in s3.items()},
        "classic_over_s3_at_1gib": ratio("1GiB") if "1GiB" in classic else None,
        "classic_over_s3_at_largest": ratio(largest), "largest_size": largest,
        "throttled_rate_error": throttle.get("error"), "throttle": throttle,
        "classic": classic, "s3": s3,
    }


async def wait_complete(admin: Admin, tp: TopicPartition, target: list[int], timeout_s: float) -> None:
    """Until the controller shows the reassignment finished: replicas = target, none adding, a leader among them."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        reply = await admin.any_controller_api.describe_topics({"names": [tp.topic]})
        parts = reply["topics"][0].get("partitions", [])
        p = next((x for x in parts if x["partition"] == tp.partition), None)
        if p is not None and p["replicas"] == target and not p["adding_replicas"] and p["leader"] in target:
            return
        await asyncio.sleep(0.05)
    raise TimeoutError(f"{tp} did not reach replicas {target} within {timeout_s} s")


def replica_bytes(cluster: LocalCluster, broker: int, topic: str) -> int:
    """The bytes of partition 0's segments in ``broker``'s log dirs, read off the files (0 if none)."""
    for d in cluster.broker_log_dirs(broker):
        path = os.path.join(d, f"{topic}-0")
        if os.path.isdir(path):
            try:
                return sum(os.path.getsize(os.path.join(path, lay.segment_file_name(b)))
                           for b in lay.segment_bases(os.listdir(path)))
            except OSError:
                return 0
    return 0


async def classic_move(cluster: LocalCluster, admin: Admin, label: str, size: int, console: Console,
                       throttle_bps: int | None = None) -> dict[str, Any]:
    topic = f"cmp-local-{label.lower()}" + ("-throttled" if throttle_bps else "")
    tp = TopicPartition(topic, 0)
    await admin.create_topic(topic, 1, assignments={0: [1, 2, 3]}, storage="local", configs=LOCAL_CONFIGS)
    await admin.wait_for_leader(tp, 1)
    async with aiohttp.ClientSession() as session:
        fill_mb_s = await fill_partition(session, cluster.broker_url(1), tp, size,
                                         batch_bytes=THROTTLE_BATCH_BYTES if throttle_bps else FILL_BATCH_BYTES)
    log_bytes = replica_bytes(cluster, 1, topic)
    load = await ProduceLoad(cluster.bootstrap_servers, [tp]).start()
    try:
        await load.wait_ack_from(tp, 1, 0, 30)
        if throttle_bps:
            rates: list[ConfigResourceChange] = [
                {"type": "broker", "name": str(b), "configs": {"leader.replication.throttled.rate": str(throttle_bps),
                                                               "follower.replication.throttled.rate": str(throttle_bps)}}
                for b in (1, 2, 3, 4)]
            replicas: ConfigResourceChange = {"type": "topic", "name": topic, "configs": {
                "leader.replication.throttled.replicas": "0:1,0:2,0:3",
                "follower.replication.throttled.replicas": "0:4"}}
            await admin.api.alter_configs({"resources": rates + [replicas]})
            await asyncio.sleep(0.5)  # the brokers see the configs
        started = time.monotonic()
        await admin.move_partition(tp, [4, 2, 3])
        first: tuple[float, int] | None = None
        caught_up_s = None
        while True:  # the copy as the new replica's files see it
            n = replica_bytes(cluster, 4, topic)
            now = time.monotonic()
            if first is None and n > 0:
                first = (now, n)
            if n >= log_bytes:
                caught_up_s = now
                break
            if now - started > 600:
                raise TimeoutError(f"{tp}: broker 4 copied {n} of {log_bytes} bytes in 600 s")
            await asyncio.sleep(0.02)
        await wait_complete(admin, tp, [4, 2, 3], 120)
        done = time.monotonic()
        await asyncio.sleep(1.0)
        gap = max_gap_ms(load.acks[tp], started, done + 1.0)
    finally:
        await load.stop()
    copy_rate = None
    if first is not None and caught_up_s is not None and caught_up_s > first[0]:
        copy_rate = (log_bytes - first[1]) / (caught_up_s - first[0])
    console.print(f"  classic {label}: filled at {fill_mb_s:.0f} MB/s, moved in {done - started:.2f} s"
                  + (f" (copy {copy_rate / 1e6:.1f} MB/s)" if copy_rate else ""))
    await admin.api.delete_topics({"names": [topic]})
    return {"size_bytes": size, "log_bytes": log_bytes, "move_s": round(done - started, 3),
            "copy_s": round(caught_up_s - started, 3) if caught_up_s else None,
            "copy_bytes_per_s": round(copy_rate) if copy_rate else None,
            "unavailability_ms": round(gap, 1) if gap is not None else None, "fill_mb_s": round(fill_mb_s, 1)}


async def s3_move(cluster: LocalCluster, admin: Admin, label: str, size: int, console: Console) -> dict[str, Any]:
    topic = f"cmp-s3-{label.lower()}"
    tp = TopicPartition(topic, 0)
    await admin.create_topic(topic, 1, assignments={0: [1]})
    await admin.wait_for_leader(tp, 1)
    async with aiohttp.ClientSession() as session:
        fill_mb_s = await fill_partition(session, cluster.broker_url(1), tp, size)
    load = await ProduceLoad(cluster.bootstrap_servers, [tp]).start()
    try:
        await load.wait_ack_from(tp, 1, 0, 30)
        await asyncio.sleep(0.5)
        started = time.monotonic()
        r = await move_once(admin, load, tp, 1, 2, timeout_s=60)
        done = time.monotonic()
    finally:
        await load.stop()
    console.print(f"  Ferry   {label}: filled at {fill_mb_s:.0f} MB/s, moved in {done - started:.2f} s")
    await admin.api.delete_topics({"names": [topic]})
    return {"size_bytes": size, "move_s": round(done - started, 3),
            "unavailability_ms": round(r.unavailability_ms, 1) if r.unavailability_ms is not None else None,
            "fill_mb_s": round(fill_mb_s, 1)}


def plot(result: dict[str, Any], path: str) -> str:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for mode, key, marker in (("classic (storage=local, RF 3)", "classic", "o"), ("Ferry (storage=s3)", "s3", "s")):
        rows = sorted(result[key].values(), key=lambda r: r["size_bytes"])
        ax.plot([r["size_bytes"] / MiB for r in rows], [r["move_s"] for r in rows], marker=marker, label=mode)
    ax.set_xscale("log")
    ax.set_xlabel("partition size (MiB)")
    ax.set_ylabel("move time (s)")
    ax.set_title("Moving one partition under load")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


async def run(cluster: LocalCluster, sizes: dict[str, int], console: Console) -> dict[str, Any]:
    classic: dict[str, dict[str, Any]] = {}
    s3: dict[str, dict[str, Any]] = {}
    async with Admin(bootstrap_controllers=cluster.controller_bootstrap, timeout_ms=60_000) as admin:
        for label, size in sizes.items():
            classic[label] = await classic_move(cluster, admin, label, size, console)
            s3[label] = await s3_move(cluster, admin, label, size, console)
        console.print(f"  throttled classic move of {THROTTLE_SIZE_BYTES // MiB} MiB at {THROTTLE_RATE_BPS} B/s ...")
        t = await classic_move(cluster, admin, f"{THROTTLE_SIZE_BYTES // MiB}MiB", THROTTLE_SIZE_BYTES, console,
                               throttle_bps=THROTTLE_RATE_BPS)
    rate = t.get("copy_bytes_per_s")
    throttle = {"limit_bytes_per_s": THROTTLE_RATE_BPS, "measured_bytes_per_s": rate,
                "error": round((rate - THROTTLE_RATE_BPS) / THROTTLE_RATE_BPS, 4) if rate else None,
                "move_s": t["move_s"], "log_bytes": t["log_bytes"]}
    return summary(classic, s3, throttle)


def render(result: dict[str, Any], console: Console) -> None:
    table = Table(title="Moving one partition: classic copy vs Ferry hand-over")
    for col in ("size", "classic move (s)", "Ferry move (s)", "classic / Ferry", "classic gap (ms)", "Ferry gap (ms)"):
        table.add_column(col, justify="right")
    for label in result["classic_move_s_by_size"]:
        c, f = result["classic_move_s_by_size"][label], result["s3_move_s_by_size"].get(label)
        table.add_row(label, f"{c:.2f}" if c else "-", f"{f:.2f}" if f else "-",
                      f"{c / f:.1f}x" if c and f else "-",
                      str(result["classic_unavailability_ms_by_size"].get(label)),
                      str(result["s3_unavailability_ms_by_size"].get(label)))
    console.print(table)
    t = result["throttle"]
    err = result["throttled_rate_error"]
    console.print(f"throttled copy: {t['measured_bytes_per_s']} B/s measured for a {t['limit_bytes_per_s']} B/s "
                  f"limit ({'n/a' if err is None else f'{err:+.1%}'}; target within ±10 %)")
    console.print(f"plot: {result.get('plot')}")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="ferry perf move --compare", description=__doc__.splitlines()[0])
    parser.add_argument("--compare", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--quick", action="store_true", help="smaller partitions (1 MiB, 16 MiB, 64 MiB)")
    parser.add_argument("--state-dir")
    parser.add_argument("--plot", default="move-compare.png", help="where the PNG goes (default move-compare.png)")
    args = parser.parse_args(argv)
    console = Console(stderr=args.json)
    sizes = QUICK_SIZES if args.quick else FULL_SIZES
    state_dir = os.path.abspath(args.state_dir) if args.state_dir else tempfile.mkdtemp(prefix="ferry-perf-compare-")
    cluster = LocalCluster(state_dir, brokers=4)
    try:
        started = time.monotonic()
        cluster.start()
        console.print(f"cluster up in {time.monotonic() - started:.1f} s (state in {state_dir})")
        result = asyncio.run(run(cluster, sizes, console))
    finally:
        cluster.stop()
    if not args.state_dir:
        shutil.rmtree(state_dir, ignore_errors=True)
    result["plot"] = plot(result, os.path.abspath(args.plot))
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        render(result, console)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
