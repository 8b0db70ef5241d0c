"""The load, the unavailability measure and the read-back check, against fake brokers.

The read-back check must fail when a record is lost, duplicated or moved: these tests break the
fake log on purpose and expect the check to say so.
"""
from __future__ import annotations

import asyncio

import pytest

from stream_storage import batches
from tests.tools.fake_broker import FakeCluster, start_fake_broker
from tools.client import TopicPartition
from tools.move_workload import Ack, ProduceLoad, check_read_back, percentile, unavailability_ms


@pytest.fixture
async def fake():
    cluster = FakeCluster(num_partitions=1)
    runners = [await start_fake_broker(cluster, 1), await start_fake_broker(cluster, 2)]
    yield cluster
    for r in runners:
        await r.cleanup()


def test_unavailability_is_last_old_ack_to_first_new_ack():
    acks = [Ack(0, 0, 1, 10.000), Ack(1, 1, 1, 10.010), Ack(2, 2, 2, 10.150), Ack(3, 3, 2, 10.160)]
    assert unavailability_ms(acks, 1, 2, after_s=10.005) == pytest.approx(140)
    assert unavailability_ms(acks, 1, 3, after_s=10.0) is None


def test_percentile_nearest_rank():
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 50 and percentile(values, 99) == 99 and percentile(values, 100) == 100
    assert percentile([], 50) is None


async def run_load(fake: FakeCluster, seconds: float, switch_at: float | None = None) -> ProduceLoad:
    tp = TopicPartition("t", 0)
    load = await ProduceLoad(list(fake.urls.values()), [tp], rate_per_s=500).start()
    await asyncio.sleep(switch_at or seconds)
    if switch_at is not None:
        fake.leader = 2
        await asyncio.sleep(seconds - switch_at)
    await load.stop()
    return load


async def test_load_and_check_pass_across_a_leader_change(fake):
    load = await run_load(fake, 1.0, switch_at=0.5)
    tp = TopicPartition("t", 0)
    brokers = {a.broker_id for a in load.acks[tp]}
    assert brokers == {1, 2} and len(load.acks[tp]) > 50
    report = await check_read_back(list(fake.urls.values()), load)
    assert report.ok, report.summary()


async def test_check_reports_a_lost_record(fake):
    load = await run_load(fake, 0.3)
    log = fake.logs[0]
    first = next(batches.iter_batches(log))
    del log[first.position:first.position + first.size_bytes]  # lose the first batch
    fake.next_offset[0] = fake.next_offset[0]  # the high watermark stays
    report = await check_read_back(list(fake.urls.values()), load, timeout_s=2)
    assert not report.ok and report.missing


async def test_check_reports_a_duplicated_record(fake):
    load = await run_load(fake, 0.3)
    log = fake.logs[0]
    first = next(batches.iter_batches(log))
    dup = bytearray(log[first.position:first.position + first.size_bytes])
    fake.next_offset[0] = batches.assign_offsets(dup, fake.next_offset[0])
    log.extend(dup)
    report = await check_read_back(list(fake.urls.values()), load)
    assert not report.ok and report.duplicated
