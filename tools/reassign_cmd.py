"""`ferry reassign-partitions`: Kafka's ReassignPartitionsCommand flags, JSON formats and output lines.

The parsing, validation, `--generate` placement and output formatting are pure functions; the
`run_*` coroutines are the thin shell that asks the controllers (and, for `--verify`, the brokers'
six-step move timelines). Every check runs before anything is changed: bad input leaves the
metadata untouched and exits non-zero.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from broker import replication_throttle as thr
from metadata_quorum.kernel.errors import ErrorCode, FerryError
from metadata_quorum.kernel.messages.configs import ConfigOp, ConfigResourceChange
from metadata_quorum.kernel.messages.replication import Reassignment as ReassignmentItem
from tools.admin import Admin, BrokerInfo, PartitionState
from tools.client import RETRIABLE_CONNECTION_ERRORS, TopicPartition

ANY_LOG_DIR = "any"
CANNOT_EXECUTE_BECAUSE_OF_EXISTING_MESSAGE = (
    "Cannot execute because there is an existing partition assignment.  Use --additional to override this and "
    "create a new partition assignment in addition to the existing one. The --additional flag can also be used "
    "to change the throttle by resubmitting the current reassignment."
)


class CommandError(Exception):
    """A failure the tool reports as `Error: <message>` with a non-zero exit; nothing was changed."""

    def __init__(self, message: str, error: ErrorCode = ErrorCode.INVALID_REQUEST) -> None:
        super().__init__(message)
        self.error = error


@dataclass
class Reassignment:
    """The parsed `--reassignment-json-file`: target replicas and (per replica) a log dir or "any"."""

    partitions: list[tuple[TopicPartition, list[int]]] = field(default_factory=list)
    log_dirs: dict[tuple[TopicPartition, int], str] = field(default_factory=dict)

    def as_map(self) -> dict[TopicPartition, list[int]]:
        return dict(self.partitions)


def java_list(items: list[Any]) -> str:
    """Java's `List.toString()`: `[1, 2]`."""
    return "[" + ", ".join(str(i) for i in items) + "]"


def _load_json(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise CommandError(f"The input string is not a valid JSON: {exc}") from None


def _field(obj: Any, name: str, kind: type, what: str) -> Any:
    if not isinstance(obj, dict):
        raise CommandError(f"Expected a JSON object for {what}, got: {json.dumps(obj)}")
    if name not in obj:
        raise CommandError(f"No such field exists: `{name}` in {what} {json.dumps(obj)}")
    value = obj[name]
    if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise CommandError(f"Field `{name}` of {what} must be an integer, got: {json.dumps(value)}")
    if kind is str and not isinstance(value, str):
        raise CommandError(f"Field `{name}` of {what} must be a string, got: {json.dumps(value)}")
    if kind is list and not isinstance(value, list):
        raise CommandError(f"Field `{name}` of {what} must be a list, got: {json.dumps(value)}")
    return value


def _version(js: Any) -> int:
    if not isinstance(js, dict):
        raise CommandError(f"Expected a JSON object at the top level, got: {json.dumps(js)[:100]}")
    version = js.get("version", 1)
    if version != 1:
        raise CommandError(f"Not supported version field value {version}")
    return 1


def parse_reassignment_json(text: str) -> Reassignment:
    """Parse without deduplicating, so that duplicates can be reported (Kafka's parsePartitionReassignmentData)."""
    js = _load_json(text)
    _version(js)
    result = Reassignment()
    items = js.get("partitions", [])
    if not isinstance(items, list):
        raise CommandError("Field `partitions` must be a list")
    for item in items:
        topic = _field(item, "topic", str, "partition entry")
        partition = _field(item, "partition", int, "partition entry")
        replicas = _field(item, "replicas", list, "partition entry")
        for r in replicas:
            if isinstance(r, bool) or not isinstance(r, int):
                raise CommandError(f"Replica ids must be integers, got {json.dumps(r)} for partition {topic}-{partition}")
        tp = TopicPartition(topic, partition)
        if "log_dirs" in item:
            dirs = _field(item, "log_dirs", list, "partition entry")
            if any(not isinstance(d, str) for d in dirs):
                raise CommandError(f"log_dirs entries must be strings for partition {tp}")
        else:
            dirs = [ANY_LOG_DIR] * len(replicas)
        if len(replicas) != len(dirs):
            raise CommandError(f"Size of replicas list {java_list(replicas)} is different from size of log dirs list "
                               f"{java_list(dirs)} for partition {tp}")
        result.partitions.append((tp, list(replicas)))
        for replica, d in zip(replicas, dirs, strict=True):
            if d == ANY_LOG_DIR:
                continue
            if not os.path.isabs(d):
                raise CommandError(f"Log directory \"{d}\" for replica {replica} of partition {tp} is not an absolute "
                                   f"path; use \"{ANY_LOG_DIR}\" or the absolute path of one of the broker's log dirs",
                                   ErrorCode.LOG_DIR_NOT_FOUND)
            result.log_dirs[(tp, replica)] = d
    return result


def validate_execute(r: Reassignment) -> dict[TopicPartition, list[int]]:
    """Kafka's parseExecuteAssignmentArgs checks."""
    if not r.partitions:
        raise CommandError("Partition reassignment list cannot be empty")
    if any(not replicas for _tp, replicas in r.partitions):
        raise CommandError("Partition replica list cannot be empty")
    dup_parts = sorted(tp for tp, n in Counter(tp for tp, _ in r.partitions).items() if n > 1)
    if dup_parts:
        raise CommandError("Partition reassignment contains duplicate topic partitions: "
                           + ",".join(str(tp) for tp in dup_parts))
    dups = [(tp, sorted(b for b, n in Counter(replicas).items() if n > 1)) for tp, replicas in r.partitions]
    dups = [(tp, d) for tp, d in dups if d]
    if dups:
        msg = ". ".join(f"{tp} contains multiple entries for {','.join(map(str, d))}" for tp, d in dups)
        raise CommandError(f"Partition replica lists may not contain duplicate entries: {msg}",
                           ErrorCode.INVALID_REPLICA_ASSIGNMENT)
    return r.as_map()


def parse_topics_json(text: str) -> list[str]:
    js = _load_json(text)
    _version(js)
    topics = js.get("topics", [])
    if not isinstance(topics, list):
        raise CommandError("Field `topics` must be a list")
    return [_field(t, "topic", str, "topic entry") for t in topics]


def parse_broker_list(text: str) -> list[int]:
    try:
        brokers = [int(b) for b in text.split(",") if b.strip()]
    except ValueError:
        raise CommandError(f"Invalid --broker-list {text!r}: expected comma-separated broker ids") from None
    dups = sorted(b for b, n in Counter(brokers).items() if n > 1)
    if dups:
        raise CommandError(f"Broker list contains duplicate entries: {java_list(dups)}")
    return brokers


def assign_replicas_to_brokers(num_partitions: int, replication_factor: int, brokers: list[int],
                               start_index: int | None = None, replica_shift: int | None = None,
                               rng: random.Random | None = None) -> dict[int, list[int]]:
    """Kafka's rack-unaware placement: round-robin leaders from a (random) start, followers shifted."""
    if num_partitions <= 0:
        raise CommandError("Number of partitions must be larger than 0.", ErrorCode.INVALID_PARTITIONS)
    if replication_factor <= 0:
        raise CommandError("Replication factor must be larger than 0.", ErrorCode.INVALID_REPLICATION_FACTOR)
    if replication_factor > len(brokers):
        raise CommandError(f"Replication factor: {replication_factor} larger than available brokers: {len(brokers)}.",
                           ErrorCode.INVALID_REPLICATION_FACTOR)
    rng = rng or random.Random()
    n = len(brokers)
    start = rng.randrange(n) if start_index is None else start_index
    shift = rng.randrange(n) if replica_shift is None else replica_shift
    out: dict[int, list[int]] = {}
    for p in range(num_partitions):
        if p > 0 and p % n == 0:
            shift += 1
        first = (p + start) % n
        replicas = [brokers[first]]
        for j in range(replication_factor - 1):
            replicas.append(brokers[(first + 1 + (shift + j) % (n - 1)) % n])
        out[p] = replicas
    return out


def format_reassignment_json(parts: dict[TopicPartition, list[int]],
                             log_dirs: dict[tuple[TopicPartition, int], str] | None = None) -> str:
    """Kafka's formatAsReassignmentJson: compact, sorted by topic then partition, log_dirs filled with "any"."""
    log_dirs = log_dirs or {}
    items = [{"topic": tp.topic, "partition": tp.partition, "replicas": list(parts[tp]),
              "log_dirs": [log_dirs.get((tp, r), ANY_LOG_DIR) for r in parts[tp]]} for tp in sorted(parts)]
    return json.dumps({"version": 1, "partitions": items}, separators=(",", ":"))


def current_assignment_text(current: dict[TopicPartition, list[int]]) -> str:
    return ("Current partition replica assignment\n\n" + format_reassignment_json(current)
            + "\n\nSave this to use as the --reassignment-json-file option during rollback")


def verify_lines(states: dict[TopicPartition, tuple[list[int], list[int], bool]]) -> list[str]:
    """(current replicas, target replicas, done) per partition -> Kafka's status lines."""
    lines = ["Status of partition reassignment:"]
    for tp in sorted(states):
        current, target, done = states[tp]
        if not done:
            lines.append(f"Reassignment of partition {tp} is still in progress.")
        elif current == target:
            lines.append(f"Reassignment of partition {tp} is completed.")
        else:
            lines.append(f"There is no active reassignment of partition {tp}, but replica set is "
                         f"{','.join(map(str, current))} rather than {','.join(map(str, target))}.")
    return lines


def list_lines(reassignments: dict[TopicPartition, PartitionState]) -> list[str]:
    if not reassignments:
        return ["No partition reassignments found."]
    lines = ["Current partition reassignments:"]
    for tp in sorted(reassignments):
        r = reassignments[tp]
        line = f"{tp}: replicas: {','.join(map(str, r.replicas))}."
        if r.adding_replicas:
            line += f" adding: {','.join(map(str, r.adding_replicas))}."
        if r.removing_replicas:
            line += f" removing: {','.join(map(str, r.removing_replicas))}."
        lines.append(line)
    return lines


def plural(n: int) -> str:
    return "" if n == 1 else "s"


def check_brokers_and_dirs(r: Reassignment, parts: dict[TopicPartition, list[int]],
                           brokers: dict[int, BrokerInfo]) -> None:
    """Kafka's verifyBrokerIds, then Ferry's log-dir check: a named dir must be one the target broker has."""
    for _tp, replicas in r.partitions:
        for b in replicas:
            if b not in brokers:
                raise CommandError(f"Unknown broker id {b}", ErrorCode.BROKER_ID_NOT_REGISTERED)
    for (tp, b), d in sorted(r.log_dirs.items()):
        have = brokers[b].log_dirs
        if have and d.rstrip("/") not in {p.rstrip("/") for p in have}:
            raise CommandError(f"Log directory {d} for replica {b} of partition {tp} does not exist on broker {b} "
                               f"(its log dirs: {', '.join(sorted(have))})", ErrorCode.LOG_DIR_NOT_FOUND)


async def current_assignment(admin: Admin, tps: list[TopicPartition]) -> dict[TopicPartition, list[int]]:
    """Kafka's getReplicaAssignmentForPartitions: "Topic X not found." / "Unable to find partition: ..."."""
    topics = await admin.describe_topics(sorted({tp.topic for tp in tps}))
    out: dict[TopicPartition, list[int]] = {}
    for name in sorted(topics):
        parts = topics[name]
        if isinstance(parts, FerryError):
            raise CommandError(f"Topic {name} not found.", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        for p in parts:
            if p.tp in tps:
                out[p.tp] = p.replicas
    missing = [tp for tp in tps if tp not in out]
    if missing:
        raise CommandError("Unable to find partition: " + ", ".join(str(tp) for tp in sorted(set(missing))),
                           ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    return out


async def run_generate(admin: Admin, topics_text: str, broker_list: str, out: list[str]) -> None:
    brokers_wanted = parse_broker_list(broker_list)
    topics = parse_topics_json(topics_text)
    dups = sorted(t for t, n in Counter(topics).items() if n > 1)
    if dups:
        raise CommandError(f"List of topics to reassign contains duplicate entries: {java_list(dups)}")
    described = await admin.describe_topics(topics)
    current: dict[TopicPartition, list[int]] = {}
    for name in topics:
        parts = described[name]
        if isinstance(parts, FerryError):
            raise CommandError(f"Topic {name} not found.", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        for p in parts:
            current[p.tp] = p.replicas
    live = {b: info for b, info in (await admin.describe_cluster()).items() if not info.fenced}
    brokers = [b for b in brokers_wanted if b in live]
    proposed: dict[TopicPartition, list[int]] = {}
    for name in topics:
        tps = [tp for tp in current if tp.topic == name]
        if not tps:
            continue
        rf = len(current[sorted(tps)[0]])
        for index, replicas in assign_replicas_to_brokers(len(tps), rf, brokers).items():
            proposed[TopicPartition(name, index)] = replicas
    out.append("Current partition replica assignment")
    out.append(format_reassignment_json(current))
    out.append("")
    out.append("Proposed partition reassignment configuration")
    out.append(format_reassignment_json(proposed))


async def alter_replica_log_dirs(admin: Admin, moves: dict[tuple[TopicPartition, int], str]) -> set[tuple[TopicPartition, int]]:
    """One AlterReplicaLogDirs round on each broker; returns the replicas whose move was accepted."""
    urls = await admin.brokers()
    accepted: set[tuple[TopicPartition, int]] = set()
    for broker in sorted({b for _tp, b in moves}):
        items = sorted((tp, d) for (tp, b), d in moves.items() if b == broker)
        if broker not in urls:
            continue
        try:
            answer = await admin.http_post(f"{urls[broker]}/v1/log-dirs/alter", {"partitions": [
                {"topic": tp.topic, "partition": tp.partition, "log_dir": d} for tp, d in items]})
        except (FerryError, *RETRIABLE_CONNECTION_ERRORS):
            continue
        for r in answer.get("results", []):
            if not r.get("error"):
                accepted.add((TopicPartition(str(r["topic"]), int(r["partition"])), broker))
    return accepted


async def execute_log_dir_moves(admin: Admin, moves: dict[tuple[TopicPartition, int], str], timeout_ms: int,
                                out: list[str]) -> None:
    """Kafka's executeMoves: retry AlterReplicaLogDirs until every replica's move has started or --timeout."""
    pending = dict(moves)
    deadline = time.monotonic() + timeout_ms / 1000
    while pending:
        done = await alter_replica_log_dirs(admin, pending)
        for tp, b in sorted(done):
            out.append(f"Successfully started moving log directory to {pending[(tp, b)]} for replica "
                       f"{tp.topic}-{tp.partition} with broker {b} ")
            del pending[(tp, b)]
        if not pending:
            break
        if time.monotonic() >= deadline:
            raise CommandError(f"Timed out before log directory move{plural(len(pending))} could be started for: "
                               + ",".join(f"{tp}-{b}" for tp, b in sorted(pending)))
        await asyncio.sleep(0.1)


def throttle_lines(throttle_bps: int, log_dir_throttle_bps: int) -> list[str]:
    """What Kafka prints for `--throttle` / `--replica-alter-log-dirs-throttle`, and why Ferry sets neither.

    A storage=s3 move copies no partition data: the old owner uploads what it still buffers and
    closes the streams, the new owner opens the same streams. There is no replication traffic to
    limit, so the flags are accepted (scripts written for Kafka keep working) and change nothing."""
    why = ("storage=s3 partitions move without copying their data (the old owner uploads what it still "
           "buffers to S3 and closes the partition's streams, the new owner opens the same streams), "
           "so there is no replica traffic to throttle")
    lines = []
    if throttle_bps >= 0:
        lines.append(f"The inter-broker throttle limit was not set ({throttle_bps} B/s requested): {why}.")
    if log_dir_throttle_bps >= 0:
        lines.append(f"The replica-alter-dir throttle limit was not set ({log_dir_throttle_bps} B/s requested): "
                     f"a log dir move of a storage=s3 replica copies only its partition.metadata file.")
    return lines


ALTER_DIRS_RATE = "replica.alter.log.dirs.io.max.bytes.per.second"
THROTTLE_RATE_KEYS = (thr.LEADER_RATE, thr.FOLLOWER_RATE)
THROTTLE_REPLICA_KEYS = (thr.LEADER_REPLICAS, thr.FOLLOWER_REPLICAS)


def throttle_resources(moves: dict[TopicPartition, tuple[list[int], list[int]]],
                       rate_bps: int) -> list[ConfigResourceChange]:
    """Kafka's ``--throttle`` for copy-based (storage=local) moves (KIP-73): the rate on every broker
    taking part, the current replicas throttled as leaders, the adding ones as followers."""
    brokers = sorted({b for current, target in moves.values() for b in current + target})
    resources: list[ConfigResourceChange] = [
        {"type": "broker", "name": str(b), "configs": {k: str(rate_bps) for k in THROTTLE_RATE_KEYS}} for b in brokers]
    for topic in sorted({tp.topic for tp in moves}):
        leaders = [f"{tp.partition}:{b}" for tp, (current, _t) in sorted(moves.items()) if tp.topic == topic
                   for b in current]
        followers = [f"{tp.partition}:{b}" for tp, (current, target) in sorted(moves.items()) if tp.topic == topic
                     for b in target if b not in current]
        ops: list[ConfigOp] = [{"op": "append", "key": key, "value": ",".join(items)}
                               for key, items in zip(THROTTLE_REPLICA_KEYS, (leaders, followers), strict=True)
                               if items]
        resources.append({"type": "topic", "name": topic, "ops": ops})
    return resources


def clear_throttle_resources(topics: list[str], brokers: list[int]) -> list[ConfigResourceChange]:
    rates: list[ConfigResourceChange] = [
        {"type": "broker", "name": str(b), "configs": {k: None for k in THROTTLE_RATE_KEYS + (ALTER_DIRS_RATE,)}}
        for b in brokers]
    replicas: list[ConfigResourceChange] = [
        {"type": "topic", "name": t, "configs": {k: None for k in THROTTLE_REPLICA_KEYS}} for t in topics]
    return rates + replicas


def throttle_set_lines(rate_bps: int) -> list[str]:
    """What Kafka prints when it sets the inter-broker throttle."""
    return ["Warning: You must run --verify periodically, until the reassignment completes, to ensure the throttle "
            "is removed.", f"The inter-broker throttle limit was set to {rate_bps} B/s"]


async def topic_storages(admin: Admin, topics: list[str]) -> dict[str, str]:
    reply = await admin.api.describe_topics({"names": topics})
    return {t["name"]: str(t.get("storage", "s3")) for t in reply.get("topics", []) if "storage" in t}


async def run_execute(admin: Admin, text: str, additional: bool, out: list[str], timeout_ms: int = 10_000,
                      throttle_bps: int = -1, log_dir_throttle_bps: int = -1) -> None:
    r = parse_reassignment_json(text)
    parts = validate_execute(r)
    if not additional and await admin.list_partition_reassignments():
        raise CommandError(CANNOT_EXECUTE_BECAUSE_OF_EXISTING_MESSAGE)
    # Like Kafka's describeCluster, only unfenced brokers count: a fenced one is "unknown".
    brokers = {b: info for b, info in (await admin.describe_cluster()).items() if not info.fenced}
    for _tp, replicas in r.partitions:  # Kafka checks broker ids before looking the partitions up
        for b in replicas:
            if b not in brokers:
                raise CommandError(f"Unknown broker id {b}", ErrorCode.BROKER_ID_NOT_REGISTERED)
    current = await current_assignment(admin, list(parts))
    check_brokers_and_dirs(r, parts, brokers)
    out.append(current_assignment_text(current))
    storages = await topic_storages(admin, sorted({tp.topic for tp in parts}))
    local_moves = {tp: (list(current.get(tp, [])), list(parts[tp])) for tp in parts
                   if storages.get(tp.topic, "s3") != "s3"}
    local_dir_brokers = sorted({b for (tp, b), d in r.log_dirs.items()
                                if d != ANY_LOG_DIR and storages.get(tp.topic, "s3") != "s3"})
    if log_dir_throttle_bps >= 0 and local_dir_brokers:  # KIP-113's intra-broker throttle, for local replicas
        await admin.api.alter_configs({"resources": [
            {"type": "broker", "name": str(b), "configs": {ALTER_DIRS_RATE: str(log_dir_throttle_bps)}}
            for b in local_dir_brokers]})
        out.append(f"The replica-alter-dir throttle limit was set to {log_dir_throttle_bps} B/s")
        log_dir_throttle_bps = -1
    if throttle_bps >= 0 and local_moves:
        await admin.api.alter_configs({"resources": throttle_resources(local_moves, throttle_bps)})
        out.extend(throttle_set_lines(throttle_bps))
        if len(local_moves) < len(parts):
            out.extend(throttle_lines(-1, log_dir_throttle_bps))
    else:
        out.extend(throttle_lines(throttle_bps, log_dir_throttle_bps))
    request: list[ReassignmentItem] = []
    for tp in sorted(parts):
        item: ReassignmentItem = {"topic": tp.topic, "partition": tp.partition, "replicas": parts[tp]}
        if any((tp, b) in r.log_dirs for b in parts[tp]):
            item["log_dirs"] = [r.log_dirs.get((tp, b), ANY_LOG_DIR) for b in parts[tp]]
        request.append(item)
    errors = {tp: e for tp, e in (await admin.alter_partition_reassignments(request)).items() if e is not None}
    if errors:
        raise CommandError("Error reassigning partition(s): " + "; ".join(
            f"{tp}: {errors[tp].message or errors[tp].error.name}" for tp in sorted(errors)),
            next(iter(errors.values())).error)
    out.append(f"Successfully started partition reassignment{plural(len(parts))} for "
               + ",".join(str(tp) for tp in sorted(parts)))
    if r.log_dirs:
        await execute_log_dir_moves(admin, r.log_dirs, timeout_ms, out)


STEP_NAMES = {"1": "notify", "2": "stop", "3": "meta", "4": "upload", "5": "elect", "6": "serve"}  # as `ferry demo`


def timeline_lines(moves: dict[int, Any], tps: set[TopicPartition]) -> list[str]:
    """The six-step timeline (`/v1/moves`) of each partition's latest move, one line each."""
    found: dict[tuple[str, int], dict[str, Any]] = {}
    for body in moves.values():
        for m in (body.get("moves", []) if isinstance(body, dict) else body or []):
            tp = TopicPartition(str(m.get("topic")), int(m.get("partition", -1)))
            key = (tp.topic, tp.partition)
            old = found.get(key)
            newer = old is None or int(m.get("move_id", 0)) > int(old.get("move_id", 0))
            fuller = old is not None and int(m.get("move_id", 0)) == int(old.get("move_id", 0)) and \
                sum(v is not None for v in (m.get("t_ms") or {}).values()) > \
                sum(v is not None for v in (old.get("t_ms") or {}).values())
            if tp in tps and (newer or fuller):
                found[key] = m
    if not found:
        return []
    lines = ["Latest move of each partition (step durations in ms):"]
    for key in sorted(found):
        m = found[key]
        steps = m.get("steps_ms") or {}
        text = ", ".join(f"{k} {STEP_NAMES.get(k, '')} {'?' if v is None else v}" for k, v in sorted(steps.items()))
        total = m.get("total_ms")
        lines.append(f"  {key[0]}-{key[1]} {m.get('from_broker')} -> {m.get('to_broker')}: {text}; "
                     f"total {'in progress' if total is None else f'{total} ms'}")
    return lines


async def run_verify(admin: Admin, text: str, out: list[str], preserve_throttles: bool = False) -> None:
    r = parse_reassignment_json(text)
    targets = r.as_map()
    ongoing = await admin.list_partition_reassignments()
    states: dict[TopicPartition, tuple[list[int], list[int], bool]] = {}
    not_found = [tp for tp in targets if tp not in ongoing]
    described = await admin.describe_topics(sorted({tp.topic for tp in not_found})) if not_found else {}
    for tp, target in targets.items():
        if tp in ongoing:
            states[tp] = (ongoing[tp].replicas, target, False)
            continue
        parts = described.get(tp.topic)
        current: list[int] = []
        if isinstance(parts, list):
            current = next((p.replicas for p in parts if p.partition == tp.partition), [])
            leader = next((p.leader for p in parts if p.partition == tp.partition), -1)
            if current == target and leader < 0:  # replicas are in place but the new owner is not serving yet
                states[tp] = (current, target, False)
                continue
        states[tp] = (current, target, True)
    out.extend(verify_lines(states))
    if not preserve_throttles and all(done for _c, _t, done in states.values()):
        cleared = await clear_throttles(admin, sorted({tp.topic for tp in targets}))
        dir_brokers = sorted({b for (_tp, b), d in r.log_dirs.items() if d != ANY_LOG_DIR})
        if not cleared and dir_brokers and await log_dir_moves_done(admin, r.log_dirs):
            await admin.api.alter_configs({"resources": [
                {"type": "broker", "name": str(b), "configs": {ALTER_DIRS_RATE: None}} for b in dir_brokers]})
            cleared = ["", f"Clearing broker-level throttles on brokers {','.join(map(str, dir_brokers))}"]
        out.extend(cleared)
    if r.log_dirs:
        out.extend(await replica_move_lines(admin, r.log_dirs))
    out.extend(timeline_lines(await admin.moves(), set(targets)))


async def clear_throttles(admin: Admin, topics: list[str]) -> list[str]:
    """Once every move of the file is done, Kafka's --verify removes the throttles it set."""
    described = await admin.api.describe_topics({"names": topics})
    throttled = [t["name"] for t in described.get("topics", [])
                 if any(k in (t.get("configs") or {}) for k in THROTTLE_REPLICA_KEYS)]
    if not throttled:
        return []
    brokers = sorted(await admin.brokers())
    await admin.api.alter_configs({"resources": clear_throttle_resources(throttled, brokers)})
    return ["", f"Clearing broker-level throttles on brokers {','.join(map(str, brokers))}"] + \
        [f"Clearing topic-level throttles on topic {t}" for t in throttled]


async def log_dir_moves_done(admin: Admin, moves: dict[tuple[TopicPartition, int], str]) -> bool:
    """Every replica of the file is in its target log dir (Kafka clears the throttle only then)."""
    return all(line.endswith("completed successfully.") for line in await replica_move_lines(admin, moves))


async def replica_move_lines(admin: Admin, moves: dict[tuple[TopicPartition, int], str]) -> list[str]:
    """Kafka's replica move states, from the brokers' DescribeLogDirs answers."""
    lines = []
    answers: dict[int, Any] = {}
    for broker in sorted({b for _tp, b in moves}):
        try:
            answers.update(await admin.describe_log_dirs([broker], sorted({tp.topic for tp, b in moves if b == broker})))
        except FerryError:
            continue
    for (tp, broker), target in sorted(moves.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        current = future = None
        body = answers.get(broker) or {}
        for b in body.get("brokers", []):
            for d in b.get("logDirs", []):
                for p in d.get("partitions", []):
                    if p.get("partition") == str(tp):
                        if p.get("isFuture"):
                            future = d.get("logDir")
                        else:
                            current = d.get("logDir")
        if current is None:
            lines.append(f"Partition {tp} cannot be found in any live log directory on broker {broker}.")
        elif future is not None:
            lines.append(f"Reassignment of replica {tp}-{broker} is still in progress." if future == target else
                         f"Partition {tp} on broker {broker} is being moved to log dir {future} instead of {target}.")
        elif current.rstrip("/") == target.rstrip("/"):
            lines.append(f"Reassignment of replica {tp}-{broker} completed successfully.")
        else:
            lines.append(f"Partition {tp} on broker {broker} is not being moved from log dir {current} to {target}.")
    return lines


async def run_cancel(admin: Admin, text: str, out: list[str]) -> None:
    r = parse_reassignment_json(text)
    targets = r.as_map()
    ongoing = await admin.list_partition_reassignments(sorted(targets))
    active = sorted(tp for tp in ongoing if tp in targets)
    if active:
        result = await admin.alter_partition_reassignments(
            [{"topic": tp.topic, "partition": tp.partition, "replicas": None} for tp in active])
        errors = {tp: e for tp, e in result.items() if e is not None}
        if errors:
            raise CommandError(f"Error cancelling partition reassignment{plural(len(errors))} for: " + "; ".join(
                f"{tp}: {errors[tp].message or errors[tp].error.name}" for tp in sorted(errors)))
        out.append(f"Successfully cancelled partition reassignment{plural(len(active))} for: "
                   + ",".join(str(tp) for tp in active))
    else:
        out.append("None of the specified partition reassignments are active.")
    out.append("None of the specified partition moves are active.")


async def run_list(admin: Admin, out: list[str]) -> None:
    out.extend(list_lines(await admin.list_partition_reassignments()))


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ferry reassign-partitions",
                                description="This tool helps to move topic partitions between replicas.")
    p.add_argument("--bootstrap-server", help="broker address(es), host:port[,host:port]")
    p.add_argument("--bootstrap-controller", help="controller address(es), host:port[,host:port]")
    actions = {
        "generate": "propose a reassignment of the topics in --topics-to-move-json-file onto --broker-list",
        "execute": "start the reassignment in --reassignment-json-file",
        "verify": "show whether the reassignment in --reassignment-json-file is done, with each move's timeline",
        "cancel": "cancel the active reassignments of the partitions in --reassignment-json-file",
        "list": "list the active reassignments",
    }
    for a, text in actions.items():
        p.add_argument(f"--{a}", action="store_true", help=text)
    p.add_argument("--topics-to-move-json-file", help='{"version":1,"topics":[{"topic":"t"}]} (with --generate)')
    p.add_argument("--broker-list", help='the brokers to place partitions on, "1,2,3" (with --generate)')
    p.add_argument("--reassignment-json-file",
                   help='{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[2],"log_dirs":["any"]}]}')
    p.add_argument("--additional", action="store_true", help="execute in addition to reassignments already running")
    p.add_argument("--timeout", type=int, default=10_000, help="ms to wait for log-dir moves to start")
    p.add_argument("--throttle", type=int, default=-1, metavar="BYTES_PER_S",
                   help="KIP-73 rate for storage=local moves (their new replicas copy the log); no effect on "
                        "storage=s3 moves, which copy no data")
    p.add_argument("--replica-alter-log-dirs-throttle", type=int, default=-1, metavar="BYTES_PER_S",
                   help="rate of storage=local replicas' log dir moves (replica.alter.log.dirs.io.max.bytes."
                        "per.second on the brokers moving them); no effect on storage=s3 log dir moves")
    p.add_argument("--preserve-throttles", action="store_true", help="do not remove the throttles at --verify")
    p.add_argument("--disable-rack-aware", action="store_true", help="accepted for compatibility with Kafka (--generate never uses racks)")
    return p


def _read_file(path: str | None, flag: str) -> str:
    if not path:
        raise CommandError(f"Missing required argument \"[{flag}]\"")
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as exc:
        raise CommandError(f"Cannot read {path}: {exc.strerror}") from None


async def run(args: argparse.Namespace, out: list[str]) -> None:
    chosen = [a for a in ("generate", "execute", "verify", "cancel", "list") if getattr(args, a)]
    if len(chosen) != 1:
        raise CommandError("Command must include exactly one action: --generate, --execute, --verify, --cancel, --list")
    if args.bootstrap_server and args.bootstrap_controller:
        raise CommandError("Please don't specify both --bootstrap-server and --bootstrap-controller")
    if not args.bootstrap_server and not args.bootstrap_controller:
        raise CommandError("Please specify either --bootstrap-server or --bootstrap-controller")
    action = chosen[0]
    # Read and parse the input before connecting: malformed files never reach the cluster.
    if action == "generate":
        topics_text = _read_file(args.topics_to_move_json_file, "topics-to-move-json-file")
        if not args.broker_list:
            raise CommandError("Missing required argument \"[broker-list]\"")
        parse_topics_json(topics_text)
        parse_broker_list(args.broker_list)
    elif action in ("execute", "verify", "cancel"):
        text = _read_file(args.reassignment_json_file, "reassignment-json-file")
        parsed = parse_reassignment_json(text)
        if action == "execute":
            validate_execute(parsed)
    async with Admin(args.bootstrap_server, args.bootstrap_controller) as admin:
        if action == "generate":
            await run_generate(admin, topics_text, args.broker_list, out)
        elif action == "execute":
            await run_execute(admin, text, args.additional, out, args.timeout,
                              args.throttle, args.replica_alter_log_dirs_throttle)
        elif action == "verify":
            await run_verify(admin, text, out, args.preserve_throttles)
        elif action == "cancel":
            await run_cancel(admin, text, out)
        else:
            await run_list(admin, out)


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    out: list[str] = []
    try:
        asyncio.run(run(args, out))
    except (CommandError, FerryError) as exc:
        print("\n".join(out), flush=True) if out else None
        message = exc.message if isinstance(exc, FerryError) else str(exc)
        name = exc.error.name
        print(f"Error: {message} ({name})", file=sys.stderr)
        return 1
    print("\n".join(out))
    return 0
