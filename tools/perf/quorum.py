"""`ferry perf quorum [--json]`: the metadata quorum measured against raw baselines.

Three real controller processes on loopback. Measured:

- commit latency of single ``put_kv`` writes through the HTTP API (p50 / p99), one writer;
- records/s with concurrent writers, each sending batches of independent ``put_kv`` writes;
- failover: with every standby replayed to the last commit (a hot standby, as in KRaft), kill -9
  the leader, time until the next write commits (median of the trials).

Baselines from the same run: an aiohttp round trip to a trivial handler in another process, and
one ``sync=True`` call through three raw pysyncobj processes with the controllers' settings.
"""
from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from typing import Any

import aiohttp

from metadata_quorum.kernel.auth import generate_secrets
from metadata_quorum.client import ControllerClient
from metadata_quorum.kernel.controller_api import ControllerApi
from metadata_quorum.kernel.messages import PUT_KV
from metadata_quorum.kernel.messages.configs import PutKvRequest
from metadata_quorum.config import RaftSettings
from tools.proc import LOOPBACK, Quorum, free_ports, start_quorum, stop_process

TARGETS = {"commit_p50_ms": 3.0, "commit_p99_ms": 20.0, "records_per_s": 20_000.0, "failover_median_s": 1.0}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = min(len(ordered) - 1, max(0, int(round(q * (len(ordered) - 1)))))
    return ordered[k]


# -- raw baselines (also run as child processes of this module) -----------------------------------

def _raw_http_server(port: int) -> None:
    from aiohttp import web

    async def ok(request: web.Request) -> web.Response:
        await request.read()
        return web.json_response({"reply": {}, "offset": 0})

    app = web.Application()
    app.router.add_post("/", ok)
    web.run_app(app, host=LOOPBACK, port=port, print=None, access_log=None)


def _raw_syncobj_node(index: int, ports: list[int], calls: int, out_path: str) -> None:
    from pysyncobj import SyncObj, SyncObjConf, replicated

    raft = RaftSettings()

    class Counter(SyncObj):
        def __init__(self, me: str, others: list[str], conf: SyncObjConf) -> None:
            super().__init__(me, others, conf)
            self.value = 0

        @replicated
        def add(self, n: int) -> int:
            self.value += n
            return self.value

    addrs = [f"{LOOPBACK}:{p}" for p in ports]
    conf = SyncObjConf(appendEntriesUseBatch=raft.append_entries_use_batch, raftMinTimeout=raft.raft_min_timeout_s,
                       raftMaxTimeout=raft.raft_max_timeout_s, appendEntriesPeriod=raft.append_entries_period_s,
                       connectionRetryTime=raft.connection_retry_time_s)
    node = Counter(addrs[index], [a for i, a in enumerate(addrs) if i != index], conf)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not (node._isReady() and node._getLeader() is not None):
        time.sleep(0.05)
    if not node._isLeader():  # the leader measures, as the controllers' leader commits
        while True:
            time.sleep(1)
    latencies = []
    for i in range(calls + 50):
        t0 = time.perf_counter()
        node.add(1, sync=True, timeout=5)
        if i >= 50:
            latencies.append(time.perf_counter() - t0)
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(latencies, f)
    node.destroy()


def _spawn_self(*args: str) -> subprocess.Popen[bytes]:
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return subprocess.Popen([sys.executable, "-m", "tools.perf.quorum", *args], cwd=root,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


async def raw_http_baseline(requests: int) -> list[float]:
    (port,) = free_ports(1)
    proc = _spawn_self("--raw-http-server", str(port))
    try:
        async with aiohttp.ClientSession() as session:
            deadline = time.monotonic() + 15
            while True:
                try:
                    async with session.post(f"http://{LOOPBACK}:{port}/", data=b"{}") as r:
                        await r.read()
                    break
                except aiohttp.ClientError:
                    if time.monotonic() > deadline:
                        raise
                    await asyncio.sleep(0.05)
            body = json.dumps({"key": "k", "value": "v"}).encode()
            latencies = []
            for i in range(requests + 50):
                t0 = time.perf_counter()
                async with session.post(f"http://{LOOPBACK}:{port}/", data=body,
                                        headers={"Content-Type": "application/json"}) as r:
                    await r.read()
                if i >= 50:
                    latencies.append(time.perf_counter() - t0)
            return latencies
    finally:
        stop_process(proc)


def raw_syncobj_baseline(calls: int, workdir: str) -> list[float]:
    ports = free_ports(3)
    out_path = os.path.join(workdir, "raw-syncobj.json")
    procs = [_spawn_self("--raw-syncobj-node", str(i), ",".join(map(str, ports)), str(calls), out_path)
             for i in range(3)]
    try:
        deadline = time.monotonic() + 90
        while not any(p.poll() is not None for p in procs):
            if time.monotonic() > deadline:
                raise TimeoutError("the raw pysyncobj baseline did not finish")
            time.sleep(0.05)
        with open(out_path, encoding="utf-8") as f:
            return list(json.load(f))
    finally:
        for p in procs:
            stop_process(p)


# -- the quorum ------------------------------------------------------------------------------------

def raw_fdatasync_baseline(workdir: str, syncs: int = 300) -> list[float]:
    """The disk's own cost: append 200 bytes and fdatasync, ``syncs`` times (what a durable commit
    adds at least once: a follower syncs before it acknowledges)."""
    latencies = []
    with open(os.path.join(workdir, "raw-fdatasync"), "wb") as f:
        for _ in range(syncs):
            f.write(b"x" * 200)
            f.flush()
            t0 = time.perf_counter()
            os.fdatasync(f.fileno())
            latencies.append(time.perf_counter() - t0)
    return latencies


async def commit_latency(client: ControllerClient, writes: int) -> list[float]:
    api = ControllerApi(client)
    for i in range(50):
        await api.put_kv({"key": f"perf/warm/{i % 10}", "value": "x"})
    latencies = []
    for i in range(writes):
        t0 = time.perf_counter()
        await api.put_kv({"key": f"perf/lat/{i % 500}", "value": str(i)})
        latencies.append(time.perf_counter() - t0)
    return latencies


def server_commit_seconds(quorum: Quorum, token: str | None = None) -> tuple[float, float]:
    """(sum, count) of the active controller's commit-latency histogram (append → applied)."""
    leader = quorum.wait_leader()
    request = urllib.request.Request(f"{quorum.url(leader)}/metrics",
                                     headers={"Authorization": f"Bearer {token}"} if token else {})
    with urllib.request.urlopen(request, timeout=10) as resp:
        text = resp.read().decode()
    values = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name in ("ferry_controller_commit_latency_seconds_sum", "ferry_controller_commit_latency_seconds_count"):
            values[name] = float(value)
    return (values.get("ferry_controller_commit_latency_seconds_sum", 0.0),
            values.get("ferry_controller_commit_latency_seconds_count", 0.0))


async def throughput(client: ControllerClient, writers: int, batch_ops: int, duration_s: float) -> tuple[int, float]:
    committed = 0
    stop_at = time.perf_counter() + duration_s

    async def writer(w: int) -> None:
        nonlocal committed
        n = 0
        while time.perf_counter() < stop_at:
            puts: list[PutKvRequest] = [{"key": f"perf/tp/{w}/{(n + i) % 200}", "value": str(n + i)}
                                        for i in range(batch_ops)]
            ops = [(PUT_KV.name, put) for put in puts]
            results = await client.write_many(ops)
            committed += sum(1 for r in results if "reply" in r)
            n += batch_ops

    t0 = time.perf_counter()
    await asyncio.gather(*(writer(w) for w in range(writers)))
    return committed, time.perf_counter() - t0


def process_cpu_s(pid: int) -> float | None:
    """CPU seconds used by a process and its reaped children (Linux /proc), or None elsewhere."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return sum(int(v) for v in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def controllers_cpu_s(quorum: Quorum) -> dict[int, float | None]:
    return {nid: process_cpu_s(proc.pid) for nid, proc in quorum.procs.items()}


async def failover_trials(quorum: Quorum, trials: int, token: str | None = None) -> list[float]:
    times = []
    for trial in range(trials):
        leader = quorum.wait_leader(timeout_s=30)
        for nid in quorum.running():
            quorum.wait_ready(nid, timeout_s=30)
        async with ControllerClient(quorum.bootstrap, timeout_ms=30_000, token=token) as client:
            before_put: PutKvRequest = {"key": "perf/failover", "value": f"before-{trial}"}
            before = await client.write_with_offset(PUT_KV.name, before_put)  # its offset too
            for nid in quorum.running():  # every standby hot: its image replayed to the last commit
                quorum.wait_image(nid, int(before["offset"]))
            t0 = time.perf_counter()
            quorum.kill(leader)
            await ControllerApi(client).put_kv({"key": "perf/failover", "value": f"after-{trial}"})
            times.append(time.perf_counter() - t0)
        quorum.start(leader)
        await asyncio.sleep(0.2)
    return times


async def run(args: argparse.Namespace) -> dict[str, Any]:
    result: dict[str, Any] = {}
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="ferry-perf-quorum-") as workdir:
        http_lat = await raw_http_baseline(args.writes)
        sync_lat = raw_syncobj_baseline(args.writes, workdir)
        fsync_lat = raw_fdatasync_baseline(workdir)
        # --secure: Raft under pysyncobj's password (Fernet on every message) and bearer tokens.
        security = generate_secrets() if args.secure else None
        token = security.internal_token if security is not None else None
        overrides: dict[str, Any] = {"security": dataclasses.asdict(security)} if security is not None else {}
        if args.unsafe_no_fsync:  # pysyncobj's own journal, for comparison: nothing synced before an ack
            overrides["raft"] = {"unsafe_no_fsync": True}
        quorum = start_quorum(os.path.join(workdir, "quorum"), **overrides)
        try:
            async with ControllerClient(quorum.bootstrap, timeout_ms=30_000, token=token) as client:
                await ControllerApi(client).put_kv({"key": "perf/start", "value": "x"})
                sum0, count0 = server_commit_seconds(quorum, token)
                lat = await commit_latency(client, args.writes)
                sum1, count1 = server_commit_seconds(quorum, token)
                leader = quorum.wait_leader()
                cpu0 = controllers_cpu_s(quorum)
                records, elapsed = await throughput(client, args.writers, args.batch, args.duration)
                hw = quorum.health(leader)["high_watermark"]  # type: ignore[index]
                for nid in quorum.running():
                    quorum.wait_ready(nid, timeout_s=60, min_high_watermark=hw)  # followers applied it all
                cpu1 = controllers_cpu_s(quorum)
                syncing = {nid: quorum.health(nid) or {} for nid in quorum.running()}
            fail = await failover_trials(quorum, args.trials, token)
        finally:
            quorum.stop_all()
    ms = 1000.0
    result.update({
        "commit_p50_ms": round(percentile(lat, 0.5) * ms, 3),
        "commit_p99_ms": round(percentile(lat, 0.99) * ms, 3),
        "records_per_s": round(records / elapsed, 1),
        "failover_median_s": round(statistics.median(fail), 3),
        "failover_s": [round(t, 3) for t in fail],
        "writes": args.writes,
        # Every controller syncs its Raft journal before acknowledging an append (group commit).
        "log_synced": all(bool(h.get("raft_log_synced")) for h in syncing.values()),
        "log_appends_per_sync": {
            ("leader" if nid == leader else f"follower-{nid}"):
                round(h.get("raft_log_appends", 0) / max(1, h.get("raft_log_syncs", 0)), 2)
            for nid, h in sorted(syncing.items())},
        "log_sync_max_ms": max((float(h.get("raft_log_sync_max_ms", 0.0)) for h in syncing.values()), default=0.0),
        "secure": bool(args.secure),
        "writers": args.writers,
        "batch_ops": args.batch,
        "cpu_us_per_record": {
            ("leader" if nid == leader else f"follower-{nid}"):
                round(((cpu1[nid] or 0.0) - (cpu0[nid] or 0.0)) / max(1, records) * 1e6, 1)
            for nid in sorted(cpu0) if cpu0[nid] is not None and cpu1.get(nid) is not None},
        "server_commit_mean_ms": round((sum1 - sum0) / max(1.0, count1 - count0) * ms, 3),
        "raw_http_p50_ms": round(percentile(http_lat, 0.5) * ms, 3),
        "raw_http_p99_ms": round(percentile(http_lat, 0.99) * ms, 3),
        "raw_syncobj_p50_ms": round(percentile(sync_lat, 0.5) * ms, 3),
        "raw_syncobj_p99_ms": round(percentile(sync_lat, 0.99) * ms, 3),
        "raw_fdatasync_p50_ms": round(percentile(fsync_lat, 0.5) * ms, 3),
        "raw_fdatasync_p99_ms": round(percentile(fsync_lat, 0.99) * ms, 3),
        "load_avg_1m_before": round(load_before, 2),
        "load_avg_1m_after": round(os.getloadavg()[0], 2),
        "cpus": os.cpu_count(),
    })
    raw_floor = result["raw_http_p50_ms"] + result["raw_syncobj_p50_ms"]
    total_us = sum(result["cpu_us_per_record"].values())
    result["cpu_us_per_record_all_controllers"] = round(total_us, 1)
    leader_us = result["cpu_us_per_record"].get("leader", 0.0)
    # The leader is one Python process (one core under the GIL); the three share the machine's CPUs.
    result["cpu_bound_records_per_s"] = (round(min(1e6 / leader_us, (os.cpu_count() or 1) * 1e6 / total_us))
                                         if total_us and leader_us else None)
    result["commit_p50_vs_raw_ratio"] = round(result["commit_p50_ms"] / raw_floor, 2) if raw_floor else None
    result["targets"] = TARGETS
    result["meets_targets"] = {
        "commit_p50_ms": result["commit_p50_ms"] <= TARGETS["commit_p50_ms"],
        "commit_p99_ms": result["commit_p99_ms"] <= TARGETS["commit_p99_ms"],
        "records_per_s": result["records_per_s"] >= TARGETS["records_per_s"],
        "failover_median_s": result["failover_median_s"] <= TARGETS["failover_median_s"],
    }
    return result


def print_table(r: dict[str, Any]) -> None:
    rows = [
        ("commit latency p50 (HTTP put_kv)", f"{r['commit_p50_ms']:.3f} ms", f"≤ {TARGETS['commit_p50_ms']} ms",
         f"raw aiohttp {r['raw_http_p50_ms']:.3f} + raw pysyncobj {r['raw_syncobj_p50_ms']:.3f} ms "
         f"(× {r['commit_p50_vs_raw_ratio']})"),
        ("commit latency p99", f"{r['commit_p99_ms']:.3f} ms", f"≤ {TARGETS['commit_p99_ms']} ms",
         f"raw aiohttp {r['raw_http_p99_ms']:.3f} + raw pysyncobj {r['raw_syncobj_p99_ms']:.3f} ms"),
        ("  of which Raft (append → applied, mean)", f"{r['server_commit_mean_ms']:.3f} ms", "", ""),
        ("  Raft log synced before each ack", "yes" if r["log_synced"] else "NO (unsafe_no_fsync)", "",
         "appends per sync " + "; ".join(f"{k} {v}" for k, v in r["log_appends_per_sync"].items())
         + f"; slowest sync {r['log_sync_max_ms']} ms; raw fdatasync p50 {r['raw_fdatasync_p50_ms']:.3f} / "
         f"p99 {r['raw_fdatasync_p99_ms']:.3f} ms"),
        (f"records/s ({r['writers']} writers × {r['batch_ops']} ops/request)", f"{r['records_per_s']:,.0f}",
         f"≥ {TARGETS['records_per_s']:,.0f}", ""),
        ("  CPU per record (3 controllers)", f"{r['cpu_us_per_record_all_controllers']} µs",
         "", "; ".join(f"{k} {v} µs" for k, v in r["cpu_us_per_record"].items())
         + (f"; ceiling with the CPUs to itself ≈ {r['cpu_bound_records_per_s']:,}/s"
            if r.get("cpu_bound_records_per_s") else "")),
        ("failover (kill -9 leader → next commit)", f"{r['failover_median_s']:.3f} s median",
         f"≤ {TARGETS['failover_median_s']} s", "trials: " + ", ".join(f"{t:.2f}" for t in r["failover_s"])),
    ]
    width = [max(len(row[i]) for row in rows) for i in range(4)]
    print("ferry perf quorum — 3 controller processes on 127.0.0.1"
          + (" (secure: encrypted Raft, bearer tokens)" if r.get("secure") else ""))
    for row in rows:
        print("  ".join(cell.ljust(width[i]) for i, cell in enumerate(row)))
    print(f"load average (1 min) before/after: {r['load_avg_1m_before']} / {r['load_avg_1m_after']} "
          f"on {r['cpus']} CPUs")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "--raw-http-server":
        _raw_http_server(int(argv[1]))
        return 0
    if argv and argv[0] == "--raw-syncobj-node":
        _raw_syncobj_node(int(argv[1]), [int(p) for p in argv[2].split(",")], int(argv[3]), argv[4])
        return 0
    parser = argparse.ArgumentParser(prog="ferry perf quorum", description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--writes", type=int, default=2000, help="single writes for the latency figures")
    parser.add_argument("--writers", type=int, default=8, help="concurrent writers for records/s")
    parser.add_argument("--batch", type=int, default=500, help="writes per request for records/s")
    parser.add_argument("--duration", type=float, default=5.0, help="seconds of the throughput run")
    parser.add_argument("--trials", type=int, default=5, help="failover trials (median reported)")
    parser.add_argument("--secure", action="store_true",
                        help="run the quorum with security: Raft encrypted with a password, HTTP with bearer tokens")
    parser.add_argument("--unsafe-no-fsync", action="store_true",
                        help="controllers acknowledge appends without syncing the Raft journal (comparison only)")
    args = parser.parse_args(argv)
    if args.trials < 1 or args.writes < 1 or args.writers < 1 or args.batch < 1 or args.duration <= 0:
        parser.error("counts and duration must be positive")
    result = asyncio.run(run(args))
    if args.json:
        print(json.dumps(result))
    else:
        print_table(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
