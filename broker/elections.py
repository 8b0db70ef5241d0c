"""Step 5 of a move on the old owner: ask the controller to elect the partition's new leader once
its streams are closed (the I/O shell of ``partition.Action.ELECT``).

Partitions closed at about the same time (a reassignment of thousands) go in one request: each
request costs a controller round trip and a commit, so one per partition would make a large move
wait on the controller. An election the controller cannot make yet (the new leader is not
unfenced yet) is asked again after a backoff; past the attempts, the controller's own re-election
deadline elects it, and the new owner's sighting of the leader change stands for t5.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable

from metadata_quorum.kernel.clock import wall_ms
from broker.move_timeline import MoveHalf
from metadata_quorum.kernel.backoff import STEP_BACKOFF, retry_after_ms_of
from metadata_quorum.kernel.controller_api import ControllerWrites
from metadata_quorum.kernel.messages.replication import ElectLeadersRequest

log = logging.getLogger("ferry.broker.partitions")

ELECT_COALESCE_S = 0.002
ELECT_BATCH_MAX = 500
ELECT_ATTEMPTS = 20
NOT_YET = ("PREFERRED_LEADER_NOT_AVAILABLE", "ELIGIBLE_LEADERS_NOT_AVAILABLE")

Key = tuple[str, int]  # (topic name, partition)


class ElectionQueue:
    """Elections asked by closes, batched; ``finish_half`` is told each move half once its
    election is answered (t5 marked when it was done)."""

    def __init__(self, controller: ControllerWrites, spawn: Callable[[Any], "asyncio.Task[Any]"],
                 finish_half: Callable[[MoveHalf], None]) -> None:
        self._controller = controller
        self._spawn = spawn
        self._finish_half = finish_half
        self._queue: list[tuple[Key, MoveHalf | None]] = []
        self._task: asyncio.Task[None] | None = None

    def ask(self, topic: str, partition: int, half: MoveHalf | None) -> None:
        self._queue.append(((topic, partition), half))
        if self._task is None or self._task.done():
            self._task = self._spawn(self._drain())

    async def _drain(self) -> None:
        await asyncio.sleep(ELECT_COALESCE_S)
        while self._queue:
            batch, self._queue = self._queue[:ELECT_BATCH_MAX], self._queue[ELECT_BATCH_MAX:]
            await self._elect(batch)

    async def _elect(self, batch: list[tuple[Key, MoveHalf | None]]) -> None:
        pending = dict(batch)
        for attempt in range(ELECT_ATTEMPTS):
            args: ElectLeadersRequest = {"election_type": "preferred",
                                         "partitions": [{"topic": t, "partition": p} for t, p in sorted(pending)]}
            try:
                reply = await self._controller.elect_leaders(args)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - the controller's deadline elects anyway
                log.warning("elect %d partitions failed: %r", len(pending), exc)
                await asyncio.sleep(STEP_BACKOFF.delay_s(attempt, retry_after_ms_of(getattr(exc, "details", None))))
                continue
            done_ms = wall_ms()  # a move timeline mark (wall time)
            retry: dict[Key, MoveHalf | None] = {}
            for result in reply.get("results", []):
                key = (str(result.get("topic")), int(result.get("partition", -1)))
                if key not in pending:
                    continue
                err = result.get("error")
                if err in NOT_YET and attempt < ELECT_ATTEMPTS - 1:
                    retry[key] = pending[key]
                    continue
                half = pending[key]
                if err and err not in ("NONE", "ELECTION_NOT_NEEDED"):
                    # the controller's deadline elects later; the new owner's sighting stands for t5
                    log.info("elect %s-%d: %s %s", key[0], key[1], err, result.get("message", ""))
                elif half is not None:
                    half.mark("t5", done_ms)
                if half is not None:
                    self._finish_half(half)
            if not retry:
                return
            pending = retry
            await asyncio.sleep(STEP_BACKOFF.delay_s(attempt))
