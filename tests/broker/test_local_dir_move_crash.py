"""KIP-113 on real segments, on real broker processes: a storage=local replica moved between two
log dirs of broker 1 while it is killed -9 at each step of the move; every restart recovers (the
move resumed, the future promoted, the old copy deleted) and every acknowledged record is there.

The copy step is interrupted from outside (kill -9 while a throttled copy runs); the steps of the
swap, which takes milliseconds, by the broker's own fault-injection point (FERRY_LOCAL_DIR_MOVE_
CRASH_AT: it sends itself SIGKILL when a move reaches the named step).
"""
from __future__ import annotations

import asyncio
import json
import os
import time

import aiohttp
import pytest

from broker import local_dir_mover as mover
from tests.broker.helpers import controller_write, fetch_all, wait_running
from tests.broker.test_local_replication import (SETTINGS, ferry_cli, idempotent_batch, partition_state,
                                                 produce_to_leader, replica_log, wait_for)
from tools.cluster import LocalCluster, http_post_json

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):  # type: ignore[no-untyped-def]
    c = LocalCluster(str(tmp_path_factory.mktemp("kip113-cluster")), brokers=3, log_dirs_per_broker=2,
                     broker_overrides=SETTINGS)
    c.start()
    yield c
    c.stop()


def entries(c: LocalCluster, broker: int, topic: str) -> dict[str, list[str]]:
    """The replica dirs of ``topic`` partition 0 in each of the broker's log dirs."""
    return {d: sorted(n for n in os.listdir(d) if n.startswith(f"{topic}-0")) for d in c.broker_log_dirs(broker)}


def alter(c: LocalCluster, broker: int, topic: str, log_dir: str) -> None:
    answer = http_post_json(f"{c.broker_url(broker)}/v1/log-dirs/alter",
                            {"partitions": [{"topic": topic, "partition": 0, "log_dir": log_dir}]})
    assert answer["results"][0]["error"] is None, answer


def restart(c: LocalCluster, broker: int, crash_at: str | None) -> None:
    """Start ``broker`` again, armed to kill itself at ``crash_at`` (None: not armed)."""
    if crash_at is None:
        os.environ.pop(mover.CRASH_AT_ENV, None)
    else:
        os.environ[mover.CRASH_AT_ENV] = crash_at
    try:
        c.start_broker(broker, wait=False)
    finally:
        os.environ.pop(mover.CRASH_AT_ENV, None)


def wait_crashed(c: LocalCluster, broker: int, timeout_s: float = 30.0) -> None:
    wait_for(lambda: c.broker_procs[broker].poll() is not None, timeout_s, f"broker {broker} killed at its crash point")
    c.stopped_brokers.add(broker)


def test_a_log_dir_move_killed_at_each_step_recovers_and_loses_nothing(cluster: LocalCluster) -> None:
    c = cluster
    d0, d1 = c.broker_log_dirs(1)
    acked: dict[str, list[tuple[int, bytes]]] = {"kip113-a": [], "kip113-b": []}
    for topic, replicas in (("kip113-a", [1, 2, 3]), ("kip113-b", [2, 1, 3])):
        reply = controller_write(c, "create_topics", {"topics": [{
            "name": topic, "storage": "local", "assignments": {"0": replicas},
            "configs": {"min.insync.replicas": "2", "segment.bytes": "65536"}}]})
        assert not reply["topics"][0].get("error"), reply
    seqs = {"kip113-a": 0, "kip113-b": 0}

    async def produce_some(s: aiohttp.ClientSession, n: int, size: int = 2000) -> None:
        for topic in acked:
            for _ in range(n):
                seq = seqs[topic]
                value = b"%s-%05d-" % (topic.encode(), seq) + b"x" * size
                answer = await produce_to_leader(s, c, topic, idempotent_batch(value, seq, 51 if "a" in topic else 52))
                acked[topic].append((answer["base_offset"], value))
                seqs[topic] += 1

    async def run() -> None:
        async with aiohttp.ClientSession() as s:
            wait_for(lambda: len(partition_state(c, "kip113-a")["isr"]) == 3 and
                     len(partition_state(c, "kip113-b")["isr"]) == 3, 20, "both topics fully in sync")
            await produce_some(s, 150)
            assert entries(c, 1, "kip113-a") == {d0: ["kip113-a-0"], d1: []}, "placed in the first dir"

            # 1. copying: a throttled copy, killed -9 from outside half-way
            controller_write(c, "alter_configs", {"resources": [
                {"type": "broker", "name": "1", "configs": {mover.ALTER_RATE: str(64 * 1024)}}]})
            await asyncio.sleep(0.5)
            alter(c, 1, "kip113-a", d1)
            wait_for(lambda: any(n.endswith("-future") for n in entries(c, 1, "kip113-a")[d1]) and
                     _dir_bytes(d1, "kip113-a") > 64 * 1024, 10, "the copy under way")
            c.kill_broker(1)
            assert _dir_bytes(d1, "kip113-a") < _dir_bytes(d0, "kip113-a"), "killed before the copy finished"
            controller_write(c, "alter_configs", {"resources": [
                {"type": "broker", "name": "1", "configs": {mover.ALTER_RATE: None}}]})
            await produce_some(s, 20)  # brokers 2 and 3 go on (min.insync.replicas=2)

            # 2. flushed: the restarted broker resumes the copy, finishes it, dies before any rename
            restart(c, 1, "flushed")
            wait_crashed(c, 1)
            found = entries(c, 1, "kip113-a")
            assert found[d0] == ["kip113-a-0"] and len(found[d1]) == 1 and found[d1][0].endswith("-future"), found

            # 3. renamed-current: resumed again; dies with the old dir renamed -delete, the future not renamed
            restart(c, 1, "renamed-current")
            wait_crashed(c, 1)
            found = entries(c, 1, "kip113-a")
            assert len(found[d0]) == 1 and found[d0][0].endswith("-delete"), found
            assert len(found[d1]) == 1 and found[d1][0].endswith("-future"), found

            # 4. renamed-future: start-up promotes the future; a follower's move (b) dies after its future
            #    took the partition's name, before the -delete dir went
            restart(c, 1, "renamed-future")
            await wait_running(s, c.broker_url(1))
            assert entries(c, 1, "kip113-a") == {d0: [], d1: ["kip113-a-0"]}, "promoted, old copy deleted"
            await produce_some(s, 20)
            b_from = next(d for d, names in entries(c, 1, "kip113-b").items() if names)
            b_to = d1 if b_from == d0 else d0
            alter(c, 1, "kip113-b", b_to)
            wait_crashed(c, 1)
            found = entries(c, 1, "kip113-b")
            assert len(found[b_from]) == 1 and found[b_from][0].endswith("-delete") and found[b_to] == ["kip113-b-0"], \
                found

            # 5. a plain restart removes the -delete dir; both replicas live in their new dirs and catch up
            restart(c, 1, None)
            await wait_running(s, c.broker_url(1))
            await produce_some(s, 20)
            assert entries(c, 1, "kip113-a") == {d0: [], d1: ["kip113-a-0"]}
            assert entries(c, 1, "kip113-b") == {b_from: [], b_to: ["kip113-b-0"]}
            for topic in acked:
                wait_for(lambda topic=topic: 1 in partition_state(c, topic)["isr"], 20,
                         f"broker 1 back in the ISR of {topic}")
                leader = int(partition_state(c, topic)["leader"])
                got = await fetch_all(s, c.broker_url(leader), topic, 0)
                assert [(r.offset, r.value) for r in got] == acked[topic], "every acknowledged record once, in order"
                if leader != 1:
                    wait_for(lambda topic=topic, leader=leader:
                             replica_log(c, 1, topic) == replica_log(c, leader, topic),
                             15, f"broker 1's moved replica of {topic} equal to the leader's")

    asyncio.run(run())


def _dir_bytes(log_dir: str, topic: str) -> int:
    total = 0
    for name in os.listdir(log_dir):
        if name.startswith(f"{topic}-0"):
            path = os.path.join(log_dir, name)
            total += sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path) if f.endswith(".log"))
    return total





def test_replica_alter_log_dirs_throttle_limits_the_copy_and_verify_clears_it(cluster: LocalCluster, tmp_path) -> None:
    """``ferry reassign-partitions --replica-alter-log-dirs-throttle B`` with a reassignment JSON
    naming a log dir: the copy between broker 2's dirs runs at about B; --verify reports the move
    done and removes the throttle."""
    c = cluster
    topic = "kip113-cli"
    reply = controller_write(c, "create_topics", {"topics": [{
        "name": topic, "storage": "local", "assignments": {"0": [2]}, "configs": {"min.insync.replicas": "1"}}]})
    assert not reply["topics"][0].get("error"), reply
    rate_bps = 300_000

    async def fill() -> None:
        async with aiohttp.ClientSession() as s:
            wait_for(lambda: partition_state(c, topic)["leader"] == 2, 10, "leader 2")
            for i in range(80):
                await produce_to_leader(s, c, topic, idempotent_batch(b"%04d" % i + os.urandom(10_000), i, 71))
    asyncio.run(fill())
    source = next(d for d, names in entries(c, 2, topic).items() if names)
    target = next(d for d in c.broker_log_dirs(2) if d != source)
    size = _dir_bytes(source, topic)
    plan = tmp_path / "dirs.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": 0, "replicas": [2], "log_dirs": [target]}]}))
    boot = ["--bootstrap-server", ",".join(u.removeprefix("http://") for u in c.bootstrap_servers)]
    proc = ferry_cli("reassign-partitions", *boot, "--execute", "--reassignment-json-file", str(plan),
                     "--replica-alter-log-dirs-throttle", str(rate_bps))
    assert proc.returncode == 0, proc.stderr
    assert f"The replica-alter-dir throttle limit was set to {rate_bps} B/s" in proc.stdout
    configs = c.controller_read("describe_configs", {"resources": [{"type": "broker", "name": "2"}]})
    assert configs["resources"][0]["configs"][mover.ALTER_RATE] == str(rate_bps)
    first = wait_for(lambda: (n := _dir_bytes(target, topic)) > 0 and (time.monotonic(), n), 20, "the copy to start")
    wait_for(lambda: entries(c, 2, topic)[target] == [f"{topic}-0"], 30, "the swap")
    copy_s = time.monotonic() - first[0]
    rate = (size - first[1]) / copy_s
    print(f"log-dir copy: {size} bytes, {rate:.0f} B/s measured for {rate_bps} B/s ({(rate - rate_bps) / rate_bps:+.1%})")
    assert 0.75 * rate_bps <= rate <= 1.25 * rate_bps, (rate, rate_bps)
    wait_for(lambda: entries(c, 2, topic)[source] == [], 10, "the old dir removed")
    proc = ferry_cli("reassign-partitions", *boot, "--verify", "--reassignment-json-file", str(plan))
    assert proc.returncode == 0, proc.stderr
    assert f"Reassignment of replica {topic}-0-2 completed successfully." in proc.stdout, proc.stdout
    assert "Clearing broker-level throttles on brokers 2" in proc.stdout, proc.stdout
    configs = c.controller_read("describe_configs", {"resources": [{"type": "broker", "name": "2"}]})
    assert mover.ALTER_RATE not in configs["resources"][0]["configs"]
