"""`ferry perf kafka`'s per-path figures, from a broker's own counters (no cluster needed), and its core pinning."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from tools.perf.kafka import (MiB, BrokerSample, MachineSample, descendants, threads_of, machine_costs,
                             parse_broker_sample, parse_proc_stat, path_costs, pin_cpus)


def _metrics_text(requests: int, latency_s: float, fsyncs: int, sync_s: float, wal_bytes: int) -> str:
    """The same metric names and labels as broker/metrics.py, with other samples around them."""
    r = CollectorRegistry()
    latency = Histogram("ferry_broker_produce_latency_seconds", "", registry=r)
    for _ in range(requests):
        latency.observe(latency_s / requests)
    storage = Gauge("ferry_broker_storage", "", ["name"], registry=r)
    storage.labels("wal_fsyncs_total").set(fsyncs)
    storage.labels("wal_sync_seconds_total").set(sync_s)
    storage.labels("wal_appended_bytes_total").set(wal_bytes)
    storage.labels("wal_bytes").set(123456)
    Counter("ferry_broker_fetch_requests", "", ["topic", "partition"], registry=r).labels("t", "0").inc(9)
    return generate_latest(r).decode()


def test_a_broker_sample_reads_the_produce_and_wal_counters() -> None:
    sample = parse_broker_sample(2.5, _metrics_text(4, 0.04, 3, 0.021, 3 * 65536))
    assert sample == BrokerSample(cpu_s=2.5, produce_requests=4, produce_latency_s=pytest.approx(0.04),
                                  wal_fsyncs=3, wal_sync_s=pytest.approx(0.021), wal_bytes=3 * 65536)


def test_path_costs_are_per_mib_per_request_and_per_fsync() -> None:
    before = BrokerSample(10.0, 100, 1.0, 50, 0.5, 1 << 20)
    after = BrokerSample(10.8, 164, 1.64, 66, 0.66, (1 << 20) + 4 * MiB)
    costs = path_costs(before, after, 4 * MiB)
    assert costs["broker_cpu_ms_per_mib"] == pytest.approx(200.0)
    assert costs["produce_latency_ms"] == pytest.approx(10.0)
    assert costs["wal_fsync_ms"] == pytest.approx(10.0)
    assert costs["wal_kib_per_fsync"] == pytest.approx(256.0)


def test_a_round_without_requests_or_fsyncs_has_no_means() -> None:
    same = BrokerSample(1.0, 5, 0.1, 2, 0.01, 10)
    costs = path_costs(same, same, MiB)
    assert costs == {"broker_cpu_ms_per_mib": 0.0, "produce_latency_ms": None, "wal_fsync_ms": None,
                     "wal_kib_per_fsync": None}


def test_machine_costs_are_per_mib_and_idle_is_a_share_of_all_cores() -> None:
    idle, total = parse_proc_stat("cpu  100 5 50 800 20 1 2 3 0 0\ncpu0 50 2 25 400 10 0 1 1 0 0\n")
    assert (idle, total) == (820, 981)
    before = MachineSample(client_cpu_s=1.0, s3_cpu_s=2.0, idle_jiffies=820, total_jiffies=981)
    after = MachineSample(client_cpu_s=1.4, s3_cpu_s=2.8, idle_jiffies=830, total_jiffies=1181)
    costs = machine_costs(before, after, 8 * MiB)
    assert costs["client_cpu_ms_per_mib"] == pytest.approx(50.0)
    assert costs["s3_server_cpu_ms_per_mib"] == pytest.approx(100.0)
    assert costs["machine_idle_pct"] == pytest.approx(5.0)
    assert machine_costs(before, before, MiB)["machine_idle_pct"] is None
    with pytest.raises(ValueError):
        parse_proc_stat("intr 1 2 3")



def test_pinning_puts_the_broker_on_its_core_and_everything_else_on_the_others() -> None:
    cores = os.sched_getaffinity(0)
    assert len(cores) >= 2, "the machines this suite runs on have two cores"
    broker_core = min(cores)
    sleeper = [sys.executable, "-c", "import threading, time; threading.Thread(target=time.sleep, args=(60,)).start(); "
               "time.sleep(60)"]
    # the "broker" starts a child of its own: a process it starts belongs on its core too
    broker = subprocess.Popen([sys.executable, "-c", f"import subprocess, time; subprocess.Popen({sleeper!r}); "
                               "time.sleep(60)"])
    other = subprocess.Popen(sleeper)
    mine = {tid: os.sched_getaffinity(tid) for tid in threads_of(os.getpid())}
    grandchildren: list[int] = []
    try:
        deadline = time.monotonic() + 10
        while not grandchildren or len(threads_of(grandchildren[0])) < 2 or len(threads_of(other.pid)) < 2:
            assert time.monotonic() < deadline, "the test's processes did not start"
            time.sleep(0.05)
            grandchildren = descendants(broker.pid)
        others = pin_cpus(broker.pid, broker_core)
        assert others == cores - {broker_core}
        for pid in (broker.pid, *grandchildren):
            assert [os.sched_getaffinity(t) for t in threads_of(pid)] == [{broker_core}] * len(threads_of(pid))
        assert [os.sched_getaffinity(t) for t in threads_of(other.pid)] == [others] * 2
        assert os.sched_getaffinity(0) == others
    finally:
        for tid, affinity in mine.items():
            try:
                os.sched_setaffinity(tid, affinity)
            except ProcessLookupError:
                pass
        for pid in grandchildren:
            os.kill(pid, signal.SIGKILL)
        for proc in (broker, other):
            proc.kill()
            proc.wait()
