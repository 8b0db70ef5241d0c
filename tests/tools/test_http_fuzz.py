"""Seeded malformed HTTP requests against a live cluster's controllers and brokers.

Every class of bad input the strict parser refuses (metadata_quorum/kernel/http_parsing.py) is sent to
both APIs: bad JSON, deep nesting, huge integers, wrong types, floats where integers belong,
signed / zero-padded / non-ASCII numbers, empty bodies, unknown paths, methods and query
parameters, oversized bodies and lists, out-of-range values, corrupt record batches. Asserted: no
answer is a 5xx, every 4xx carries Kafka's JSON error body, nothing a refused request carried is
stored or changed (topics, configs, brokers, reassignments, partitions read back), and the cluster
still produces and fetches afterwards.
"""
from __future__ import annotations

import asyncio
import json
import random
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable

import aiohttp
import pytest
from yarl import URL

from metadata_quorum.image import STREAM_ID_COUNTER_KEY
from stream_storage.batches import build_batch, read_records
from tools.admin import Admin
from tools.client import TopicPartition

pytestmark = pytest.mark.integration

SEED = 20261124
REQUESTS_PER_CLASS = 200
CONCURRENCY = 8
TOPIC = "fz"  # the one topic the fuzz may name that exists; every topic it could create starts "fz-"


@dataclass(frozen=True)
class Probe:
    kind: str  # the class of bad input, for the per-class counts
    target: str  # "controller" or "broker"
    method: str
    path: str  # already percent-encoded where it needs to be
    query: str = ""
    body: bytes | None = None


# -- bad values -----------------------------------------------------------------------------------------

NOT_INTEGERS: list[Any] = [1.5, 1.0, -0.0, 1e3, "1", "01", " 1", "+1", "-0", "١", True, False, None, [], [1], {},
                           {"n": 1}, "", "x" * 300]
TEXT_NUMBERS = ["", " 1", "1 ", "+1", "01", "00", "-0", "-", "--1", "1_0", "1.0", "1e3", "0x10", "١", "１", "²", "\t1",
                "9" * 21, "-" + "9" * 30, "NaN", "inf", "%201", "1%00"]
NOT_STRINGS: list[Any] = [1, 1.5, True, None, [], ["x"], {"a": "b"}]
NOT_LISTS: list[Any] = [1, "x", {"a": 1}, True, 1.5]
NOT_OBJECTS: list[Any] = [1, "x", [1], True, 1.5]


def huge_int(rng: random.Random, in_query: bool = False) -> str:
    """Beyond int64 and beyond Python's 4,300-digit limit; a request line stays under aiohttp's 8,190 bytes
    (a longer one is refused by its HTTP parser, with a plain-text 400, before any handler runs)."""
    return rng.choice(["", "-"]) + "9" * rng.choice([21, 40, 4301, 5000] + ([] if in_query else [20_000]))


def deep(rng: random.Random) -> bytes:
    depth = rng.choice([33, 100, 1000, 5000, 50_000])
    if rng.random() < 0.5:
        return b'{"topics":' + b"[" * depth + b"]" * depth + b"}"
    return b'{"a":' * depth + b"1" + b"}" * depth


def garbage_json(rng: random.Random) -> bytes:
    valid = json.dumps({"topics": [{"name": "fz-g", "num_partitions": 1}], "validate_only": True}).encode()
    choice = rng.randrange(9)
    if choice == 0:
        return valid[:rng.randrange(1, len(valid))]  # truncated
    if choice == 1:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 64)))
    if choice == 2:
        return b"\xff\xfe" + valid
    if choice == 3:
        return valid.replace(b"1", b"NaN")
    if choice == 4:
        return b'{"topics": [], "topics": []}'
    if choice == 5:
        return valid + b" trailing"
    if choice == 6:
        return b"{'topics': []}"
    if choice == 7:
        return rng.choice([b"[]", b"1", b'"x"', b"null", b"true", b" "])
    return b'{"a": "\\ud800' + b"\\" * rng.randrange(1, 3) + b'"}'


# -- the probes -----------------------------------------------------------------------------------------

CONTROLLER_POSTS = ["/v1/write/create_topics", "/v1/write/delete_topics", "/v1/write/alter_partition_reassignments",
                    "/v1/write/elect_leaders", "/v1/write/alter_configs", "/v1/write/put_kv", "/v1/write",
                    "/v1/read/describe_topics", "/v1/read/describe_configs", "/v1/read/describe_cluster",
                    "/v1/read/list_partition_reassignments", "/v1/read/get_kv", "/v1/read/describe_stream"]
BROKER_FETCHES = [f"/v1/fetch/{TOPIC}/0", f"/v1/offsets/{TOPIC}/0"]
# the broker's POSTs that take a partitions list (one parser: http_api.partition_entries)
BROKER_POSTS = ["/v1/log-dirs/alter", "/v1/pre-upload", "/v1/delete-records"]


def one_bad(base: dict[str, Any], path: list[str | int], value: Any) -> dict[str, Any]:
    """``base`` (deep-copied) with the field at ``path`` replaced by ``value``."""
    out: Any = json.loads(json.dumps(base))
    node = out
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return out


def op_cases(rng: random.Random) -> tuple[str, dict[str, Any]]:
    """A write or read operation with exactly one field of the wrong type or out of range."""
    choice = rng.randrange(12)
    if choice == 0:
        base = {"topics": [{"name": f"fz-{rng.randrange(10**6)}", "num_partitions": 1, "replication_factor": 1}]}
        field = rng.choice(["num_partitions", "replication_factor"])
        return "/v1/write/create_topics", one_bad(base, ["topics", 0, field], rng.choice(NOT_INTEGERS[:11] + [
            200_000, 2**31, 2**63, 10_001]))
    if choice == 1:
        base = {"topics": [{"name": f"fz-{rng.randrange(10**6)}", "configs": {"retention.ms": "1000"}}],
                "validate_only": False}
        path: list[str | int] = rng.choice([["topics", 0, "name"], ["topics", 0, "configs"], ["validate_only"],
                                            ["topics"], ["topics", 0], ["topics", 0, "assignments"]])
        bad = rng.choice(NOT_STRINGS if path[-1] == "name" else NOT_OBJECTS if path[-1] in ("configs", 0) else
                         NOT_LISTS if path[-1] == "topics" else [1, "true", "x"] if path[-1] == "validate_only" else
                         [{" 0": [1]}, {"+0": [1]}, {"00": [1]}, {"0": ["1"]}, {"0": [1.0]}, {"١": [1]}])
        return "/v1/write/create_topics", one_bad(base, path, bad)
    if choice == 2:
        base = {"reassignments": [{"topic": TOPIC, "partition": 0, "replicas": [2]}]}
        path = rng.choice([["reassignments", 0, "partition"], ["reassignments", 0, "replicas", 0]])
        return "/v1/write/alter_partition_reassignments", one_bad(base, path, rng.choice(NOT_INTEGERS[:12]))
    if choice == 3:
        base = {"names": [TOPIC]}
        return "/v1/write/delete_topics", one_bad(base, rng.choice([["names"], ["names", 0]]),
                                                  rng.choice(NOT_STRINGS[:2] + NOT_LISTS[:1] + [["x"] * 100_001]))
    if choice == 4:
        base = {"partitions": [{"topic": TOPIC, "partition": 0}], "election_type": "preferred"}
        return "/v1/write/elect_leaders", one_bad(base, rng.choice([["partitions", 0, "partition"],
                                                                    ["election_type"], ["partitions"]]),
                                                  rng.choice(NOT_INTEGERS[:9] + ["unclean!", 7]))
    if choice == 5:
        base = {"resources": [{"type": "topic", "name": TOPIC, "configs": {"retention.ms": "1000"}}]}
        path = rng.choice([["resources", 0, "type"], ["resources", 0, "name"], ["resources", 0, "configs"],
                           ["resources"]])
        return "/v1/write/alter_configs", one_bad(base, path, rng.choice(NOT_STRINGS[:3] + NOT_LISTS[:1]))
    if choice == 6:
        base = {"key": "fz-key", "value": "v"}
        return "/v1/write/put_kv", one_bad(base, ["key"], rng.choice(NOT_STRINGS))
    if choice == 7:
        base = {"ops": [{"op": "create_topics", "args": {"topics": [{"name": "fz-b", "num_partitions": "1"}]}}]}
        path = rng.choice([["ops"], ["ops", 0, "op"], ["ops", 0, "args"], ["ops", 0]])
        bad = rng.choice(NOT_OBJECTS if path[-1] in ("args", 0) else NOT_STRINGS if path[-1] == "op" else
                         NOT_LISTS + [[], [{"op": "create_topics"}] * 10_001])
        return "/v1/write", one_bad(base, path, bad)
    if choice == 8:
        base = {"broker_id": 999, "broker_epoch": 1, "metadata_offset": 1}
        op = rng.choice(["broker_heartbeat", "unregister_broker", "register_broker"])
        return f"/v1/write/{op}", one_bad(base, [rng.choice(list(base))], rng.choice(NOT_INTEGERS[:12]))
    if choice == 9:
        op = rng.choice(["open_stream", "close_stream", "trim_stream", "commit_object"])
        base = {"stream_id": 1, "epoch": 1, "broker_id": 999, "broker_epoch": 1, "new_start_offset": 0,
                "object_key": "k", "size": 1, "ranges": [{"stream_id": 1, "epoch": 1, "start_offset": 0,
                                                           "end_offset": 1}]}
        path = [rng.choice([["ranges", 0, "stream_id"], ["ranges", 0, "end_offset"], ["size"]])] \
            if op == "commit_object" else [["stream_id"]]
        path = path[0]
        return f"/v1/write/{op}", one_bad(base, path, rng.choice(NOT_INTEGERS[:12]))
    if choice == 10:
        op = rng.choice(["describe_topics", "describe_configs", "list_partition_reassignments", "get_kv",
                         "describe_stream"])
        bad = rng.choice(NOT_INTEGERS + NOT_LISTS)
        return f"/v1/read/{op}", {rng.choice(["names", "resources", "partitions", "key", "stream_id"]): bad}
    return "/v1/write/create_topics", {"topics": [{"name": f"fz-{i}", "num_partitions": 1} for i in range(3)],
                                       "validate_only": rng.choice([1, "yes", [], 0.0, "false"])}


def probes(rng: random.Random, produce_bodies: list[bytes]) -> list[Probe]:
    out: list[Probe] = []

    def add(kind: str, make: Callable[[], Probe]) -> None:
        out.extend(make() for _ in range(REQUESTS_PER_CLASS))

    add("bad_json", lambda: rng.choice([
        Probe("bad_json", "controller", "POST", rng.choice(CONTROLLER_POSTS), body=garbage_json(rng)),
        Probe("bad_json", "broker", "POST", rng.choice(BROKER_POSTS), body=garbage_json(rng))]))
    add("deep_nesting", lambda: rng.choice([
        Probe("deep_nesting", "controller", "POST", rng.choice(CONTROLLER_POSTS), body=deep(rng)),
        Probe("deep_nesting", "broker", "POST", rng.choice(BROKER_POSTS), body=deep(rng))]))
    add("huge_ints", lambda: rng.choice([
        Probe("huge_ints", "controller", "POST", "/v1/write/create_topics",
              body=b'{"topics":[{"name":"fz-h","num_partitions":' + huge_int(rng).encode() + b"}]}"),
        Probe("huge_ints", "controller", "POST", "/v1/read/describe_stream",
              body=b'{"stream_id":' + huge_int(rng).encode() + b"}"),
        Probe("huge_ints", "controller", "GET", "/v1/log", query="offset=" + huge_int(rng, in_query=True)),
        Probe("huge_ints", "broker", "GET", rng.choice(BROKER_FETCHES), query="offset=" + huge_int(rng, in_query=True)),
        Probe("huge_ints", "broker", "POST", rng.choice(BROKER_POSTS),
              body=b'{"partitions":[{"topic":"fz","partition":' + huge_int(rng).encode() + b',"log_dir":"x"}]}')]))

    def wrong_type() -> Probe:
        path, args = op_cases(rng)
        return Probe("wrong_types", "controller", "POST", path, body=json.dumps(args).encode())

    add("wrong_types", wrong_type)

    def floats() -> Probe:
        value = rng.choice([1.5, 0.5, 1.0, -1.0, 1e3, 2.5e-3])
        return rng.choice([
            Probe("floats", "controller", "POST", "/v1/write/alter_partition_reassignments", body=json.dumps(
                {"reassignments": [{"topic": TOPIC, "partition": value if value != 0.5 else 1.5,
                                    "replicas": [2]}]}).encode()),
            Probe("floats", "controller", "POST", "/v1/write/create_topics", body=json.dumps(
                {"topics": [{"name": "fz-f", "num_partitions": value}]}).encode()),
            Probe("floats", "broker", "POST", rng.choice(BROKER_POSTS), body=json.dumps(
                {"partitions": [{"topic": TOPIC, "partition": value, "log_dir": "x"}]}).encode()),
            Probe("floats", "broker", "GET", rng.choice(BROKER_FETCHES), query=f"offset={value}")])

    add("floats", floats)

    def text_numbers() -> Probe:
        text = URL.build(query={"x": rng.choice(TEXT_NUMBERS)}).raw_query_string[2:] if rng.random() < 0.8 \
            else rng.choice(["%201", "1%00", "%EF%BC%91", "%D9%A1"])
        return rng.choice([
            Probe("text_numbers", "broker", "POST", f"/v1/produce/{TOPIC}/{text}", body=produce_bodies[0]),
            Probe("text_numbers", "broker", "GET", f"/v1/fetch/{TOPIC}/{text}", query="offset=0"),
            Probe("text_numbers", "broker", "GET", f"/v1/fetch/{TOPIC}/0", query=f"offset={text}"),
            Probe("text_numbers", "broker", "GET", f"/v1/fetch/{TOPIC}/0", query=f"offset=0&max_bytes={text}"),
            Probe("text_numbers", "broker", "POST", f"/v1/produce/{TOPIC}/0", query=f"leader_epoch={text}",
                  body=produce_bodies[0]),
            Probe("text_numbers", "broker", "POST", f"/v1/produce/{TOPIC}/0", query=f"acks={text}",
                  body=produce_bodies[0]),
            Probe("text_numbers", "broker", "GET", "/v1/moves", query=f"partition={text}"),
            Probe("text_numbers", "controller", "GET", "/v1/log", query=f"offset={text}"),
            Probe("text_numbers", "controller", "GET", "/v1/log", query=f"offset=0&max_records={text}")])

    add("text_numbers", text_numbers)
    add("empty_body", lambda: rng.choice([
        Probe("empty_body", "controller", "POST", rng.choice(CONTROLLER_POSTS), body=b""),
        Probe("empty_body", "broker", "POST", rng.choice(BROKER_POSTS), body=b"")]))

    def unknown() -> Probe:
        target = rng.choice(["controller", "broker"])
        path = rng.choice(["/v1/write/", "/v1/write/x/extra", "/v1/read/", "/v1/read/nope", "/v1/write/nope",
                           "/v1/nope", "/", "/v2/write/create_topics", "/v1/fetch/fz", "/v1/produce/fz/0/1",
                           "/v1/log-dirs/alter/x", "/v1/%ff", "/v1/write/%00", "/v1/.." + "/x" * 50,
                           "/v1/" + "a" * 4000])
        method = rng.choice(["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"])
        if rng.random() < 0.4:  # a known path with a method it does not take
            path, method = rng.choice([("/v1/write/create_topics", "GET"), ("/v1/log", "POST"),
                                       ("/v1/health", "DELETE"), (f"/v1/fetch/{TOPIC}/0", "POST"),
                                       (f"/v1/produce/{TOPIC}/0", "GET"), ("/v1/log-dirs/alter", "PUT"),
                                       ("/v1/quorum/status", "POST"), ("/metrics", "PATCH")])
        if rng.random() < 0.3:  # a known path with an unknown or repeated query parameter
            path, method = rng.choice([("/v1/log", "GET"), (f"/v1/fetch/{TOPIC}/0", "GET"), ("/v1/moves", "GET"),
                                       ("/v1/metadata", "GET"), ("/v1/read/describe_cluster", "POST")])
            return Probe("unknown_paths_methods", "broker" if "log" not in path and "read" not in path
                         else "controller", method, path, query=rng.choice(
                             ["offset=0&offset=1", "ofset=0", "offset=0&max_wait_ms=0&x=1", "topics=a&topics=b",
                              "consistency=any&consistency=leader"]), body=b"{}")
        return Probe("unknown_paths_methods", target, method, path, body=b"{}" if method != "GET" else None)

    add("unknown_paths_methods", unknown)

    def oversized() -> Probe:
        choice = rng.randrange(6)
        if choice == 0:
            return Probe("oversized", "controller", "POST", "/v1/write/delete_topics",
                         body=json.dumps({"names": ["fz-x"] * 100_001}).encode())
        if choice == 1:
            return Probe("oversized", "controller", "POST", "/v1/write/create_topics",
                         body=json.dumps({"topics": [{"name": "fz-" + "a" * rng.choice([250, 40_000])}]}).encode())
        if choice == 2:
            return Probe("oversized", "broker", "POST", "/v1/log-dirs/alter", body=json.dumps(
                {"partitions": [{"topic": "a" * 300, "partition": 0, "log_dir": "x"}]}).encode())
        if choice == 3:
            return Probe("oversized", "broker", "GET", "/v1/moves", query="topic=" + "a" * 300)
        if choice == 4:
            return Probe("oversized", "controller", "POST", "/v1/write/put_kv",
                         body=json.dumps({"key": "k" * 40_000, "value": "v"}).encode())
        return Probe("oversized", "broker", "POST", "/v1/log-dirs/alter", body=json.dumps(
            {"partitions": [{"topic": TOPIC, "partition": 0, "log_dir": "x" * 5000}] * 3}).encode())

    add("oversized", oversized)

    def out_of_range() -> Probe:
        return rng.choice([
            Probe("out_of_range", "controller", "POST", "/v1/write/create_topics", body=json.dumps(
                {"topics": [{"name": "fz-r", "num_partitions": rng.choice([200_000, 10_001, 2**31, -2, 0])}],
                 "validate_only": rng.choice([True, False])}).encode()),
            Probe("out_of_range", "controller", "POST", "/v1/write/create_topics", body=json.dumps(
                {"topics": [{"name": "fz-r", "replication_factor": rng.choice([2**15, 0, -5, 7])}]}).encode()),
            Probe("out_of_range", "controller", "GET", "/v1/log",
                  query=rng.choice(["offset=-1", "offset=0&max_records=0", "offset=0&max_wait_ms=-1"])),
            Probe("out_of_range", "broker", "GET", f"/v1/fetch/{TOPIC}/0",
                  query=rng.choice(["offset=-1", "offset=0&max_bytes=0", "offset=0&max_wait_ms=-5",
                                    "offset=0&max_bytes=2147483648", "offset=0&leader_epoch=2147483648"])),
            Probe("out_of_range", "broker", "POST", f"/v1/produce/{TOPIC}/{rng.choice(['2147483648', '7', '-1'])}",
                  body=produce_bodies[0]),
            Probe("out_of_range", "broker", "POST", f"/v1/produce/{TOPIC}/0", query=f"acks={rng.choice(['2', '-2'])}",
                  body=produce_bodies[0]),
            Probe("out_of_range", "broker", "GET", "/v1/moves", query=rng.choice(["limit=0", "limit=10001",
                                                                                 "partition=-2"])),
            Probe("out_of_range", "broker", "POST", "/v1/log-dirs/alter", body=json.dumps(
                {"partitions": [{"topic": TOPIC, "partition": rng.choice([-1, 2**31]), "log_dir": "x"}]}).encode())])

    add("out_of_range", out_of_range)

    def corrupt_batch() -> Probe:
        batch = bytearray(rng.choice(produce_bodies))
        mode = rng.randrange(4)
        if mode == 0:
            # the length and everything from the magic byte on (a broker overwrites the base offset and
            # the partition leader epoch, as Kafka's does, so flips there are not corruption)
            spot = rng.choice([rng.randrange(8, 12), rng.randrange(16, len(batch))])
            batch[spot] ^= 1 << rng.randrange(8)
        elif mode == 1:
            batch = batch[:rng.randrange(len(batch))]
        elif mode == 2:
            batch += bytes(rng.randrange(256) for _ in range(rng.randrange(1, 30)))
        else:
            batch = bytearray(rng.randrange(256) for _ in range(rng.randrange(0, 200)))
        return Probe("corrupt_batches", "broker", "POST", f"/v1/produce/{TOPIC}/0", body=bytes(batch))

    add("corrupt_batches", corrupt_batch)
    rng.shuffle(out)
    return out


# -- running them ---------------------------------------------------------------------------------------


async def send(session: aiohttp.ClientSession, base: str, probe: Probe) -> tuple[int, bytes, str]:
    url = URL(f"{base}{probe.path}" + (f"?{probe.query}" if probe.query else ""), encoded=True)
    async with session.request(probe.method, url, data=probe.body,
                               timeout=aiohttp.ClientTimeout(total=30)) as resp:
        return resp.status, await resp.read(), resp.headers.get("Content-Type", "")


async def state(admin: Admin, cluster: Any) -> dict[str, Any]:
    """What a refused request must not change: topics, configs, brokers, reassignments, the kv entry."""
    topics = cluster.controller_read("describe_topics", {})
    names = sorted(t["name"] if isinstance(t, dict) else t for t in (topics.get("topics") or topics))
    brokers = cluster.controller_read("describe_cluster", {})["brokers"]
    return {
        "topics": json.dumps(topics, sort_keys=True),
        "configs": json.dumps(cluster.controller_read("describe_configs", {"resources": [
            {"type": "topic", "name": n} for n in names] + [{"type": "broker", "name": ""}]}), sort_keys=True),
        "brokers": [(b["broker_id"], b["broker_epoch"], b["fenced"], b["incarnation_id"]) for b in brokers],
        "reassignments": json.dumps(cluster.controller_read("list_partition_reassignments", {}), sort_keys=True),
        "kv": json.dumps([cluster.controller_read("get_kv", {"key": key})
                          for key in ("fz-key", STREAM_ID_COUNTER_KEY)], sort_keys=True),
    }


async def read_back(session: aiohttp.ClientSession, base: str) -> list[bytes | None]:
    async with session.get(f"{base}/v1/fetch/{TOPIC}/0", params={"offset": "0", "max_wait_ms": "0",
                                                                 "max_bytes": str(8 << 20)}) as resp:
        assert resp.status == 200, await resp.text()
        return [r.value for r in read_records(await resp.read())]


async def produce_when_served(session: aiohttp.ClientSession, base: str, batch: bytes) -> None:
    """One produce, retried while the partition is still opening (a retriable 421/503)."""
    deadline = time.monotonic() + 30
    while True:
        async with session.post(f"{base}/v1/produce/{TOPIC}/0", data=batch) as resp:
            if resp.status == 200:
                return
            assert resp.status in (421, 503) and time.monotonic() < deadline, await resp.text()
        await asyncio.sleep(0.1)


async def test_malformed_requests_get_4xx_json_and_change_nothing(shared_cluster) -> None:
    cluster = shared_cluster
    rng = random.Random(SEED)
    async with Admin(bootstrap_controllers=cluster.controller_bootstrap) as admin:
        await admin.create_topic(TOPIC, 1, assignments={0: [1]})
        await admin.wait_for_leader(TopicPartition(TOPIC, 0), 1)
        controller_url = cluster.quorum.url(cluster.controller_leader())
        broker_url = cluster.broker_url(1)
        produce_bodies = [build_batch([(b"k%d" % i, b"v" * rng.randrange(1, 40)) for i in range(rng.randrange(1, 5))])
                          for _ in range(8)]
        async with aiohttp.ClientSession() as session:
            await produce_when_served(session, broker_url, produce_bodies[0])
            before = await state(admin, cluster)
            stored_before = await read_back(session, broker_url)
            all_probes = probes(rng, produce_bodies)
            assert len(all_probes) >= 2000
            outcomes: Counter[tuple[str, int]] = Counter()
            failures: list[str] = []
            started = time.monotonic()
            queue = list(all_probes)

            async def worker() -> None:
                while queue:
                    probe = queue.pop()
                    base = controller_url if probe.target == "controller" else broker_url
                    status, body, content_type = await send(session, base, probe)
                    outcomes[(probe.kind, status)] += 1
                    shown = f"{probe.method} {probe.target}{probe.path[:100]}?{probe.query[:60]} " \
                            f"body={(probe.body or b'')[:80]!r} -> {status} {body[:300]!r}"
                    if status >= 500:
                        failures.append(shown)
                    elif status >= 400:
                        try:
                            answer = json.loads(body)
                            assert "application/json" in content_type
                            assert set(answer) >= {"error", "code", "message"} and isinstance(answer["code"], int)
                        except (AssertionError, ValueError):
                            failures.append("not a JSON error body: " + shown)
                    elif probe.kind in ("corrupt_batches", "text_numbers", "out_of_range") \
                            and "/v1/produce/" in probe.path:
                        failures.append("a malformed produce was accepted: " + shown)

            await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
            elapsed_s = time.monotonic() - started
            kinds = Counter(p.kind for p in all_probes)
            print(f"\n{len(all_probes)} probes in {elapsed_s:.1f} s; per class: {dict(sorted(kinds.items()))}")
            print("statuses:", dict(sorted(Counter(s for (_k, s), n in outcomes.items() for _ in range(n)).items())))
            assert failures == [], "\n".join(failures[:30])
            assert sum(n for (_k, s), n in outcomes.items() if s >= 500) == 0
            # nothing changed and nothing was stored
            assert await state(admin, cluster) == before
            assert await read_back(session, broker_url) == stored_before
            # the cluster still serves: a produce and a fetch of it
            await produce_when_served(session, broker_url, build_batch([(b"k", b"after")]))
            assert (await read_back(session, broker_url))[-1] == b"after"
            assert elapsed_s < 120
    for path in [cluster.broker_log_path(b) for b in cluster.broker_ports] + \
            [cluster.quorum.log_path(n) for n in range(1, cluster.num_controllers + 1)]:
        with open(path, encoding="utf-8", errors="replace") as log:
            assert "Traceback" not in log.read(), path
