"""storage=local topics on real broker processes: Kafka's replication cases.

Real parts only: a moto server (unused by these topics but part of the cluster), 3 controller
processes, 3 broker processes, raw HTTP. Each test takes seconds.
"""
from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import os
import time
from typing import Any

import aiohttp
import pytest

from broker import local_layout as lay
from stream_storage import batches
from tests.broker.helpers import controller_write, fetch_all, produce, wait_running
from tools.cluster import LocalCluster

pytestmark = pytest.mark.integration

SETTINGS = {"heartbeat_interval_ms": 250, "session_timeout_ms": 3000, "metrics_interval_ms": 500,
            "replica_lag_time_max_ms": 1000, "replica_fetch_wait_max_ms": 200,
            "replica_high_watermark_checkpoint_interval_ms": 500, "produce_request_timeout_ms": 2000}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):  # type: ignore[no-untyped-def]
    c = LocalCluster(str(tmp_path_factory.mktemp("local-cluster")), brokers=3, broker_overrides=SETTINGS)
    c.start()
    yield c
    c.stop()


def create_local_topic(c: LocalCluster, name: str, replicas: list[int], min_isr: int = 2) -> None:
    reply = controller_write(c, "create_topics", {"topics": [{
        "name": name, "storage": "local", "assignments": {"0": replicas},
        "configs": {"min.insync.replicas": str(min_isr), "segment.bytes": "65536"}}]})
    assert not reply["topics"][0].get("error"), reply


def partition_state(c: LocalCluster, topic: str) -> dict[str, Any]:
    """The partition as a controller's committed image has it (one that has seen the topic)."""
    for _ in range(100):
        reply = c.controller_read("describe_topics", {"names": [topic]})
        if "partitions" in reply["topics"][0]:
            return dict(reply["topics"][0]["partitions"][0])
        time.sleep(0.05)
    raise AssertionError(f"no controller knows {topic}: {reply}")


def wait_for(pred: Any, timeout_s: float, what: str) -> Any:
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        last = pred()
        if last:
            return last
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what} (last: {last})")


def replica_log(c: LocalCluster, broker: int, topic: str) -> bytes:
    """Every byte of the replica's segments, read from its files (the broker may be running)."""
    for d in c.broker_log_dirs(broker):
        path = os.path.join(d, f"{topic}-0")
        if os.path.isdir(path):
            out = b""
            for base in lay.segment_bases(os.listdir(path)):
                with open(os.path.join(path, lay.segment_file_name(base)), "rb") as f:
                    out += f.read()
            return out
    return b""


def idempotent_batch(value: bytes, seq: int, producer_id: int) -> bytes:
    return batches.build_batch([(None, value)], timestamp_ms=int(time.time() * 1000), producer_id=producer_id,
                               producer_epoch=0, base_sequence=seq)


async def produce_to_leader(session: aiohttp.ClientSession, c: LocalCluster, topic: str, body: bytes,
                            acks: str = "all", timeout_s: float = 20.0) -> dict[str, Any]:
    """Retry (as a Kafka client does) until some live broker leading the partition acknowledges."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        try:
            leader = int(partition_state(c, topic)["leader"])
        except Exception as exc:  # noqa: BLE001 - a controller election in progress
            last = exc
            await asyncio.sleep(0.1)
            continue
        if leader in c.broker_procs and leader not in c.stopped_brokers:
            try:
                status, answer = await produce(session, c.broker_url(leader), topic, 0, body, acks=acks)
                if status == 200:
                    return answer
                last = answer
            except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
                last = exc
        await asyncio.sleep(0.05)
    raise AssertionError(f"no acknowledgement within {timeout_s}s: {last}")


def test_acks_all_replicates_to_every_replica_and_reads_stop_at_the_high_watermark(cluster: LocalCluster) -> None:
    c = cluster
    create_local_topic(c, "rep-basic", [1, 2, 3])

    async def run() -> None:
        async with aiohttp.ClientSession() as s:
            wait_for(lambda: partition_state(c, "rep-basic")["leader"] == 1, 10, "leader 1")
            for i in range(30):
                answer = await produce_to_leader(s, c, "rep-basic", idempotent_batch(b"v%02d" % i, i, 11))
                assert answer["base_offset"] == i
            got = await fetch_all(s, c.broker_url(1), "rep-basic", 0)
            assert [r.value for r in got] == [b"v%02d" % i for i in range(30)]
            status, answer = await produce(s, c.broker_url(2), "rep-basic", 0, idempotent_batch(b"x", 99, 12))
            assert status != 200 and answer["error"] == "NOT_LEADER_OR_FOLLOWER", answer
            # a storage=local partition keeps no transaction state: a transactional batch is refused
            txn = batches.build_batch([(None, b"t")], timestamp_ms=int(time.time() * 1000), producer_id=13,
                                      producer_epoch=0, base_sequence=0, transactional=True)
            status, answer = await produce(s, c.broker_url(1), "rep-basic", 0, txn)
            assert status != 200 and answer["error"] == "INVALID_TXN_STATE" and "storage=local" in str(answer), answer
    asyncio.run(run())
    wait_for(lambda: replica_log(c, 2, "rep-basic") == replica_log(c, 1, "rep-basic") ==
             replica_log(c, 3, "rep-basic"), 10, "identical replicas")
    data = replica_log(c, 1, "rep-basic")
    assert [r.value for r in batches.read_records(data)] == [b"v%02d" % i for i in range(30)]
    # Kafka's layout on every replica
    for b in (1, 2, 3):
        d = next(os.path.join(x, "rep-basic-0") for x in c.broker_log_dirs(b)
                 if os.path.isdir(os.path.join(x, "rep-basic-0")))
        names = set(os.listdir(d))
        assert {"00000000000000000000.log", "00000000000000000000.index", "00000000000000000000.timeindex",
                "leader-epoch-checkpoint", "partition.metadata"} <= names, names
    wait_for(lambda: any(os.path.exists(os.path.join(x, lay.REPLICATION_CHECKPOINT)) for x in c.broker_log_dirs(1)),
             5, "replication-offset-checkpoint")


def test_not_enough_replicas_below_min_insync(cluster: LocalCluster) -> None:
    c = cluster
    create_local_topic(c, "rep-min", [1, 2], min_isr=3)

    async def run() -> None:
        async with aiohttp.ClientSession() as s:
            wait_for(lambda: partition_state(c, "rep-min")["leader"] == 1, 10, "leader 1")
            await asyncio.sleep(0.5)
            status, answer = await produce(s, c.broker_url(1), "rep-min", 0, idempotent_batch(b"a", 0, 21))
            assert answer.get("error") == "NOT_ENOUGH_REPLICAS", answer
            status, answer = await produce(s, c.broker_url(1), "rep-min", 0, idempotent_batch(b"a", 0, 21), acks="1")
            assert status == 200, answer
    asyncio.run(run())


def test_kill_leader_under_acked_produce_loses_nothing_and_truncates_the_divergent_suffix(
        cluster: LocalCluster) -> None:
    """RF 3, min.insync.replicas=2: acks=all records are written while the leader is killed -9;
    a suffix the old leader took with acks=1 while its followers were stopped is divergent and
    must be gone from it after it comes back as a follower."""
    c = cluster
    topic = "rep-kill"
    create_local_topic(c, topic, [1, 2, 3])
    acked: list[tuple[int, bytes]] = []

    async def run() -> None:
        async with aiohttp.ClientSession() as s:
            wait_for(lambda: partition_state(c, topic)["leader"] == 1 and len(partition_state(c, topic)["isr"]) == 3,
                     10, "leader 1 with 3 in sync")
            seq = 0
            for _ in range(40):
                answer = await produce_to_leader(s, c, topic, idempotent_batch(b"k%03d" % seq, seq, 31))
                acked.append((answer["base_offset"], b"k%03d" % seq))
                seq += 1
            # the followers stop; the leader takes records with acks=1 that nobody else has
            c.pause_broker(2)
            c.pause_broker(3)
            try:
                # the followers' fetches waiting on the leader end (empty) before the records come
                await asyncio.sleep(SETTINGS["replica_fetch_wait_max_ms"] / 1000 + 0.3)
                for i in range(5):
                    status, answer = await produce(s, c.broker_url(1), topic, 0,
                                                   idempotent_batch(b"lost%d" % i, 1000 + i, 32), acks="1")
                    assert status == 200, answer
                c.kill_broker(1)
            finally:
                c.resume_broker(2)
                c.resume_broker(3)
            # the producer goes on against whoever is elected
            for _ in range(40):
                answer = await produce_to_leader(s, c, topic, idempotent_batch(b"k%03d" % seq, seq, 31))
                acked.append((answer["base_offset"], b"k%03d" % seq))
                seq += 1
            new_leader = int(partition_state(c, topic)["leader"])
            assert new_leader in (2, 3)
            c.start_broker(1)
            await wait_running(s, c.broker_url(1))
            wait_for(lambda: 1 in partition_state(c, topic)["isr"], 20, "broker 1 back in the ISR")
            got = await fetch_all(s, c.broker_url(new_leader), topic, 0)
            offsets = [r.offset for r in got]
            assert offsets == sorted(set(offsets)), "offsets are unique and in order"
            assert [(r.offset, r.value) for r in got] == acked, "every acknowledged record once, in order"
            assert not any((r.value or b"").startswith(b"lost") for r in got)
            wait_for(lambda: replica_log(c, 1, topic) == replica_log(c, new_leader, topic), 10,
                     "the old leader's log equal to the new leader's")
    asyncio.run(run())
    old = replica_log(c, 1, topic)
    assert b"lost" not in old, "the divergent suffix was truncated"


def test_a_follower_that_falls_behind_leaves_the_isr_and_rejoins(cluster: LocalCluster) -> None:
    c = cluster
    topic = "rep-lag"
    create_local_topic(c, topic, [2, 3, 1], min_isr=1)

    async def run() -> None:
        async with aiohttp.ClientSession() as s:
            wait_for(lambda: partition_state(c, topic)["leader"] == 2 and len(partition_state(c, topic)["isr"]) == 3,
                     20, "leader 2 with 3 in sync")
            c.pause_broker(3)
            try:
                deadline = time.monotonic() + 2.2  # past replica.lag.time.max.ms, within the session timeout
                seq = 0
                while time.monotonic() < deadline:
                    await produce_to_leader(s, c, topic, idempotent_batch(b"l%d" % seq, seq, 41), acks="1")
                    seq += 1
                    await asyncio.sleep(0.02)
                shrunk = partition_state(c, topic)["isr"]
            finally:
                c.resume_broker(3)
            assert 3 not in shrunk, f"the lagging follower left the ISR: {shrunk}"
            assert 2 in shrunk
            wait_for(lambda: 3 in partition_state(c, topic)["isr"], 15, "the follower back in the ISR")
    asyncio.run(run())


def test_kafka_clients_produce_and_consume_a_local_topic(cluster: LocalCluster) -> None:
    """librdkafka with acks=all through the Kafka listener, the same as for s3 topics."""
    from confluent_kafka import Consumer, Producer

    c = cluster
    create_local_topic(c, "rep-kafka", [3, 1, 2])
    wait_for(lambda: partition_state(c, "rep-kafka")["leader"] == 3, 10, "leader 3")
    producer = Producer({"bootstrap.servers": c.kafka_bootstrap, "acks": "all", "enable.idempotence": True})
    delivered: list[int] = []
    for i in range(50):
        producer.produce("rep-kafka", value=b"m%02d" % i, partition=0,
                         on_delivery=lambda err, msg: delivered.append(msg.offset()) if err is None else None)
    assert producer.flush(20) == 0
    assert delivered == list(range(50))
    consumer = Consumer({"bootstrap.servers": c.kafka_bootstrap, "group.id": "rep-kafka-g",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe(["rep-kafka"])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(got) < 50 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got.append(msg.value())
    consumer.close()
    assert got == [b"m%02d" % i for i in range(50)]


def test_copy_based_reassignment_adds_a_replica_then_drops_the_removed_one(cluster: LocalCluster) -> None:
    """Kafka's reassignment: the adding replica fetches everything from the leader, the move
    completes once it is in the ISR, and the removed replica's dir is deleted."""
    c = cluster
    topic = "rep-move"
    create_local_topic(c, topic, [1, 2], min_isr=1)

    async def run() -> None:
        async with aiohttp.ClientSession() as s:
            wait_for(lambda: partition_state(c, topic)["leader"] == 1, 10, "leader 1")
            for i in range(200):
                await produce_to_leader(s, c, topic, idempotent_batch(b"m%03d" % i + b"." * 500, i, 51))
            reply = controller_write(c, "alter_partition_reassignments",
                                     {"reassignments": [{"topic": topic, "partition": 0, "replicas": [3, 2]}]})
            assert not reply["responses"][0].get("error"), reply
            state = wait_for(lambda: (p := partition_state(c, topic)) and p["replicas"] == [3, 2] and
                             not p.get("adding_replicas") and not p.get("removing_replicas") and p, 20,
                             "the reassignment to complete")
            assert sorted(state["isr"]) == [2, 3] and state["leader"] in (2, 3)
            got = await fetch_all(s, c.broker_url(int(state["leader"])), topic, 0)
            assert [r.value for r in got] == [b"m%03d" % i + b"." * 500 for i in range(200)]
    asyncio.run(run())
    wait_for(lambda: replica_log(c, 1, topic) == b"", 10, "broker 1's replica dir deleted")
    assert replica_log(c, 3, topic) == replica_log(c, 2, topic)


def ferry_cli(*args: str) -> "subprocess.CompletedProcess[str]":
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return subprocess.run([sys.executable, "-m", "tools.cli", *args], capture_output=True, text=True, cwd=root,
                          env=dict(os.environ, PYTHONPATH=root), timeout=120)


def test_a_throttled_move_takes_about_bytes_over_rate_and_verify_clears_the_throttle(
        cluster: LocalCluster, tmp_path) -> None:
    """``ferry reassign-partitions --throttle B`` (KIP-73): the new replica copies at about B."""
    c = cluster
    topic = "rep-throttle"
    create_local_topic(c, topic, [1], min_isr=1)
    rate_bps = 400_000

    async def fill() -> int:
        async with aiohttp.ClientSession() as s:
            wait_for(lambda: partition_state(c, topic)["leader"] == 1, 10, "leader 1")
            for i in range(100):
                await produce_to_leader(s, c, topic, idempotent_batch(b"%04d" % i + os.urandom(10_000), i, 61),
                                        acks="1")
        return len(replica_log(c, 1, topic))
    size = asyncio.run(fill())
    plan = tmp_path / "move.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": [2]}]}))
    boot = ["--bootstrap-server", ",".join(u.removeprefix("http://") for u in c.bootstrap_servers)]
    started = time.monotonic()
    proc = ferry_cli("reassign-partitions", *boot, "--execute", "--reassignment-json-file", str(plan),
                     "--throttle", str(rate_bps))
    assert proc.returncode == 0, proc.stderr
    assert f"The inter-broker throttle limit was set to {rate_bps} B/s" in proc.stdout
    configs = c.controller_read("describe_topics", {"names": [topic]})["topics"][0]["configs"]
    assert configs["leader.replication.throttled.replicas"] == "0:1"
    assert configs["follower.replication.throttled.replicas"] == "0:2"
    # the copy as the new replica's files see it: from its first bytes to the whole log
    first = wait_for(lambda: len(replica_log(c, 2, topic)) > 0 and (time.monotonic(), len(replica_log(c, 2, topic))),
                     30, "the copy to start")
    wait_for(lambda: len(replica_log(c, 2, topic)) >= size, 60, "the copy to finish")
    copy_s = time.monotonic() - first[0]
    rate = (size - first[1]) / copy_s
    print(f"throttled copy: {size} bytes, {rate:.0f} B/s measured for {rate_bps} B/s "
          f"({(rate - rate_bps) / rate_bps:+.1%}), whole move {time.monotonic() - started:.2f} s")
    assert 0.75 * rate_bps <= rate <= 1.25 * rate_bps, (rate, rate_bps)
    wait_for(lambda: partition_state(c, topic)["replicas"] == [2], 30, "the move to finish")
    proc = ferry_cli("reassign-partitions", *boot, "--verify", "--reassignment-json-file", str(plan))
    assert proc.returncode == 0, proc.stderr
    assert f"Reassignment of partition {topic}-0 is completed." in proc.stdout
    assert "Clearing broker-level throttles on brokers 1,2,3" in proc.stdout
    assert f"Clearing topic-level throttles on topic {topic}" in proc.stdout
    configs = c.controller_read("describe_topics", {"names": [topic]})["topics"][0]["configs"]
    assert "leader.replication.throttled.replicas" not in configs
    broker_configs = c.controller_read("describe_configs", {"resources": [{"type": "broker", "name": "2"}]})
    assert "follower.replication.throttled.rate" not in broker_configs["resources"][0]["configs"]
