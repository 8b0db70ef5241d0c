"""The Kafka front end's use of produce forwarding (``broker/produce_forward.py``): route one
partition of a produce request, hold it, send it to the owner, and turn the owner's answer (or
its absence) into what this broker answers.

Never written here, never acknowledged unless the owner acknowledged it: the client gets the
owner's own per-partition result, or, when the owner's answer does not come (connection refused
or lost, the request's timeout passed), ``NOT_LEADER_OR_FOLLOWER`` naming the owner, as before
forwarding existed. A forwarded request is sent once; a client retry after a lost answer is
deduplicated by the owner's idempotent sequence checks, as for a direct send whose answer was lost.
"""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any, Callable, Collection, Protocol

from broker.admission import LeaderView, not_leader
from broker.kafka.produce_forwarder import ForwardFailed, ForwardTarget
from broker.kafka.wire import Request
from broker.produce_forward import ClientsSentTo, ProduceAsk, Route, RouteKind, is_forwarded
from metadata_quorum.kernel.errors import FerryError

DEFAULT_TIMEOUT_MS = 30_000  # a request that gives no timeout of its own (Kafka's request.timeout.ms)


class Routes(Protocol):
    """``broker.produce_routes.ProduceRoutes``."""

    def route(self, topic: str, partition: int, ask: ProduceAsk) -> Route: ...
    async def settle(self, topic: str, partition: int, ask: ProduceAsk, limit_ms: int) -> Route: ...


class Sender(Protocol):
    """``broker.kafka.produce_forwarder.ProduceForwarder``."""

    def send(self, target: ForwardTarget, topic: str, partition: int, records: bytes, acks: int, timeout_ms: int,
             api_version: int) -> asyncio.Future[Any] | None: ...


@dataclass(frozen=True)
class Forwarded:
    """The owner's answer for one partition (its ``PartitionProduceResponse``; None for acks=0)
    and the leader the client is told about."""

    answer: Any
    leader: int
    leader_epoch: int


class ProduceForwarding:
    def __init__(self, broker_id: int, routes: Routes, sender: Sender,
                 target_of: Callable[[int], ForwardTarget | None], count: Callable[[str], None]) -> None:
        self.broker_id = broker_id
        self.routes = routes
        self.sender = sender
        self.target_of = target_of
        self.count = count
        self.clients = ClientsSentTo()

    def ask(self, req: Request, has_records: bool) -> ProduceAsk:
        return ProduceAsk(req.api_version, is_forwarded(req.client_id),
                          getattr(req.body, "transactional_id", None) is not None, has_records,
                          self.clients.named_ms_ago((req.client_host, req.client_id), time.monotonic()))

    def named(self, req: Request, leaders: Collection[int]) -> None:
        """An answer to ``req`` named ``leaders``: the client connects to them (produce_forward.py)."""
        if leaders:
            self.clients.record((req.client_host, req.client_id), leaders, time.monotonic())

    def route(self, req: Request, topic: str, partition: int) -> Route:
        """No await: a partition served here goes on to its append in the same step."""
        return self.routes.route(topic, partition, self.ask(req, True))

    async def forward(self, req: Request, topic: str, partition: int, records: bytes, acks: int,
                      timeout_ms: int) -> Forwarded | None:
        """Hold, then forward; None when the hold ends with the partition to be served (or
        refused) here after all."""
        timeout_ms = timeout_ms if timeout_ms > 0 else DEFAULT_TIMEOUT_MS
        deadline = time.monotonic() + timeout_ms / 1000
        route = await self.routes.settle(topic, partition, self.ask(req, True), timeout_ms)
        target = self.target_of(route.target) if route.kind is RouteKind.FORWARD else None
        if target is None:
            return None
        left_ms = max(1, int((deadline - time.monotonic()) * 1000))
        try:  # queued at once after the hold, in arrival order (see ProduceRoutes.settle)
            answer = self.sender.send(target, topic, partition, records, acks, left_ms, req.api_version)
            if answer is None:  # acks=0: nobody answers
                self.count("sent")
                return Forwarded(None, route.target, route.target_epoch)
            result = await asyncio.wait_for(asyncio.shield(answer), left_ms / 1000)
        except (ForwardFailed, asyncio.TimeoutError) as exc:
            self.count("failed")
            raise self._refusal(topic, partition, route) from exc
        self.count("answered")
        return Forwarded(result, route.target, route.target_epoch)

    def _refusal(self, topic: str, partition: int, route: Route) -> FerryError:
        """Today's answer: ``NOT_LEADER_OR_FOLLOWER`` naming the owner."""
        return not_leader(topic, partition, self.broker_id, LeaderView(route.target, route.target_epoch),
                          "CLOSED", None)


