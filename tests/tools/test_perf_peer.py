"""`ferry perf peer`: its summary of two runs, and a smoke run against Apache Kafka itself."""
from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
from rich.console import Console

from tools.peer.jars import kafka_jars_dir
from tools.perf.peer import PacedProducer, plot, render, summarize


def _run(move_s: dict[str, float], gap_ms: float, mb_s: float, cpu: float, e2e: float, crash: float) -> dict:
    return {"moves": {k: {"size_bytes": 1, "move_s": v, "gap_ms": gap_ms} for k, v in move_s.items()},
            "produce_mb_s": mb_s, "cpu_s_per_gib": cpu, "e2e_p50_ms": 1.0, "e2e_p99_ms": e2e,
            "crash_failover_s": crash}


def test_the_summary_carries_every_ratio_the_targets_name(tmp_path: Path) -> None:
    kafka = _run({"1MiB": 2.0, "1GiB": 60.0}, 200.0, 80.0, 10.0, 20.0, 9.0)
    ferry = _run({"1MiB": 0.05, "1GiB": 0.1}, 100.0, 90.0, 30.0, 10.0, 0.6)
    result = summarize(kafka, ferry, {"crash_failover_s": 1.5}, "4.4.0")
    assert result["kafka_version"] == "4.4.0" and result["move_speedup_at"] == "1GiB"
    assert result["move_speedup_at_1gib"] == pytest.approx(600.0)
    assert result["cpu_ratio"] == pytest.approx(3.0)
    assert result["crash_failover_ratio"] == pytest.approx(0.6 / 9.0, abs=1e-3)
    assert result["s3wal_crash_failover_ratio"] == pytest.approx(1.5 / 9.0, abs=1e-3)
    assert (result["kafka_leader_change_gap_p99_ms"], result["ferry_move_gap_p99_ms"]) == (200.0, 100.0)
    json.dumps(result)  # --json prints it whole
    plot(result, str(tmp_path / "peer.png"))
    assert (tmp_path / "peer.png").stat().st_size > 10_000
    console = Console(record=True, width=140)
    render(result, console)
    assert "600.000" in console.export_text()


def test_a_gap_is_the_longest_silence_between_acknowledgements_in_the_window() -> None:
    paced = PacedProducer("unused:0", "t", 0)
    paced.acks.extend([1.0, 1.01, 1.02, 1.30, 1.31, 5.0])
    assert paced.gap_ms(0.9, 2.0) == pytest.approx(280.0)
    assert paced.gap_ms(1.305, 2.0) is None  # one acknowledgement: no gap to measure


@pytest.mark.integration
def test_apache_kafka_starts_from_the_jars_and_a_reassignment_copies_and_completes() -> None:
    """The peer is Apache Kafka itself (KRaft, from the pinned jars): one copy reassignment of a
    partition under a paced producer, measured the way the benchmark measures Ferry's moves."""
    jars = kafka_jars_dir()
    if jars is None:
        pytest.skip("Apache Kafka's jars are not installed (make kafka-jars)")
    from tools.peer.apache_kafka import ApacheKafkaCluster
    from tools.perf.peer import KafkaPeer, one_move

    cluster = ApacheKafkaCluster(Path(tempfile.mkdtemp(prefix="peer-smoke-")), jars)
    cluster.start()
    try:
        assert cluster.version.startswith("4.")
        move = one_move(KafkaPeer(cluster), "1MiB", 1 << 20, [1, 2], [3, 2], None, timeout_s=120)
    finally:
        cluster.stop(graceful=False)
    assert 0 < move["move_s"] < 60 and move["producer_errors"] == 0
    assert move["gap_ms"] is not None and move["gap_ms"] > 0
