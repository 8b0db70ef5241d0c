"""A librdkafka producer through moves with the old owner forwarding what it can no longer take
(broker/produce_forward.py): every acknowledged record is read back exactly once, in order, and
the old owners did forward (their counter of forwarded batches the owner answered)."""
from __future__ import annotations

import asyncio
import re
import threading
import time

import aiohttp
import pytest
from confluent_kafka import Producer

from tests.kafka.test_clients import Acked, assert_read_back_exactly, read_all
from tools.admin import Admin
from tools.client import TopicPartition

pytestmark = pytest.mark.integration

MOVES = 6


def produce_until(bootstrap: str, topic: str, acked: Acked, stop: threading.Event, per_s: float) -> int:
    """Records at ``per_s`` with no lingering, so that several requests are in flight to the old
    owner when a move starts; returns how many were produced."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                         "linger.ms": 0, "socket.nagle.disable": True, "message.timeout.ms": 60000})
    started, i = time.monotonic(), 0
    while not stop.is_set():
        producer.produce(topic, value=b"r%08d" % i, partition=0, on_delivery=acked.on_delivery)
        producer.poll(0)
        i += 1
        delay = started + i / per_s - time.monotonic()
        if delay > 0:
            time.sleep(delay)
    assert producer.flush(60) == 0
    return i


async def forwarded_batches(cluster, outcome: str) -> float:  # type: ignore[no-untyped-def]
    total = 0.0
    async with aiohttp.ClientSession() as session:
        for bid in (1, 2, 3):
            async with session.get(f"{cluster.broker_url(bid)}/metrics") as resp:
                text = await resp.text()
            found = re.search(r'^ferry_broker_produce_forwarded_batches_total\{outcome="%s"\} (\S+)$' % outcome,
                              text, re.M)
            total += float(found.group(1)) if found else 0.0
    return total


async def test_librdkafka_moves_over_on_forwarded_answers_and_every_record_is_read_back_once(cluster) -> None:
    topic = "fwd"
    tp = TopicPartition(topic, 0)
    async with Admin(bootstrap_controllers=cluster.controller_bootstrap) as admin:
        await admin.create_topic(topic, 1, assignments={0: [1]})
        await admin.wait_for_leader(tp, 1, timeout_s=20)
        acked, stop = Acked(), threading.Event()
        producing = asyncio.ensure_future(asyncio.to_thread(
            produce_until, cluster.kafka_bootstrap, topic, acked, stop, 500.0))
        try:
            while acked.count() < 200:
                await asyncio.sleep(0.05)
            owner = 1
            for _ in range(MOVES):  # 1 -> 2 -> 3 -> 1 -> ...
                target = owner % 3 + 1
                await admin.move_partition(tp, [target])
                await admin.wait_for_leader(tp, leader=target, timeout_s=20)
                before = acked.count()
                while acked.count() < before + 100:  # the producer goes on at the new owner
                    await asyncio.sleep(0.05)
                owner = target
        finally:
            stop.set()
            produced = await asyncio.wait_for(producing, 90)
    assert acked.errors == []
    assert acked.count() == produced
    assert await forwarded_batches(cluster, "answered") > 0
    got = await asyncio.to_thread(read_all, cluster.kafka_bootstrap, topic, 1, produced)
    assert sum(len(v) for v in got.values()) == produced
    assert_read_back_exactly(acked, got)
