"""Produce requests held while their partition changes hands on this broker.

Whether a partition is changing hands is decided by ``admission.handoff_pending`` (pure); this
module only holds the requests until that turns false (or a deadline passes) and keeps those
held for one partition in arrival order, so that a client is answered when the move ends instead
of being refused and retrying after its backoff (docs/broker-api.md, Produce).
"""
from __future__ import annotations

import asyncio
import collections
import time
from typing import Callable, Hashable


class HandoffWaits:
    """Held requests, per partition key. The owner calls :meth:`changed` whenever the image or a
    partition's state changes, which is when a pending hand-off may have ended."""

    def __init__(self) -> None:
        self._changed = asyncio.Event()  # set (and replaced) on every change
        self.lines: dict[Hashable, collections.deque[asyncio.Future[None]]] = {}

    def changed(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def wait(self, key: Hashable, pending: Callable[[], bool], timeout_s: float) -> None:
        """Return once ``pending()`` is false, or after ``timeout_s``; the caller then serves or
        refuses as usual.

        Requests held for one key leave in arrival order, each after the one before it ran on to
        its first await (its append is queued to the WAL by then), and a request arriving while
        others are held queues behind them: a pipelining idempotent producer's batches reach the
        WAL in the order sent. Returns without yielding when nothing is under way."""
        line = self.lines.get(key)
        if line is None and not pending():
            return
        if line is None:
            line = self.lines[key] = collections.deque()
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        line.append(turn)
        if len(line) == 1:
            turn.set_result(None)
        deadline = time.monotonic() + timeout_s
        try:
            await asyncio.wait_for(asyncio.shield(turn), timeout_s)
            while pending() and time.monotonic() < deadline:
                await asyncio.wait_for(self._changed.wait(), deadline - time.monotonic())
        except asyncio.TimeoutError:
            pass
        finally:
            head = line[0] is turn
            line.remove(turn)
            if not line:
                self.lines.pop(key, None)
            elif head and not line[0].done():
                line[0].set_result(None)  # the next one's turn, once this one has run on
