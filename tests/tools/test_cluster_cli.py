"""`ferry cluster` without processes: the lock, the refusal, the summary and what a fresh `up` removes."""
from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tools import cluster


def test_up_refuses_while_another_up_holds_the_state_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    with open(state_dir / cluster.LOCK_FILE, "a+", encoding="utf-8") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        code = cluster.main(["up", "--state-dir", str(state_dir)])
    err = capsys.readouterr().err
    assert code == 1 and "another `ferry cluster up` is starting a cluster" in err
    assert len(err.strip().splitlines()) == 1
    assert sorted(os.listdir(state_dir)) == [cluster.LOCK_FILE]  # nothing started, nothing written


def test_up_refuses_while_a_recorded_process_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A live Ferry process recorded in cluster.json (here a sleeper that names tools.cli) blocks `up`."""
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", "tools.cli"],
                               start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while not cluster._is_ferry_process(sleeper.pid) and time.monotonic() < deadline:
            time.sleep(0.01)  # its command line appears once the interpreter has started
        (state_dir / cluster.STATE_FILE).write_text(json.dumps(
            {"status": "running", "state_dir": str(state_dir), "s3": {"pid": None},
             "controllers": [], "brokers": [{"id": 1, "pid": sleeper.pid}]}))
        assert cluster.running_processes(str(state_dir)) == ["broker 1"]
        code = cluster.main(["up", "--state-dir", str(state_dir)])
        err = capsys.readouterr().err
        assert code == 1 and "a cluster is already running" in err and "broker 1" in err
        assert (state_dir / cluster.STATE_FILE).exists()
        assert cluster.main(["down", "--state-dir", str(state_dir)]) == 0
        assert sleeper.wait(10) != 0  # stopped by down (its group got SIGTERM)
        assert not (state_dir / cluster.STATE_FILE).exists()
    finally:
        if sleeper.poll() is None:
            sleeper.kill()
            sleeper.wait(10)


def test_down_and_status_without_state_are_one_line_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for action in ("down", "status"):
        assert cluster.main([action, "--state-dir", str(tmp_path)]) == 1
        err = capsys.readouterr().err
        assert err.startswith("Error: no cluster state in") and len(err.strip().splitlines()) == 1


def test_a_dead_pid_in_the_state_file_is_not_a_running_cluster(tmp_path: Path) -> None:
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    done.wait(10)
    (tmp_path / cluster.STATE_FILE).write_text(json.dumps({"brokers": [{"id": 1, "pid": done.pid}], "controllers": []}))
    assert cluster.running_processes(str(tmp_path)) == []


def test_fresh_up_removes_only_what_a_cluster_created(tmp_path: Path) -> None:
    for d in ("controllers/data", "wal/broker-1", "broker-1/d0", "mine"):
        (tmp_path / d).mkdir(parents=True)
    for f in ("s3.log", "broker-1.json", "broker-1.log", "notes.txt", cluster.LOCK_FILE):
        (tmp_path / f).write_text("x")
    assert cluster._remove_previous_data(str(tmp_path)) is True
    assert sorted(os.listdir(tmp_path)) == sorted([cluster.LOCK_FILE, "mine", "notes.txt"])
    assert cluster._remove_previous_data(str(tmp_path)) is False


def test_summary_says_where_things_run_and_how_to_stop_them() -> None:
    state = {"state_dir": "/s", "s3": {"endpoint_url": "http://127.0.0.1:9", "pid": 5, "log": "/s/s3.log"},
             "controllers": [{"id": 1, "url": "http://127.0.0.1:10", "pid": 6, "log": "/s/c1.log"}],
             "brokers": [{"id": 1, "url": "http://127.0.0.1:11", "pid": 7, "log": "/s/b1.log"}],
             "bootstrap_server": "127.0.0.1:11", "bootstrap_controller": "127.0.0.1:10"}
    text = cluster.summary(state, 3.0)
    assert "--bootstrap-server 127.0.0.1:11" in text and "--bootstrap-controller 127.0.0.1:10" in text
    assert "/s/b1.log" in text and "pid 7" in text
    assert text.splitlines()[-1] == "Stop it with: ferry cluster down --state-dir /s"
    assert "console" not in text
    state["console"] = {"url": "http://127.0.0.1:12/", "pid": 8, "log": "/s/console.log"}
    text = cluster.summary(state, 3.0)
    assert "console       http://127.0.0.1:12/" in text and "pid 8" in text
    # `down` stops the console with the rest, after the brokers
    from tools.cluster_procs import state_pids

    assert state_pids(state) == [("broker 1", 7), ("controller 1", 6), ("s3", 5), ("console", 8)]
    state["balancer"] = {"metrics_url": "http://127.0.0.1:13/metrics", "pid": 9, "log": "/s/balancer.log",
                         "dry_run": False}
    text = cluster.summary(state, 3.0)
    assert "balancer      http://127.0.0.1:13/metrics" in text and "--no-balancer" in text
    assert state_pids(state)[-1] == ("balancer", 9)


def test_down_finds_a_process_that_logs_to_the_state_dir_but_was_not_recorded(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`up` killed between spawning the embedded S3 and recording it: `down` still stops it."""
    log_path = tmp_path / "s3.log"
    with open(log_path, "ab") as log:
        stray = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", "tools.cli"],
                                 stdout=log, stderr=log, start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while not cluster._is_ferry_process(stray.pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert cluster.running_processes(str(tmp_path)) == [f"pid {stray.pid}"]
        assert cluster.main(["up", "--state-dir", str(tmp_path)]) == 1  # refused: something still runs
        assert "a cluster is already running" in capsys.readouterr().err
        assert cluster.main(["down", "--state-dir", str(tmp_path)]) == 0
        assert stray.wait(10) != 0
        assert cluster.running_processes(str(tmp_path)) == []
    finally:
        if stray.poll() is None:
            stray.kill()
            stray.wait(10)


def test_broker_config_takes_json_values_of_known_settings_only(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert cluster.broker_overrides_of(["authorizer_enabled=true", 'super_users=["User:admin"]',
                                        "num_partitions=4", "cluster_id=c1"]) == {
        "authorizer_enabled": True, "super_users": ["User:admin"], "num_partitions": 4, "cluster_id": "c1"}
    with pytest.raises(ValueError):
        cluster.broker_overrides_of(["authorizer=true"])  # not a broker setting
    assert cluster.main(["up", "--state-dir", str(tmp_path), "--broker-config", "nope=1"]) == 2
    assert "nope=1" in capsys.readouterr().err and not (tmp_path / "cluster.json").exists()
