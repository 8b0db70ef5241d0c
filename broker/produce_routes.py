"""The broker's side of forwarding a produce: the inputs of ``produce_forward.produce_route`` read
from the partition manager's slots and image, and the old owner's hold until the owner is elected."""
from __future__ import annotations

import time
from typing import Callable, Collection, Protocol

from broker import admission
from broker.produce_forward import HERE, ProduceAsk, Route, RouteKind, produce_route


class RouteState(Protocol):
    """What the routes read of the partition manager (``broker.partition_manager.PartitionManager``)."""

    def handed_over(self, topic: str, partition: int) -> tuple[admission.ServingState, float] | None: ...

    async def hold(self, key: tuple[str, str, int], pending: Callable[[], bool], timeout_s: float) -> None: ...


class ProduceRoutes:
    def __init__(self, broker_id: int, state: Callable[[], RouteState | None],
                 view: Callable[[str, int], admission.LeaderView | None], listening: Callable[[], Collection[int]],
                 window_ms: int, hold_max_ms: int) -> None:
        self.broker_id = broker_id
        self._state = state
        self._view = view
        self._listening = listening
        self.window_ms = window_ms
        self.hold_max_ms = hold_max_ms

    def route(self, topic: str, partition: int, ask: ProduceAsk) -> Route:
        """Where the partition's batches go now (no await: the common case, a partition served
        here, is decided from its slot alone)."""
        state = self._state()
        if state is None or self.window_ms <= 0:
            return HERE
        given_up = state.handed_over(topic, partition)
        if given_up is None:
            return HERE
        serving, given_up_mono_s = given_up
        return produce_route(self.broker_id, self._view(topic, partition), serving,
                             (time.monotonic() - given_up_mono_s) * 1000, self.window_ms, self._listening(), ask)

    async def settle(self, topic: str, partition: int, ask: ProduceAsk, limit_ms: int) -> Route:
        """The route once the hold ends: requests held for one partition leave in arrival order
        (``handoff.HandoffWaits``), and a request arriving while others are held queues behind
        them, so forwarded batches are sent in the order the client sent them. Bounded by
        ``limit_ms`` and ``hold_max_ms``; still undecided then, the core's path answers."""
        state = self._state()
        if state is None:
            return HERE
        await state.hold(("forward", topic, partition),
                         lambda: self.route(topic, partition, ask).kind is RouteKind.AWAIT,
                         max(0, min(limit_ms, self.hold_max_ms)) / 1000)
        route = self.route(topic, partition, ask)
        return HERE if route.kind is RouteKind.AWAIT else route
