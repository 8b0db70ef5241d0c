"""Pipelined Produce requests of one connection reach the log in arrival order, whether a request
carries one partition or several (an idempotent producer's next batch would otherwise pass the
sequence check first and be refused OUT_OF_ORDER_SEQUENCE_NUMBER, as Kafka's Java client saw)."""
from __future__ import annotations

import asyncio
from dataclasses import dataclass

from kafka.protocol.producer.produce import ProduceRequest

from broker.producer_ids import CountingProducerIds
from broker.kafka.data_apis import DataApis
from broker.kafka.eager import eager_start
from broker.kafka.wire import Request


@dataclass
class Done:
    base_offset: int
    log_append_time_ms: int = -1
    log_start_offset: int = 0


class OrderCore:
    """Records the order in which appends take their place (synchronously, at the call), then
    waits for the WAL as a real broker does."""

    broker_id = 1
    cluster_id = "c"
    image = None

    def __init__(self) -> None:
        self.placed: list[tuple[str, int, bytes]] = []

    async def append_records(self, topic: str, partition: int, body: bytearray, acks: int,
                             client_leader_epoch: int | None = None) -> Done:
        self.placed.append((topic, partition, bytes(body)))
        await asyncio.sleep(0.01)  # the WAL's fsync
        return Done(len(self.placed))


def produce(parts: list[tuple[int, bytes]], correlation_id: int) -> Request:
    T = ProduceRequest.TopicProduceData
    body = ProduceRequest[9](transactional_id=None, acks=-1, timeout_ms=1000, topic_data=[
        T(name="t", partition_data=[T.PartitionProduceData(index=p, records=r) for p, r in parts])])
    return Request(0, 9, correlation_id, "c", body, 0)


async def test_a_single_partition_request_does_not_overtake_a_multi_partition_one() -> None:
    core = OrderCore()
    apis = DataApis(core, CountingProducerIds())
    # as the listener does: one task per request, created in arrival order
    first = asyncio.ensure_future(apis.produce(produce([(2, b"seq-1265"), (0, b"other")], 1)))
    second = asyncio.ensure_future(apis.produce(produce([(2, b"seq-1266")], 2)))
    await asyncio.gather(first, second)
    assert [b for _, _, b in core.placed] == [b"seq-1265", b"other", b"seq-1266"]


async def test_eager_start_runs_to_the_first_await_at_once_and_finishes_as_a_task() -> None:
    steps: list[str] = []

    async def work(fail: bool) -> int:
        steps.append("before")
        await asyncio.sleep(0)
        steps.append("after")
        if fail:
            raise ValueError("late")
        return 7

    fut = eager_start(work(False))
    assert steps == ["before"] and not fut.done()
    assert await fut == 7 and steps == ["before", "after"]

    async def at_once() -> int:
        raise KeyError("early")

    early = eager_start(at_once())
    assert early.done() and isinstance(early.exception(), KeyError)
    late = eager_start(work(True))
    try:
        await late
    except ValueError as exc:
        assert str(exc) == "late"
    else:
        raise AssertionError("the failure after the first await was lost")
    slow = eager_start(asyncio.sleep(10))
    slow.cancel()
    try:
        await slow
    except asyncio.CancelledError:
        pass
    assert slow.cancelled()
