"""What a user sees when a tool fails or is asked for help: one line, Kafka's error name, no traceback."""
from __future__ import annotations

import os
import subprocess
import sys
import types

import pytest

from metadata_quorum.kernel.errors import ErrorCode, FerryError
from tools import cli
from tools.cluster import ROOT
from tools.demo import Outcome, verdict
from tools.proc import free_ports
from tools.reassign_cmd import throttle_lines

TOOLS = sorted(set(cli.COMMANDS) - {"perf", "rebalance", "autoscale"})  # these import Spark/plots on --help


@pytest.mark.parametrize("name", TOOLS)
def test_every_command_has_help(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main([name, "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: ferry {name}")


def test_ferry_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--help"]) == 0
    out = capsys.readouterr().out
    assert all(f"  {name}" in out for name in cli.COMMANDS)
    assert cli.main(["nope"]) == 2


def _fake_tool(monkeypatch: pytest.MonkeyPatch, exc: BaseException) -> None:
    def main(_argv: list[str]) -> int:
        raise exc
    module = types.ModuleType("fake_tool")
    module.main = main  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "fake_tool", module)
    monkeypatch.setitem(cli.COMMANDS, "fake", ("fake_tool", "a tool that fails"))


@pytest.mark.parametrize("exc, code, expected", [
    (FerryError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "Topic t not found."), 1,
     "Error: Topic t not found. (UNKNOWN_TOPIC_OR_PARTITION)"),
    (ConnectionRefusedError(111, "Connection refused"), 1, "(NETWORK_EXCEPTION)"),
    (TimeoutError("no answer"), 1, "Error: timed out: no answer (REQUEST_TIMED_OUT)"),
    (ValueError("boom"), 1, "Error: ValueError: boom (UNKNOWN_SERVER_ERROR)"),
    (KeyboardInterrupt(), 130, "Interrupted"),
])
def test_a_failing_tool_prints_one_line_and_no_traceback(monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str],
                                                         exc: BaseException, code: int, expected: str) -> None:
    monkeypatch.delenv("FERRY_DEBUG", raising=False)
    _fake_tool(monkeypatch, exc)
    assert cli.main(["fake"]) == code
    err = capsys.readouterr().err
    assert expected in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_throttle_is_accepted_and_says_why_it_sets_nothing() -> None:
    assert throttle_lines(-1, -1) == []
    (line,) = throttle_lines(1_000_000, -1)
    assert line.startswith("The inter-broker throttle limit was not set (1000000 B/s requested): ")
    assert "storage=s3" in line and "copying" in line
    both = throttle_lines(10, 20)
    assert len(both) == 2 and both[1].startswith("The replica-alter-dir throttle limit was not set (20 B/s requested)")


def test_demo_verdict_is_one_line_ok_or_fail() -> None:
    ok = verdict(True, Outcome(10, 500, True, 120.0, 200.0), [], 20.0)
    assert ok.startswith("[bold green]OK[/]: 10 moves") and "p50 120 ms" in ok and "\n" not in ok
    fail = verdict(False, Outcome(3, 0, False, problem="only 3 of 10 moves completed"), [4242], 20.0)
    assert fail.startswith("[bold red]FAIL[/]: only 3 of 10 moves completed") and "4242" in fail
    leak = verdict(True, Outcome(10, 500, True, 1.0, 2.0), [99], 1.0)
    assert leak.startswith("[bold red]FAIL[/]: processes still running: 99")


UNREACHABLE = [
    ["topics", "--list"],
    ["metadata-quorum", "describe", "--status"],
    ["reassign-partitions", "--list"],
    ["leader-election", "--election-type", "preferred", "--all-topic-partitions"],
    ["log-dirs", "--describe"],
    ["produce", "--topic", "t"],
    ["consume", "--topic", "t"],
]


@pytest.mark.integration
@pytest.mark.parametrize("args", UNREACHABLE, ids=[a[0] for a in UNREACHABLE])
def test_no_broker_reachable_is_one_clear_line(args: list[str]) -> None:
    (port,) = free_ports(1)  # nothing listens there
    where = ["--bootstrap-server", f"127.0.0.1:{port}"]
    argv = args[:1] + where + args[1:]
    proc = subprocess.run([sys.executable, "-m", "tools.cli", *argv], capture_output=True, text=True, cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=ROOT), timeout=60, input="x\n")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "LEADER_NOT_AVAILABLE" in lines[0] and f"127.0.0.1:{port}" in lines[0]
    assert "Traceback" not in proc.stderr and "Unclosed" not in proc.stderr
