"""The broker's heartbeats on a thread of their own, with their own event loop and connections.

A broker taking or giving up thousands of partitions at once keeps its event loop busy for
seconds at a time (opening streams, replaying metadata, recovering WAL tails). Heartbeats sent
from that loop left late, the controller fenced a live broker, and fencing moved its partitions to
the others: more load there, more late heartbeats, more fencing. Sent from here, a heartbeat
waits only for the CPU, never for the data path's callbacks.

The lease argument is unchanged (heartbeat.py): the lease runs from when a heartbeat was *sent*
and is only read by the data path, which checks it before acknowledging a write. What crosses
threads is small and one-way: the heartbeat reads the broker's metadata offset and log-dir states
(plain values), the data path reads the lease and the heartbeat state, and callbacks into the
broker (a new broker epoch) are handed to the broker's own loop.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from typing import Any, Awaitable, Callable, Coroutine, Mapping, TypeVar

from broker.heartbeat import BrokerLease, Heartbeater, HeartbeatState
from metadata_quorum.kernel.controller_api import ControllerWrites, WriteFunction
from metadata_quorum.kernel.messages.cluster import BrokerAddresses

T = TypeVar("T")
WriteFn = Callable[[str, Mapping[str, Any]], Awaitable[Mapping[str, Any]]]


class HeartbeatClient:
    """What the heartbeat thread needs of a controller connection: write, then close on stop."""

    def __init__(self, write: WriteFn, close: Callable[[], Awaitable[None]]) -> None:
        self.write = write
        self.close = close


class ThreadedHeartbeater:
    """A :class:`Heartbeater` running on its own thread and loop; the broker's loop uses it as it
    would use the heartbeater itself (``register``, ``start``, ``poke``, ``request_shutdown``,
    ``stop``, and the ``state`` and ``lease`` it reads).

    ``make_client`` is called on the heartbeat thread: an aiohttp session belongs to the loop it
    was created on, so the heartbeat's controller connection is made there.
    """

    def __init__(self, make_client: Callable[[], HeartbeatClient], broker_id: int, interval_ms: int,
                 session_timeout_ms: int, registration: Callable[[], BrokerAddresses],
                 metadata_offset: Callable[[], int], dir_states: Callable[[], tuple[list[str], list[str]]],
                 on_failure: Callable[[], None] | None = None) -> None:
        self._make_client = make_client
        self._client: HeartbeatClient | None = None
        self._loop = asyncio.new_event_loop()
        self._owner_loop: asyncio.AbstractEventLoop | None = None
        self._on_registered: Callable[[int], None] | None = None
        self.heartbeater = Heartbeater(ControllerWrites(WriteFunction(self._write)), broker_id, interval_ms, session_timeout_ms, registration,
                                       metadata_offset, dir_states, on_failure=on_failure,
                                       on_registered=self._registered)
        self._thread = threading.Thread(target=self._run, name=f"heartbeat-{broker_id}", daemon=True)
        self._thread.start()

    # -- what the broker reads -------------------------------------------------------------------
    @property
    def state(self) -> HeartbeatState:
        return self.heartbeater.state

    @property
    def lease(self) -> BrokerLease:
        return self.heartbeater.lease

    @property
    def on_registered(self) -> Callable[[int], None] | None:
        return self._on_registered

    @on_registered.setter
    def on_registered(self, callback: Callable[[int], None] | None) -> None:
        """Called with each new broker epoch, on the loop that set it."""
        self._owner_loop = asyncio.get_running_loop()
        self._on_registered = callback

    # -- what the broker does --------------------------------------------------------------------
    async def register(self, timeout_s: float = 30.0) -> int:
        return await self._call(self.heartbeater.register(timeout_s))

    def start(self) -> None:
        self._loop.call_soon_threadsafe(self.heartbeater.start)

    def poke(self) -> None:
        self._loop.call_soon_threadsafe(self.heartbeater.poke)

    def request_shutdown(self) -> None:
        self._loop.call_soon_threadsafe(self.heartbeater.request_shutdown)

    async def stop(self) -> None:
        if not self._thread.is_alive():
            return
        try:
            await self._call(self._stop_here())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            await asyncio.to_thread(self._thread.join, 5.0)

    # -- on the heartbeat thread -----------------------------------------------------------------
    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_forever()
        finally:
            self._loop.close()

    async def _write(self, op: str, args: Mapping[str, Any]) -> Mapping[str, Any]:
        if self._client is None:
            self._client = self._make_client()
        return await self._client.write(op, args)

    async def _stop_here(self) -> None:
        await self.heartbeater.stop()
        if self._client is not None:
            await self._client.close()

    def _registered(self, broker_epoch: int) -> None:
        callback, loop = self._on_registered, self._owner_loop
        if callback is not None and loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(callback, broker_epoch)

    async def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        future: concurrent.futures.Future[T] = asyncio.run_coroutine_threadsafe(coro, self._loop)
        return await asyncio.wrap_future(future)
