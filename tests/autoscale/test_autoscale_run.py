"""A short autoscaling experiment on a real cluster: nothing lost, and its outputs hold data."""
from __future__ import annotations

import json

import pandas as pd
import pytest

from tools.autoscale import cli

pytestmark = [pytest.mark.integration, pytest.mark.spark]

SHORT = """
name: short
duration_s: 22
drain_timeout_s: 30
cluster: {brokers: 2, metrics_interval_ms: 1000, upload_interval_ms: 1000}
topic: {name: load, partitions: 6}
load: {rate_per_s: 150, value_bytes: 256, skew: 0.5}
steps:
  - {at_s: 2, action: set_rate, rate_per_s: 250}
  - {at_s: 3, action: add_brokers, count: 1}
  - {at_s: 6, action: rebalance, window_ms: 3000}
  - {at_s: 17, action: remove_broker, broker: 1, window_ms: 3000}
"""


def test_short_scenario_loses_nothing_and_writes_its_outputs(tmp_path, capsys):
    scenario = tmp_path / "short.yaml"
    scenario.write_text(SHORT)
    out = tmp_path / "out"
    code = cli.main(["run", str(scenario), "--out", str(out), "--no-progress"])
    printed = capsys.readouterr().out
    summary = json.loads((out / "summary.json").read_text())
    assert code in (0, 1) and summary["verdict"] in printed
    checks = summary["checks"]
    assert checks["zero_loss"] and checks["steps_completed"] and checks["moves_completed"]
    assert checks["removed_brokers_drained"] and checks["removed_brokers_gone"] and checks["final_state_recorded"]
    records = summary["records"]
    assert records["lost"] == 0 and records["duplicated"] == 0 and records["acknowledged"] > 3_000
    assert summary["verification"]["misplaced"] == 0
    frame = pd.read_csv(out / "timeseries.csv", dtype={"live_brokers": str})
    assert len(frame) >= 22 and frame["achieved_rps"].sum() == records["acknowledged"]
    assert frame["consumed_rps"].sum() == records["acknowledged"]  # the consumer read each record once
    assert frame["brokers"].max() == 3 and frame["brokers"].iloc[-1] == 2  # scaled out, then in
    assert {"broker_1_rps", "broker_2_rps", "broker_3_rps"} <= set(frame.columns)
    assert frame["broker_3_rps"].sum() > 0  # the added broker took load after the rebalance
    events = json.loads((out / "events.json").read_text())
    kinds = [e["kind"] for e in events]
    assert "rebalance_done" in kinds and "broker_removed" in kinds and kinds.count("move") == summary["moves"] > 0
    # where each stall went: cut at the brokers' timeline of the move, the parts add up to it
    with_parts = [e for e in events if e["kind"] == "move" and e.get("stall_parts_ms")]
    assert with_parts and summary["stall_per_moved_partition_ms"]["with_parts"] == len(with_parts)
    for e in with_parts:
        assert abs(sum(e["stall_parts_ms"].values()) - e["stall_ms"]) < 1.0 and min(e["stall_parts_ms"].values()) >= 0
    # the run's warm planner read only the window's few new sample objects, on the driver
    for e in (e for e in events if e["kind"] == "rebalance_done"):
        assert e["timings_s"]["spark_read"] is False and 0 < e["timings_s"]["new_objects"] <= 12
    removed_at_s = next(e["t_s"] for e in events if e["kind"] == "broker_removed")
    assert frame["t_s"].iloc[-1] >= int(removed_at_s)  # the series reaches the second of the removal
    assert "1" not in frame["live_brokers"].iloc[-1].split() and summary["final_live_brokers"] == [2, 3]
    for png in ("overview.png", "balance.png"):
        assert (out / png).read_bytes()[:4] == b"\x89PNG" and (out / png).stat().st_size > 20_000
    assert not any(p.is_dir() for p in (out / "cluster").iterdir())  # scratch removed, logs kept

