"""Retention and DeleteRecords over real processes (moto behind the latency/error proxy, a
controller, two brokers): the log start offset moves, records below it are gone from the
metadata image and from S3, consumers below it get OFFSET_OUT_OF_RANGE, and everything at or
above it is still read back exactly once, in order — also after the partition moves."""
from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import urllib.request
from typing import Any

import aiohttp
import pytest
from kafka import KafkaAdminClient
from kafka import TopicPartition as KafkaTopicPartition
from kafka.errors import OffsetOutOfRangeError

from metadata_quorum.image import MetadataImage
from metadata_quorum.records import decode_record, partition_stream_key
from stream_storage.config import S3Config
from stream_storage.object_store import ObjectStoreError
from stream_storage.s3_store import S3ObjectStore
from tests.broker.conftest import FAST
from tests.broker.helpers import batch, controller_write, create_topic, fetch_all, produce, reassign, wait_serving
from tools.cluster import ROOT, LocalCluster

RECORD = b"r" * 1000
OVERRIDES = dict(FAST, retention_check_interval_ms=200, gc_interval_ms=300, gc_grace_ms=2000,
                 storage={"upload_bytes": 24 * 1024, "upload_interval_ms": 50})


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):  # type: ignore[no-untyped-def]
    # 2 % of S3 requests fail (SlowDown before, InternalError after applying): retries must cope
    c = LocalCluster(str(tmp_path_factory.mktemp("retention")), controllers=1, brokers=2,
                     broker_overrides=OVERRIDES, s3_profile="latency:1,5,0.02")
    c.start()
    yield c
    c.stop()


def image_of(c: LocalCluster) -> MetadataImage:
    assert c.quorum is not None
    leader = c.controller_leader()
    with urllib.request.urlopen(f"{c.quorum.url(leader)}/v1/snapshot", timeout=10) as r:
        body = json.loads(r.read())
    return MetadataImage.from_records([decode_record(x) for x in body["records"]])


def data_stream(c: LocalCluster, topic: str, partition: int) -> Any:
    image = image_of(c)
    topic_id = image.topics.by_name[topic]
    return image.streams.streams[int(image.kv[partition_stream_key(topic_id, partition, "data")])]


async def past_injected_faults(call: Any) -> Any:
    """The test's own S3 requests go through the cluster's faulty endpoint too: retry them."""
    for attempt in range(10):
        try:
            return await call()
        except ObjectStoreError:
            if attempt == 9:
                raise
            await asyncio.sleep(0.05)


async def bucket_keys(c: LocalCluster) -> set[str]:
    store = S3ObjectStore(S3Config(endpoint_url=c.s3_endpoint, bucket=c.bucket))
    try:
        return {o.key for o in await past_injected_faults(lambda: store.list("streams/"))}
    finally:
        await store.close()


async def fill(s: aiohttp.ClientSession, url: str, topic: str, batches_count: int, tag: str) -> list[bytes]:
    values = []
    for i in range(batches_count):
        vs = [f"{tag}-{i}-{j}".encode() + RECORD for j in range(8)]
        status, body = await produce(s, url, topic, 0, batch(vs))
        assert status == 200, body
        values += vs
    return values


async def wait_objects(c: LocalCluster, topic: str, at_least: int, end_offset: int) -> Any:
    deadline = time.monotonic() + 20
    while True:
        stream = data_stream(c, topic, 0)
        if len(stream.objects) >= at_least and stream.end_offset >= end_offset:
            return stream
        assert time.monotonic() < deadline, stream
        await asyncio.sleep(0.1)


async def test_delete_records_over_http_cli_and_kafka_then_a_move(cluster: LocalCluster, tmp_path) -> None:
    c = cluster
    create_topic(c, "dr", leader=1)
    async with aiohttp.ClientSession() as s:
        u1, u2 = c.broker_url(1), c.broker_url(2)
        await wait_serving(s, u1, "dr", 0)
        values = await fill(s, u1, "dr", 30, "a")  # 240 records, ~8 KiB a batch: several objects
        stream = await wait_objects(c, "dr", 4, len(values))
        objects_before = list(stream.objects)
        keys_before = await bucket_keys(c)
        assert {o.object_key for o in objects_before} <= keys_before

        # bad input changes nothing
        async with s.post(f"{u1}/v1/delete-records", json={"partitions": [
                {"topic": "dr", "partition": 0, "offset": 10_000}]}) as r:
            res = (await r.json())["partitions"][0]
        assert res["error"] == "OFFSET_OUT_OF_RANGE" and res["low_watermark"] == -1
        async with s.post(f"{u2}/v1/delete-records", json={"partitions": [
                {"topic": "dr", "partition": 0, "offset": 5}]}) as r:
            assert (await r.json())["partitions"][0]["error"] == "NOT_LEADER_OR_FOLLOWER"
        async with s.post(f"{u1}/v1/delete-records", json={"partitions": [{"topic": "dr", "partition": "0"}]}) as r:
            assert r.status == 400 and (await r.json())["error"] == "INVALID_REQUEST"
        assert data_stream(c, "dr", 0).start_offset == 0

        # HTTP: to the end of the second object (two whole objects go)
        cut = objects_before[1].end_offset
        async with s.post(f"{u1}/v1/delete-records", json={"partitions": [
                {"topic": "dr", "partition": 0, "offset": cut}]}) as r:
            res = (await r.json())["partitions"][0]
        assert res == {"topic": "dr", "partition": 0, "low_watermark": cut, "error": None}
        stream = data_stream(c, "dr", 0)
        assert stream.start_offset == cut
        assert all(o.end_offset > cut for o in stream.objects)
        gone = {o.object_key for o in objects_before[:2]}
        assert not gone & await bucket_keys(c), "objects wholly below the start must leave S3"
        async with s.get(f"{u1}/v1/fetch/dr/0", params={"offset": str(cut - 1)}) as r:
            assert r.status == 416 and (await r.json())["error"] == "OFFSET_OUT_OF_RANGE"
        async with s.get(f"{u1}/v1/offsets/dr/0", params={"spec": "earliest"}) as r:
            assert (await r.json())["offset"] == cut
        records = await fetch_all(s, u1, "dr", 0, start=cut)
        assert [r.value for r in records] == values[cut:]

        # ferry delete-records with Kafka's offset JSON file: mid-object (offsets, not objects)
        mid = cut + 5
        spec = tmp_path / "offsets.json"
        spec.write_text(json.dumps({"partitions": [{"topic": "dr", "partition": 0, "offset": mid}], "version": 1}))
        env = dict(os.environ, PYTHONPATH=ROOT)
        proc = subprocess.run([sys.executable, "-m", "tools.cli", "delete-records", "--bootstrap-server", u2,
                               "--offset-json-file", str(spec)], capture_output=True, text=True, timeout=60, env=env,
                              cwd=ROOT)
        assert proc.returncode == 0, proc.stderr
        assert f"partition: dr-0\tlow_watermark: {mid}" in proc.stdout
        bad = tmp_path / "bad.json"
        bad.write_text(json.dumps({"partitions": [{"topic": "dr", "partition": 0, "offset": 1},
                                                  {"topic": "dr", "partition": 0, "offset": 2}], "version": 1}))
        proc = subprocess.run([sys.executable, "-m", "tools.cli", "delete-records", "--bootstrap-server", u2,
                               "--offset-json-file", str(bad)], capture_output=True, text=True, timeout=60, env=env,
                              cwd=ROOT)
        assert proc.returncode == 1 and "duplicate" in proc.stderr
        records = await fetch_all(s, u1, "dr", 0, start=mid)
        assert [r.value for r in records if r.offset >= mid] == values[mid:]

        # the Kafka API, as a Kafka user calls it (kafka-python's admin client)
        admin = KafkaAdminClient(bootstrap_servers=c.kafka_bootstrap, request_timeout_ms=20_000)
        try:
            answer = admin.delete_records({KafkaTopicPartition("dr", 0): cut + 40}, timeout_ms=20_000)
            assert answer[KafkaTopicPartition("dr", 0)]["low_watermark"] == cut + 40
            with pytest.raises(OffsetOutOfRangeError):
                admin.delete_records({KafkaTopicPartition("dr", 0): 10**9}, timeout_ms=20_000)
        finally:
            admin.close()
        assert data_stream(c, "dr", 0).start_offset == cut + 40

        # the new owner serves from the new start: a move keeps the log start offset
        reassign(c, "dr", 0, 2)
        await wait_serving(s, u2, "dr", 0)
        async with s.get(f"{u2}/v1/offsets/dr/0", params={"spec": "earliest"}) as r:
            assert (await r.json())["offset"] == cut + 40
        more = await fill(s, u2, "dr", 3, "b")
        records = await fetch_all(s, u2, "dr", 0, start=cut + 40)
        assert [r.value for r in records] == (values + more)[cut + 40:]


async def test_retention_bytes_and_ms_trim_whole_objects(cluster: LocalCluster) -> None:
    c = cluster
    create_topic(c, "rb", leader=1)
    async with aiohttp.ClientSession() as s:
        u1 = c.broker_url(1)
        await wait_serving(s, u1, "rb", 0)
        values = await fill(s, u1, "rb", 40, "r")
        await wait_objects(c, "rb", 5, len(values))
        total = sum(o.range_bytes for o in data_stream(c, "rb", 0).objects)
        assert total > 0
        limit = total // 3
        controller_write(c, "alter_configs", {"resources": [{"type": "topic", "name": "rb",
                                                             "configs": {"retention.bytes": str(limit)}}]})
        deadline = time.monotonic() + 20
        while True:
            stream = data_stream(c, "rb", 0)
            kept = sum(o.range_bytes for o in stream.objects)
            if stream.start_offset > 0 and kept < total:
                break
            assert time.monotonic() < deadline, stream
            await asyncio.sleep(0.1)
        await asyncio.sleep(0.6)  # a few more passes change nothing more
        stream = data_stream(c, "rb", 0)
        kept = sum(o.range_bytes for o in stream.objects)
        # Kafka's rule: at least retention.bytes stays; less than that plus the oldest object kept
        assert limit <= kept < limit + stream.objects[0].range_bytes
        start = stream.start_offset
        assert start == stream.objects[0].start_offset
        records = await fetch_all(s, u1, "rb", 0, start=start)
        assert [r.value for r in records] == values[start:]
        keys = await bucket_keys(c)
        assert {o.object_key for o in stream.objects} <= keys

        # retention.ms: records produced with old timestamps expire once committed
        controller_write(c, "alter_configs", {"resources": [{"type": "topic", "name": "rb",
                                                             "configs": {"retention.bytes": "-1",
                                                                         "retention.ms": "60000"}}]})
        await asyncio.sleep(0.6)
        assert data_stream(c, "rb", 0).start_offset == start, "fresh records must not expire"
        create_topic(c, "rt-old", leader=1)
        await wait_serving(s, u1, "rt-old", 0)
        old_ts = int(time.time() * 1000) - 3_600_000
        for i in range(20):
            status, body = await produce(s, u1, "rt-old", 0, batch([b"old-%d" % i + RECORD] * 8, ts_ms=old_ts + i))
            assert status == 200, body
        for i in range(3):
            status, body = await produce(s, u1, "rt-old", 0, batch([b"new-%d" % i + RECORD] * 8))
            assert status == 200, body
        controller_write(c, "alter_configs", {"resources": [{"type": "topic", "name": "rt-old",
                                                             "configs": {"retention.ms": "600000"}}]})
        deadline = time.monotonic() + 20
        while data_stream(c, "rt-old", 0).start_offset == 0:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.1)
        await asyncio.sleep(0.6)
        stream = data_stream(c, "rt-old", 0)
        assert 0 < stream.start_offset <= 160  # only the old batches, whole objects of them
        records = await fetch_all(s, u1, "rt-old", 0, start=stream.start_offset)
        assert [r.value[:5] for r in records][-24:] == [b"new-0"] * 8 + [b"new-1"] * 8 + [b"new-2"] * 8


async def test_garbage_collection_deletes_only_unnamed_objects(cluster: LocalCluster) -> None:
    """An object a crashed broker PUT but never committed leaves the bucket after the grace;
    every object the metadata names stays, under produce."""
    c = cluster
    create_topic(c, "gc", leader=2)
    store = S3ObjectStore(S3Config(endpoint_url=c.s3_endpoint, bucket=c.bucket))
    orphan = f"streams/9/{int(time.time() * 1000) - 5000:013d}-crashed"
    young = f"streams/9/{int(time.time() * 1000) + 60_000:013d}-in-flight"
    await past_injected_faults(lambda: store.put(orphan, b"never committed"))
    await past_injected_faults(lambda: store.put(young, b"an upload that may still commit"))
    async with aiohttp.ClientSession() as s:
        await wait_serving(s, c.broker_url(2), "gc", 0)
        values = await fill(s, c.broker_url(2), "gc", 20, "g")
        deadline = time.monotonic() + 20
        while orphan in await bucket_keys(c):
            assert time.monotonic() < deadline, "the orphan outlived its grace"
            await asyncio.sleep(0.2)
        keys = await bucket_keys(c)
        image = image_of(c)
        named = {k for k, refs in image.streams.object_refs.items() if refs}
        assert named <= keys and young in keys
        records = await fetch_all(s, c.broker_url(2), "gc", 0)
        assert [r.value for r in records] == values
    await past_injected_faults(lambda: store.delete([young]))
    await store.close()
