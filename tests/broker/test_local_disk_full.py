"""KIP-928 on a storage=local log dir, on real broker processes with a real full disk: broker 1's
only log dir is a small tmpfs. When a write fails with ENOSPC the dir turns SATURATED, produce to
its partitions fails with KAFKA_STORAGE_ERROR, leadership goes to an in-sync replica elsewhere,
reads go on, nothing acknowledged is lost, and moving the replicas away brings the dir back ONLINE.

Skipped (saying why) where a tmpfs cannot be mounted (mounting needs CAP_SYS_ADMIN).
"""
from __future__ import annotations

import asyncio
import os
import subprocess
from typing import Any

import aiohttp
import pytest

from tests.broker.helpers import controller_write, fetch_all, produce
from tests.broker.test_local_replication import (SETTINGS, idempotent_batch, partition_state, produce_to_leader,
                                                 replica_log, wait_for)
from tools.cluster import LocalCluster, http_get_json

pytestmark = pytest.mark.integration

TMPFS_BYTES = 2 * 1024 * 1024
RECORD_BYTES = 16 * 1024


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):  # type: ignore[no-untyped-def]
    state = str(tmp_path_factory.mktemp("kip928-cluster"))
    full_dir = os.path.join(state, "broker-1", "d0")
    os.makedirs(full_dir)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={TMPFS_BYTES}", "tmpfs", full_dir],
                          capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs CAP_SYS_ADMIN): {done.stderr.decode().strip()}")
    c = LocalCluster(state, brokers=3, broker_overrides=dict(SETTINGS, log_dir_check_interval_ms=200))
    try:
        c.start()
        yield c
    finally:
        c.stop()
        subprocess.run(["umount", "-l", full_dir], check=False)


def dir_state(c: LocalCluster, broker: int) -> str:
    body: Any = http_get_json(f"{c.broker_url(broker)}/v1/log-dirs", 5.0)
    return str(body["brokers"][0]["logDirs"][0]["state"])


def test_a_full_local_dir_saturates_hands_off_leadership_and_comes_back(cluster: LocalCluster) -> None:
    c = cluster
    for topic, replicas in (("full", [1, 2, 3]), ("full-solo", [1])):
        reply = controller_write(c, "create_topics", {"topics": [{
            "name": topic, "storage": "local", "assignments": {"0": replicas},
            "configs": {"min.insync.replicas": "2" if len(replicas) > 1 else "1", "segment.bytes": "262144"}}]})
        assert not reply["topics"][0].get("error"), reply
    acked: dict[str, list[bytes]] = {"full": [], "full-solo": []}

    async def run() -> None:
        async with aiohttp.ClientSession() as s:
            wait_for(lambda: partition_state(c, "full")["leader"] == 1 and len(partition_state(c, "full")["isr"]) == 3,
                     20, "broker 1 leading with 3 in sync")
            for i in range(5):
                value = b"solo-%03d" % i
                answer = await produce_to_leader(s, c, "full-solo", idempotent_batch(value, i, 61))
                acked["full-solo"].append(value)
                assert answer["base_offset"] == i
            # fill broker 1's dir through the replicated topic until a write fails
            refused: dict[str, Any] = {}
            for seq in range(4 * TMPFS_BYTES // RECORD_BYTES):
                value = b"full-%05d-" % seq + os.urandom(RECORD_BYTES)
                status, answer = await produce(s, c.broker_url(1), "full", 0, idempotent_batch(value, seq, 62),
                                               acks="all")
                if status != 200:
                    refused = answer
                    break
                acked["full"].append(value)
            assert refused.get("error") == "KAFKA_STORAGE_ERROR", refused
            assert len(acked["full"]) > 20
            wait_for(lambda: dir_state(c, 1) == "SATURATED", 10, "broker 1's dir SATURATED")
            # the controller hands leadership to an in-sync replica elsewhere; broker 1 leaves the ISR
            state = wait_for(lambda: (p := partition_state(c, "full")) and p["leader"] in (2, 3) and
                             1 not in p["isr"] and p, 10, "leadership handed off")
            # the producer goes on against the new leader (acks=all, min.insync.replicas=2)
            for _ in range(20):
                seq = len(acked["full"]) + 1
                value = b"full-%05d-" % seq + b"after"
                await produce_to_leader(s, c, "full", idempotent_batch(value, seq, 62))
                acked["full"].append(value)
            # the single replica has nobody to hand off to: it keeps leading, refuses writes, serves reads
            assert partition_state(c, "full-solo")["leader"] == 1
            status, answer = await produce(s, c.broker_url(1), "full-solo", 0, idempotent_batch(b"x", 5, 61))
            assert status != 200 and answer.get("error") == "KAFKA_STORAGE_ERROR", answer
            got = await fetch_all(s, c.broker_url(1), "full-solo", 0)
            assert [r.value for r in got] == acked["full-solo"], "reads on the full dir go on"
            got = await fetch_all(s, c.broker_url(int(state["leader"])), "full", 0)
            assert [r.value for r in got] == acked["full"][:len(got)] and len(got) == len(acked["full"]), \
                "every acknowledged record, once, in order"
            # moving the replicas away frees the dir: ONLINE again
            for topic, target in (("full", [2, 3]), ("full-solo", [2])):
                reply = controller_write(c, "alter_partition_reassignments",
                                         {"reassignments": [{"topic": topic, "partition": 0, "replicas": target}]})
                assert not reply["responses"][0].get("error"), reply
            for topic, target in (("full", [2, 3]), ("full-solo", [2])):
                wait_for(lambda topic=topic, target=target: (p := partition_state(c, topic)) and
                         p["replicas"] == target and
                         not p.get("adding_replicas") and p["leader"] in target, 30, f"{topic} moved off broker 1")
            wait_for(lambda: replica_log(c, 1, "full") == b"" and replica_log(c, 1, "full-solo") == b"", 10,
                     "broker 1's replica dirs deleted")
            wait_for(lambda: dir_state(c, 1) == "ONLINE", 10, "broker 1's dir ONLINE again")
            for topic in acked:
                leader = int(partition_state(c, topic)["leader"])
                got = await fetch_all(s, c.broker_url(leader), topic, 0)
                assert [r.value for r in got] == acked[topic], f"nothing acknowledged lost in {topic}"

    asyncio.run(run())
