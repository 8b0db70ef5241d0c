"""An autoscaling run's panels for the console: the series from its CSV, the balance series the same
as the experiment's own (tools/autoscale/summary.py), events filtered, files re-read only on change."""
from __future__ import annotations

import io
import json
import math
import os

import pandas as pd

from tools.autoscale.summary import balance_series
from tools.console.runs import RunDir, run_view

CSV = """t_s,offered_rps,achieved_rps,p50_ms,p99_ms,consumed_rps,consumer_lag,brokers,max_over_mean,moves,errors,retries,broker_1_rps,broker_2_rps,broker_3_rps,live_brokers
0,100,90,,,80,10,2,1.2,0,0,0,60,30,0,1 2
1,100,100,2.5,9.1,100,10,2,1.0,0,0,0,50,50,0,1 2
2,200,150,3.0,20.0,120,40,3,1.5,2,1,3,50,50,50,1 2 3
3,200,200,2.0,8.0,210,30,3,1.0,1,0,0,70,70,60,1 2 3
4,200,200,2.0,8.0,200,30,3,1.0,0,0,0,0,0,0,
"""


def test_series_and_balance_match_the_experiments_own() -> None:
    events = [{"t_s": 2.0, "kind": "add_brokers", "brokers": [3]}, {"t_s": 2.5, "kind": "move", "partition": 1},
              {"t_s": 3.0, "kind": "decision", "why": "x"}, {"kind": "move"}]
    v = run_view("run-1", CSV, events)
    assert v["series"]["t_s"] == [0, 1, 2, 3, 4] and v["series"]["p50_ms"][:2] == [None, 2.5]
    assert v["per_broker"]["3"] == [0, 0, 50, 60, 0] and v["series"]["retries"][2] == 3
    assert v["events"] == [{"t_s": 2.0, "kind": "add_brokers"}, {"t_s": 2.5, "kind": "move"}]
    theirs = balance_series(pd.read_csv(io.StringIO(CSV), dtype={"live_brokers": str})).tolist()
    assert len(theirs) == len(v["balance"])
    for ours, expected in zip(v["balance"], theirs, strict=True):
        assert (ours is None and math.isnan(expected)) or abs(ours - expected) < 1e-3, (v["balance"], theirs)


def test_the_run_dir_is_read_again_only_when_it_changed(tmp_path) -> None:
    d = RunDir(str(tmp_path))
    assert d.read() is None
    (tmp_path / "timeseries.csv").write_text(CSV.split("2,200")[0], encoding="utf-8")
    first = d.read()
    assert first is not None and first["series"]["t_s"] == [0, 1] and first["events"] == []
    assert d.read() is first
    (tmp_path / "timeseries.csv").write_text(CSV, encoding="utf-8")
    (tmp_path / "events.json").write_text(json.dumps([{"t_s": 2, "kind": "remove_broker"}]), encoding="utf-8")
    stamp = os.stat(tmp_path / "timeseries.csv").st_mtime + 1
    os.utime(tmp_path / "timeseries.csv", (stamp, stamp))
    second = d.read()
    assert second is not None and second["series"]["t_s"] == [0, 1, 2, 3, 4] and second["name"] == tmp_path.name
    assert second["events"] == [{"t_s": 2.0, "kind": "remove_broker"}]


def test_an_experiment_followed_by_the_console_writes_what_the_console_reads(tmp_path) -> None:
    from tools.autoscale.runner import Experiment
    from tools.autoscale.scenario import load_scenario

    exp = Experiment(load_scenario(None), tmp_path, on_console=lambda _url: None)
    for t in (0.2, 1.3, 1.4):
        exp.rec.offered(t)
        exp.rec.acked(t, 1, 4.0)
    exp.rec.gauge(1.0, "live_brokers", [1, 2])
    exp.rec.event(1.5, "add_brokers", brokers=[3])
    exp._write_live()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["events.json", "timeseries.csv"]
    v = RunDir(str(tmp_path)).read()
    assert v is not None and v["series"]["t_s"] == [0, 1] and v["series"]["achieved_rps"] == [1, 2]
    assert v["per_broker"]["1"] == [1, 2] and v["events"] == [{"t_s": 1.5, "kind": "add_brokers"}]
