"""The Spark side: sample aggregation and the `ferry rebalance` command end to end (local mode)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from metadata_quorum.kernel.errors import FerryError
from tools.rebalance import cli
from tools.rebalance.aggregate import aggregate_samples, read_samples
from tools.rebalance.model import make_cluster_load
from tools.rebalance.samples import PartitionSample, encode_samples, write_samples_dir
from tools.rebalance.summary import broker_totals
from tools.rebalance.synthetic import SyntheticSpec, synthetic_cluster, synthetic_samples

pytestmark = pytest.mark.spark

END_MS = 1_700_000_000_000


def write_frame(frame: pd.DataFrame, root: Path) -> list[str]:
    paths = []
    for (ts_ms, broker_id), rows in frame.groupby(["ts_ms", "broker_id"]):
        data = rows.to_json(orient="records", lines=True).encode()
        paths.append(str(write_samples_dir(root, int(broker_id), int(ts_ms), data)))
    return paths


def sample(ts_ms: int, broker: int, topic: str, partition: int, bytes_in: int, bytes_out: int,
           interval_ms: int = 10_000, size: int = 0) -> PartitionSample:
    return PartitionSample(ts_ms, interval_ms, broker, topic, partition, bytes_in, bytes_out, bytes_in // 100,
                           bytes_out // 100, size)


def test_aggregation_means_rates_over_the_window_and_follows_moves(spark, tmp_path):
    objects = {
        # outside the window (ts <= END - 30 s): ignored
        (1, END_MS - 40_000): [sample(END_MS - 40_000, 1, "a", 0, 10**9, 10**9)],
        (1, END_MS - 20_000): [sample(END_MS - 20_000, 1, "a", 0, 100_000, 300_000, size=5),
                               sample(END_MS - 20_000, 1, "b", 0, 50_000, 0)],
        # a-0 moved from broker 1 to broker 2; its later sample names the new owner
        (2, END_MS - 10_000): [sample(END_MS - 10_000, 2, "a", 0, 300_000, 100_000, size=7)],
        (1, END_MS): [sample(END_MS, 1, "b", 0, 150_000, 20_000, interval_ms=20_000)],
    }
    paths = [str(write_samples_dir(tmp_path, b, ts, encode_samples(rows))) for (b, ts), rows in objects.items()]
    agg = aggregate_samples(spark, read_samples(spark, paths), window_ms=30_000)
    assert agg.end_ms == END_MS and agg.rows_in_window == 4
    rows = agg.partitions.set_index(["topic", "partition"])
    a, b = rows.loc[("a", 0)], rows.loc[("b", 0)]
    assert int(a["owner"]) == 2 and int(a["size_bytes"]) == 7
    assert a["net_in"] == pytest.approx(400_000 / 20.0) and a["net_out"] == pytest.approx(400_000 / 20.0)
    assert int(b["owner"]) == 1
    assert b["net_in"] == pytest.approx(200_000 / 30.0) and b["net_out"] == pytest.approx(20_000 / 30.0)
    brokers = agg.brokers.set_index("owner")
    assert brokers.loc[2, "net_in"] == pytest.approx(20_000.0) and int(brokers.loc[1, "partition_count"]) == 1
    assert agg.cluster.brokers == (1, 2)


def test_aggregation_matches_the_synthetic_loads(spark, tmp_path):
    cluster = synthetic_cluster(SyntheticSpec(2_000, 10, partitions_per_topic=20, seed=11))
    paths = write_frame(synthetic_samples(cluster, intervals=3), tmp_path)
    agg = aggregate_samples(spark, read_samples(spark, paths), window_ms=60_000)
    got = agg.cluster
    assert got.n_partitions == cluster.n_partitions
    assert (got.owners == cluster.owners).all() and (got.topics == cluster.topics).all()
    np.testing.assert_allclose(got.loads, cluster.loads, rtol=1e-6, atol=0.1)
    totals = broker_totals(got, got.owners, got.brokers)
    spark_sums = agg.brokers.set_index("owner").loc[list(got.brokers)]
    np.testing.assert_allclose(spark_sums["net_in"].to_numpy(), totals["net_in"], rtol=1e-9)


def test_the_warm_planner_aggregates_as_spark_does_and_reads_only_new_objects(spark, tmp_path):
    from tools.rebalance.warm import LocalObjects, WarmPlanner

    cluster = synthetic_cluster(SyntheticSpec(400, 8, partitions_per_topic=20, seed=13))
    write_frame(synthetic_samples(cluster, intervals=3), tmp_path)
    expected = aggregate_samples(spark, read_samples(spark, sorted(str(p) for p in tmp_path.rglob("*.jsonl"))),
                                 window_ms=60_000).cluster
    by_spark = WarmPlanner(LocalObjects(tmp_path), window_ms=60_000, spark_min_objects=1)
    by_driver = WarmPlanner(LocalObjects(tmp_path), window_ms=60_000, spark_min_objects=10**6)
    assert by_spark.refresh() == (24, True) and by_driver.refresh() == (24, False)
    for planner in (by_spark, by_driver):
        got = planner.cluster()
        assert (got.topics == expected.topics).all() and (got.owners == expected.owners).all()
        np.testing.assert_allclose(got.loads, expected.loads, rtol=1e-9)
        np.testing.assert_allclose(got.request_rates, expected.request_rates, rtol=1e-9)
    # one interval later: only its 8 objects are read, and the oldest interval leaves the window
    write_frame(synthetic_samples(cluster, intervals=1, end_ms=END_MS + 10_000, seed=5), tmp_path)
    assert by_driver.refresh() == (8, False) and by_driver.window_objects == 32
    by_driver.window_ms = 25_000
    assert by_driver.refresh() == (0, False) and by_driver.window_objects == 24


def test_an_empty_window_is_a_clear_error(spark, tmp_path):
    path = write_samples_dir(tmp_path, 1, END_MS, encode_samples([sample(END_MS, 1, "a", 0, 1, 1)]))
    with pytest.raises(FerryError) as err:
        aggregate_samples(spark, read_samples(spark, [str(path)]), window_ms=1_000, end_ms=END_MS - 60_000)
    assert "no load samples in the window" in err.value.message


@pytest.fixture(scope="module")
def skewed_input(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("samples")
    cluster = synthetic_cluster(SyntheticSpec(1_000, 8, partitions_per_topic=20, seed=12))
    write_frame(synthetic_samples(cluster, intervals=3, end_ms=END_MS), root)
    return root


def run_cli(capsys, *argv: str) -> tuple[int, dict | None, str]:
    code = cli.main(list(argv))
    out = capsys.readouterr()
    report = json.loads(out.out) if code == 0 and "--json" in argv else None
    return code, report, out.err


def replan_input(root: Path, plan_json: dict, dest: Path) -> Path:
    """The same samples with the plan applied: each moved partition reported by its new owner."""
    moved = {(p["topic"], p["partition"]): p["replicas"][0] for p in plan_json["partitions"]}
    rows = []
    for path in sorted(root.glob("metrics/broker=*/*.jsonl")):
        for line in path.read_text().splitlines():
            row = json.loads(line)
            row["broker_id"] = moved.get((row["topic"], row["partition"]), row["broker_id"])
            rows.append(row)
    write_frame(pd.DataFrame(rows), dest)
    return dest


def test_rebalance_command_plans_a_balanced_cluster_and_replanning_moves_nothing(spark, skewed_input, tmp_path,
                                                                                 capsys):
    out_file = tmp_path / "plan.json"
    code, report, _ = run_cli(capsys, "--input", str(skewed_input), "--window-ms", "60000", "--json",
                              "--output", str(out_file))
    assert code == 0
    summary, plan_json = report["summary"], report["plan"]
    assert json.loads(out_file.read_text()) == plan_json
    assert plan_json["version"] == 1 and len(plan_json["partitions"]) == summary["moves"] > 0
    assert all(p["log_dirs"] == ["any"] and len(p["replicas"]) == 1 for p in plan_json["partitions"])
    for r in ("net_in", "net_out"):
        assert summary["resources"][r]["before"]["max_over_mean"] >= 2.0
        assert summary["resources"][r]["after"]["max_over_mean"] <= 1.10
    assert set(summary["timings_s"]) == {"spark_startup", "aggregation", "planning"}
    assert report["executed"] is None  # dry run
    code, again, _ = run_cli(capsys, "--input", str(replan_input(skewed_input, plan_json, tmp_path / "after")),
                             "--window-ms", "60000", "--json")
    assert code == 0 and again["summary"]["moves"] == 0 and again["plan"]["partitions"] == []


def test_rebalance_command_add_and_remove_broker_modes(spark, skewed_input, capsys):
    code, report, _ = run_cli(capsys, "--input", str(skewed_input), "--window-ms", "60000", "--json",
                              "--add-broker", "8,9")
    assert code == 0
    assert {p["replicas"][0] for p in report["plan"]["partitions"]} == {8, 9}
    assert report["summary"]["brokers_after"] == list(range(10))
    code, report, _ = run_cli(capsys, "--input", str(skewed_input), "--window-ms", "60000", "--json",
                              "--remove-broker", "3")
    assert code == 0
    moved = report["plan"]["partitions"]
    assert len(moved) == 125 and all(p["replicas"][0] != 3 for p in moved)  # broker 3's 1000 / 8 partitions
    assert report["summary"]["resources"]["partition_count"]["after"]["avg"] == pytest.approx(1_000 / 7)
    assert report["summary"]["brokers_after"] == [0, 1, 2, 4, 5, 6, 7]


def test_rebalance_command_prints_a_summary_and_the_plan(spark, skewed_input, capsys):
    code = cli.main(["--input", str(skewed_input), "--window-ms", "60000"])
    out = capsys.readouterr().out
    assert code == 0
    assert "max/mean" in out and "net_in" in out and "floor" in out and "Dry run" in out
    plan_line = out.split("Proposed partition reassignment configuration\n")[1].splitlines()[0]
    assert json.loads(plan_line)["version"] == 1


@pytest.mark.parametrize("argv, message", [
    (["--remove-broker", "42"], "BROKER_ID_NOT_REGISTERED: cannot remove unknown brokers [42]"),
    (["--add-broker", "2"], "brokers [2] already lead partitions"),
    (["--add-broker", "x"], "--add-broker takes comma-separated broker ids"),
    (["--brokers", "0,1"], "not in the broker list"),
    (["--window-ms", "0"], "--window-ms must be positive"),
    (["--execute"], "--execute needs --bootstrap-server"),
    (["--balance-band", "1.5"], "--balance-band must be between 0 and 1"),
    (["--max-network-in", "-5"], "--max-network-in must be a positive rate"),
])
def test_rebalance_command_refuses_bad_input(spark, skewed_input, capsys, argv, message):
    code, _, err = run_cli(capsys, "--input", str(skewed_input), "--window-ms", "60000", *argv)
    assert code == 1 and message in err


def test_rebalance_command_with_no_samples_fails_clearly(spark, tmp_path, capsys):
    (tmp_path / "metrics").mkdir()
    code, _, err = run_cli(capsys, "--input", str(tmp_path), "--window-ms", "60000")
    assert code == 1 and "no load samples found" in err
    code, _, err = run_cli(capsys, "--window-ms", "60000")
    assert code == 1 and "--s3-endpoint URL --bucket B, or --input DIR" in err


@pytest.mark.integration
def test_rebalance_reads_samples_from_a_real_s3_endpoint(spark, capsys):
    from stream_storage.s3_server import S3Server
    from tools.rebalance.samples import S3SampleSource, write_samples

    cluster = make_cluster_load(["t"] * 6, range(6), [1, 1, 1, 1, 1, 2], [100.0] * 6, [50.0] * 6,
                                brokers=[1, 2])
    with S3Server(bucket="ferry-metrics") as s3:
        source = S3SampleSource(s3.endpoint_url, "ferry-metrics")
        for k in range(3):
            ts = END_MS - k * 10_000
            for broker in (1, 2):
                rows = [sample(ts, broker, "t", int(p), 1_000_000, 500_000)
                        for p in np.nonzero(cluster.owners == broker)[0]]
                write_samples(source, broker, ts, rows)
        code, report, _ = run_cli(capsys, "--s3-endpoint", s3.endpoint_url, "--bucket", "ferry-metrics",
                                  "--window-ms", "20000", "--json")
        code_missing, _, err = run_cli(capsys, "--s3-endpoint", s3.endpoint_url, "--bucket", "no-such-bucket",
                                       "--window-ms", "20000")
    assert code == 0
    assert report["summary"]["window"]["sample_rows"] == 12  # 2 of 3 intervals x 6 partitions
    assert report["summary"]["resources"]["net_in"]["before"]["max"] == pytest.approx(500_000.0)
    assert {p["replicas"][0] for p in report["plan"]["partitions"]} == {2}
    assert report["summary"]["resources"]["net_in"]["after"]["max_over_mean"] == pytest.approx(1.0)
    assert code_missing == 1 and "bucket 'no-such-bucket' does not exist" in err
