"""Object compaction over real processes, interleaved with moves and a kill -9 of the owner under
acknowledged produce: every acknowledged record is read back exactly once, in order; the
partition ends up in a bounded number of objects, each of them in the bucket."""
from __future__ import annotations

import asyncio
import time

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.broker.conftest import FAST
from stream_storage.batches import build_batch
from tests.broker.helpers import (controller_write, create_topic, fetch_all, produce, reassign, wait_running,
                                  wait_serving)
from tests.broker.test_broker_integration import Writer, assert_exactly_once_in_order
from tests.broker.test_retention import bucket_keys, data_stream
from tools.cluster import LocalCluster

TARGET_BYTES = 16 * 1024


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):  # type: ignore[no-untyped-def]
    storage = {"upload_bytes": 2048, "upload_interval_ms": 20, "compaction_interval_ms": 100,
               "compaction_min_age_ms": 0, "compaction_target_bytes": TARGET_BYTES,
               "compaction_delete_delay_ms": 300, "compaction_max_small_objects": 8}
    c = LocalCluster(str(tmp_path_factory.mktemp("compaction")), controllers=1, brokers=2,
                     broker_overrides=dict(FAST, storage=storage, gc_interval_ms=500, gc_grace_ms=3000),
                     s3_profile="latency:1,4")
    c.start()
    yield c
    c.stop()


async def compaction_runs(s: aiohttp.ClientSession, url: str) -> float:
    async with s.get(f"{url}/metrics") as r:
        text = await r.text()
    for family in text_string_to_metric_families(text):
        if family.name == "ferry_broker_storage":
            for sample in family.samples:
                if sample.labels.get("name") == "compaction_runs_total":
                    return float(sample.value)
    return 0.0


async def wait_acks(w: Writer, more: int, timeout_s: float = 20) -> None:
    target, deadline = len(w.acked) + more, time.monotonic() + timeout_s
    while len(w.acked) < target and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    assert len(w.acked) >= target, (len(w.acked), w.refused)


async def test_compaction_with_moves_and_kill_9_loses_and_duplicates_nothing(cluster: LocalCluster) -> None:
    c = cluster
    create_topic(c, "cm", leader=1)
    async with aiohttp.ClientSession() as s:
        await wait_serving(s, c.broker_url(1), "cm", 0)
        w = Writer(s, c, "cm")
        task = asyncio.ensure_future(w.run(max_requests=100_000))
        try:
            deadline = time.monotonic() + 20
            while await compaction_runs(s, c.broker_url(1)) < 2:
                assert time.monotonic() < deadline, "broker 1 never compacted"
                await asyncio.sleep(0.1)
            await wait_acks(w, 50)
            reassign(c, "cm", 0, 2)
            await wait_serving(s, c.broker_url(2), "cm", 0)
            await wait_acks(w, 50)
            reassign(c, "cm", 0, 1)
            await wait_serving(s, c.broker_url(1), "cm", 0)
            await wait_acks(w, 80)
            c.kill_broker(1)  # kill -9 of the owner while it uploads, commits and compacts
            await wait_serving(s, c.broker_url(2), "cm", 0, timeout_s=30)
            await wait_acks(w, 80)
            deadline = time.monotonic() + 20
            while await compaction_runs(s, c.broker_url(2)) < 2:
                assert time.monotonic() < deadline, "broker 2 never compacted"
                await asyncio.sleep(0.1)
            c.restart_broker(1)
            await wait_running(s, c.broker_url(1))
            reassign(c, "cm", 0, 1)
            await wait_serving(s, c.broker_url(1), "cm", 0)
            await wait_acks(w, 50)
        finally:
            w.stop.set()
            await task
        assert set(w.refused) <= {"NOT_LEADER_OR_FOLLOWER", "CONNECTION", "LEADER_NOT_AVAILABLE"}, w.refused
        records = await fetch_all(s, c.broker_url(1), "cm", 0)
        assert_exactly_once_in_order(records, w.acked)
        # settled: the partition is held in few objects, every one of them in the bucket
        await asyncio.sleep(1.0)
        deadline = time.monotonic() + 20
        while True:
            stream = data_stream(c, "cm", 0)
            total = sum(o.range_bytes for o in stream.objects)
            bound = 2 * total / TARGET_BYTES + 8 + 3  # large ones, the small tail, young ones
            if len(stream.objects) <= bound:
                break
            assert time.monotonic() < deadline, (len(stream.objects), bound)
            await asyncio.sleep(0.2)
        assert {o.object_key for o in stream.objects} <= await bucket_keys(c)
        records = await fetch_all(s, c.broker_url(1), "cm", 0)
        assert_exactly_once_in_order(records, w.acked)


async def test_a_compacted_topic_keeps_the_latest_value_of_each_key(cluster: LocalCluster) -> None:
    c = cluster
    reply = controller_write(c, "create_topics", {"topics": [{
        "name": "kc", "num_partitions": 1, "replication_factor": 1, "assignments": {"0": [2]},
        "configs": {"cleanup.policy": "compact", "delete.retention.ms": "0"}}]})
    assert not reply["topics"][0].get("error"), reply
    async with aiohttp.ClientSession() as s:
        url = c.broker_url(2)
        await wait_serving(s, url, "kc", 0)
        latest: dict[bytes, bytes | None] = {}
        for round_ in range(6):
            for k in range(8):
                key = b"k%d" % k
                value = None if (round_ == 4 and k % 4 == 0) else b"v%d-%d" % (k, round_)
                body = build_batch([(key, value)])
                status, answer = await produce(s, url, "kc", 0, body)
                assert status == 200, answer
                latest[key] = value
        deadline = time.monotonic() + 30
        while True:
            records = await fetch_all(s, url, "kc", 0)
            keys = [r.key for r in records]
            if len(keys) == len(set(keys)) or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.2)
        assert len(keys) == len(set(keys)), f"superseded values survived: {len(keys)} records"
        # the latest value of each key, at its own offset, in offset order; tombstones removed
        # (delete.retention.ms 0) except where a later value came
        state = {r.key: r.value for r in records}
        assert state == {k: v for k, v in latest.items() if v is not None}
        assert [r.offset for r in records] == sorted(r.offset for r in records)
        assert records[-1].offset == 47
