"""`ferry perf scale [--json]`: every partition of a large topic moved at once.

For each size (default 1,000, 2,000, 5,000 and 10,000 partitions) on a local 3-broker cluster:

1. create a topic with that many partitions, spread round-robin over the brokers: seconds until
   every partition is served by its broker;
2. give each partition data (keyed records, acknowledged);
3. one reassignment moving every partition to the next broker: seconds until every partition is
   served by its requested broker, then a record produced to each one is acknowledged by that
   broker and every acknowledged record is read back exactly once, at its offset;
4. from the controllers: elections (Raft term changes), broker fencings and metadata records
   written per moved partition during the move, and the peak depth of the active controller's
   queue of operations (sampled every 50 ms);
5. the longest hold of any controller's and any broker's event loop (``loop_lag_recent_ms`` in
   their ``/v1/health``, sampled every 50 ms), and each process's resident memory after the
   creation, with its growth per partition it holds;
6. after the move is verified, one broker restarted (``--restarts``): a controlled restart (SIGTERM,
   then started again with the same id), then another broker crashed (SIGKILL) and started again:
   seconds from the signal until every partition is led by a live broker and served there (the
   restarted broker back, no broker opening or closing a partition), then a record more to each
   partition and everything acknowledged read back once more (tools/perf/scale_restart.py).

Requests stay within ``max_partitions_per_request``: a reassignment goes in pieces, a creation as
a CreateTopics and then CreatePartitions steps (``--create-per-request``).

The raw baseline is the same reassignment's single controller write (``alter_partition_
reassignments``): the rest of the time is the brokers' part of the move.
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
from collections import Counter
from typing import Any

import aiohttp
from rich.console import Console
from rich.table import Table

from metadata_quorum.kernel.errors import ErrorCode, FerryError
from metadata_quorum.kernel.validation import MAX_PARTITIONS_PER_REQUEST
from tools.admin import Admin
from tools.cluster import LocalCluster
from tools.perf import detection
from tools.perf.scale_checks import produce_keyed, read_back, served_by, wait_all_at
from tools.perf.scale_restart import KINDS as RESTART_KINDS, PREFIX as RESTART_PREFIX, restart_broker, victims

DEFAULT_SIZES = (1000, 2000, 5000, 10000)
TARGETS = {"all_serving_s_10000": 15.0, "all_serving_s_100000": 150.0, "create_s_100000": 60.0,
           "elections": 0, "fenced": 0, "loop_lag_max_ms": 100.0, "controller_kib_per_partition": 2.0,
           "broker_kib_per_partition": 20.0, "records_per_move": 8.0, "restart_serving_s_30000": 10.0}
SAMPLE_INTERVAL_S = 0.05


class ClusterProbe:
    """Reads the controllers' health and committed log over HTTP (the public API only)."""

    def __init__(self, session: aiohttp.ClientSession, controllers: list[str], brokers: list[str]) -> None:
        self.session = session
        self.controllers = controllers
        self.brokers = brokers
        self.peak_queue_depth = 0
        self.loop_lag_max_ms = 0.0  # the controllers' event loops, over the sampled span
        self.broker_loop_lag_max_ms = 0.0
        self._sampling: asyncio.Task[None] | None = None
        # the metadata log followed while a round runs: (offset, record type, fences a broker)
        self._tail: list[tuple[int, str, bool]] = []
        self._tail_start = -1
        self._tail_next = -1
        self._tail_dropped: list[int] = []  # offsets where the log had dropped records not yet read
        self._tailing: asyncio.Task[None] | None = None

    async def health(self, brokers: bool = False) -> list[dict[str, Any]]:
        out = []
        for url in (self.brokers if brokers else self.controllers):
            try:
                async with self.session.get(f"{url}/v1/health", timeout=aiohttp.ClientTimeout(total=2)) as r:
                    out.append(await r.json())
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
                continue
        return out

    async def tick_gap_max_ms(self) -> float:
        """The longest Raft tick gap any controller saw since it started."""
        return max((float(h.get("raft_tick_gap_max_ms", 0.0)) for h in await self.health()), default=0.0)

    async def term_and_offset(self) -> tuple[int, int]:
        rows = await self.health()
        return max(int(h["term"]) for h in rows), max(int(h["high_watermark"]) for h in rows)

    def start_sampling(self) -> None:
        self.peak_queue_depth = 0
        self.loop_lag_max_ms = self.broker_loop_lag_max_ms = 0.0
        self._sampling = asyncio.get_running_loop().create_task(self._sample())

    async def stop_sampling(self) -> int:
        if self._sampling is not None:
            self._sampling.cancel()
            try:
                await self._sampling
            except asyncio.CancelledError:
                pass
        return self.peak_queue_depth

    async def _sample(self) -> None:
        """Every ``SAMPLE_INTERVAL_S``: the queue's depth and the loops' lag over the last two
        seconds (``kernel/loop_lag.py``: a hold shorter than the sampling interval is seen too)."""
        rounds = 0
        while True:
            for h in await self.health():
                self.peak_queue_depth = max(self.peak_queue_depth, int(h.get("queue_depth", 0)))
                self.loop_lag_max_ms = max(self.loop_lag_max_ms, float(h.get("loop_lag_recent_ms", 0.0)))
            if rounds % 10 == 0:  # brokers' window is two seconds too: every half second is enough
                for h in await self.health(brokers=True):
                    self.broker_loop_lag_max_ms = max(self.broker_loop_lag_max_ms,
                                                      float(h.get("loop_lag_recent_ms", 0.0)))
            rounds += 1
            await asyncio.sleep(SAMPLE_INTERVAL_S)

    def start_tail(self, offset: int) -> None:
        """Follow the metadata log from ``offset`` while a round runs. A move of 10,000 partitions
        writes more records than the controllers retain (``log_retention_records``): read after
        the round, the first of them were already dropped and fencings could not be counted."""
        self._tail, self._tail_dropped = [], []
        self._tail_start = self._tail_next = offset
        self._tailing = asyncio.get_running_loop().create_task(self._follow())

    async def stop_tail(self) -> None:
        if self._tailing is not None:
            self._tailing.cancel()
            await asyncio.gather(self._tailing, return_exceptions=True)
            self._tailing = None

    async def _follow(self) -> None:
        turn = 0
        while True:
            url = self.controllers[turn % len(self.controllers)]
            try:
                async with self.session.get(f"{url}/v1/log", params={
                        "offset": str(self._tail_next), "max_records": "20000", "max_wait_ms": "500"},
                        timeout=aiohttp.ClientTimeout(total=30)) as r:
                    body = await r.json()
                    if r.status != 200:
                        raise OSError(str(body))
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
                turn += 1
                await asyncio.sleep(0.2)
                continue
            if "snapshot" in body:
                self._tail_dropped.append(self._tail_next)
                self._tail_next = int(body["snapshot"]["offset"]) + 1
                continue
            for e in body.get("records", []):
                rec = e["record"]
                fenced = rec.get("type") == "BrokerRegistrationChange" and rec.get("fields", {}).get("fenced") is True
                self._tail.append((int(e["offset"]), str(rec.get("type")), fenced))
                self._tail_next = int(e["offset"]) + 1

    async def records_between(self, start: int, end: int) -> Counter[str]:
        """Record types committed in ``[start, end)``."""
        if self._tailing is not None and self._tail_start <= start:
            deadline = time.monotonic() + 60
            # the tail is filled by another task; a benchmark's check
            while self._tail_next < end and time.monotonic() < deadline and not self._tailing.done():  # noqa: ASYNC110
                await asyncio.sleep(0.1)
            if self._tail_next >= end:
                counts: Counter[str] = Counter()
                for offset, kind, fenced in self._tail:
                    if start <= offset < end:
                        counts[kind] += 1
                        counts["fenced"] += fenced
                if any(start <= o < end for o in self._tail_dropped):
                    counts["(snapshot: older records dropped)"] += 1
                return counts
        counts = Counter()
        offset = start
        while offset < end:
            async with self.session.get(f"{self.controllers[0]}/v1/log",
                                        params={"offset": str(offset), "max_records": "50000"},
                                        timeout=aiohttp.ClientTimeout(total=30)) as r:
                body = await r.json()
            if "snapshot" in body:
                counts["(snapshot: older records dropped)"] += 1
                break
            entries = body.get("records", [])
            if not entries:
                break
            for e in entries:
                if e["offset"] >= end:
                    break
                rec = e["record"]
                counts[str(rec.get("type"))] += 1
                if rec.get("type") == "BrokerRegistrationChange" and rec.get("fields", {}).get("fenced") is True:
                    counts["fenced"] += 1
            offset = int(entries[-1]["offset"]) + 1
        return counts


def rss_mib(pid: int) -> float:
    """Resident memory of one process (``VmRSS``), MiB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def rss_by_role(cluster: LocalCluster) -> dict[str, dict[int, float]]:
    assert cluster.quorum is not None
    return {"controller": {n: rss_mib(p.pid) for n, p in cluster.quorum.procs.items()},
            "broker": {b: rss_mib(p.pid) for b, p in cluster.broker_procs.items()}}


def kib_per_partition(before: dict[int, float], after: dict[int, float], partitions: int) -> float:
    """The largest growth of one process, per partition it holds (KiB)."""
    grown = max((after[k] - before.get(k, after[k]) for k in after), default=0.0)
    return round(grown * 1024 / max(partitions, 1), 2)


def chunks(n: int, size: int) -> list[range]:
    """``range(n)`` in pieces of at most ``size``: requests stay within ``max_partitions_per_request``."""
    return [range(start, min(n, start + size)) for start in range(0, n, size)]


async def create_split(admin: Admin, topic: str, placed: dict[int, int], per_request: int) -> None:
    """Create ``topic`` with its first ``per_request`` partitions, then grow it request by request
    (CreatePartitions), as Kafka's tools must above the controller's per-request bound."""
    pieces = chunks(len(placed), per_request)
    await admin.create_topic(topic, len(pieces[0]), assignments={p: [placed[p]] for p in pieces[0]})
    for piece in pieces[1:]:
        reply = await admin.api.create_partitions({"topics": [{
            "name": topic, "count": piece.stop, "assignments": [[placed[p]] for p in piece]}]})
        (result,) = reply["topics"]
        if result.get("error") and result["error"] != "NONE":
            error = FerryError(ErrorCode.from_name(str(result["error"])), str(result.get("message", "")))
            if error.error is ErrorCode.INVALID_PARTITIONS and await partition_count(admin, topic) >= piece.stop:
                continue  # an attempt that timed out had grown it already (the client sent it again)
            raise error


async def partition_count(admin: Admin, topic: str) -> int:
    described = (await admin.describe_topics([topic])).get(topic)
    return len(described) if isinstance(described, list) else 0


async def one_size(cluster: LocalCluster, admin: Admin, probe: ClusterProbe, partitions: int,
                   per_partition: int, console: Console, row: dict[str, Any] | None = None,
                   create_per_request: int = MAX_PARTITIONS_PER_REQUEST,
                   restarts: list[str] | None = None) -> dict[str, Any]:
    """One round, then the ``restarts`` named (tools/perf/scale_restart.py); fills ``row`` as it
    goes, so a caller that catches a failure still has what was measured."""
    row = {} if row is None else row
    row["partitions"] = partitions
    topic = f"scale-{partitions}"
    brokers = {bid: cluster.broker_url(bid) for bid in sorted(cluster.broker_ports)}
    ids = sorted(brokers)
    placed = {p: ids[p % len(ids)] for p in range(partitions)}
    targets = {p: ids[(ids.index(b) + 1) % len(ids)] for p, b in placed.items()}
    term0, offset0 = await probe.term_and_offset()
    row.update(phase="create", term_start=term0, offset_start=offset0)
    await probe.stop_tail()
    probe.start_tail(offset0)
    rss_before = rss_by_role(cluster)
    probe.start_sampling()
    started = time.monotonic()
    try:
        await create_split(admin, topic, placed, create_per_request)
        created_s = time.monotonic() - started
        row["create_write_s"] = round(created_s, 2)
        await wait_all_at(admin, brokers, topic, placed, timeout_s=300)
        create_s = time.monotonic() - started
        row["create_s"] = round(create_s, 2)
    finally:
        row["peak_queue_depth_create"] = await probe.stop_sampling()
        row["loop_lag_max_ms_create"] = round(probe.loop_lag_max_ms, 1)
    rss_after = rss_by_role(cluster)
    row["controller_rss_mib"] = round(max(rss_after["controller"].values()), 1)
    row["broker_rss_mib"] = round(max(rss_after["broker"].values()), 1)
    row["controller_kib_per_partition"] = kib_per_partition(rss_before["controller"], rss_after["controller"],
                                                            partitions)
    row["broker_kib_per_partition"] = kib_per_partition(rss_before["broker"], rss_after["broker"],
                                                        -(-partitions // len(ids)))
    console.print(f"  {partitions}: created in {created_s:.1f} s, all serving after {create_s:.1f} s")
    row["phase"] = "produce"
    acked = await produce_keyed(cluster.bootstrap_servers, topic, partitions, per_partition, "a")
    term1, offset1 = await probe.term_and_offset()
    row.update(phase="move", elections_during_create=term1 - term0, term_move=term1, offset_move=offset1)
    probe.start_sampling()
    started = time.monotonic()
    try:
        result = {}
        for piece in chunks(partitions, MAX_PARTITIONS_PER_REQUEST):
            result.update(await admin.alter_partition_reassignments(
                [{"topic": topic, "partition": p, "replicas": [targets[p]]} for p in piece]))
        accept_s = time.monotonic() - started
        row["reassign_write_s"] = round(accept_s, 3)
        refused = {tp: e for tp, e in result.items() if e is not None}
        if refused:
            raise FerryError(ErrorCode.INVALID_REQUEST, f"reassignment refused for {len(refused)} partitions: "
                             f"{next(iter(refused.values()))}")
        await wait_all_at(admin, brokers, topic, targets, timeout_s=600)
        all_serving_s = time.monotonic() - started
        row["all_serving_s"] = round(all_serving_s, 2)
    finally:
        row["peak_queue_depth"] = await probe.stop_sampling()
        row["loop_lag_max_ms_move"] = round(probe.loop_lag_max_ms, 1)
        row["loop_lag_max_ms"] = round(max(probe.loop_lag_max_ms, row.get("loop_lag_max_ms_create", 0.0)), 1)
        row["broker_loop_lag_max_ms"] = round(probe.broker_loop_lag_max_ms, 1)
    peak = row["peak_queue_depth"]
    term2, offset2 = await probe.term_and_offset()
    console.print(f"  {partitions}: all at their targets {all_serving_s:.1f} s after the reassignment")
    row["phase"] = "verify"
    records = await probe.records_between(offset1, offset2)
    after = await produce_keyed(cluster.bootstrap_servers, topic, partitions, 1, "b")
    wrong_broker = 0  # an acknowledgement's offset says nothing of the broker: ask the leader instead
    described = (await admin.describe_topics([topic])).get(topic)
    if isinstance(described, list):
        wrong_broker = sum(1 for p in described if p.leader != targets[p.partition])
    checked = await read_back(cluster.bootstrap_servers, topic, partitions, [acked, after])
    moved_records = sum(n for k, n in records.items() if k != "fenced" and not k.startswith("("))
    row.update({
        "partitions": partitions,
        "create_s": round(create_s, 2),
        "create_write_s": round(created_s, 2),
        "reassign_write_s": round(accept_s, 3),
        "all_serving_s": round(all_serving_s, 2),
        "elections_during_create": term1 - term0,
        "elections": term2 - term1,
        "fenced": fenced_count(records),
        "records_per_move": round(moved_records / partitions, 2),
        "records_by_type": {k: v for k, v in sorted(records.items()) if k != "fenced"},
        "peak_queue_depth": peak,
        "raft_tick_gap_max_ms": await probe.tick_gap_max_ms(),
        **checked,
        "not_led_by_target": wrong_broker,
    })
    if restarts:
        await restart_phase(cluster, admin, probe, topic, partitions, restarts, [acked, after], row, console)
    row["phase"] = "done"
    return row


async def restart_phase(cluster: LocalCluster, admin: Admin, probe: ClusterProbe, topic: str, partitions: int,
                        kinds: list[str], acked: list[dict[int, list[tuple[int, bytes]]]], row: dict[str, Any],
                        console: Console) -> None:
    """After the move is verified (so that a loss is the restart's, not the move's): each kind of
    restart in turn (tools/perf/scale_restart.py), one record more to every partition after each,
    then everything acknowledged in the round read back once more."""
    started = time.monotonic()
    term, _offset = await probe.term_and_offset()
    ids = sorted(cluster.broker_ports)
    for kind, victim in victims(ids, kinds).items():
        row["phase"] = f"restart ({kind})"
        row.update(await restart_broker(cluster, admin, topic, partitions, victim, kind))
        console.print(f"  {partitions}: broker {victim} restarted ({kind}), every partition serving "
                      f"{row[RESTART_PREFIX[kind] + '_serving_s']:.1f} s after the signal")
        acked = acked + [await produce_keyed(cluster.bootstrap_servers, topic, partitions, 1, kind[0])]
    row["phase"] = "restart verify"
    row["restart_elections"] = (await probe.term_and_offset())[0] - term
    checked = await read_back(cluster.bootstrap_servers, topic, partitions, acked)
    row.update({f"restart_{k}": v for k, v in checked.items()})
    row["restart_phase_s"] = round(time.monotonic() - started, 1)  # restarts, produce and read-back in all


def fenced_count(records: Counter[str]) -> int | None:
    """Fencings among the records read; None (unknown) when the log had already dropped some of them."""
    if any(k.startswith("(snapshot") for k in records):
        return None
    return records.get("fenced", 0)


async def finish_failed_row(probe: ClusterProbe, row: dict[str, Any], error: BaseException) -> dict[str, Any]:
    """What a failed round still tells: where it failed and why, elections and fencings so far."""
    row["error"] = f"{type(error).__name__}: {error}"
    row["failed_in"] = row.get("phase", "start")
    try:
        term, offset = await probe.term_and_offset()
        start_term = int(row.get("term_start", term))
        row["elections_total"] = term - start_term
        if "term_move" in row:
            row["elections"] = term - int(row["term_move"])
        else:
            row["elections_during_create"] = term - start_term
        records = await probe.records_between(int(row.get("offset_start", offset)), offset)
        row["fenced"] = fenced_count(records)
        row["raft_tick_gap_max_ms"] = await probe.tick_gap_max_ms()
    except Exception as e:  # noqa: BLE001 - the cluster may be gone: keep what the round measured
        row["probe_error"] = repr(e)
    return row


async def delete_and_wait(admin: Admin, cluster: LocalCluster, topic: str, timeout_s: float = 300) -> None:
    """Delete the round's topic and wait until no broker holds any of its partitions."""
    await admin.api.delete_topics({"names": [topic]})
    brokers = {bid: cluster.broker_url(bid) for bid in sorted(cluster.broker_ports)}
    deadline = time.monotonic() + timeout_s
    while any((await served_by(admin, brokers, topic)).values()):
        if time.monotonic() > deadline:
            raise FerryError(ErrorCode.REQUEST_TIMED_OUT, f"brokers still hold partitions of {topic}")
        await asyncio.sleep(0.5)


async def run(cluster: LocalCluster, sizes: list[int], per_partition: int, console: Console,
              create_per_request: int = MAX_PARTITIONS_PER_REQUEST,
              restarts: list[str] | None = None) -> dict[str, Any]:
    """Every size in turn; a size that fails gives a partial row (with ``error``) and ends the curve."""
    rounds: list[dict[str, Any]] = []
    async with Admin(bootstrap_controllers=cluster.controller_bootstrap, timeout_ms=120_000) as admin, \
            aiohttp.ClientSession() as session:
        probe = ClusterProbe(session, cluster.controller_bootstrap,
                             [cluster.broker_url(b) for b in sorted(cluster.broker_ports)])
        for n in sizes:
            row: dict[str, Any] = {}
            try:
                rounds.append(await one_size(cluster, admin, probe, n, per_partition, console, row,
                                             create_per_request, restarts))
            except Exception as e:  # noqa: BLE001 - a failed round ends the run, its row kept
                rounds.append(await finish_failed_row(probe, row, e))
                console.print(f"  {n}: failed while in {row['failed_in']}: {row['error']}")
                break
            try:
                await delete_and_wait(admin, cluster, f"scale-{n}")
            except (FerryError, aiohttp.ClientError, asyncio.TimeoutError, OSError) as e:
                # the round is measured; a next size would start beside the leftover partitions
                rounds[-1]["cleanup_error"] = f"{type(e).__name__}: {e}"
                console.print(f"  {n}: deleting the round's topic failed ({e}); the curve ends here")
                break
        await probe.stop_tail()
    by = {str(r["partitions"]): r for r in rounds}

    def column(key: str) -> dict[str, Any]:
        return {k: r.get(key) for k, r in by.items()}

    return {
        "sizes": sizes,
        "all_serving_s_by_partitions": column("all_serving_s"),
        "create_s_by_partitions": column("create_s"),
        "elections_by_partitions": {k: (r.get("elections") or 0) + (r.get("elections_during_create") or 0)
                                    for k, r in by.items()},
        "fenced_by_partitions": column("fenced"),
        "records_per_move_by_partitions": column("records_per_move"),
        "peak_queue_depth_by_partitions": column("peak_queue_depth"),
        "raft_tick_gap_max_ms_by_partitions": column("raft_tick_gap_max_ms"),
        "loop_lag_max_ms_by_partitions": column("loop_lag_max_ms"),
        "loop_lag_max_ms_move_by_partitions": column("loop_lag_max_ms_move"),
        "broker_loop_lag_max_ms_by_partitions": column("broker_loop_lag_max_ms"),
        "controller_rss_mib_by_partitions": column("controller_rss_mib"),
        "broker_rss_mib_by_partitions": column("broker_rss_mib"),
        "controller_kib_per_partition_by_partitions": column("controller_kib_per_partition"),
        "broker_kib_per_partition_by_partitions": column("broker_kib_per_partition"),
        "reassign_write_s_by_partitions": column("reassign_write_s"),
        "lost_by_partitions": {k: (r["missing"] + r["misplaced"]) if "missing" in r else None for k, r in by.items()},
        "duplicated_by_partitions": column("duplicated"),
        "restart_serving_s_by_partitions": column("restart_serving_s"),
        "restart_serving_s_30000": by.get("30000", {}).get("restart_serving_s"),
        "restart_exit_s_by_partitions": column("restart_exit_s"),
        "restart_led_elsewhere_s_by_partitions": column("restart_led_elsewhere_s"),
        "restart_back_s_by_partitions": column("restart_back_s"),
        "crash_restart_serving_s_by_partitions": column("crash_restart_serving_s"),
        "crash_restart_led_elsewhere_s_by_partitions": column("crash_restart_led_elsewhere_s"),
        "restart_lost_by_partitions": {k: (r["restart_missing"] + r["restart_misplaced"])
                                       if "restart_missing" in r else None for k, r in by.items()},
        "restart_duplicated_by_partitions": column("restart_duplicated"),
        "errors_by_partitions": {k: r["error"] for k, r in by.items() if "error" in r},
        "rounds": rounds,
        "targets": TARGETS,
    }


def render(result: dict[str, Any], console: Console) -> None:
    table = Table(title="Every partition moved at once (3 brokers, 3 controllers)", title_justify="left")
    for col in ("partitions", "create s", "reassign write s", "all serving s", "elections", "fenced",
                "records/move", "peak queue", "loop lag ms", "broker lag ms", "ctl KiB/p", "broker KiB/p",
                "acked", "lost", "dup", "restart s", "crash restart s", "restart lost/dup"):
        table.add_column(col, justify="right", no_wrap=True)

    def cell(r: dict[str, Any], key: str, fmt: str = "{}") -> str:
        return "-" if r.get(key) is None else fmt.format(r[key])

    for r in result["rounds"]:
        elections = (r.get("elections") or 0) + (r.get("elections_during_create") or 0)
        lost = str(r["missing"] + r["misplaced"]) if "missing" in r else "-"
        restart_lost = f"{r['restart_missing'] + r['restart_misplaced']}/{r['restart_duplicated']}" \
            if "restart_missing" in r else "-"
        table.add_row(str(r["partitions"]), cell(r, "create_s", "{:.1f}"), cell(r, "reassign_write_s", "{:.2f}"),
                      cell(r, "all_serving_s", "{:.1f}"), str(elections), cell(r, "fenced"),
                      cell(r, "records_per_move", "{:.1f}"), cell(r, "peak_queue_depth"),
                      cell(r, "loop_lag_max_ms", "{:.0f}"), cell(r, "broker_loop_lag_max_ms", "{:.0f}"),
                      cell(r, "controller_kib_per_partition", "{:.1f}"), cell(r, "broker_kib_per_partition", "{:.1f}"),
                      cell(r, "acknowledged"), lost, cell(r, "duplicated"), cell(r, "restart_serving_s", "{:.1f}"),
                      cell(r, "crash_restart_serving_s", "{:.1f}"), restart_lost)
    console.print(table)
    fd = result.get("failure_detection")
    if fd:
        console.print(f"failure detection: heartbeat {fd['broker']['heartbeat_interval_ms']} ms, session "
                      f"{fd['controller_session_timeout_ms']} ms, tick {fd['controller_tick_interval_ms']} ms")
    for r in result["rounds"]:
        if "error" in r:
            console.print(f"{r['partitions']} partitions failed in {r['failed_in']}: {r['error']}")
    console.print(f"targets: all serving ≤ {TARGETS['all_serving_s_10000']:.0f} s at 10,000 partitions and "
                  f"≤ {TARGETS['all_serving_s_100000']:.0f} s at 100,000, created ≤ "
                  f"{TARGETS['create_s_100000']:.0f} s at 100,000; 0 elections and 0 fencings at every size; "
                  f"controller loop lag ≤ {TARGETS['loop_lag_max_ms']:.0f} ms; ≤ "
                  f"{TARGETS['controller_kib_per_partition']:.0f} KiB per partition in a controller and ≤ "
                  f"{TARGETS['broker_kib_per_partition']:.0f} KiB in a broker; "
                  f"≤ {TARGETS['records_per_move']:.0f} records per moved partition; every partition serving "
                  f"≤ {TARGETS['restart_serving_s_30000']:.0f} s after a broker's restart at 30,000. "
                  "AutoMQ documents closing 5,000 partitions in about 45 s.")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="ferry perf scale", description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--partitions", default=",".join(str(n) for n in DEFAULT_SIZES),
                        help="comma-separated sizes (default 1000,2000,5000,10000)")
    parser.add_argument("--records-per-partition", type=int, default=2)
    parser.add_argument("--state-dir")
    parser.add_argument("--create-per-request", type=int, default=MAX_PARTITIONS_PER_REQUEST,
                        help="partitions per creation request: the topic is created with the first ones, "
                             "then grown by CreatePartitions (default: max_partitions_per_request, "
                             f"{MAX_PARTITIONS_PER_REQUEST}; a creation is one operation on the controller's loop)")
    parser.add_argument("--restarts", default=",".join(RESTART_KINDS),
                        help="after each move, restart one broker in each of these ways: graceful (SIGTERM, a "
                             "controlled shutdown), crash (SIGKILL); comma-separated, 'none' for no restart "
                             f"(default {','.join(RESTART_KINDS)})")
    detection.add_arguments(parser)
    args = parser.parse_args(argv)
    broker_overrides, controller_overrides = detection.overrides(parser, args)
    try:
        sizes = [int(s) for s in args.partitions.split(",") if s.strip()]
    except ValueError:
        parser.error(f"--partitions must be comma-separated integers, got {args.partitions!r}")
    if not sizes or any(n <= 0 for n in sizes):
        parser.error("--partitions needs at least one positive size")
    restarts = [k.strip() for k in args.restarts.split(",") if k.strip() and k.strip() != "none"]
    if any(k not in RESTART_KINDS for k in restarts):
        parser.error(f"--restarts takes {', '.join(RESTART_KINDS)} or none, got {args.restarts!r}")
    if not 0 < args.create_per_request <= MAX_PARTITIONS_PER_REQUEST:
        parser.error(f"--create-per-request must be 1..{MAX_PARTITIONS_PER_REQUEST}")
    console = Console(stderr=args.json)
    state_dir = os.path.abspath(args.state_dir) if args.state_dir else tempfile.mkdtemp(prefix="ferry-perf-scale-")
    cluster = LocalCluster(state_dir, broker_overrides=broker_overrides, controller_overrides=controller_overrides)
    try:
        started = time.monotonic()
        cluster.start()
        console.print(f"cluster up in {time.monotonic() - started:.1f} s (state in {state_dir})")
        result = asyncio.run(run(cluster, sizes, args.records_per_partition, console, args.create_per_request,
                                 restarts))
        result["failure_detection"] = detection.settings(cluster)
    finally:
        cluster.stop()
    if not args.state_dir:
        shutil.rmtree(state_dir, ignore_errors=True)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        render(result, console)
    return 1 if result.get("errors_by_partitions") else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
