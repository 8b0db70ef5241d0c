"""`ferry metadata-quorum` and `ferry topics` against three real controller processes."""
from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest

from metadata_quorum.client import ControllerClient
from tools import metadata_quorum_cmd, topics_cmd
from tools.proc import LOOPBACK, Quorum, free_ports

pytestmark = pytest.mark.integration


def run(module: Any, argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = module.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def broker(shared_quorum: Quorum) -> int:
    """One registered, unfenced broker, so that topics can be placed."""

    async def register() -> int:
        async with ControllerClient(shared_quorum.bootstrap) as client:
            reg = await client.write_with_offset("register_broker", {
                "broker_id": 1, "incarnation_id": "cli-test", "endpoints": ["http://127.0.0.1:1"],
                "log_dirs": [{"dir_id": "dir-a", "path": "/tmp/ferry-cli-a"}]})
            hb = await client.write("broker_heartbeat", {"broker_id": 1, "broker_epoch": reg["reply"]["broker_epoch"],
                                                         "metadata_offset": reg["offset"]})
            assert hb["is_fenced"] is False
            return int(reg["reply"]["broker_epoch"])

    return asyncio.run(register())


def keep_alive(quorum: Quorum, broker_epoch: int) -> None:
    async def beat() -> None:
        async with ControllerClient(quorum.bootstrap) as client:
            await client.write("broker_heartbeat", {"broker_id": 1, "broker_epoch": broker_epoch,
                                                    "metadata_offset": 1 << 40})
    asyncio.run(beat())


def test_describe_status_prints_kafkas_fields(shared_quorum: Quorum, capsys: pytest.CaptureFixture[str]) -> None:
    leader = shared_quorum.wait_leader()
    follower = next(n for n in shared_quorum.running() if n != leader)
    code, out, _ = run(metadata_quorum_cmd,
                       ["--bootstrap-controller", shared_quorum.peers[follower].http, "describe", "--status"], capsys)
    assert code == 0
    fields = dict(re.split(r":\s+", line, maxsplit=1) for line in out.strip().splitlines())
    assert list(fields) == ["ClusterId", "LeaderId", "LeaderEpoch", "HighWatermark", "MaxFollowerLag",
                            "MaxFollowerLagTimeMs", "CurrentVoters", "CurrentObservers"]
    assert fields["ClusterId"] == "ferry-local"
    assert int(fields["LeaderId"]) == leader
    assert int(fields["LeaderEpoch"]) >= 1 and int(fields["HighWatermark"]) >= 1
    assert [v for v in re.findall(r'"id": (\d+)', fields["CurrentVoters"])] == ["1", "2", "3"]


def test_describe_replication_prints_kafkas_table(shared_quorum: Quorum, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(metadata_quorum_cmd, ["--bootstrap-controller", ",".join(shared_quorum.bootstrap),
                                             "describe", "--replication"], capsys)
    assert code == 0
    header, *rows = out.strip().splitlines()
    assert header.split() == ["NodeId", "DirectoryId", "LogEndOffset", "Lag", "LastFetchTimestamp",
                              "LastCaughtUpTimestamp", "Status"]
    statuses = sorted(r.split()[-1] for r in rows[:3])
    assert statuses == ["Follower", "Follower", "Leader"]
    code, out, _ = run(metadata_quorum_cmd, ["--bootstrap-controller", shared_quorum.bootstrap[0],
                                             "describe", "--replication", "--human-readable"], capsys)
    assert code == 0 and "ms ago" in out


def test_unreachable_controller_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    (port,) = free_ports(1)
    code, _, err = run(metadata_quorum_cmd, ["--bootstrap-controller", f"{LOOPBACK}:{port}", "--timeout-ms", "300",
                                             "describe", "--status"], capsys)
    assert code == 1 and "REQUEST_TIMED_OUT" in err


def test_topics_create_list_describe_delete(shared_quorum: Quorum, broker: int,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    boot = ["--bootstrap-controller", shared_quorum.bootstrap[1]]
    keep_alive(shared_quorum, broker)
    code, out, err = run(topics_cmd, boot + ["--create", "--topic", "orders", "--partitions", "3",
                                             "--replication-factor", "1", "--config", "retention.ms=1000"], capsys)
    assert (code, out.strip()) == (0, "Created topic orders."), err
    code, out, _ = run(topics_cmd, boot + ["--create", "--topic", "audit", "--storage", "local"], capsys)
    assert code == 0
    code, out, _ = run(topics_cmd, boot + ["--list"], capsys)
    assert out.split() == ["audit", "orders"]
    code, out, _ = run(topics_cmd, boot + ["--describe", "--topic", "orders"], capsys)
    header, *parts = out.rstrip("\n").splitlines()
    assert header.startswith("Topic: orders\tTopicId: ")
    assert "\tPartitionCount: 3\tReplicationFactor: 1\tConfigs: retention.ms=1000\tStorage: s3" in header
    assert [p.split("\t")[2] for p in parts] == ["Partition: 0", "Partition: 1", "Partition: 2"]
    assert all("\tLeader: 1\tReplicas: 1\tIsr: 1" in p for p in parts)
    code, out, _ = run(topics_cmd, boot + ["--delete", "--topic", "orders"], capsys)
    assert code == 0
    code, out, _ = run(topics_cmd, boot + ["--list"], capsys)
    assert out.split() == ["audit"]


@pytest.mark.parametrize("args, error", [
    (["--create", "--topic", "bad name!"], "INVALID_TOPIC_EXCEPTION"),
    (["--create", "--topic", "zero", "--partitions", "0"], "INVALID_PARTITIONS"),
    (["--create", "--topic", "rf", "--replication-factor", "3", "--storage", "local"], "INVALID_REPLICATION_FACTOR"),
    (["--create", "--topic", "cfg", "--config", "novalue"], "INVALID_CONFIG"),
    (["--create", "--topic", "ra", "--replica-assignment", "1:9"], "INVALID_REPLICA_ASSIGNMENT"),
    (["--create", "--topic", "dup"], "TOPIC_ALREADY_EXISTS"),
    (["--delete", "--topic", "missing"], "UNKNOWN_TOPIC_OR_PARTITION"),
    (["--describe", "--topic", "missing"], "UNKNOWN_TOPIC_OR_PARTITION"),
])
def test_topics_bad_input_fails_clearly_and_changes_nothing(
        shared_quorum: Quorum, broker: int, capsys: pytest.CaptureFixture[str], args: list[str], error: str) -> None:
    boot = ["--bootstrap-controller", shared_quorum.bootstrap[0]]
    keep_alive(shared_quorum, broker)
    run(topics_cmd, boot + ["--create", "--topic", "dup", "--if-not-exists"], capsys)
    before = shared_quorum.health(shared_quorum.wait_leader())["high_watermark"]  # type: ignore[index]
    _, listed_before, _ = run(topics_cmd, boot + ["--list"], capsys)
    code, out, err = run(topics_cmd, boot + args, capsys)
    assert code == 1 and out == ""
    assert err.startswith("Error while executing topic command : ")
    assert f"ERROR {error}: " in err
    _, listed_after, _ = run(topics_cmd, boot + ["--list"], capsys)
    assert listed_after == listed_before
    assert shared_quorum.health(shared_quorum.wait_leader())["high_watermark"] == before  # type: ignore[index]


def test_ferry_command_line_dispatches_to_the_tools(shared_quorum: Quorum) -> None:
    """The same tools through `python -m tools.cli`, as a user runs them."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "tools.cli", "metadata-quorum", "--bootstrap-controller",
                          shared_quorum.bootstrap[2], "describe", "--status"],
                         capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0].startswith("ClusterId:")
    bad = subprocess.run([sys.executable, "-m", "tools.cli", "topics", "--bootstrap-controller",
                          shared_quorum.bootstrap[0], "--create", "--topic", "..", "--partitions", "1"],
                         capture_output=True, text=True, timeout=60, check=False)
    assert bad.returncode == 1 and "INVALID_TOPIC_EXCEPTION" in bad.stderr
