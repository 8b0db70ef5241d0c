"""The broker as a real process: produce/fetch, a move between two brokers under load, controlled
shutdown and restart, recovery of a killed owner from its WAL, and a paused owner stepping down.

Real parts only: moto server, 3 controller processes, 2 broker processes, raw HTTP.
"""
from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families
import pytest

from tests.broker.conftest import FAST
from tests.broker.helpers import (batch, create_topic, fetch_all, leader_of, produce, reassign, wait_running,
                                  wait_serving)
from stream_storage.batches import build_batch
from stream_storage.config import S3Config
from stream_storage.s3_store import S3ObjectStore
from tools.cluster import LocalCluster
from broker.load_samples import decode_samples

pytestmark = pytest.mark.integration


class Writer:
    """Produces one numbered record per request to whoever leads; remembers every acknowledgement.

    It is an idempotent producer (one producer id, sequence = record number), as a Kafka client
    with ``enable.idempotence`` is: a request cut by a kill -9 may have been written and made
    durable without its answer arriving, and the retry of the same sequence must then be answered
    with the first copy's offsets instead of being written again.
    """

    PRODUCER_ID = 7001

    def __init__(self, session: aiohttp.ClientSession, c: LocalCluster, topic: str, partition: int = 0) -> None:
        self.session, self.c, self.topic, self.partition = session, c, topic, partition
        self.acked: list[tuple[int, bytes]] = []  # (offset, value)
        self.refused: dict[str, int] = {}
        self.stop = asyncio.Event()
        self.n = 0

    async def _leader_url(self) -> str | None:
        for bid in sorted(self.c.broker_ports):
            if bid in self.c.stopped_brokers:
                continue
            try:
                leader = await leader_of(self.session, self.c.broker_url(bid), self.topic, self.partition)
            except (aiohttp.ClientError, asyncio.TimeoutError, KeyError):
                continue
            if leader >= 0:
                return self.c.broker_url(leader)
        return None

    async def run(self, max_requests: int = 5000) -> None:
        url = await self._leader_url()
        for _ in range(max_requests):
            if self.stop.is_set():
                return
            value = b"r%06d" % self.n
            if url is None:
                await asyncio.sleep(0.02)
                url = await self._leader_url()
                continue
            try:
                body_bytes = build_batch([(None, value)], timestamp_ms=int(time.time() * 1000),
                                         producer_id=self.PRODUCER_ID, producer_epoch=0, base_sequence=self.n)
                status, body = await produce(self.session, url, self.topic, self.partition, body_bytes)
            except (aiohttp.ClientError, asyncio.TimeoutError):
                status, body = 0, {"error": "CONNECTION"}
            if status == 200:
                self.acked.append((int(body["base_offset"]), value))
                self.n += 1
            else:
                err = str(body.get("error"))
                self.refused[err] = self.refused.get(err, 0) + 1
                await asyncio.sleep(0.01)
                url = await self._leader_url()


def assert_exactly_once_in_order(records: list[Any], acked: list[tuple[int, bytes]]) -> None:
    by_offset = {r.offset: r.value for r in records}
    assert [r.offset for r in records] == list(range(len(records))), "offsets are not dense from 0"
    for offset, value in acked:
        assert by_offset.get(offset) == value, f"acknowledged record {value!r} not at offset {offset}"
    values = [r.value for r in records]
    assert len(values) == len(set(values)), "a record was written twice"
    acked_values = [v for _, v in acked]
    assert [v for v in values if v in set(acked_values)] == acked_values, "acknowledged records out of order"


async def test_produce_fetch_offsets_metadata_and_errors(two_brokers: LocalCluster) -> None:
    c = two_brokers
    create_topic(c, "rt", leader=1)
    u1, u2 = c.broker_url(1), c.broker_url(2)
    async with aiohttp.ClientSession() as s:
        await wait_serving(s, u1, "rt", 0)
        t0 = int(time.time() * 1000)
        offsets = []
        for i in range(5):
            status, body = await produce(s, u1, "rt", 0, batch([b"k%d-a" % i, b"k%d-b" % i], ts_ms=t0 + i * 10))
            assert status == 200, body
            offsets.append((body["base_offset"], body["last_offset"]))
        assert offsets == [(0, 1), (2, 3), (4, 5), (6, 7), (8, 9)]
        records = await fetch_all(s, u1, "rt", 0)
        assert [r.value for r in records] == [b"k%d-%s" % (i, x) for i in range(5) for x in (b"a", b"b")]
        # offsets: earliest, latest, by timestamp
        async with s.get(f"{u1}/v1/offsets/rt/0", params={"spec": "earliest"}) as r:
            assert (await r.json())["offset"] == 0
        async with s.get(f"{u1}/v1/offsets/rt/0", params={"spec": "latest"}) as r:
            assert (await r.json())["offset"] == 10
        async with s.get(f"{u1}/v1/offsets/rt/0", params={"spec": "timestamp", "timestamp_ms": str(t0 + 25)}) as r:
            assert (await r.json())["offset"] == 6
        async with s.get(f"{u1}/v1/offsets/rt/0", params={"spec": "timestamp", "timestamp_ms": str(t0 + 10**6)}) as r:
            assert (await r.json())["offset"] == -1
        # a long-poll fetch at the end returns when data arrives
        poll = asyncio.ensure_future(s.get(f"{u1}/v1/fetch/rt/0", params={"offset": "10", "max_wait_ms": "5000"}))
        await asyncio.sleep(0.2)
        assert not poll.done()
        status, _ = await produce(s, u1, "rt", 0, batch([b"late"]))
        assert status == 200
        resp = await asyncio.wait_for(poll, 5)
        from stream_storage.batches import read_records
        assert [r.value for r in read_records(await resp.read())] == [b"late"]
        resp.release()
        # the other broker does not lead it
        status, body = await produce(s, u2, "rt", 0, batch([b"x"]))
        assert (status, body["error"]) == (421, "NOT_LEADER_OR_FOLLOWER")
        assert body["details"]["leader_id"] == 1 and body["details"]["leader_url"] == u1
        # stale and future leader epochs
        status, body = await produce(s, u1, "rt", 0, batch([b"x"]), leader_epoch="-5")
        assert body["error"] == "FENCED_LEADER_EPOCH"
        status, body = await produce(s, u1, "rt", 0, batch([b"x"]), leader_epoch="99")
        assert body["error"] == "UNKNOWN_LEADER_EPOCH"
        # bad input: unknown topic, corrupt batch, bad acks, out-of-range fetch
        status, body = await produce(s, u1, "nope", 0, batch([b"x"]))
        assert (status, body["error"]) == (404, "UNKNOWN_TOPIC_OR_PARTITION")
        corrupt = bytearray(batch([b"x"]))
        corrupt[-1] ^= 0xFF
        status, body = await produce(s, u1, "rt", 0, bytes(corrupt))
        assert body["error"] == "CORRUPT_MESSAGE" and "CRC" in body["message"]
        status, body = await produce(s, u1, "rt", 0, b"short")
        assert body["error"] == "CORRUPT_MESSAGE"
        status, body = await produce(s, u1, "rt", 0, batch([b"x"]), acks="7")
        assert body["error"] == "INVALID_REQUIRED_ACKS"
        async with s.get(f"{u1}/v1/fetch/rt/0", params={"offset": "999"}) as r:
            assert r.status == 416 and (await r.json())["error"] == "OFFSET_OUT_OF_RANGE"
        assert len(await fetch_all(s, u1, "rt", 0)) == 11  # nothing changed by the bad requests
        # metadata and log dirs
        async with s.get(f"{u2}/v1/metadata", params={"topics": "rt,missing"}) as r:
            meta = await r.json()
        assert meta["topics"][0]["partitions"][0]["leader"] == 1
        assert meta["topics"][1]["error"] == "UNKNOWN_TOPIC_OR_PARTITION"
        async with s.get(f"{u1}/v1/log-dirs") as r:
            dirs = await r.json()
        log_dir = dirs["brokers"][0]["logDirs"][0]
        assert log_dir["logDir"] == c.broker_log_dirs(1)[0] and log_dir["error"] is None
        assert {"partition": "rt-0", "size": log_dir["partitions"][0]["size"], "offsetLag": 0, "isFuture": False} \
            in log_dir["partitions"] and log_dir["partitions"][0]["size"] > 0
        async with s.post(f"{u1}/v1/log-dirs/alter", json={"partitions": [
                {"topic": "rt", "partition": 0, "log_dir": "relative/dir"},
                {"topic": "rt", "partition": 0, "log_dir": "/not/a/dir/of/this/broker"}]}) as r:
            results = (await r.json())["results"]
        assert [x["error"] for x in results] == ["LOG_DIR_NOT_FOUND", "LOG_DIR_NOT_FOUND"]
        async with s.post(f"{u1}/v1/log-dirs/alter", data=b"{not json") as r:
            assert r.status == 400 and (await r.json())["error"] == "INVALID_REQUEST"
        async with s.get(f"{u1}/v1/nope") as r:
            assert r.status == 404 and (await r.json())["error"] == "INVALID_REQUEST"
        async with s.get(f"{u1}/v1/fetch/rt/0", params={"offset": "x"}) as r:
            assert r.status == 400 and "not an integer" in (await r.json())["message"]
        async with s.get(f"{u1}/metrics") as r:
            text = await r.text()
        assert 'ferry_broker_produce_records_total{partition="0",topic="rt"} 11.0' in text
        assert 'ferry_broker_storage{name="wal_fsyncs_total"}' in text
    # load samples: one object per broker per interval in the bucket, one line per partition
    await asyncio.sleep(1.2)
    store = S3ObjectStore(S3Config(endpoint_url=c.s3_endpoint, bucket=c.bucket))
    samples = []
    for info in await store.list("metrics/broker=1/"):
        samples += decode_samples(await store.get(info.key))
    await store.close()
    rt = [x for x in samples if x.topic == "rt" and x.partition == 0]
    assert rt and sum(x.records_in for x in rt) == 11 and rt[-1].size_bytes > 0
    # S3 requests by billing kind: the broker PUT its data and load samples, each counted with its bytes
    async with aiohttp.ClientSession() as s:
        async with s.get(f"{c.broker_url(1)}/metrics") as r:
            families = {m.name: m for m in text_string_to_metric_families(await r.text())}
    requests = {x.labels["kind"]: x.value for x in families["ferry_broker_s3_requests"].samples
                if x.name.endswith("_total")}
    sent = {x.labels["kind"]: x.value for x in families["ferry_broker_s3_bytes"].samples
            if x.name.endswith("_total") and x.labels["direction"] == "sent"}
    assert requests.get("PUT", 0) >= 2 and sent.get("PUT", 0) > 0


async def test_move_under_load_loses_nothing_and_is_timed(two_brokers: LocalCluster) -> None:
    c = two_brokers
    create_topic(c, "mv", leader=1)
    async with aiohttp.ClientSession() as s:
        await wait_serving(s, c.broker_url(1), "mv", 0)
        w = Writer(s, c, "mv")
        task = asyncio.ensure_future(w.run())
        for target in (2, 1, 2):
            before = len(w.acked)
            deadline = time.monotonic() + 20
            while len(w.acked) < before + 20 and time.monotonic() < deadline:  # writes before each move
                await asyncio.sleep(0.02)
            reassign(c, "mv", 0, target)
            await wait_serving(s, c.broker_url(target), "mv", 0)
        before = len(w.acked)
        deadline = time.monotonic() + 20
        while len(w.acked) < before + 20 and time.monotonic() < deadline:  # and after the last one
            await asyncio.sleep(0.02)
        w.stop.set()
        await task
        assert len(w.acked) >= 60
        assert set(w.refused) <= {"NOT_LEADER_OR_FOLLOWER"}, w.refused
        records = await fetch_all(s, c.broker_url(2), "mv", 0)
        assert_exactly_once_in_order(records, w.acked)
        deadline = time.monotonic() + 10  # the old owner publishes its half of a timeline just after its close
        while True:
            async with s.get(f"{c.broker_url(2)}/v1/moves", params={"topic": "mv"}) as r:
                moves = (await r.json())["moves"]
            if sum(1 for m in moves if m["complete"] and m["from_broker"] is not None) >= 3 or \
                    time.monotonic() > deadline:
                break
            await asyncio.sleep(0.1)
        async with s.get(f"{c.broker_url(1)}/metrics") as r:
            text = await r.text()
        assert 'ferry_broker_move_step_seconds_count{role="source",step="4"}' in text
        assert 'ferry_broker_move_step_seconds_count{role="target",step="total"}' in text
        # each old owner handed its closing object's tail to the new owner over the brokers' API,
        # which kept it: the new owner's step 6 read the partition meta without a GET
        kept = 0.0
        for bid in (1, 2):
            async with s.get(f"{c.broker_url(bid)}/metrics") as r:
                for family in text_string_to_metric_families(await r.text()):
                    for sample in family.samples:
                        if sample.name == "ferry_broker_object_tails_total":
                            assert sample.labels["result"] == "kept", sample
                            kept += sample.value
        assert kept == 3
    complete = [m for m in moves if m["complete"] and m["from_broker"] is not None]
    assert len(complete) == 3, moves
    for m in complete:
        t = m["t_ms"]
        assert all(t[f"t{i}"] is not None for i in range(7)), m
        assert [t[f"t{i}"] for i in range(7)] == sorted(t[f"t{i}"] for i in range(7)), m
        assert m["clean"] is True and m["total_ms"] == t["t6"] - t["t0"]
    assert {(m["from_broker"], m["to_broker"]) for m in complete} == {(1, 2), (2, 1)}


async def test_controlled_shutdown_moves_partitions_then_restart(two_brokers: LocalCluster) -> None:
    c = two_brokers
    create_topic(c, "cs", leader=1, partitions=2)
    async with aiohttp.ClientSession() as s:
        for p in (0, 1):
            await wait_serving(s, c.broker_url(1), "cs", p)
            status, _ = await produce(s, c.broker_url(1), "cs", p, batch([b"before-%d" % p]))
            assert status == 200
        assert c.terminate_broker(1) == 0  # SIGTERM: moves its partitions away, then exits
        for p in (0, 1):
            await wait_serving(s, c.broker_url(2), "cs", p)
            status, _ = await produce(s, c.broker_url(2), "cs", p, batch([b"after-%d" % p]))
            assert status == 200
        log_text = open(c.broker_log_path(1)).read()
        assert "controlled shutdown" in log_text and "closed cs-0" in log_text
        c.restart_broker(1)
        await wait_running(s, c.broker_url(1))
        reassign(c, "cs", 0, 1)
        await wait_serving(s, c.broker_url(1), "cs", 0)
        recs = await fetch_all(s, c.broker_url(1), "cs", 0)
        assert [r.value for r in recs] == [b"before-0", b"after-0"]
        recs = await fetch_all(s, c.broker_url(2), "cs", 1)
        assert [r.value for r in recs] == [b"before-1", b"after-1"]


@pytest.fixture
def wal_only_cluster(tmp_path):  # type: ignore[no-untyped-def]
    """Uploads only on close, so that a killed broker's acknowledged data lives in its WAL alone."""
    c = LocalCluster(str(tmp_path / "c"), brokers=2, log_dirs_per_broker=2, broker_overrides=dict(
        FAST, storage={"upload_interval_ms": 600000, "upload_bytes": 256 * 1024 * 1024}))
    c.start()
    yield c
    c.stop()


async def until(check: Any, timeout_s: float = 10.0) -> None:
    """Poll ``check`` (a read of any controller's image, which may lag the leader's a little)."""
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.1)


async def test_killed_owner_recovered_from_its_wal_then_paused_owner_steps_down(wal_only_cluster: LocalCluster) -> None:
    c = wal_only_cluster
    create_topic(c, "kw", leader=1)
    async with aiohttp.ClientSession() as s:
        await wait_serving(s, c.broker_url(1), "kw", 0)
        acked = []
        for i in range(30):
            status, body = await produce(s, c.broker_url(1), "kw", 0, batch([b"w%d" % i]))
            assert status == 200
            acked.append((body["base_offset"], b"w%d" % i))
        killed_epoch = c.controller_read("describe_cluster")["brokers"]
        killed_epoch = next(b["broker_epoch"] for b in killed_epoch if b["broker_id"] == 1)
        c.kill_broker(1)  # kill -9: nothing of it reached S3
        await wait_serving(s, c.broker_url(2), "kw", 0, timeout_s=30)
        # fenced on broker 2's proof that the process is gone (its WAL lock was free), not on silence
        await until(lambda: c.controller_read("get_kv", {"key": "broker/1/dead_epoch"})["value"] == str(killed_epoch))
        recs = await fetch_all(s, c.broker_url(2), "kw", 0)
        assert_exactly_once_in_order(recs, acked)
        async with s.get(f"{c.broker_url(2)}/v1/moves", params={"topic": "kw"}) as r:
            moves = (await r.json())["moves"]
        assert any(m["to_broker"] == 2 and m["clean"] is False and m["complete"] for m in moves), moves
        # AlterReplicaLogDirs on broker 2: the partition's WAL and streams follow it to the other dir
        async with s.get(f"{c.broker_url(2)}/v1/log-dirs") as r:
            dirs = (await r.json())["brokers"][0]["logDirs"]
        here = next(d["logDir"] for d in dirs if d["partitions"])
        there = next(d["logDir"] for d in dirs if d["logDir"] != here)
        async with s.post(f"{c.broker_url(2)}/v1/log-dirs/alter",
                          json={"partitions": [{"topic": "kw", "partition": 0, "log_dir": there}]}) as r:
            assert (await r.json())["results"][0]["error"] is None
        async with s.get(f"{c.broker_url(2)}/v1/log-dirs") as r:
            dirs = (await r.json())["brokers"][0]["logDirs"]
        assert [p["partition"] for d in dirs if d["logDir"] == there for p in d["partitions"]] == ["kw-0"]
        await wait_serving(s, c.broker_url(2), "kw", 0)
        status, body = await produce(s, c.broker_url(2), "kw", 0, batch([b"moved-dir"]))
        assert status == 200
        acked.append((body["base_offset"], b"moved-dir"))

        # now broker 2 owns it; bring broker 1 back, move the partition there, then freeze it
        c.restart_broker(1)
        await wait_running(s, c.broker_url(1))
        reassign(c, "kw", 0, 1)
        await wait_serving(s, c.broker_url(1), "kw", 0)
        for i in range(30, 40):
            status, body = await produce(s, c.broker_url(1), "kw", 0, batch([b"w%d" % i]))
            assert status == 200
            acked.append((body["base_offset"], b"w%d" % i))
        c.pause_broker(1)  # SIGSTOP: the controller fences it and gives the partition to broker 2
        await wait_serving(s, c.broker_url(2), "kw", 0, timeout_s=30)
        status, body = await produce(s, c.broker_url(2), "kw", 0, batch([b"w40"]))
        assert status == 200
        acked.append((body["base_offset"], b"w40"))
        # a paused broker keeps its lock: fenced by its session's expiry, never reported dead
        assert c.controller_read("get_kv", {"key": "broker/1/dead_epoch"})["value"] is None
        c.resume_broker(1)
        # the resumed old owner must not acknowledge anything: it steps down
        for _ in range(20):
            status, body = await produce(s, c.broker_url(1), "kw", 0, batch([b"stale"]))
            assert status != 200, body
            assert body["error"] == "NOT_LEADER_OR_FOLLOWER"
            await asyncio.sleep(0.05)
        recs = await fetch_all(s, c.broker_url(2), "kw", 0)
        assert_exactly_once_in_order(recs, acked)
        assert b"stale" not in {r.value for r in recs}
