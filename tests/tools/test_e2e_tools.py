"""The Kafka-compatible tools as real commands against a real cluster.

Bad input: a clear message, a non-zero exit, and the metadata unchanged (compared before/after).
Good input: Kafka's output lines, the move done, its six-step timeline printed by --verify.
"""
from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys

import pytest

from tools.admin import Admin
from tools.client import Producer, TopicPartition
from tools.cluster import ROOT

pytestmark = pytest.mark.integration


def ferry(args: list[str], cluster, stdin: str | None = None, timeout_s: float = 60) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=ROOT)
    return subprocess.run([sys.executable, "-m", "tools.cli", *args], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=timeout_s, input=stdin)


def controller_flag(cluster) -> list[str]:
    return ["--bootstrap-controller", ",".join(u.removeprefix("http://") for u in cluster.controller_bootstrap)]


def server_flag(cluster) -> list[str]:
    return ["--bootstrap-server", ",".join(u.removeprefix("http://") for u in cluster.bootstrap_servers)]


async def snapshot(cluster) -> tuple[object, object]:
    async with Admin(bootstrap_controllers=cluster.controller_bootstrap) as admin:
        topics = await admin.read("describe_topics", {})
        return topics, await admin.list_partition_reassignments()


@pytest.fixture(scope="module")
def topic(shared_cluster):
    async def setup():
        async with Admin(bootstrap_controllers=shared_cluster.controller_bootstrap) as admin:
            await admin.create_topic("tools", 2, assignments={0: [1], 1: [2]})
            for p in (0, 1):
                await admin.wait_for_leader(TopicPartition("tools", p))
    asyncio.run(setup())
    return "tools"


def write(tmp_path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def reassignment(parts: list[dict]) -> str:
    return json.dumps({"version": 1, "partitions": parts})


BAD_INPUTS = [
    ("unknown broker", reassignment([{"topic": "tools", "partition": 0, "replicas": [9]}]), "Unknown broker id 9"),
    ("duplicate replicas", reassignment([{"topic": "tools", "partition": 0, "replicas": [2, 2]}]),
     "Partition replica lists may not contain duplicate entries: tools-0 contains multiple entries for 2"),
    ("log dirs size", reassignment([{"topic": "tools", "partition": 0, "replicas": [2], "log_dirs": ["any", "any"]}]),
     "Size of replicas list [2] is different from size of log dirs list [any, any] for partition tools-0"),
    ("unknown partition", reassignment([{"topic": "tools", "partition": 7, "replicas": [2]}]),
     "Unable to find partition: tools-7"),
    ("unknown topic", reassignment([{"topic": "nope", "partition": 0, "replicas": [2]}]), "Topic nope not found."),
    ("relative log dir", reassignment([{"topic": "tools", "partition": 0, "replicas": [2], "log_dirs": ["d0"]}]),
     "is not an absolute path"),
    ("log dir not on broker", reassignment([{"topic": "tools", "partition": 0, "replicas": [2],
                                            "log_dirs": ["/nonexistent/dir"]}]), "does not exist on broker 2"),
    ("malformed json", '{"version": 1, "partitions": [', "The input string is not a valid JSON"),
]


@pytest.mark.parametrize("name,text,message", BAD_INPUTS, ids=[b[0] for b in BAD_INPUTS])
def test_bad_reassignment_input_changes_nothing(shared_cluster, topic, tmp_path, name, text, message):
    before = asyncio.run(snapshot(shared_cluster))
    path = write(tmp_path, "r.json", text)
    proc = ferry(["reassign-partitions", *controller_flag(shared_cluster), "--execute",
                  "--reassignment-json-file", path], shared_cluster)
    assert proc.returncode != 0
    assert message in proc.stderr, proc.stderr + proc.stdout
    assert "Successfully started" not in proc.stdout
    assert asyncio.run(snapshot(shared_cluster)) == before


def test_execute_verify_list_through_a_broker(shared_cluster, topic, tmp_path):
    d2 = shared_cluster.broker_log_dirs(2)[0]
    path = write(tmp_path, "r.json", reassignment([{"topic": "tools", "partition": 0, "replicas": [2], "log_dirs": [d2]}]))
    proc = ferry(["reassign-partitions", *server_flag(shared_cluster), "--execute", "--reassignment-json-file", path],
                 shared_cluster)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "Current partition replica assignment"
    assert json.loads(lines[2]) == {"version": 1, "partitions": [
        {"topic": "tools", "partition": 0, "replicas": [1], "log_dirs": ["any"]}]}
    assert lines[4] == "Save this to use as the --reassignment-json-file option during rollback"
    assert lines[5] == "Successfully started partition reassignment for tools-0"
    assert lines[6] == f"Successfully started moving log directory to {d2} for replica tools-0 with broker 2 "

    async def wait_moved():
        async with Admin(bootstrap_controllers=shared_cluster.controller_bootstrap) as admin:
            return await admin.wait_for_leader(TopicPartition("tools", 0), 2)
    state = asyncio.run(wait_moved())
    assert state.directories in ([], [None]) or len(state.directories) == 1
    proc = ferry(["reassign-partitions", *server_flag(shared_cluster), "--verify", "--reassignment-json-file", path],
                 shared_cluster)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.splitlines()
    assert out[:2] == ["Status of partition reassignment:", "Reassignment of partition tools-0 is completed."]
    assert "Reassignment of replica tools-0-2 completed successfully." in out, proc.stdout
    assert any(line.startswith("  tools-0 1 -> 2:") and "total" in line for line in out), proc.stdout
    proc = ferry(["reassign-partitions", *server_flag(shared_cluster), "--list"], shared_cluster)
    assert proc.stdout.strip() == "No partition reassignments found."


def test_generate_proposes_only_listed_brokers(shared_cluster, topic, tmp_path):
    path = write(tmp_path, "m.json", json.dumps({"version": 1, "topics": [{"topic": "tools"}]}))
    before = asyncio.run(snapshot(shared_cluster))
    proc = ferry(["reassign-partitions", *controller_flag(shared_cluster), "--generate",
                  "--topics-to-move-json-file", path, "--broker-list", "3"], shared_cluster)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "Current partition replica assignment"
    assert lines[3] == "Proposed partition reassignment configuration"
    assert [p["replicas"] for p in json.loads(lines[4])["partitions"]] == [[3], [3]]
    assert asyncio.run(snapshot(shared_cluster)) == before


def test_leader_election_and_log_dirs(shared_cluster, topic):
    proc = ferry(["leader-election", *controller_flag(shared_cluster), "--election-type", "preferred",
                  "--topic", "tools", "--partition", "1"], shared_cluster)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "Valid replica already elected for partitions tools-1"

    async def produce():
        async with Producer(shared_cluster.bootstrap_servers) as p:
            await p.send_and_wait("tools", b"x" * 1000, partition=1)
    asyncio.run(produce())
    proc = ferry(["log-dirs", *server_flag(shared_cluster), "--describe", "--broker-list", "2", "--topic-list", "tools"],
                 shared_cluster)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "Querying brokers for log directories information"
    assert lines[1] == "Received log directory information from brokers 2"
    body = json.loads(lines[2])
    assert body["version"] == 1 and body["brokers"][0]["broker"] == 2
    parts = {p["partition"]: p for d in body["brokers"][0]["logDirs"] for p in d["partitions"]}
    assert parts["tools-1"]["size"] >= 1000
    proc = ferry(["log-dirs", *server_flag(shared_cluster), "--describe", "--broker-list", "8"], shared_cluster)
    assert proc.returncode != 0 and "The given brokers do not exist from --broker-list: 8" in proc.stderr


def test_console_produce_and_consume(shared_cluster, topic):
    proc = ferry(["produce", *server_flag(shared_cluster), "--topic", "tools", "--partition", "1", "--print-offsets"],
                 shared_cluster, stdin="alpha\nbeta\n")
    assert proc.returncode == 0, proc.stderr
    offsets = [int(line.rsplit("@", 1)[1]) for line in proc.stdout.split()]
    assert len(offsets) == 2 and offsets[1] == offsets[0] + 1
    proc = ferry(["consume", *server_flag(shared_cluster), "--topic", "tools", "--partition", "1",
                  "--offset", str(offsets[0]), "--max-messages", "2", "--property", "print.offset=true"], shared_cluster)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [f"Offset:{offsets[0]}\talpha", f"Offset:{offsets[1]}\tbeta"]
    assert "Processed a total of 2 messages" in proc.stderr


def test_list_verify_and_cancel_a_move_held_open(tmp_path):
    """Hold a move open (old owner frozen, long deadlines), then list, verify and cancel it with the tools."""
    from tools.client import read_all
    from tools.cluster import LocalCluster

    slow = {"session_timeout_ms": 30_000, "reelection_timeout_ms": 30_000}
    c = LocalCluster(str(tmp_path / "held"), broker_overrides={"session_timeout_ms": 30_000},
                     controller_overrides=slow)
    c.start()
    try:
        tp = TopicPartition("held", 0)

        async def setup() -> list[int]:
            async with Admin(bootstrap_controllers=c.controller_bootstrap) as admin:
                await admin.create_topic("held", 1, assignments={0: [1]})
                await admin.wait_for_leader(tp, 1)
            async with Producer(c.bootstrap_servers) as p:
                return [(await p.send_and_wait("held", b"r%d" % i, partition=0)).offset for i in range(5)]
        offsets = asyncio.run(setup())
        path = write(tmp_path, "r.json", reassignment([{"topic": "held", "partition": 0, "replicas": [2]}]))
        c.pause_broker(1)
        try:
            proc = ferry(["reassign-partitions", *controller_flag(c), "--execute", "--reassignment-json-file", path], c)
            assert proc.returncode == 0, proc.stderr
            proc = ferry(["reassign-partitions", *controller_flag(c), "--list"], c)
            assert proc.stdout.splitlines() == ["Current partition reassignments:",
                                                "held-0: replicas: 2. adding: 2. removing: 1."]
            proc = ferry(["reassign-partitions", *controller_flag(c), "--verify", "--reassignment-json-file", path], c)
            assert proc.stdout.splitlines()[:2] == ["Status of partition reassignment:",
                                                    "Reassignment of partition held-0 is still in progress."]
            proc = ferry(["reassign-partitions", *controller_flag(c), "--execute", "--reassignment-json-file", path], c)
            assert proc.returncode != 0 and "Cannot execute because there is an existing partition assignment" in proc.stderr, proc.stdout
            proc = ferry(["reassign-partitions", *controller_flag(c), "--cancel", "--reassignment-json-file", path], c)
            assert proc.returncode == 0, proc.stderr
            assert proc.stdout.splitlines()[0] == "Successfully cancelled partition reassignment for: held-0"
            proc = ferry(["reassign-partitions", *controller_flag(c), "--list"], c)
            # Back on its original replica; until the frozen owner re-opens it the partition has no
            # leader, which the controller may still list (with no replica being added or removed).
            assert proc.stdout.strip() in ("No partition reassignments found.",
                                           "Current partition reassignments:\nheld-0: replicas: 1."), proc.stdout
        finally:
            c.resume_broker(1)

        async def after() -> list[tuple[int, bytes | None]]:
            async with Admin(bootstrap_controllers=c.controller_bootstrap) as admin:
                state = await admin.wait_for_leader(tp, timeout_s=30)
                assert state.replicas == [1] and state.leader == 1
            async with Producer(c.bootstrap_servers) as p:
                await p.send_and_wait("held", b"after", partition=0)
            return [(r.offset, r.value) for r in (await read_all(c.bootstrap_servers, [tp]))[tp]]
        log = asyncio.run(after())
        assert log[:5] == [(o, b"r%d" % i) for i, o in enumerate(offsets)]
        assert log[5:] == [(5, b"after")]
    finally:
        c.stop(graceful=False)


def test_topics_and_metadata_quorum_through_a_broker(shared_cluster):
    """Kafka's tools take --bootstrap-server; Ferry's find the controllers through the broker."""
    boot = server_flag(shared_cluster)
    proc = ferry(["topics", *boot, "--create", "--topic", "via-broker", "--partitions", "2"], shared_cluster)
    assert (proc.returncode, proc.stdout.strip()) == (0, "Created topic via-broker."), proc.stderr
    proc = ferry(["topics", *boot, "--list"], shared_cluster)
    assert "via-broker" in proc.stdout.split()
    proc = ferry(["topics", *boot, "--describe", "--topic", "via-broker"], shared_cluster)
    assert proc.returncode == 0 and proc.stdout.startswith("Topic: via-broker\tTopicId: "), proc.stderr
    assert len(proc.stdout.strip().splitlines()) == 3
    before = asyncio.run(snapshot(shared_cluster))
    proc = ferry(["topics", *boot, "--create", "--topic", "via-broker"], shared_cluster)
    assert proc.returncode == 1 and proc.stderr.strip().splitlines() == [
        "Error while executing topic command : ERROR TOPIC_ALREADY_EXISTS: Topic 'via-broker' already exists."]
    assert asyncio.run(snapshot(shared_cluster)) == before
    proc = ferry(["metadata-quorum", *boot, "describe", "--status"], shared_cluster)
    assert proc.returncode == 0 and proc.stdout.splitlines()[1].startswith("LeaderId:"), proc.stderr


def test_throttle_is_accepted_and_sets_nothing(shared_cluster, topic, tmp_path):
    async def leader() -> int:
        async with Admin(bootstrap_controllers=shared_cluster.controller_bootstrap) as admin:
            return (await admin.wait_for_leader(TopicPartition("tools", 1))).leader
    src = asyncio.run(leader())
    dst = 3 if src != 3 else 1
    path = write(tmp_path, "r.json", reassignment([{"topic": "tools", "partition": 1, "replicas": [dst]}]))
    proc = ferry(["reassign-partitions", *server_flag(shared_cluster), "--execute", "--reassignment-json-file", path,
                  "--throttle", "1000000"], shared_cluster)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[5].startswith("The inter-broker throttle limit was not set (1000000 B/s requested): storage=s3")
    assert lines[6] == "Successfully started partition reassignment for tools-1"

    async def moved() -> None:
        async with Admin(bootstrap_controllers=shared_cluster.controller_bootstrap) as admin:
            await admin.wait_for_leader(TopicPartition("tools", 1), dst)
    asyncio.run(moved())
