"""Seeded hostile Kafka frames against a live broker: no crash, no hang, nothing stored, and the
broker keeps serving real clients afterwards."""
from __future__ import annotations

import asyncio
import random
import struct
import time

import pytest
from kafka.protocol.metadata.api_versions import ApiVersionsRequest, ApiVersionsResponse
from kafka.protocol.producer.produce import ProduceRequest

from stream_storage.batches import build_batch
from tests.kafka.test_clients import Acked, ConfluentClient, assert_read_back_exactly, read_all
from tests.kafka.test_wire import _mutations, frame, metadata, produce
from tools.admin import Admin
from tools.client import TopicPartition

pytestmark = pytest.mark.integration

FRAMES = 10_000
PER_CONNECTION = 50


def api_versions(correlation_id: int) -> bytes:
    return frame(ApiVersionsRequest[3](client_software_name="fuzz", client_software_version="1"), 3, correlation_id)


def corrupt_batches(rng: random.Random) -> list[bytes]:
    """Produce requests whose framing is fine but whose record batch is not (the validator's classes)."""
    out = []
    for _ in range(20):
        batch = bytearray(build_batch([(b"k", b"v" * rng.randrange(1, 50))] * rng.randrange(1, 5)))
        spot = rng.randrange(21, len(batch))  # attributes onwards: CRC-covered
        batch[spot] ^= 1 << rng.randrange(8)
        T = ProduceRequest.TopicProduceData
        body = ProduceRequest[9](transactional_id=None, acks=-1, timeout_ms=1000, topic_data=[
            T(name="fz", partition_data=[T.PartitionProduceData(index=0, records=bytes(batch))])])
        out.append(frame(body, 9))
    return out


async def one_connection(port: int, frames: list[bytes]) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        for f in frames:
            writer.write(f)
        writer.write(api_versions(777))
        await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
        return await asyncio.wait_for(reader.read(), 10)  # the broker closes: no hang
    except OSError:  # the broker closed the connection first (a violation): expected
        return b""
    finally:
        writer.close()


async def test_ten_thousand_hostile_frames_change_nothing_and_the_broker_serves_on(shared_cluster) -> None:
    cluster = shared_cluster
    async with Admin(bootstrap_controllers=cluster.controller_bootstrap) as admin:
        await admin.create_topic("fz", 1, assignments={0: [1]})
        await admin.wait_for_leader(TopicPartition("fz", 0), 1)
        before = sorted((await admin.describe_topics()).keys())
        acked = Acked()
        client = ConfluentClient(cluster.kafka_bootstrap)
        await asyncio.to_thread(client.produce, "fz", [(0, b"a%03d" % i) for i in range(20)], acked, 1000.0)
        rng = random.Random(20261124)
        seeds = [metadata(v) for v in (0, 9, 12)] + [produce(v) for v in (3, 9, 11)] + corrupt_batches(rng)
        port = cluster.kafka_ports[1]
        frames = [_mutations(rng, seeds) for _ in range(FRAMES)] + corrupt_batches(rng)
        started = time.monotonic()
        chunks = [frames[i:i + PER_CONNECTION] for i in range(0, len(frames), PER_CONNECTION)]
        for i in range(0, len(chunks), 8):
            await asyncio.gather(*(one_connection(port, c) for c in chunks[i:i + 8]))
        elapsed = time.monotonic() - started
        assert elapsed < 300
        # still serving: a fresh connection gets ApiVersions at once
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(api_versions(5))
        await writer.drain()
        (size,) = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), 5))
        answer = ApiVersionsResponse.decode(await reader.readexactly(size), version=3, header=True)
        writer.close()
        assert answer.error_code == 0 and answer.header.correlation_id == 5
        assert cluster.broker_procs[1].poll() is None  # no crash
        # nothing stored and no state changed: the topic holds exactly what real clients acknowledged
        await asyncio.to_thread(client.produce, "fz", [(0, b"b%03d" % i) for i in range(20)], acked, 1000.0)
        assert acked.errors == [] and acked.count() == 40
        got = await asyncio.to_thread(read_all, cluster.kafka_bootstrap, "fz", 1, 40)
        assert_read_back_exactly(acked, got)
        assert len(got[0]) == 40, "a hostile frame stored records"
        # (a real consumer's first FindCoordinator creates __consumer_offsets: that is no fuzz frame's doing)
        assert [t for t in sorted((await admin.describe_topics()).keys()) if not t.startswith("__")] == before
    with open(cluster.broker_log_path(1), encoding="utf-8") as log:
        text = log.read()
    assert "Kafka request failed" not in text and "Traceback" not in text
