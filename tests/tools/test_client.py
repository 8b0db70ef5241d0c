"""Producer and consumer against fake brokers: batching, acknowledged offsets, retries, timeouts."""
from __future__ import annotations

import asyncio

import pytest

from metadata_quorum.kernel.errors import ErrorCode, FerryError
from tests.tools.fake_broker import FakeCluster, start_fake_broker
from tools.client import Consumer, Producer, TopicPartition, decode_batches, encode_batch, read_all


@pytest.fixture
async def fake():
    cluster = FakeCluster()
    runners = [await start_fake_broker(cluster, 1), await start_fake_broker(cluster, 2)]
    yield cluster
    for r in runners:
        await r.cleanup()


def test_encode_decode_round_trip_skips_records_before_start():
    data = encode_batch([(b"k%d" % i, b"v%d" % i, [("h", b"x")], 1000 + i) for i in range(5)])
    recs = decode_batches("t", 0, data, start_offset=2)
    assert [r.offset for r in recs] == [2, 3, 4]
    assert [r.value for r in recs] == [b"v2", b"v3", b"v4"]
    assert recs[0].key == b"k2" and recs[0].headers == (("h", b"x"),) and recs[0].timestamp_ms == 1002


async def test_acknowledged_offsets_are_consecutive_and_read_back_in_order(fake):
    async with Producer(list(fake.urls.values()), linger_ms=5) as producer:
        futures = [await producer.send("t", b"%d" % i, partition=0) for i in range(200)]
        metas = await asyncio.gather(*futures)
    assert [m.offset for m in metas] == list(range(200))
    assert fake.produce_calls < 200  # records were batched
    got = await read_all(list(fake.urls.values()), [TopicPartition("t", 0)])
    assert [(r.offset, r.value) for r in got[TopicPartition("t", 0)]] == [(i, b"%d" % i) for i in range(200)]


async def test_producer_follows_the_new_leader_after_not_leader(fake):
    async with Producer(list(fake.urls.values()), linger_ms=1) as producer:
        first = [await producer.send_and_wait("t", b"a%d" % i, partition=1) for i in range(10)]
        fake.leader = 2  # a move: broker 1 now answers NOT_LEADER_OR_FOLLOWER
        fake.leader_epoch = 1
        rest = [await producer.send_and_wait("t", b"b%d" % i, partition=1) for i in range(10)]
        assert producer.retries >= 1
    assert {m.broker_id for m in first} == {1} and {m.broker_id for m in rest} == {2}
    offsets = [m.offset for m in first + rest]
    assert offsets == list(range(20))
    got = await read_all(list(fake.urls.values()), [TopicPartition("t", 1)])
    assert [r.value for r in got[TopicPartition("t", 1)]] == [b"a%d" % i for i in range(10)] + [b"b%d" % i for i in range(10)]


async def test_lost_answer_is_retried_without_duplicating(fake):
    async with Producer(list(fake.urls.values()), linger_ms=0) as producer:
        await producer.send_and_wait("t", b"x", partition=0)
        fake.lose_next_answer = True
        meta = await producer.send_and_wait("t", b"y", partition=0)
        assert producer.retries >= 1
    assert meta.offset == 1
    got = await read_all(list(fake.urls.values()), [TopicPartition("t", 0)])
    assert [r.value for r in got[TopicPartition("t", 0)]] == [b"x", b"y"]


async def test_delivery_timeout_fails_the_future(fake):
    fake.produce_error = {1: ErrorCode.LEADER_NOT_AVAILABLE, 2: ErrorCode.LEADER_NOT_AVAILABLE}
    async with Producer(list(fake.urls.values()), delivery_timeout_ms=300, retry_backoff_ms=20) as producer:
        fut = await producer.send("t", b"z", partition=0)
        with pytest.raises(FerryError) as info:
            await asyncio.wait_for(fut, 5)
    assert info.value.error == ErrorCode.REQUEST_TIMED_OUT
    assert fake.next_offset.get(0, 0) == 0


async def test_non_retriable_error_fails_at_once(fake):
    fake.produce_error = {1: ErrorCode.MESSAGE_TOO_LARGE}
    async with Producer(list(fake.urls.values()), delivery_timeout_ms=60_000) as producer:
        with pytest.raises(FerryError) as info:
            await asyncio.wait_for(producer.send_and_wait("t", b"z", partition=0), 5)
    assert info.value.error == ErrorCode.MESSAGE_TOO_LARGE


async def test_unknown_topic_is_reported(fake):
    async with Producer(list(fake.urls.values())) as producer:
        with pytest.raises(FerryError) as info:
            await producer.send("nope", b"z")
    assert info.value.error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


async def test_consumer_seek_and_poll(fake):
    async with Producer(list(fake.urls.values())) as producer:
        for i in range(30):
            await producer.send("t", b"%d" % i, partition=0)
        await producer.flush()
    async with Consumer(list(fake.urls.values()), max_bytes=64) as consumer:
        tp = TopicPartition("t", 0)
        consumer.assign([tp])
        consumer.seek(tp, 25)
        got = []
        for _ in range(20):
            got += await consumer.poll(0)
            if consumer.position(tp) >= 30:
                break
    assert [r.offset for r in got] == [25, 26, 27, 28, 29]


async def test_keyed_records_use_kafkas_murmur2_partitioner(fake):
    from kafka.partitioner.default import murmur2
    async with Producer(list(fake.urls.values())) as producer:
        metas = [await producer.send_and_wait("t", b"v", key=b"key-%d" % i) for i in range(20)]
    assert [m.partition for m in metas] == [(murmur2(b"key-%d" % i) & 0x7FFFFFFF) % 2 for i in range(20)]


async def test_consumer_stops_at_a_corrupt_batch_or_skips_it_when_asked(fake):
    from tools.client import CorruptSkip

    good = [encode_batch([(None, b"a%d" % i, None, None) for i in range(2)]),
            encode_batch([(None, b"x%d" % i, None, None) for i in range(3)]),
            encode_batch([(None, b"b", None, None)])]
    log = bytearray()
    for base, body in zip((0, 2, 5), good, strict=True):
        batch = bytearray(body)
        batch[0:8] = base.to_bytes(8, "big")
        log += batch
    log[len(good[0]) + len(good[1]) - 2] ^= 0xFF  # the second batch's records, after its CRC
    fake.logs[0], fake.next_offset[0] = log, 6
    tp = TopicPartition("t", 0)
    async with Consumer(list(fake.urls.values())) as consumer:
        consumer.assign([tp])
        assert [r.value for r in await consumer.poll(0)] == [b"a0", b"a1"]
        with pytest.raises(FerryError) as info:
            await consumer.poll(0)
        assert info.value.error is ErrorCode.CORRUPT_MESSAGE and "offsets 2..4" in info.value.message
        assert consumer.position(tp) == 2
    async with Consumer(list(fake.urls.values()), skip_corrupt=True) as consumer:
        consumer.assign([tp])
        got = []
        for _ in range(5):
            got += await consumer.poll(0)
        assert [(r.offset, r.value) for r in got] == [(0, b"a0"), (1, b"a1"), (5, b"b")]
        assert [(s.tp, s.base_offset, s.next_offset) for s in consumer.skipped] == [(tp, 2, 5)]
        assert isinstance(consumer.skipped[0], CorruptSkip)
