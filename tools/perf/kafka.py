"""`ferry perf kafka [--json] [--quick] [--pin-broker-cpu N]`: real Kafka clients against a local cluster.

1. Produce MB/s of a confluent-kafka (librdkafka) producer, 64 KiB batches of 1 KiB records,
   acks=all, against the HTTP produce path (the same 64 KiB batches POSTed) and a raw asyncio
   TCP sink (the same bytes in length-prefixed frames, answered unread) — all in the same run,
   interleaved rounds, medians. Like with like: 8 partitions on one broker, the same record and
   batch sizes, the same durability (acknowledged after the WAL fsync), no producer ids, the
   same 8 requests in flight (the HTTP client one per partition; librdkafka
   ``max.in.flight=8`` on its one connection), and one call from Python per 64 KiB on both
   clients (librdkafka's ``produce_batch``; one POST). An idempotent librdkafka producer is measured
   beside it: idempotence caps librdkafka at 5 requests in flight per connection, and while the
   WAL fsync sets each request's latency, throughput follows the bytes in flight, so it is
   reported separately rather than as the comparison. Each path's broker CPU per MiB, mean
   produce latency, and WAL fsync time and bytes per fsync (the group commit) are reported too:
   they say whether a round was bound by the broker's CPU or by the disk; so are the CPU per MiB
   of the clients (this process) and of the S3 server, and how idle the machine's cores were: on
   a machine whose cores are all busy, the paths' ratio is the ratio of everything they cost.
2. End-to-end latency, produce → consumer-group member, at a steady rate: p50 / p99.
3. The unavailability a librdkafka producer sees across a move (last acknowledgement before the
   move's gap → first after it), p50 / p99 over ``--moves`` moves of one partition back and forth.

``--pin-broker-cpu N`` puts every thread of the measured broker on core N and every other
process of the run (controllers, the other brokers, the S3 server, this process with the clients,
and what they start later) on the remaining cores: the paths' ratio then follows the broker's
own cost per MiB rather than everything each path costs the machine, as with the clients and the
S3 server on machines of their own.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass
from itertools import pairwise
from typing import Any, Awaitable, Callable

from confluent_kafka import Consumer, KafkaError, Producer
from rich.console import Console
from prometheus_client.parser import text_string_to_metric_families
from rich.table import Table

from tools.admin import Admin
from tools.client import TopicPartition, encode_batch
from tools.cluster import ROOT, LocalCluster
from tools.move_workload import percentile
from tools.perf.move import post_bodies, start_raw_sink  # noqa: F401 - start_raw_sink kept for symmetry
from tools.perf.quorum import process_cpu_s
from tools.perf.raw_tcp_sink import send_frames

MiB = 1024 * 1024
BATCH_BYTES = 64 * 1024
RECORD_BYTES = 1024
# librdkafka leaves Nagle's algorithm on unless told (Kafka's Java client turns it off): with at most
# five requests in flight per connection, a request's last segment waiting for an ACK halves the
# throughput on loopback. Every producer here turns it off, as a tuned deployment does.
LOW_LATENCY = {"socket.nagle.disable": True}
TARGETS = {"kafka_vs_http": 1.5, "client_move_unavailable_p50_ms": 60, "client_move_unavailable_p99_ms": 150,
           "java_client_move_unavailable_p99_ms": 150}
ROUNDS = 5  # interleaved; the machine is shared, so medians of several
PARTITIONS = 8
PRODUCE_BROKER = 3  # leads the produce comparison's partitions
#: requests in flight on each path of the comparison: the HTTP client keeps one per partition
INFLIGHT = PARTITIONS
#: librdkafka's cap per connection once idempotence is on (Kafka's own limit for idempotence)
IDEMPOTENT_INFLIGHT = 5
RAW_PIPELINE = 5  # the raw sink's bound: 5 frames unanswered on each of 8 connections
#: moto keeps objects up to this size in memory; above it (its default is 5 MiB) it copies each one
#: into a temporary file, which cost its process ~2 ms of CPU per MiB uploaded (5.8 against 3.7 ms/MiB
#: for 8 MiB PUTs), on the two cores the broker and the clients use. The brokers upload 8 MiB objects.
MOTO_MEMORY_OBJECT_BYTES = 16 * MiB


def librdkafka_produce_mb_s(bootstrap: str, topic: str, total_bytes: int, idempotent: bool = False) -> float:
    """MB/s of an acks=all librdkafka producer sending ``total_bytes`` in 1 KiB records.

    Without idempotence it keeps :data:`INFLIGHT` requests in flight, as the HTTP client does;
    with it, librdkafka keeps at most :data:`IDEMPOTENT_INFLIGHT`. Records are handed over a
    batch's worth at a time (``produce_batch``, one partition per call, round robin), as the HTTP
    client hands over one 64 KiB body per POST: a ``produce`` call per record costs this process
    ~1 ms of CPU more per MiB than the HTTP client spends (measured: 3.0-3.6 against 2.2-2.3 ms),
    on the same two cores as the broker. librdkafka still builds, checksums and sends every record
    batch itself. Delivery reports come back for failed records only
    (``delivery.report.only.error``), for the same reason; success is still checked: no failure
    reported and nothing left undelivered when ``flush`` returns."""
    settings = {"enable.idempotence": True} if idempotent else {"max.in.flight": INFLIGHT}
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", **settings,
                         "batch.size": BATCH_BYTES, "linger.ms": 5, "compression.type": "none",
                         "queue.buffering.max.kbytes": 64 * 1024, "delivery.report.only.error": True,
                         **LOW_LATENCY})
    value = os.urandom(RECORD_BYTES)
    per_call = BATCH_BYTES // RECORD_BYTES
    calls = total_bytes // (per_call * RECORD_BYTES)
    failures: list[str] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            failures.append(str(err))

    started = time.monotonic()
    for i in range(calls):
        pending: list[dict[str, Any]] = [{"value": value} for _ in range(per_call)]
        while pending:
            try:
                queued = producer.produce_batch(topic, pending, partition=i % PARTITIONS, on_delivery=on_delivery)
            except BufferError:
                queued = -1
            if queued < len(pending):  # what was not queued carries ``_error``: queue full is retried
                refused = [m["_error"] for m in pending
                           if "_error" in m and m["_error"].code() != KafkaError._QUEUE_FULL]
                if refused:
                    raise RuntimeError(f"{len(refused)} records refused: {refused[0]}")
                pending = [{"value": m["value"]} for m in pending if "_error" in m or queued < 0]
                producer.poll(0.005)
            else:
                pending = []
        producer.poll(0)
    undelivered = producer.flush(120)
    elapsed = time.monotonic() - started
    if failures:
        raise RuntimeError(f"{len(failures)} records failed: {failures[0]}")
    if undelivered:
        raise RuntimeError(f"{undelivered} records still undelivered after 120 s")
    return calls * per_call * RECORD_BYTES / MiB / elapsed


@dataclass(frozen=True)
class BrokerSample:
    """What one broker process had done by a moment: CPU seconds and its produce/WAL counters."""

    cpu_s: float
    produce_requests: float
    produce_latency_s: float
    wal_fsyncs: float
    wal_sync_s: float
    wal_bytes: float


def parse_broker_sample(cpu_s: float, metrics_text: str) -> BrokerSample:
    """The counters :func:`path_costs` needs, from a broker's Prometheus text."""
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(metrics_text):
        for sample in family.samples:
            if sample.name == "ferry_broker_produce_latency_seconds_count":
                values["requests"] = sample.value
            elif sample.name == "ferry_broker_produce_latency_seconds_sum":
                values["latency"] = sample.value
            elif sample.name == "ferry_broker_storage" and sample.labels.get("name") in (
                    "wal_fsyncs_total", "wal_sync_seconds_total", "wal_appended_bytes_total"):
                values[sample.labels["name"]] = sample.value
    return BrokerSample(cpu_s, values.get("requests", 0.0), values.get("latency", 0.0),
                        values.get("wal_fsyncs_total", 0.0), values.get("wal_sync_seconds_total", 0.0),
                        values.get("wal_appended_bytes_total", 0.0))


def path_costs(before: BrokerSample, after: BrokerSample, payload_bytes: int) -> dict[str, float | None]:
    """Per-path figures of one round: broker CPU ms per MiB sent, mean produce latency (request
    to acknowledgement, in the broker), mean WAL fsync and the bytes each fsync made durable."""
    requests = after.produce_requests - before.produce_requests
    fsyncs = after.wal_fsyncs - before.wal_fsyncs
    return {
        "broker_cpu_ms_per_mib": (after.cpu_s - before.cpu_s) * 1000 / (payload_bytes / MiB),
        "produce_latency_ms": (after.produce_latency_s - before.produce_latency_s) * 1000 / requests
        if requests else None,
        "wal_fsync_ms": (after.wal_sync_s - before.wal_sync_s) * 1000 / fsyncs if fsyncs else None,
        "wal_kib_per_fsync": (after.wal_bytes - before.wal_bytes) / 1024 / fsyncs if fsyncs else None,
    }


@dataclass(frozen=True)
class MachineSample:
    """What else ran on the machine by a moment: this process (the clients: librdkafka's threads
    or the HTTP client), the S3 server, and every core's idle and total time (jiffies)."""

    client_cpu_s: float
    s3_cpu_s: float
    idle_jiffies: int
    total_jiffies: int


def parse_proc_stat(text: str) -> tuple[int, int]:
    """(idle, total) jiffies of all cores from /proc/stat's first line (idle includes iowait)."""
    fields = text.split("\n", 1)[0].split()
    if not fields or fields[0] != "cpu":
        raise ValueError(f"not /proc/stat: {text[:40]!r}")
    values = [int(v) for v in fields[1:]]
    return values[3] + values[4], sum(values[:8])  # guest time is already counted in user


def machine_costs(before: MachineSample, after: MachineSample, payload_bytes: int) -> dict[str, float | None]:
    """The CPU the rest of the machine spent on a round: the clients and the S3 server per MiB, and
    how idle the cores were (near 0: the round was bound by the machine's CPU, not by latency)."""
    mib = payload_bytes / MiB
    total = after.total_jiffies - before.total_jiffies
    return {
        "client_cpu_ms_per_mib": (after.client_cpu_s - before.client_cpu_s) * 1000 / mib,
        "s3_server_cpu_ms_per_mib": (after.s3_cpu_s - before.s3_cpu_s) * 1000 / mib,
        "machine_idle_pct": 100 * (after.idle_jiffies - before.idle_jiffies) / total if total > 0 else None,
    }


def machine_sample(s3_pid: int | None) -> MachineSample:
    with open("/proc/stat", encoding="ascii") as f:
        idle, total = parse_proc_stat(f.read())
    own = os.times()
    s3_cpu = process_cpu_s(s3_pid) if s3_pid is not None else None
    return MachineSample(own.user + own.system, s3_cpu or 0.0, idle, total)


def broker_sample(url: str, pid: int) -> BrokerSample:
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return parse_broker_sample(process_cpu_s(pid) or 0.0, text)


def threads_of(pid: int) -> list[int]:
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except FileNotFoundError:
        return []


def descendants(pid: int) -> list[int]:
    """``pid``'s live descendants, from /proc (children files are per thread)."""
    out: list[int] = []
    todo = [pid]
    while todo:
        parent = todo.pop()
        for tid in threads_of(parent):
            try:
                with open(f"/proc/{parent}/task/{tid}/children") as f:
                    kids = [int(k) for k in f.read().split()]
            except FileNotFoundError:
                continue
            out += kids
            todo += kids
    return out


def pin_cpus(broker_pid: int, broker_cpu: int) -> set[int]:
    """Every thread of the broker ``broker_pid`` and of its descendants on ``broker_cpu``; this
    process and every other descendant of it on the other cores (threads and processes started
    later inherit their creator's set). Returns the other cores."""
    cores = os.sched_getaffinity(0)
    if broker_cpu not in cores or len(cores) < 2:
        raise SystemExit(f"--pin-broker-cpu {broker_cpu}: needs that core and one more (this process has "
                         f"{sorted(cores)})")
    others = cores - {broker_cpu}
    broker_side = {broker_pid, *descendants(broker_pid)}
    for pid in [os.getpid(), *descendants(os.getpid())]:
        for tid in threads_of(pid):
            try:
                os.sched_setaffinity(tid, {broker_cpu} if pid in broker_side else others)
            except ProcessLookupError:
                pass
    return others


def start_tcp_sink() -> tuple[subprocess.Popen[bytes], int]:
    proc = subprocess.Popen([sys.executable, "-m", "tools.perf.raw_tcp_sink"], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, cwd=ROOT, start_new_session=True)
    assert proc.stdout is not None
    return proc, int(json.loads(proc.stdout.readline())["port"])


async def throughput(cluster: LocalCluster, admin: Admin, total_bytes: int) -> dict[str, Any]:
    topic = "perf-kafka-produce"
    await admin.create_topic(topic, PARTITIONS, assignments={p: [PRODUCE_BROKER] for p in range(PARTITIONS)})
    for p in range(PARTITIONS):
        await admin.wait_for_leader(TopicPartition(topic, p), PRODUCE_BROKER)
    body = encode_batch([(None, os.urandom(RECORD_BYTES), None, None)] * (BATCH_BYTES // RECORD_BYTES))
    broker, pid = cluster.broker_url(PRODUCE_BROKER), cluster.broker_pid(PRODUCE_BROKER)
    s3_pid = cluster.s3.process.pid if cluster.s3 is not None and cluster.s3.process is not None else None
    requests = max(PARTITIONS, total_bytes // len(body))
    sink, port = start_tcp_sink()
    paths: dict[str, Callable[[], Awaitable[float]]] = {
        "kafka": lambda: asyncio.to_thread(librdkafka_produce_mb_s, cluster.kafka_bootstrap, topic, total_bytes),
        "kafka_idempotent": lambda: asyncio.to_thread(librdkafka_produce_mb_s, cluster.kafka_bootstrap, topic,
                                                      total_bytes, True),
        "http": lambda: post_bodies(lambda p: f"{broker}/v1/produce/{topic}/{p}?acks=-1", body, requests, INFLIGHT),
    }
    rounds: dict[str, list[float]] = {"raw_tcp": [], **{name: [] for name in paths}}
    costs: dict[str, list[dict[str, float | None]]] = {name: [] for name in paths}
    try:
        await asyncio.to_thread(librdkafka_produce_mb_s, cluster.kafka_bootstrap, topic, total_bytes // 10)
        for _ in range(ROUNDS):
            rounds["raw_tcp"].append(await send_frames(port, body, requests, PARTITIONS, RAW_PIPELINE))
            for name, run_path in paths.items():
                before = await asyncio.to_thread(broker_sample, broker, pid)
                machine_before = machine_sample(s3_pid)
                rounds[name].append(await run_path())
                machine_after = machine_sample(s3_pid)
                after = await asyncio.to_thread(broker_sample, broker, pid)
                sent = total_bytes if name != "http" else requests * len(body)
                costs[name].append({**path_costs(before, after, sent),
                                    **machine_costs(machine_before, machine_after, sent)})
    finally:
        from tools.proc import stop_process
        stop_process(sink)
        if sink.stdout is not None:
            sink.stdout.close()
    kafka, idem, http, raw = (statistics.median(rounds[n]) for n in ("kafka", "kafka_idempotent", "http", "raw_tcp"))
    return {"produce_mb_s": kafka, "http_produce_mb_s": http, "raw_tcp_mb_s": raw,
            "kafka_vs_http": kafka / http if http else None, "kafka_vs_raw": kafka / raw if raw else None,
            "produce_idempotent_mb_s": idem, "kafka_idempotent_vs_http": idem / http if http else None,
            "requests_in_flight": {"kafka": INFLIGHT, "http": INFLIGHT, "raw_tcp": PARTITIONS * RAW_PIPELINE,
                                   "kafka_idempotent": IDEMPOTENT_INFLIGHT},
            "kafka_vs_http_rounds": [k / h for k, h in zip(rounds["kafka"], rounds["http"], strict=True) if h],
            "costs": {name: _median_costs(c) for name, c in costs.items()},
            "rounds": rounds, "bytes_per_round": total_bytes, "load_average_1m": os.getloadavg()[0]}


def _median_costs(rounds: list[dict[str, float | None]]) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for key in rounds[0]:
        values = [r[key] for r in rounds if r[key] is not None]
        out[key] = statistics.median(values) if values else None  # type: ignore[type-var]
    return out


def end_to_end(bootstrap: str, topic: str, seconds: float, per_s: float, partitions: int = 3) -> dict[str, Any]:
    """Produce ``per_s`` records a second (each carrying its send time) and read them with a
    consumer-group member; latency = time read - time sent (one process, one clock).

    The producer is warmed first (a record to each partition, flushed): its first records would
    otherwise carry its start-up (bootstrap connection, Metadata, InitProducerId, ~0.5 s), which
    was the whole of the p99 this measure used to report (368 ms against a p50 of 1.2 ms; every
    record over 50 ms was sent in the producer's first half second). That start-up is reported
    apart, as ``e2e_first_record_ms``."""
    latencies_ms: list[float] = []
    first_ms: list[float] = []
    measured_from = [float("inf")]
    done = threading.Event()
    ready = threading.Event()

    def consume() -> None:
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"perf-e2e-{os.getpid()}", **LOW_LATENCY,
                             "auto.offset.reset": "latest", "fetch.wait.max.ms": 100,
                             "enable.auto.commit": True})
        consumer.subscribe([topic], on_assign=lambda c, parts: ready.set())
        try:
            while not done.is_set():
                msg = consumer.poll(0.1)
                value = msg.value() if msg is not None and msg.error() is None else None
                if value is None:
                    continue
                sent = float(value[:20])
                (latencies_ms if sent >= measured_from[0] else first_ms).append((time.time() - sent) * 1000)
        finally:
            consumer.close()

    reader = threading.Thread(target=consume, daemon=True)
    reader.start()
    ready.wait(30)
    time.sleep(0.5)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 0,
                         **LOW_LATENCY})
    for partition in range(partitions):  # the warm-up: connections, Metadata, producer id
        producer.produce(topic, value=b"%20.6f" % time.time() + b" " * 100, partition=partition)
    producer.flush(30)
    measured_from[0] = time.time()
    end = time.monotonic() + seconds
    n = 0
    started = time.monotonic()
    while time.monotonic() < end:
        producer.produce(topic, value=b"%20.6f" % time.time() + b" " * 100)
        producer.poll(0)
        n += 1
        delay = started + n / per_s - time.monotonic()
        if delay > 0:
            time.sleep(delay)
    producer.flush(30)
    time.sleep(1.0)
    done.set()
    reader.join(10)
    return {"e2e_p50_ms": percentile(latencies_ms, 50), "e2e_p99_ms": percentile(latencies_ms, 99),
            "e2e_records": len(latencies_ms), "e2e_sent": n,
            "e2e_first_record_ms": max(first_ms) if first_ms else None}


async def move_unavailability(admin: Admin, bootstrap: str, moves: int) -> dict[str, Any]:
    topic = "perf-kafka-move"
    tp = TopicPartition(topic, 0)
    await admin.create_topic(topic, 1, assignments={0: [1]})
    await admin.wait_for_leader(tp, 1)
    acks: list[float] = []
    stop = threading.Event()
    lock = threading.Lock()

    def produce() -> None:
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                             "linger.ms": 0, "topic.metadata.refresh.interval.ms": 60000, **LOW_LATENCY})

        def on_delivery(err: Any, _msg: Any) -> None:
            if err is None:
                with lock:
                    acks.append(time.monotonic())

        while not stop.is_set():
            producer.produce(topic, value=b"m" * 100, partition=0, on_delivery=on_delivery)
            producer.poll(0.002)
        producer.flush(30)

    thread = threading.Thread(target=produce, daemon=True)
    thread.start()
    gaps_ms: list[float] = []
    try:
        await asyncio.sleep(2.0)
        owner = 1
        for _ in range(moves):
            target = 2 if owner == 1 else 1
            started = time.monotonic()
            await admin.move_partition(tp, [target])
            await admin.wait_for_leader(tp, target, timeout_s=20)
            await asyncio.sleep(1.5)
            with lock:
                window = [t for t in acks if started - 0.05 <= t <= started + 1.5]
            # the move's gap: the longest silence between two acknowledgements around it
            gap = max((b - a for a, b in pairwise(window)), default=None)
            if gap is not None:
                gaps_ms.append(gap * 1000)
            owner = target
    finally:
        stop.set()
        await asyncio.to_thread(thread.join, 30)
    return {"client_move_unavailable_p50_ms": percentile(gaps_ms, 50),
            "client_move_unavailable_p99_ms": percentile(gaps_ms, 99), "moves": len(gaps_ms),
            "client_move_unavailable_ms": gaps_ms}


async def java_move_unavailability(admin: Admin, bootstrap: str, moves: int) -> dict[str, Any]:
    """The same moves under Kafka's Java producer (``kafka-verifiable-producer`` from the pinned
    jars, at its defaults: idempotent, acks=all), which prints a JSON event, with its wall-clock
    time in ms, for every acknowledgement. Empty when the jars are not installed."""
    from tools.peer.jars import kafka_jars_dir
    from tools.peer.kafka_tools import KafkaTools

    if kafka_jars_dir() is None:
        return {}
    topic = "perf-kafka-move-java"
    tp = TopicPartition(topic, 0)
    await admin.create_topic(topic, 1, assignments={0: [1]})
    await admin.wait_for_leader(tp, 1)
    acks_ms: list[int] = []
    proc = KafkaTools().start("kafka-verifiable-producer", "--bootstrap-server", bootstrap, "--topic", topic,
                              "--throughput", "500", stderr=subprocess.DEVNULL)

    def read_events() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if "producer_send_success" in line:
                acks_ms.append(int(json.loads(line)["timestamp"]))

    reader = threading.Thread(target=read_events, daemon=True)
    reader.start()
    gaps_ms: list[float] = []
    try:
        deadline = time.monotonic() + 60
        # acks come from a reader thread; a benchmark's start-up wait
        while not acks_ms and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.1)
        await asyncio.sleep(2.0)
        owner = 1
        for _ in range(moves):
            target = 2 if owner == 1 else 1
            started_ms = time.time() * 1000
            await admin.move_partition(tp, [target])
            await admin.wait_for_leader(tp, target, timeout_s=20)
            await asyncio.sleep(1.5)
            window = [t for t in list(acks_ms) if started_ms - 50 <= t <= started_ms + 1500]
            gap = max((b - a for a, b in pairwise(window)), default=None)
            if gap is not None:
                gaps_ms.append(float(gap))
            owner = target
    finally:
        proc.terminate()
        await asyncio.to_thread(proc.wait, 30)
        await asyncio.to_thread(reader.join, 10)
    return {"java_client_move_unavailable_p50_ms": percentile(gaps_ms, 50),
            "java_client_move_unavailable_p99_ms": percentile(gaps_ms, 99), "java_moves": len(gaps_ms),
            "java_client_move_unavailable_ms": gaps_ms}


async def run(cluster: LocalCluster, total_bytes: int, moves: int, e2e_s: float, console: Console) -> dict[str, Any]:
    async with Admin(bootstrap_controllers=cluster.controller_bootstrap) as admin:
        console.print("  produce: librdkafka vs HTTP vs raw TCP ...")
        result = await throughput(cluster, admin, total_bytes)
        console.print("  end-to-end latency ...")
        await admin.create_topic("perf-kafka-e2e", 3)
        for p in range(3):
            await admin.wait_for_leader(TopicPartition("perf-kafka-e2e", p))
        result.update(await asyncio.to_thread(end_to_end, cluster.kafka_bootstrap, "perf-kafka-e2e", e2e_s, 200.0))
        console.print(f"  {moves} moves under a librdkafka producer ...")
        result.update(await move_unavailability(admin, cluster.kafka_bootstrap, moves))
        console.print(f"  {moves} moves under Kafka's Java producer ...")
        result.update(await java_move_unavailability(admin, cluster.kafka_bootstrap, moves))
    return result


def render(result: dict[str, Any], console: Console) -> None:
    table = Table(title="ferry perf kafka")
    for col in ("measure", "value", "target", "met", "broker: CPU/MiB, produce latency, fsync; other CPU/MiB; cores idle"):
        table.add_column(col)

    def row(name: str, value: str, target: str, met: bool | None, costs: str = "") -> None:
        table.add_row(name, value, target, "" if met is None else ("yes" if met else "NO"), costs)

    def cost(name: str) -> str:
        c = result["costs"][name]

        def fmt(key: str, digits: int) -> str:
            return "-" if c.get(key) is None else f"{c[key]:.{digits}f}"
        return (f"{fmt('broker_cpu_ms_per_mib', 1)} ms, {fmt('produce_latency_ms', 1)} ms, "
                f"{fmt('wal_fsync_ms', 1)} ms / {fmt('wal_kib_per_fsync', 0)} KiB; client "
                f"{fmt('client_cpu_ms_per_mib', 1)}, S3 server {fmt('s3_server_cpu_ms_per_mib', 1)} ms/MiB; "
                f"idle {fmt('machine_idle_pct', 0)}%")

    ratio = result.get("kafka_vs_http")
    inflight = result["requests_in_flight"]
    row(f"librdkafka produce MB/s ({inflight['kafka']} in flight)", f"{result['produce_mb_s']:.1f}", "", None,
        cost("kafka"))
    row(f"HTTP produce MB/s ({inflight['http']} in flight)", f"{result['http_produce_mb_s']:.1f}", "", None,
        cost("http"))
    row("raw TCP MB/s", f"{result['raw_tcp_mb_s']:.1f}", "", None)
    per_round = ", ".join(f"{r:.2f}" for r in result["kafka_vs_http_rounds"])
    row("Kafka / HTTP", f"{ratio:.2f}" if ratio else "-", f"≥ {TARGETS['kafka_vs_http']}",
        ratio is not None and ratio >= TARGETS["kafka_vs_http"], f"rounds: {per_round}")
    idem = result.get("kafka_idempotent_vs_http")
    row(f"idempotent librdkafka MB/s ({inflight['kafka_idempotent']} in flight)",
        f"{result['produce_idempotent_mb_s']:.1f} ({idem:.2f}× HTTP)" if idem else "-", "", None,
        cost("kafka_idempotent"))
    row("e2e p50 / p99 ms", f"{result['e2e_p50_ms'] or 0:.1f} / {result['e2e_p99_ms'] or 0:.1f}", "", None)
    p50, p99 = result["client_move_unavailable_p50_ms"], result["client_move_unavailable_p99_ms"]
    row("move unavailability p50 ms", f"{p50:.0f}" if p50 is not None else "-",
        f"≤ {TARGETS['client_move_unavailable_p50_ms']}",
        p50 is not None and p50 <= TARGETS["client_move_unavailable_p50_ms"])
    row("move unavailability p99 ms", f"{p99:.0f}" if p99 is not None else "-",
        f"≤ {TARGETS['client_move_unavailable_p99_ms']}",
        p99 is not None and p99 <= TARGETS["client_move_unavailable_p99_ms"])
    java = result.get("java_client_move_unavailable_p99_ms")
    row("move unavailability, Java producer p50 / p99 ms",
        f"{result.get('java_client_move_unavailable_p50_ms') or 0:.0f} / {java:.0f}" if java is not None
        else "- (make kafka-jars)", f"p99 ≤ {TARGETS['java_client_move_unavailable_p99_ms']}",
        java is not None and java <= TARGETS["java_client_move_unavailable_p99_ms"])
    console.print(table)
    console.print(f"load average (1 min) at the end of the produce rounds: {result['load_average_1m']:.1f}")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="ferry perf kafka", description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--quick", action="store_true", help="less data, fewer moves")
    parser.add_argument("--moves", type=int, default=None, help="moves of one partition (default 10, quick 10)")
    parser.add_argument("--state-dir")
    parser.add_argument("--pin-broker-cpu", type=int, default=None,
                        help="the measured broker on this core, everything else on the others")
    args = parser.parse_args(argv)
    console = Console(stderr=args.json)
    total_bytes = (32 if args.quick else 128) * MiB
    moves = args.moves or 10
    state_dir = os.path.abspath(args.state_dir) if args.state_dir else tempfile.mkdtemp(prefix="ferry-perf-kafka-")
    # read by the embedded S3 server (moto) the cluster starts: objects stay in memory, as in S3
    os.environ.setdefault("MOTO_S3_DEFAULT_KEY_BUFFER_SIZE", str(MOTO_MEMORY_OBJECT_BYTES))
    cluster = LocalCluster(state_dir)
    try:
        cluster.start()
        if args.pin_broker_cpu is not None:
            others = pin_cpus(cluster.broker_pid(PRODUCE_BROKER), args.pin_broker_cpu)
            console.print(f"  broker {PRODUCE_BROKER} on core {args.pin_broker_cpu}, everything else on {sorted(others)}")
        result = asyncio.run(run(cluster, total_bytes, moves, 5.0 if args.quick else 15.0, console))
        result["pinned_broker_cpu"] = args.pin_broker_cpu
    finally:
        cluster.stop()
    if not args.state_dir:
        shutil.rmtree(state_dir, ignore_errors=True)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        render(result, console)
    return 0
