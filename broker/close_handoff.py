"""What a closing owner sends beside step 4's closing commit, so that steps 5 and 6 of a move wait
on nothing more than that commit (the I/O shell; the decisions are in tail_handoff.py and
partition.py).

- The election (step 5) goes right behind the closing commit in the same controller request,
  with ``require_closed_streams``: the controller elects only if that commit closed both streams,
  so an election never comes before the close; a partition it did not elect is elected by its
  close as before.
- The closing object's tail (the meta snapshots and the index) goes to the broker the controller
  will elect, once the PUT succeeded, so that its step 6 reads the meta without a GET. The
  receiving half (``accept_object_tail``) keeps it in every stream storage of this broker.
"""
from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any, Callable, Iterable, Protocol

from metadata_quorum.kernel.clock import wall_ms
from broker import partition as sm
from broker.metrics import BrokerMetrics
from broker.move_timeline import MoveHalf
from broker.tail_handoff import TailHandoff, broker_url, plan_handoffs
from metadata_quorum.delta import TopicIdPartition
from metadata_quorum.image import MetadataImage
from metadata_quorum.kernel.controller_api import ControllerWrites
from metadata_quorum.kernel.messages.replication import ElectLeadersRequest

if TYPE_CHECKING:
    from broker.partition_manager import Slot

log = logging.getLogger("ferry.broker.partitions")

ELECT_WITH_CLOSE_WAIT_S = 0.5  # the election sent behind the closing commit is answered with it


class TailSender(Protocol):
    """Sends an object's tail to another broker (``tail_handoff_http.TailHandoffClient``)."""

    async def send(self, url: str, handoff: TailHandoff, tail: bytes) -> bool: ...


class CloseHandoff:
    """One per partition manager; hooks itself into each storage's uploader (``on_closing_put``,
    ``on_closing_commit``), which calls it for uploads that close streams."""

    def __init__(self, broker_id: int, image: Callable[[], MetadataImage], slots: Callable[[], Iterable["Slot"]],
                 controller: ControllerWrites, spawn: Callable[[Any], "asyncio.Task[Any]"], storages: list[Any],
                 metrics: BrokerMetrics, tail_sender: TailSender | None) -> None:
        self.broker_id = broker_id
        self._image = image
        self._slots = slots
        self._controller = controller
        self._spawn = spawn
        self._storages = storages
        self.metrics = metrics
        self._tail_sender = tail_sender
        for st in storages:
            uploader = getattr(st, "uploader", None)
            if uploader is None:
                continue
            if tail_sender is not None:
                uploader.on_closing_put = self.hand_off_tail
            uploader.on_closing_commit = self.elect_with_close

    def hand_off_tail(self, object_key: str, data: bytes, closing_ids: frozenset[int]) -> None:
        """Step 4, once the closing object is stored: send its tail (the meta snapshots, the
        index) to the brokers that will lead the partitions it closes (tail_handoff.py), so that
        their step 6 reads it without a GET. Sent while the commit goes on; never awaited."""
        if self._tail_sender is None:
            return
        partitions = [(s.tp.topic_id, s.tp.partition) for s in self._slots() if s.replica is not None and
                      (s.replica.data_stream_id in closing_ids or s.replica.meta_stream_id in closing_ids)]
        for handoff in plan_handoffs(self._image(), self.broker_id, partitions, object_key, len(data)):
            url = broker_url(self._image(), handoff.broker_id)
            if url is not None:
                self._spawn(self._tail_sender.send(url, handoff, data[handoff.tail_start:]))

    def elect_with_close(self, closing_ids: frozenset[int]) -> None:
        """Step 4's commit, closing both streams of these partitions, is about to be sent: their
        elections (step 5) go right behind it in the same controller request
        (``partition.on_close_committing``). Called synchronously just before the commit is queued
        in the write batcher; the election task queues its write on its first step, after it."""
        slots = []
        for slot in self._slots():
            replica = slot.replica
            if replica is None or replica.data_stream_id not in closing_ids or \
                    replica.meta_stream_id not in closing_ids:
                continue  # a stream closed by a later request: the election waits for that one
            slot.status, actions = sm.on_close_committing(slot.status)
            if sm.Action.ELECT in actions:
                slots.append(slot)
        if slots:
            task = self._spawn(self._elect_behind_commit([(slot, slot.source) for slot in slots]))
            for slot in slots:
                slot.election_with_close = task

    async def _elect_behind_commit(self, batch: list[tuple[Slot, MoveHalf | None]]) -> frozenset[TopicIdPartition]:
        """One ``elect_leaders`` of partitions whose streams the commit queued just before closes,
        elected only if it did (``require_closed_streams``); returns those elected. Not retried:
        a partition not elected here is elected by its close as before (``on_closed``)."""
        args: ElectLeadersRequest = {
            "election_type": "preferred", "require_closed_streams": True,
            "partitions": [{"topic": slot.topic, "partition": slot.tp.partition} for slot, _h in batch]}
        try:
            reply = await self._controller.elect_leaders(args)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - each close asks again
            log.info("election behind the closing commit failed: %r", exc)
            return frozenset()
        done_ms = wall_ms()  # the move timeline's marks are wall time, compared across brokers
        by_key = {(slot.topic, slot.tp.partition): (slot, half) for slot, half in batch}
        elected: set[TopicIdPartition] = set()
        for result in reply.get("results", []):
            found = by_key.get((str(result.get("topic")), int(result.get("partition", -1))))
            if found is None or result.get("error") not in (None, "NONE"):
                continue
            slot, half = found
            elected.add(slot.tp)
            if half is not None:
                half.mark("t5", done_ms)
        return frozenset(elected)

    def accept_object_tail(self, object_key: str, size: int, tail_start: int, tail: bytes) -> bool:
        """Another broker's hand-off of its closing object's tail: kept in every stream storage
        here (one per log dir; the partition's is not known until it opens)."""
        kept = any([bool(st.accept_tail(object_key, size, tail_start, tail)) for st in self._storages
                    if hasattr(st, "accept_tail")])
        self.metrics.object_tails.labels("kept" if kept else "refused").inc()
        return kept

    async def elected_with_close(self, slot: Slot, half: MoveHalf | None) -> bool:
        """Whether the election sent behind the closing commit elected the partition. It is
        answered in the same reply as the commit, so this rarely waits; past a bound the close
        asks again (a second answer is ELECTION_NOT_NEEDED)."""
        task, slot.election_with_close = slot.election_with_close, None
        if task is None:
            return False
        done, _ = await asyncio.wait({task}, timeout=ELECT_WITH_CLOSE_WAIT_S)
        if not done or task.cancelled() or task.exception() is not None or slot.tp not in task.result():
            return False
        t4, t5 = (half.times_ms.get("t4"), half.times_ms.get("t5")) if half is not None else (None, None)
        if half is not None and t4 is not None and t5 is not None and t5 < t4:
            # one reply answered the commit and the election: the streams were closed when it came
            half.times_ms["t4"] = t5
        return True
