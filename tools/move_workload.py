"""A steady produce load, partition moves under it, and the checks the demo, tests and benchmark share.

`ProduceLoad` keeps every partition busy (one request in flight per partition, the rest batched)
and remembers each acknowledgement: which record, at which offset, from which broker, when. From
that, a move's client-observed unavailability is the time between the last acknowledgement by the
old owner and the first by the new one. `check_read_back` reads every partition from its start
and checks that each acknowledged record is there exactly once, at its acknowledged offset, in order.
"""
from __future__ import annotations

import asyncio
import math
import time
from collections import Counter
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

from metadata_quorum.kernel.errors import FerryError
from tools.admin import Admin
from tools.client import Producer, RecordMetadata, TopicPartition, read_all


@dataclass(frozen=True)
class Ack:
    seq: int
    offset: int
    broker_id: int
    time_s: float
    sent_s: float = 0.0  # when the request it answers was sent (monotonic, like time_s)


@dataclass
class ProduceLoad:
    """Sends `<topic>-<partition>:<seq>` records (padded to `value_bytes`) to each partition."""

    bootstrap: list[str]
    partitions: list[TopicPartition]
    value_bytes: int = 100
    window: int = 64  # records queued per partition ahead of acknowledgements
    rate_per_s: float = 400.0  # records per second per partition (a steady load, not a flood)
    delivery_timeout_ms: int = 30_000
    acks: dict[TopicPartition, list[Ack]] = field(default_factory=dict)
    failed: dict[TopicPartition, int] = field(default_factory=dict)
    sent: dict[TopicPartition, int] = field(default_factory=dict)
    producer: Producer | None = None
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)
    _stop: asyncio.Event = field(default_factory=asyncio.Event)

    def value(self, tp: TopicPartition, seq: int) -> bytes:
        head = f"{tp}:{seq}:".encode()
        return head + b"x" * max(0, self.value_bytes - len(head))

    @staticmethod
    def parse(value: bytes) -> tuple[str, int]:
        tp, seq, _pad = value.split(b":", 2)
        return tp.decode(), int(seq)

    async def start(self) -> "ProduceLoad":
        self.producer = await Producer(self.bootstrap, linger_ms=1, delivery_timeout_ms=self.delivery_timeout_ms,
                                       request_timeout_ms=5_000).start()
        for tp in self.partitions:
            self.acks[tp], self.failed[tp], self.sent[tp] = [], 0, 0
            self._tasks.append(asyncio.create_task(self._run(tp)))
        return self

    async def _run(self, tp: TopicPartition) -> None:
        assert self.producer is not None
        sem = asyncio.Semaphore(self.window)
        seq = 0
        pending: set[asyncio.Future[Any]] = set()
        started = time.monotonic()
        while not self._stop.is_set():
            delay = started + seq / self.rate_per_s - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            elif delay < -1.0:  # fell behind (a move, a pause): do not burst to catch up
                started = time.monotonic() - seq / self.rate_per_s
            await sem.acquire()
            if self._stop.is_set():
                break
            fut = await self.producer.send(tp.topic, self.value(tp, seq), partition=tp.partition)
            self.sent[tp] += 1
            fut.add_done_callback(self._callback(tp, seq, sem))
            pending.add(fut)
            fut.add_done_callback(pending.discard)
            seq += 1
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)

    def _callback(self, tp: TopicPartition, seq: int, sem: asyncio.Semaphore) -> Any:
        def done(fut: asyncio.Future[RecordMetadata]) -> None:
            self._on_done(tp, seq, fut)
            sem.release()
        return done

    def _on_done(self, tp: TopicPartition, seq: int, fut: asyncio.Future[RecordMetadata]) -> None:
        if fut.cancelled() or fut.exception() is not None:
            self.failed[tp] += 1
            return
        m = fut.result()
        self.acks[tp].append(Ack(seq, m.offset, m.broker_id, m.ack_time_s, m.sent_s))

    async def stop(self) -> None:
        self._stop.set()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self.producer is not None:
            await self.producer.close()

    def last_ack(self, tp: TopicPartition) -> Ack | None:
        acks = self.acks.get(tp)
        return acks[-1] if acks else None

    async def wait_ack_from(self, tp: TopicPartition, broker_id: int, after_s: float, timeout_s: float) -> Ack:
        """The first acknowledgement from `broker_id` received after `after_s`."""
        deadline = time.monotonic() + timeout_s
        start_index = 0
        while True:
            acks = self.acks[tp]
            for i in range(start_index, len(acks)):
                if acks[i].broker_id == broker_id and acks[i].time_s >= after_s:
                    return acks[i]
            start_index = max(0, len(acks) - 1)
            if time.monotonic() > deadline:
                raise FerryError.from_json({"error": "REQUEST_TIMED_OUT",
                                            "message": f"no acknowledgement for {tp} from broker {broker_id} within {timeout_s}s"})
            await asyncio.sleep(0.005)


def unavailability_ms(acks: list[Ack], old_broker: int, new_broker: int, after_s: float) -> float | None:
    """Last acknowledgement by the old owner → first by the new one, for a move started at `after_s`."""
    first_new = next((a for a in acks if a.broker_id == new_broker and a.time_s >= after_s), None)
    if first_new is None:
        return None
    last_old = None
    for a in acks:
        if a.time_s > first_new.time_s:
            break
        if a.broker_id == old_broker:
            last_old = a
    if last_old is None:
        return None
    return max(0.0, (first_new.time_s - last_old.time_s) * 1000)


@dataclass
class MoveResult:
    tp: TopicPartition
    from_broker: int
    to_broker: int
    started_s: float
    unavailability_ms: float | None
    timeline: dict[str, Any] | None = None


async def move_once(admin: Admin, load: ProduceLoad, tp: TopicPartition, from_broker: int, to_broker: int,
                    timeout_s: float = 20.0) -> MoveResult:
    """Reassign `tp` to `to_broker` and wait until the load is acknowledged by it."""
    started = time.monotonic()
    await admin.move_partition(tp, [to_broker])
    await load.wait_ack_from(tp, to_broker, started, timeout_s)
    return MoveResult(tp, from_broker, to_broker, started,
                      unavailability_ms(load.acks[tp], from_broker, to_broker, started))


def has_source_half(timeline: dict[str, Any]) -> bool:
    """Whether the old owner's times (t1..t4) are merged in: it publishes them a moment after it closes."""
    return all(timeline.get("t_ms", {}).get(f"t{k}") is not None for k in (1, 2, 3, 4))


async def fetch_timeline(admin: Admin, tp: TopicPartition, broker_ids: list[int], move_after_ms: int = 0,
                         timeout_s: float = 5.0, want_source: bool = True) -> dict[str, Any] | None:
    """The newest complete six-step timeline of `tp` (as the brokers' /v1/moves report it).

    With `want_source`, wait (up to `timeout_s`) until the old owner's half is merged in; a move
    whose old owner died never gets it, so pass False there."""
    deadline = time.monotonic() + timeout_s
    urls = await admin.brokers()
    while True:
        best: dict[str, Any] | None = None
        for bid in broker_ids:
            if bid not in urls:
                continue
            try:
                body = await admin.http_get(f"{urls[bid]}/v1/moves",
                                            {"topic": tp.topic, "partition": str(tp.partition), "limit": "5"})
            except Exception:  # noqa: BLE001 - a dead broker: the other side may still report
                continue
            for m in body.get("moves", []):
                if int(m.get("move_id", 0)) >= move_after_ms and m.get("complete"):
                    if best is None or int(m["move_id"]) > int(best["move_id"]):
                        best = m
        if best is not None and (has_source_half(best) or not want_source):
            return best
        if time.monotonic() > deadline:
            return best
        await asyncio.sleep(0.05)


@dataclass
class ReadBackReport:
    acknowledged: int
    missing: list[str]
    duplicated: list[str]
    misplaced: list[str]
    out_of_order: list[str]

    @property
    def ok(self) -> bool:
        return not (self.missing or self.duplicated or self.misplaced or self.out_of_order)

    def summary(self) -> str:
        parts = [f"{self.acknowledged} acknowledged records"]
        for name in ("missing", "duplicated", "misplaced", "out_of_order"):
            items = getattr(self, name)
            if items:
                parts.append(f"{len(items)} {name.replace('_', ' ')} (e.g. {', '.join(items[:3])})")
        return "; ".join(parts)


async def check_read_back(bootstrap: list[str], load: ProduceLoad, timeout_s: float = 60.0) -> ReadBackReport:
    """Every acknowledged record exactly once, at its acknowledged offset, in send order."""
    logs = await read_all(bootstrap, load.partitions, timeout_s=timeout_s)
    missing: list[str] = []
    duplicated: list[str] = []
    misplaced: list[str] = []
    out_of_order: list[str] = []
    total = 0
    for tp in load.partitions:
        by_offset = {r.offset: r.value for r in logs[tp]}
        counts = Counter(r.value for r in logs[tp])
        seq_at_offset = []
        for r in logs[tp]:
            if r.value is None:
                continue
            name, seq = ProduceLoad.parse(r.value)
            if name == str(tp):
                seq_at_offset.append(seq)
        if any(b <= a for a, b in pairwise(seq_at_offset)):
            bad = next(i for i, (a, b) in enumerate(pairwise(seq_at_offset)) if b <= a)
            out_of_order.append(f"{tp}: seq {seq_at_offset[bad + 1]} after {seq_at_offset[bad]}")
        for ack in load.acks[tp]:
            total += 1
            value = load.value(tp, ack.seq)
            n = counts.get(value, 0)
            if n == 0:
                missing.append(f"{tp}:{ack.seq}@{ack.offset}")
            elif n > 1:
                duplicated.append(f"{tp}:{ack.seq} x{n}")
            elif by_offset.get(ack.offset) != value:
                misplaced.append(f"{tp}:{ack.seq}@{ack.offset}")
    return ReadBackReport(total, missing, duplicated, misplaced, out_of_order)


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100)."""
    if not values:
        return None
    s = sorted(values)
    k = max(0, min(len(s) - 1, math.ceil(q / 100 * len(s)) - 1))
    return s[k]
