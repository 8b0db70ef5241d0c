"""The pure parts of the autoscale harness: scenarios, the recorder, the verdict, the plots."""
from __future__ import annotations

import csv
import json

import pandas as pd
import pytest

from metadata_quorum.kernel.errors import ErrorCode, FerryError
from tools.autoscale import cli
from tools.autoscale.plots import plot_balance, plot_overview
from tools.autoscale.recorder import Recorder, percentile
from tools.autoscale.runner import broker_overrides, live_broker_ids
from tools.autoscale.scenario import DEFAULT_SCENARIO, load_scenario, parse_scenario
from tools.autoscale.summary import balance_series, summarize_run, time_to_balance_s

GOOD = """
name: t
duration_s: 60
cluster: {brokers: 2}
topic: {partitions: 4}
load: {rate_per_s: 100, skew: 1.0}
steps:
  - {at_s: 10, action: set_rate, rate_per_s: 300, ramp_s: 10}
  - {at_s: 20, action: add_brokers, count: 2}
  - {at_s: 25, action: rebalance, window_ms: 4000}
  - {at_s: 40, action: remove_broker, broker: 1}
"""


def test_the_default_scenario_parses_and_fits_in_two_minutes():
    scn = load_scenario(None)
    assert scn.name == "default" and scn.duration_s <= 100
    assert [s.action for s in scn.steps] == ["set_rate", "add_brokers", "rebalance", "set_rate", "remove_broker"]
    assert DEFAULT_SCENARIO.is_file()


def test_the_upload_cap_goes_into_every_brokers_storage_config_only_when_set():
    assert broker_overrides(parse_scenario(GOOD)) == {"metrics_interval_ms": 1_000}
    fresh = parse_scenario(GOOD.replace("cluster: {brokers: 2}", "cluster: {brokers: 2, upload_interval_ms: 500}"))
    assert fresh.upload_interval_ms == 500
    assert broker_overrides(fresh) == {"metrics_interval_ms": 1_000, "storage": {"upload_interval_ms": 500}}


def test_rates_ramps_and_weights():
    scn = parse_scenario(GOOD)
    assert scn.rate_at(0) == 100 and scn.rate_at(9.9) == 100
    assert scn.rate_at(15) == pytest.approx(200) and scn.rate_at(20) == 300 and scn.rate_at(59) == 300
    weights = scn.partition_weights()
    assert sum(weights) == pytest.approx(1.0) and weights[-1] == pytest.approx(2 * weights[0])
    assert scn.steps[3].broker == 1 and scn.steps[3].window_ms == 5_000 and scn.steps[2].balance_band == 0.05


@pytest.mark.parametrize("text, message", [
    ("duration_s: 10\nsteps: [{at_s: 1, action: explode}]", "'steps[0].action' must be one of"),
    ("duration_s: 10\nsteps: [{at_s: 12, action: add_brokers}]", "is not before the end"),
    ("duration_s: 10\nsteps: [{at_s: 5, action: add_brokers}, {at_s: 2, action: rebalance}]", "keep steps in order"),
    ("duration_s: 10\ncluster: {brokers: 1}\nsteps: [{at_s: 1, action: remove_broker, broker: 1}]", "leave no broker"),
    ("duration_s: 10\nload: {rate_per_s: fast}", "'load.rate_per_s' must be a number"),
    ("duration_s: 10\ncolour: blue", "unknown scenario setting 'colour'"),
    ("duration_s: [", "not valid YAML"),
    ("duration_s: 10\nsteps: [{at_s: 1, action: rebalance, balance_band: 2}]",
     "'steps[0].balance_band' must be > 0 and < 1"),
    ("steps: []", "'duration_s' is required"),
    ("duration_s: 10\ncluster: {brokers: 2, wal: s3}", "unknown scenario setting 'cluster.wal'"),
    ("duration_s: 10\ntopic: {partitions: 4, replicas: 3}", "unknown scenario setting 'topic.replicas'"),
    ("duration_s: 10\ncluster: {upload_interval_ms: 0}", "'cluster.upload_interval_ms' must be >= 1"),
    # formerly accepted: a step's unknown key, or a key its action does not take, was ignored
    ("duration_s: 10\nsteps: [{at_s: 1, action: add_brokers, cuont: 2}]", "unknown scenario setting 'steps[0].cuont'"),
    ("duration_s: 10\nsteps: [{at_s: 1, action: set_rate, rate_per_s: 5, count: 2}]",
     "unknown scenario setting 'steps[0].count'"),
    ("duration_s: 10\nsteps: [{at_s: 1, action: add_brokers}, {at_s: 2, action: rebalance, window: 5}]",
     "unknown scenario setting 'steps[1].window'"),
    ("duration_s: 10\nsteps: [{at_s: -1, action: add_brokers}]", "'steps[0].at_s' must be >= 0"),
    ("duration_s: 10\nsteps: [{at_s: 1, action: add_brokers, count: 1.5}]", "'steps[0].count' must be an integer"),
    ("duration_s: 10\nsteps: [{action: add_brokers}]", "'steps[0].at_s' is required"),
    ("duration_s: 10\nsteps: [5]", "'steps[0]' must be a JSON object"),
    ("duration_s: .inf", "'duration_s' must be a finite number"),
    ("duration_s: 10\nname: 7", "'name' must be a string"),
])
def test_bad_scenarios_name_the_field(text, message):
    with pytest.raises(FerryError) as err:
        parse_scenario(text)
    assert err.value.error is ErrorCode.INVALID_CONFIG and message in err.value.message


def test_a_missing_scenario_file_is_a_clear_error(tmp_path):
    with pytest.raises(FerryError) as err:
        load_scenario(tmp_path / "nope.yaml")
    assert "cannot read scenario" in err.value.message


def synthetic_run() -> Recorder:
    """Brokers 1, 2 for 10 s; broker 3 joins at 5 s (live from 6 s) and takes load from 8 s on."""
    rec = Recorder()
    for t in range(14):
        live = [1, 2] if t < 6 else [1, 2, 3]
        rec.gauge(t + 0.1, "live_brokers", live)
        rec.gauge(t + 0.1, "retries_total", 2 * t)
        rec.gauge(t + 0.1, "consumer_lag", 10 - t if t < 10 else 0)
        share = {1: 50, 2: 50} if t < 8 else {1: 34, 2: 33, 3: 33}
        for broker, n in share.items():
            for k in range(n):
                rec.offered(t + k / 200)
                rec.acked(t + k / 200 + 0.001, broker, 5.0 if t < 8 else 50.0 + k)
        rec.consumed(t + 0.5, 100)
    rec.event(5.0, "add_brokers", count=1)
    rec.event(6.0, "brokers_added", brokers=[3])
    rec.event(7.5, "move", partition=0, from_broker=1, to_broker=3, stall_ms=120.0)
    rec.event(7.6, "move", partition=1, from_broker=2, to_broker=3, stall_ms=80.0)
    rec.event(7.9, "rebalance_done", submitted=2, completed=2)
    rec.failed(3.2)
    return rec


def test_recorder_rows_and_csv(tmp_path):
    rec = synthetic_run()
    rows = rec.rows()
    assert len(rows) == 14 and rows[0]["offered_rps"] == 100 and rows[0]["achieved_rps"] == 100
    assert rows[3]["errors"] == 1 and rows[4]["retries"] == 2
    assert rows[2]["p50_ms"] == 5.0 and rows[9]["p99_ms"] == percentile(
        [50.0 + k for n in (34, 33, 33) for k in range(n)], 99) == 82.0
    assert rows[7]["moves"] == 2 and rows[6]["brokers"] == 3 and rows[5]["brokers"] == 2
    assert rows[7]["broker_3_rps"] == 0 and rows[8]["broker_3_rps"] == 33
    assert rows[7]["max_over_mean"] == pytest.approx(50 / (100 / 3), rel=1e-3)
    path = rec.write_csv(tmp_path / "ts.csv")
    with path.open() as f:
        read = list(csv.DictReader(f))
    assert len(read) == 14 and read[8]["live_brokers"] == "1 2 3" and read[8]["broker_1_rps"] == "34"
    events = json.loads(rec.write_events(tmp_path / "ev.json").read_text())
    assert [e["kind"] for e in events][:2] == ["add_brokers", "brokers_added"]


def test_percentile_is_nearest_rank():
    assert percentile([3.0, 1.0, 2.0, 4.0], 50) == 2.0 and percentile([1.0] * 99 + [100.0], 99) == 1.0
    assert percentile([1.0] * 98 + [100.0, 100.0], 99) == 100.0


def frame_of(rec: Recorder, tmp_path) -> pd.DataFrame:
    return pd.read_csv(rec.write_csv(tmp_path / "ts.csv"), dtype={"live_brokers": str})


def test_time_to_balance_waits_for_the_added_brokers(tmp_path):
    frame = frame_of(synthetic_run(), tmp_path)
    ratios = balance_series(frame)
    assert ratios[4] == pytest.approx(1.0) and ratios[7] > 1.1
    # balanced with brokers 1, 2 before broker 3 is live: that does not count
    assert time_to_balance_s(frame, 5.0, added=frozenset({3})) == pytest.approx(5.0)  # 3 s windows from t=8
    assert time_to_balance_s(frame, 5.0, until_s=11, added=frozenset({3})) is None


def test_verdict(tmp_path):
    rec = synthetic_run()
    frame = frame_of(rec, tmp_path)
    events = [{"t_s": e.t_s, "kind": e.kind, **e.detail} for e in rec.events]
    events.append({"t_s": 1.0, "kind": "step_done"})
    events.append({"t_s": 13.5, "kind": "final_state", "live_brokers": [1, 2, 3]})
    good = summarize_run(frame, events, {"acknowledged": 1400, "lost": 0, "duplicated": 0}, first_step_s=5.0, steps=1)
    assert good["verdict"] == "pass" and good["time_to_balance_s"] == pytest.approx(5.0)
    assert good["moves"] == 2 and good["stall_per_moved_partition_ms"] == {
        "p50": 100.0, "p99": 119.6, "max": 120.0, "measured": 2, "parts": {}, "with_parts": 0}
    assert good["p99_steady"]["mean_ms"] == 5.0 and good["p99_during_moves"]["seconds"] == 2
    # move seconds 7 (p99 5 ms) and 8 (p99 82 ms: rank 99 of the 100 latencies 50..83)
    assert good["p99_during_moves"]["mean_ms"] == 43.5 and good["p99_during_moves_over_steady"] == 8.7
    assert good["records"]["offered"] == 1400 and good["records"]["failed"] == 1
    lost = summarize_run(frame, events, {"acknowledged": 1400, "lost": 3, "duplicated": 0}, first_step_s=5.0, steps=1)
    assert lost["verdict"] == "fail" and lost["checks"]["zero_loss"] is False
    unfinished = summarize_run(frame, events, {"lost": 0, "duplicated": 0}, first_step_s=5.0, steps=2)
    assert unfinished["verdict"] == "fail" and unfinished["checks"]["steps_completed"] is False


def test_verdict_fails_when_the_series_ends_before_a_removal_completed(tmp_path):
    """A removed broker still live in the last row, or no state recorded after the last step, fails."""
    rec = synthetic_run()
    frame = frame_of(rec, tmp_path)
    events = [{"t_s": e.t_s, "kind": e.kind, **e.detail} for e in rec.events]
    events += [{"t_s": 12.5, "kind": "remove_broker", "broker": 1},
               {"t_s": 13.0, "kind": "broker_removed", "broker": 1, "partitions_left": 0},
               {"t_s": 13.0, "kind": "step_done"}]
    ok = {"acknowledged": 1400, "lost": 0, "duplicated": 0}
    still_live = summarize_run(frame, events + [{"t_s": 13.5, "kind": "final_state"}], ok, 5.0, steps=1)
    assert still_live["verdict"] == "fail" and still_live["checks"]["removed_brokers_gone"] is False
    assert still_live["final_live_brokers"] == [1, 2, 3] and still_live["checks"]["final_state_recorded"]
    no_end = summarize_run(frame, events, ok, 5.0, steps=1)
    assert no_end["verdict"] == "fail" and no_end["checks"]["final_state_recorded"] is False
    stale_end = summarize_run(frame, events + [{"t_s": 12.8, "kind": "final_state"}], ok, 5.0, steps=1)
    assert stale_end["checks"]["final_state_recorded"] is False  # sampled before the last step ended
    rec.gauge(13.9, "live_brokers", [2, 3])  # the removal reached the last row
    gone = summarize_run(frame_of(rec, tmp_path), events + [{"t_s": 13.9, "kind": "final_state"}], ok, 5.0, steps=1)
    assert gone["verdict"] == "pass" and gone["final_live_brokers"] == [2, 3]
    timed_out = events + [{"t_s": 13.9, "kind": "final_state"}, {"t_s": 13.0, "kind": "step_timed_out", "step": 1}]
    assert summarize_run(frame_of(rec, tmp_path), timed_out, ok, 5.0, steps=2)["checks"]["steps_completed"] is False


def test_live_brokers_exclude_fenced_and_shutting_down_ones():
    reply = {"brokers": [{"broker_id": 1, "fenced": False, "in_controlled_shutdown": True},
                         {"broker_id": 2, "fenced": False, "in_controlled_shutdown": False},
                         {"broker_id": 3, "fenced": True, "in_controlled_shutdown": False},
                         {"broker_id": 4}], "metadata_offset": 12}
    assert live_broker_ids(reply) == [2, 4] and live_broker_ids({"brokers": []}) == []


def test_plots_are_written(tmp_path):
    rec = synthetic_run()
    frame = frame_of(rec, tmp_path)
    events = [{"t_s": e.t_s, "kind": e.kind, **e.detail} for e in rec.events]
    for plot in (plot_overview, plot_balance):
        path = plot(frame, events, tmp_path / f"{plot.__name__}.png", "test")
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000


def test_bad_scenario_exits_2_with_the_field_named(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("duration_s: 10\nsteps: [{at_s: 1, action: explode}]\n")
    assert cli.main(["run", str(bad), "--out", str(tmp_path / "o"), "--no-progress"]) == 2
    assert "INVALID_CONFIG: scenario setting 'steps[0].action' must be one of" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_wal_mode_reaches_the_cluster(tmp_path, monkeypatch, capsys):
    """`--wal s3` and `--s3-profile` are passed to the local cluster the experiment starts; anything
    else is refused."""
    from tools.autoscale import runner

    seen: dict[str, object] = {}

    class Stop(Exception):
        pass

    class FakeCluster:
        def __init__(self, state_dir: str, **kw: object) -> None:
            seen.update(kw)

        def start(self) -> None:
            raise Stop

        def stop(self, graceful: bool = True) -> None:
            pass

    monkeypatch.setattr(runner, "LocalCluster", FakeCluster)
    scenario = tmp_path / "t.yaml"
    scenario.write_text(GOOD)
    with pytest.raises(Stop):
        cli.main(["run", str(scenario), "--out", str(tmp_path / "out"), "--no-progress", "--wal", "s3"])
    assert seen["wal_mode"] == "s3"
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["run", "--wal", "nfs"])
    assert "invalid choice" in capsys.readouterr().err
    assert cli.build_parser().parse_args(["compare", "a.yaml", "b.yaml", "--wal", "s3"]).wal == "s3"
    assert seen["s3_profile"] == "local"
    with pytest.raises(Stop):
        cli.main(["run", str(scenario), "--out", str(tmp_path / "out2"), "--no-progress", "--s3-profile",
                  "aws-standard"])
    assert seen["s3_profile"] == "aws-standard"
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["compare", "a.yaml", "b.yaml", "--s3-profile", "fast"])
    assert "--s3-profile" in capsys.readouterr().err
    assert cli.build_parser().parse_args(["compare", "a.yaml", "b.yaml", "--s3-profile", "latency:20,80"]).s3_profile \
        == "latency:20,80"
