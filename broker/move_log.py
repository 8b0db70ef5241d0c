"""This broker's record of partition moves: each half it took part in, logged, measured, and
published in the metadata log's KV so that any broker can show the whole six-step timeline.

Publishing is off the move's critical path and batched: halves finished within a short window go
out in one controller request. Each broker writes only its own keys
(``move/<topic_id>/<partition>/<role>/<broker_id>``), so concurrent writers never lose updates.
"""
from __future__ import annotations

import asyncio
import collections
import logging
import time
from typing import Any, Awaitable, Callable, Mapping

from broker.metrics import BrokerMetrics
from broker.move_timeline import (ROLE_SOURCE, ROLE_TARGET, MoveHalf, MoveTimeline, decode_halves, encode_halves,
                                  merge_all, move_kv_key)
from metadata_quorum.image import MetadataImage
from metadata_quorum.kernel.controller_api import ControllerWrites
from metadata_quorum.kernel.messages import PUT_KV
from metadata_quorum.kernel.messages.configs import PutKvRequest

log = logging.getLogger("ferry.broker.moves")

MOVE_HISTORY = 1000
KV_COALESCE_S = 0.05
# Move halves finishing on one broker within a second, past which they are a bulk move's: it would
# otherwise add one KV record per partition and broker to the metadata log, so its halves stay in
# this broker's own history (``/v1/moves``), which tools also read. A rate over a second, not a
# count per publishing window: on a busy machine a bulk move's halves finish spread out, and a
# short window let most of them through (8.3 records per moved partition instead of ~7).
KV_MAX_PER_SECOND = 16
# Halves of one reassignment share its move id (the controller's t0): more than this many begun
# here under one id are a bulk move's from the start, whatever pace they finish at.
KV_MAX_PER_MOVE = 16
MOVE_IDS_KEPT = 256
#: several writes in one request (``ControllerClient.write_many``): ``[(op name, request), ...]``
WriteManyFn = Callable[[list[tuple[str, Mapping[str, Any]]]], Awaitable[Any]]


class MoveLog:
    def __init__(self, broker_id: int, metrics: BrokerMetrics, image: Callable[[], MetadataImage],
                 controller: ControllerWrites, write_many: WriteManyFn | None,
                 spawn: Callable[[Any], asyncio.Task[Any]]) -> None:
        self.broker_id = broker_id
        self.metrics = metrics
        self._image = image
        self._controller = controller
        self._write_many = write_many
        self._spawn = spawn
        self.history: collections.deque[MoveHalf] = collections.deque(maxlen=MOVE_HISTORY)
        self._queue: dict[str, list[MoveHalf]] = {}
        self._task: asyncio.Task[None] | None = None
        self._written: dict[str, str] = {}  # this broker's own keys, as last written
        self.unpublished = 0  # halves of bulk moves kept only here
        self._finished_mono_s: collections.deque[float] = collections.deque()  # the last second's halves
        self._begun_by_move: collections.OrderedDict[int, int] = collections.OrderedDict()  # halves begun per move id

    def begin(self, half: MoveHalf) -> None:
        """A half has begun (the old owner saw the change, or the new owner the election): counted
        under its move id, so a bulk move is known as one before its first half finishes."""
        begun = self._begun_by_move
        begun[half.move_id] = begun.pop(half.move_id, 0) + 1
        while len(begun) > MOVE_IDS_KEPT:
            begun.popitem(last=False)

    def finish(self, half: MoveHalf) -> None:
        """A half is complete (the old owner elected, or the new owner serves): log, measure, publish."""
        self.history.append(half)
        times = " ".join(f"{k}=+{v - half.move_id}ms" for k, v in sorted(half.times_ms.items()))
        log.info("move %s-%d %s half (broker %d, leader epoch %d): %s", half.topic, half.partition, half.role,
                 half.broker_id, half.leader_epoch, times)
        topic_id = self._image().topics.by_name.get(half.topic)
        if topic_id is None:
            return
        if half.role == ROLE_TARGET:
            merged = self.timeline_for(half)
            if merged is not None and merged.complete:
                log.info("move %s-%d from broker %s to %d took %s ms: steps %s", half.topic, half.partition,
                         merged.from_broker, self.broker_id, merged.total_ms, merged.steps_ms)
                self.metrics.observe_move(ROLE_TARGET, merged.steps_ms, merged.total_ms)
        else:
            self.metrics.observe_move(ROLE_SOURCE, _source_steps_ms(half), None)
        if self._bulk(time.monotonic()) | (self._begun_by_move.get(half.move_id, 0) > KV_MAX_PER_MOVE):
            self.unpublished += 1
            return
        self._queue.setdefault(move_kv_key(topic_id, half.partition, half.role, self.broker_id), []).append(half)
        if self._task is None or self._task.done():
            self._task = self._spawn(self._publish())

    def _bulk(self, now_mono_s: float) -> bool:
        """More than ``KV_MAX_PER_SECOND`` halves finished here within the last second, this one included."""
        recent = self._finished_mono_s
        recent.append(now_mono_s)
        while recent and recent[0] <= now_mono_s - 1.0:
            recent.popleft()
        if len(recent) == KV_MAX_PER_SECOND + 1:
            log.info("more than %d move timelines a second: a bulk move's stay in this broker's history, "
                     "not published", KV_MAX_PER_SECOND)
        return len(recent) > KV_MAX_PER_SECOND

    async def _publish(self) -> None:
        await asyncio.sleep(KV_COALESCE_S)
        while self._queue:
            queued, self._queue = self._queue, {}
            puts: list[PutKvRequest] = []
            for key, halves in queued.items():
                value: str | None = self._written.get(key, self._image().kv.get(key))
                for half in halves:
                    value = encode_halves(value, half)
                if value is None:
                    continue  # no half queued under this key
                self._written[key] = value
                puts.append({"key": key, "value": value})
            try:
                if self._write_many is not None and len(puts) > 1:
                    await self._write_many([(PUT_KV.name, put) for put in puts])
                else:
                    for put in puts:
                        await self._controller.put_kv(put)
            except Exception as exc:  # noqa: BLE001 - timelines are best effort
                log.info("could not publish %d move timelines: %r", len(puts), exc)

    def _halves(self, topic: str | None, partition: int | None) -> list[MoveHalf]:
        halves = [h for h in self.history
                  if (topic is None or h.topic == topic) and (partition is None or h.partition == partition)]
        image = self._image()
        prefix = "move/"
        if topic is not None:
            topic_id = image.topics.by_name.get(topic)
            if topic_id is None:
                return halves
            prefix += f"{topic_id}/" + (f"{partition}/" if partition is not None else "")
        if topic is not None and partition is not None:
            # one partition's keys, looked up by name: scanning the whole KV (two stream keys per
            # partition) for every finished half made a bulk move quadratic on the broker
            topic_id = image.topics.by_name[topic]
            keys = [move_kv_key(topic_id, partition, role, b) for b in image.cluster.brokers
                    for role in (ROLE_SOURCE, ROLE_TARGET)]
            values = [v for k in keys if (v := image.kv.get(k)) is not None]
        else:
            values = [v for k, v in image.kv.items() if k.startswith(prefix)]  # decode only the keys asked for
        for value in values:
            halves.extend(h for h in decode_halves(value) if partition is None or h.partition == partition)
        return halves

    def timeline_for(self, half: MoveHalf) -> MoveTimeline | None:
        for m in merge_all(self._halves(half.topic, half.partition)):
            if m.move_id == half.move_id:
                return m
        return None

    def moves(self, topic: str | None = None, partition: int | None = None, limit: int = 100) -> list[MoveTimeline]:
        return merge_all(self._halves(topic, partition))[:limit]


def _source_steps_ms(half: MoveHalf) -> dict[str, int | None]:
    """Steps 1-5 as the old owner saw them (t0 is the move id)."""
    t: dict[str, int | None] = {"t0": half.move_id}
    t.update({k: half.times_ms.get(k) for k in ("t1", "t2", "t3", "t4", "t5")})
    steps: dict[str, int | None] = {}
    for i in range(1, 6):
        cur, prev = t.get(f"t{i}"), t.get(f"t{i-1}")
        steps[str(i)] = cur - prev if cur is not None and prev is not None else None
    return steps
