"""Keyed deadlines for the coordinator's timeouts (Kafka's CoordinatorTimer, without threads).

Scheduling a key again replaces its deadline, as a member's heartbeat pushes its session expiry
forward. The queue is a heap with lazy deletion: a replaced or cancelled entry stays in the heap
until it reaches the top, and the heap is rebuilt when stale entries outnumber live ones, so
frequent heartbeats cost O(log n) each and memory stays proportional to live deadlines.
"""
from __future__ import annotations

import heapq
from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)

_REBUILD_MIN_ENTRIES = 64


class DeadlineQueue(Generic[K]):
    def __init__(self) -> None:
        self._heap: list[tuple[int, int, K]] = []
        self._live: dict[K, tuple[int, int]] = {}
        self._seq = 0

    def __len__(self) -> int:
        return len(self._live)

    def schedule(self, key: K, deadline_ms: int) -> None:
        self._seq += 1
        self._live[key] = (deadline_ms, self._seq)
        heapq.heappush(self._heap, (deadline_ms, self._seq, key))
        if len(self._heap) > _REBUILD_MIN_ENTRIES and len(self._heap) > 2 * len(self._live):
            self._heap = [(d, s, k) for k, (d, s) in self._live.items()]
            heapq.heapify(self._heap)

    def cancel(self, key: K) -> None:
        self._live.pop(key, None)

    def deadline_ms(self, key: K) -> int | None:
        entry = self._live.get(key)
        return None if entry is None else entry[0]

    def clear(self) -> None:
        self._heap.clear()
        self._live.clear()

    def _drop_stale(self) -> None:
        while self._heap:
            deadline_ms, seq, key = self._heap[0]
            if self._live.get(key) == (deadline_ms, seq):
                return
            heapq.heappop(self._heap)

    def next_deadline_ms(self) -> int | None:
        self._drop_stale()
        return self._heap[0][0] if self._heap else None

    def pop_due(self, now_ms: int) -> K | None:
        """The key with the earliest deadline at or before ``now_ms`` (removed), else ``None``."""
        self._drop_stale()
        if not self._heap or self._heap[0][0] > now_ms:
            return None
        _, _, key = heapq.heappop(self._heap)
        del self._live[key]
        return key
