"""`ferry reassign-partitions` / `leader-election` / `log-dirs` against an in-process fake controller.

Checks Kafka's JSON formats, output lines and validation messages, and that bad input changes
nothing (no write reaches the controller). The real-process versions live in test_e2e_*.py.
"""
from __future__ import annotations

import json
import random
from typing import Any

import pytest

from metadata_quorum.kernel.errors import ErrorCode, FerryError
from tools import reassign_cmd as rc
from tools.admin import Admin
from tools.client import TopicPartition
from tools.leader_election_cmd import parse_election_json, result_lines


class FakeController:
    """Topic t: p0 on [1], p1 on [2]; brokers 1..3 with one log dir each."""

    def __init__(self) -> None:
        self.parts = {0: [1], 1: [2]}
        self.reassigning: dict[int, list[int]] = {}
        self.writes: list[tuple[str, dict[str, Any]]] = []

    async def read(self, op: str, args: dict[str, Any], leader: bool = True) -> Any:
        if op == "describe_cluster":
            return {"brokers": [{"broker_id": b, "endpoints": [f"http://127.0.0.1:{9000 + b}"],
                                 "log_dirs": [{"dir_id": f"d{b}", "path": f"/data/b{b}"}], "fenced": False}
                                for b in (1, 2, 3)]}
        if op == "describe_topics":
            names = args.get("names") or ["t"]
            return {"topics": [
                {"name": n, "topic_id": "x", "partitions": [
                    {"partition": p, "replicas": r, "isr": r, "leader": r[0], "leader_epoch": 0}
                    for p, r in sorted(self.parts.items())]} if n == "t" else
                {"name": n, "error": "UNKNOWN_TOPIC_OR_PARTITION", "message": f"unknown topic {n}"}
                for n in names]}
        if op == "list_partition_reassignments":
            return {"reassignments": [{"topic": "t", "partition": p, "replicas": r, "adding_replicas": r,
                                       "removing_replicas": self.parts[p]} for p, r in self.reassigning.items()]}
        raise AssertionError(op)

    async def write(self, op: str, args: dict[str, Any]) -> Any:
        self.writes.append((op, args))
        if op == "alter_partition_reassignments":
            out = []
            for r in args["reassignments"]:
                if r["replicas"] is None:
                    self.reassigning.pop(r["partition"], None)
                else:
                    self.parts[r["partition"]] = r["replicas"]
                out.append({"topic": r["topic"], "partition": r["partition"]})
            return {"responses": out}
        if op == "elect_leaders":
            return {"results": [{"topic": "t", "partition": 0},
                                {"topic": "t", "partition": 1, "error": "ELECTION_NOT_NEEDED", "message": ""}]}
        raise AssertionError(op)


async def run_tool(fake: FakeController, argv_action: dict[str, Any], files: dict[str, str], tmp_path,
                   timeout_ms: int = 10_000) -> tuple[int, str]:
    paths = {}
    for name, text in files.items():
        p = tmp_path / name
        p.write_text(text)
        paths[name] = str(p)
    args = rc.build_parser().parse_args(["--bootstrap-controller", "127.0.0.1:1"] + [
        a for k, v in argv_action.items() for a in ([k] if v is True else [k, paths.get(v, v)])])
    out: list[str] = []
    admin = Admin(bootstrap_controllers="127.0.0.1:1", controller=fake)
    await admin.start()
    try:
        action = next(a for a in ("generate", "execute", "verify", "cancel", "list") if getattr(args, a))
        if action == "execute":
            text = open(args.reassignment_json_file).read()
            await rc.run_execute(admin, text, args.additional, out, timeout_ms)
        elif action == "verify":
            await rc.run_verify(admin, open(args.reassignment_json_file).read(), out)
        elif action == "generate":
            await rc.run_generate(admin, open(args.topics_to_move_json_file).read(), args.broker_list, out)
        elif action == "cancel":
            await rc.run_cancel(admin, open(args.reassignment_json_file).read(), out)
        else:
            await rc.run_list(admin, out)
        return 0, "\n".join(out)
    except rc.CommandError as exc:
        return 1, str(exc)
    finally:
        await admin.close()


def move(parts: list[dict[str, Any]]) -> str:
    return json.dumps({"version": 1, "partitions": parts})


async def test_execute_prints_rollback_json_and_starts(tmp_path):
    fake = FakeController()
    code, out = await run_tool(fake, {"--execute": True, "--reassignment-json-file": "r.json"},
                               {"r.json": move([{"topic": "t", "partition": 0, "replicas": [3]}])}, tmp_path)
    assert code == 0, out
    assert out.splitlines() == [
        "Current partition replica assignment", "",
        '{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1],"log_dirs":["any"]}]}', "",
        "Save this to use as the --reassignment-json-file option during rollback",
        "Successfully started partition reassignment for t-0"]
    assert fake.parts[0] == [3]


@pytest.mark.parametrize("parts,message", [
    ([{"topic": "t", "partition": 0, "replicas": [7]}], "Unknown broker id 7"),
    ([{"topic": "t", "partition": 0, "replicas": [1, 1, 2]}],
     "Partition replica lists may not contain duplicate entries: t-0 contains multiple entries for 1"),
    ([{"topic": "t", "partition": 0, "replicas": [1, 2], "log_dirs": ["any"]}],
     "Size of replicas list [1, 2] is different from size of log dirs list [any] for partition t-0"),
    ([{"topic": "t", "partition": 5, "replicas": [1]}], "Unable to find partition: t-5"),
    ([{"topic": "nope", "partition": 0, "replicas": [1]}], "Topic nope not found."),
    ([{"topic": "t", "partition": 0, "replicas": [2], "log_dirs": ["data/b2"]}], "is not an absolute path"),
    ([{"topic": "t", "partition": 0, "replicas": [2], "log_dirs": ["/data/b9"]}], "does not exist on broker 2"),
    ([], "Partition reassignment list cannot be empty"),
    ([{"topic": "t", "partition": 0, "replicas": []}], "Partition replica list cannot be empty"),
    ([{"topic": "t", "partition": 0, "replicas": [2]}, {"topic": "t", "partition": 0, "replicas": [3]}],
     "Partition reassignment contains duplicate topic partitions: t-0"),
])
async def test_bad_reassignments_change_nothing(tmp_path, parts, message):
    fake = FakeController()
    before = dict(fake.parts)
    code, out = await run_tool(fake, {"--execute": True, "--reassignment-json-file": "r.json"},
                               {"r.json": move(parts)}, tmp_path)
    assert code == 1
    assert message in out
    assert fake.writes == [] and fake.parts == before


@pytest.mark.parametrize("text,message", [
    ("{not json", "The input string is not a valid JSON"),
    ('{"version": 2, "partitions": []}', "Not supported version field value 2"),
    ('{"partitions": [{"topic": "t", "replicas": [1]}]}', "No such field exists: `partition`"),
])
async def test_malformed_files_are_refused(tmp_path, text, message):
    fake = FakeController()
    code, out = await run_tool(fake, {"--execute": True, "--reassignment-json-file": "r.json"}, {"r.json": text}, tmp_path)
    assert code == 1 and message in out and fake.writes == []


async def test_execute_refuses_while_another_reassignment_runs_unless_additional(tmp_path):
    fake = FakeController()
    fake.reassigning = {1: [3]}
    files = {"r.json": move([{"topic": "t", "partition": 0, "replicas": [3]}])}
    code, out = await run_tool(fake, {"--execute": True, "--reassignment-json-file": "r.json"}, files, tmp_path)
    assert code == 1 and out.startswith("Cannot execute because there is an existing partition assignment.")
    assert fake.writes == []
    code, out = await run_tool(fake, {"--execute": True, "--additional": True, "--reassignment-json-file": "r.json"},
                               files, tmp_path)
    assert code == 0 and fake.parts[0] == [3]


async def test_log_dirs_are_passed_to_the_controller(tmp_path):
    fake = FakeController()
    # No broker answers AlterReplicaLogDirs here: the reassignment is started, the log-dir move times out.
    code, out = await run_tool(fake, {"--execute": True, "--reassignment-json-file": "r.json"},
                               {"r.json": move([{"topic": "t", "partition": 1, "replicas": [3], "log_dirs": ["/data/b3"]}])},
                               tmp_path, timeout_ms=200)
    assert code == 1 and out == "Timed out before log directory move could be started for: t-1-3", out
    (op, args), = fake.writes
    assert args["reassignments"] == [{"topic": "t", "partition": 1, "replicas": [3], "log_dirs": ["/data/b3"]}]


async def test_verify_list_and_cancel_lines(tmp_path):
    fake = FakeController()
    fake.reassigning = {1: [3]}
    files = {"r.json": move([{"topic": "t", "partition": 0, "replicas": [1]}, {"topic": "t", "partition": 1, "replicas": [3]}])}
    code, out = await run_tool(fake, {"--verify": True, "--reassignment-json-file": "r.json"}, files, tmp_path)
    assert out.splitlines()[:3] == ["Status of partition reassignment:", "Reassignment of partition t-0 is completed.",
                                    "Reassignment of partition t-1 is still in progress."]
    code, out = await run_tool(fake, {"--list": True}, {}, tmp_path)
    assert out.splitlines() == ["Current partition reassignments:", "t-1: replicas: 3. adding: 3. removing: 2."]
    code, out = await run_tool(fake, {"--cancel": True, "--reassignment-json-file": "r.json"}, files, tmp_path)
    assert out.splitlines()[0] == "Successfully cancelled partition reassignment for: t-1"
    code, out = await run_tool(fake, {"--list": True}, {}, tmp_path)
    assert out == "No partition reassignments found."
    files2 = {"r.json": move([{"topic": "t", "partition": 0, "replicas": [2]}])}
    code, out = await run_tool(fake, {"--verify": True, "--reassignment-json-file": "r.json"}, files2, tmp_path)
    assert "There is no active reassignment of partition t-0, but replica set is 1 rather than 2." in out


async def test_generate_round_robin(tmp_path):
    fake = FakeController()
    code, out = await run_tool(fake, {"--generate": True, "--topics-to-move-json-file": "m.json", "--broker-list": "2,3"},
                               {"m.json": json.dumps({"version": 1, "topics": [{"topic": "t"}]})}, tmp_path)
    assert code == 0, out
    lines = out.splitlines()
    assert lines[0] == "Current partition replica assignment"
    assert json.loads(lines[1])["partitions"][0] == {"topic": "t", "partition": 0, "replicas": [1], "log_dirs": ["any"]}
    assert lines[3] == "Proposed partition reassignment configuration"
    proposed = json.loads(lines[4])["partitions"]
    assert sorted(p["replicas"][0] for p in proposed) == [2, 3]
    assert fake.writes == []


async def test_generate_errors(tmp_path):
    fake = FakeController()
    code, out = await run_tool(fake, {"--generate": True, "--topics-to-move-json-file": "m.json", "--broker-list": "2,2"},
                               {"m.json": json.dumps({"topics": [{"topic": "t"}]})}, tmp_path)
    assert code == 1 and out == "Broker list contains duplicate entries: [2]"
    code, out = await run_tool(fake, {"--generate": True, "--topics-to-move-json-file": "m.json", "--broker-list": "2"},
                               {"m.json": json.dumps({"topics": [{"topic": "zz"}]})}, tmp_path)
    assert code == 1 and out == "Topic zz not found."


def test_assignment_matches_kafkas_round_robin():
    got = rc.assign_replicas_to_brokers(6, 3, [0, 1, 2, 3, 4], start_index=0, replica_shift=0)
    assert got == {0: [0, 1, 2], 1: [1, 2, 3], 2: [2, 3, 4], 3: [3, 4, 0], 4: [4, 0, 1], 5: [0, 2, 3]}
    with pytest.raises(rc.CommandError, match="Replication factor: 4 larger than available brokers: 3."):
        rc.assign_replicas_to_brokers(2, 4, [1, 2, 3])
    for seed in range(20):
        a = rc.assign_replicas_to_brokers(10, 2, [1, 2, 3, 4], rng=random.Random(seed))
        assert all(len(set(r)) == 2 for r in a.values())
        leaders = [r[0] for r in a.values()]
        assert max(leaders.count(b) for b in (1, 2, 3, 4)) - min(leaders.count(b) for b in (1, 2, 3, 4)) <= 1


def test_format_is_kafkas_compact_sorted_json():
    text = rc.format_reassignment_json({TopicPartition("b", 1): [2], TopicPartition("a", 10): [1, 3],
                                        TopicPartition("a", 2): [3]}, {(TopicPartition("a", 10), 3): "/d"})
    assert text == ('{"version":1,"partitions":[{"topic":"a","partition":2,"replicas":[3],"log_dirs":["any"]},'
                    '{"topic":"a","partition":10,"replicas":[1,3],"log_dirs":["any","/d"]},'
                    '{"topic":"b","partition":1,"replicas":[2],"log_dirs":["any"]}]}')


def test_leader_election_lines():
    lines, failed = result_lines("preferred", {
        TopicPartition("t", 0): None, TopicPartition("t", 1): FerryError(ErrorCode.ELECTION_NOT_NEEDED, ""),
        TopicPartition("t", 2): FerryError(ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE, "no live replica")})
    assert lines == ["Successfully completed leader election (PREFERRED) for partitions t-0",
                     "Valid replica already elected for partitions t-1",
                     "Error completing leader election (PREFERRED) for partition: t-2: "
                     "ELIGIBLE_LEADERS_NOT_AVAILABLE: no live replica"]
    assert failed == 1
    with pytest.raises(rc.CommandError, match="duplicate partitions: t-0"):
        parse_election_json('{"partitions": [{"topic": "t", "partition": 0}, {"topic": "t", "partition": 0}]}')
    with pytest.raises(rc.CommandError, match='missing "partitions" field'):
        parse_election_json('{"x": 1}')


async def test_a_fenced_broker_is_unknown_like_in_kafka(tmp_path):
    fake = FakeController()
    real_read = fake.read

    async def read(op: str, args: dict[str, Any], leader: bool = True) -> Any:
        reply = await real_read(op, args)
        if op == "describe_cluster":
            reply["brokers"][2]["fenced"] = True
        return reply
    fake.read = read  # type: ignore[method-assign]
    code, out = await run_tool(fake, {"--execute": True, "--reassignment-json-file": "r.json"},
                               {"r.json": move([{"topic": "t", "partition": 0, "replicas": [3]}])}, tmp_path)
    assert code == 1 and out == "Unknown broker id 3" and fake.writes == []
