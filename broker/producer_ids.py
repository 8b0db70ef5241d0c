"""Producer ids for InitProducerId, taken from the controller in blocks (Kafka's
RPCProducerIdManager).

The controller hands out blocks of 1,000 ids (``metadata_quorum/ops/producer_ids.py``) and never
the same block twice, so every id is unique across the cluster and over time: a new producer never
inherits the sequence numbers or epoch another producer left on a partition. The broker serves ids
from its current block and asks for the next one when 90% of it is used (as Kafka does), so that
InitProducerId seldom waits on the controller.

:class:`ProducerIdBlocks` decides (which id next, whether to prefetch, whether a reply is usable)
without I/O; :class:`ProducerIdManager` is its shell over the controller facade.
"""
from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol

from metadata_quorum.kernel.backoff import STEP_BACKOFF
from metadata_quorum.kernel.errors import ErrorCode, FerryError
from metadata_quorum.kernel.messages.cluster import AllocateProducerIdsReply, AllocateProducerIdsRequest

log = logging.getLogger("ferry.broker.producer_ids")

#: ask for the next block when this share of the current one is used (Kafka's 90%)
PREFETCH_AT = 0.9
#: attempts at a block before InitProducerId is answered with an error
ALLOCATE_ATTEMPTS = 5


class ProducerIdSource(Protocol):
    """Where InitProducerId takes a new producer id."""

    async def next_producer_id(self) -> int: ...


class CountingProducerIds:
    """Ids from a counter: for a single in-process broker (tests and tools without a controller)."""

    def __init__(self, first: int = 0) -> None:
        self._next = first

    async def next_producer_id(self) -> int:
        self._next += 1
        return self._next - 1


@dataclass(frozen=True)
class Block:
    start: int
    length: int

    @property
    def end(self) -> int:
        return self.start + self.length


@dataclass
class ProducerIdBlocks:
    """The ids this broker holds: the current block, then any prefetched one."""

    blocks: deque[Block] = field(default_factory=deque)
    next_id: int = -1

    def add(self, reply: AllocateProducerIdsReply) -> None:
        """Take a block from the controller's reply; a reply that is not a block is a protocol error."""
        start, length = reply.get("producer_id_start"), reply.get("producer_id_len")
        if not isinstance(start, int) or not isinstance(length, int) or start < 0 or length <= 0:
            raise FerryError(ErrorCode.UNKNOWN_SERVER_ERROR, f"the controller answered no producer id block: {reply!r}")
        if self.blocks and start < self.blocks[-1].end:
            return  # an older answer (a retried request): never serve ids twice
        self.blocks.append(Block(start, length))
        if self.next_id < 0:
            self.next_id = start

    def take(self) -> int | None:
        """The next unused id, or None when every held block is used up."""
        while self.blocks:
            block = self.blocks[0]
            if self.next_id < block.start:
                self.next_id = block.start
            if self.next_id < block.end:
                pid = self.next_id
                self.next_id += 1
                return pid
            self.blocks.popleft()
        return None

    def wants_prefetch(self) -> bool:
        """True when no block beyond the current one is held and the current one is 90% used."""
        if len(self.blocks) != 1:
            return not self.blocks
        block = self.blocks[0]
        return self.next_id - block.start >= PREFETCH_AT * block.length


Allocate = Callable[[AllocateProducerIdsRequest], Awaitable[AllocateProducerIdsReply]]


class ProducerIdManager:
    """Serves producer ids from controller blocks; one allocation in flight at a time."""

    def __init__(self, allocate: Allocate, broker_id: int, broker_epoch: Callable[[], int]) -> None:
        self._allocate = allocate
        self._broker_id = broker_id
        self._broker_epoch = broker_epoch
        self._blocks = ProducerIdBlocks()
        self._fetching: asyncio.Task[None] | None = None

    async def next_producer_id(self) -> int:
        for attempt in range(ALLOCATE_ATTEMPTS):
            pid = self._blocks.take()
            if self._blocks.wants_prefetch():
                self._start_fetch()
            if pid is not None:
                return pid
            task = self._start_fetch()
            try:
                await asyncio.shield(task)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("producer id block: %r", exc)
                if attempt == ALLOCATE_ATTEMPTS - 1:
                    raise FerryError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                                     f"no producer id block from the controller: {exc}") from exc
                await asyncio.sleep(STEP_BACKOFF.delay_s(attempt))
        raise FerryError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, "no producer id block from the controller")

    def _start_fetch(self) -> asyncio.Task[None]:
        if self._fetching is None or self._fetching.done():
            self._fetching = asyncio.ensure_future(self._fetch())
            self._fetching.add_done_callback(_log_failure)
        return self._fetching

    async def _fetch(self) -> None:
        reply = await self._allocate({"broker_id": self._broker_id, "broker_epoch": self._broker_epoch()})
        self._blocks.add(reply)


def _log_failure(task: asyncio.Task[None]) -> None:
    """A prefetch nobody awaits may fail: say so (the next take asks again)."""
    if not task.cancelled() and task.exception() is not None:
        log.warning("producer id block prefetch failed: %r", task.exception())


__all__ = ["ALLOCATE_ATTEMPTS", "PREFETCH_AT", "Block", "CountingProducerIds", "ProducerIdBlocks", "ProducerIdManager", "ProducerIdSource"]
