"""Wake-ups for objects that exist by the thousand: one per stream, one per partition.

``asyncio.Event`` and ``asyncio.Condition`` allocate their waiter deque (~0.6 KiB each) when they
are built, and a broker holds three Events and a Condition per partition (each stream handle's
``idle``, each replica's ``drained`` and ``data_arrived``) that are almost never waited on: at
10,000 partitions that was ~30 MiB, a quarter of the broker's memory per partition. These keep no
waiter list until someone waits. Same event-loop semantics as asyncio's: a waiter registered
before ``set``/``notify_all`` is woken even if the state changes again before it runs.
"""
from __future__ import annotations

import asyncio
from typing import Callable


class _Waiters:
    __slots__ = ("_waiters",)

    def __init__(self) -> None:
        self._waiters: list[asyncio.Future[None]] | None = None

    def _wake_all(self) -> None:
        waiters, self._waiters = self._waiters, None
        for fut in waiters or ():
            if not fut.done():
                fut.set_result(None)

    async def _park(self) -> None:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self._waiters is None:
            self._waiters = []
        self._waiters.append(fut)
        try:
            await fut
        finally:
            if self._waiters is not None and fut in self._waiters:
                self._waiters.remove(fut)  # cancelled (a timeout): not woken, not kept


class LazyEvent(_Waiters):
    """``asyncio.Event``'s ``set``/``clear``/``is_set``/``wait``."""

    __slots__ = ("_value",)

    def __init__(self) -> None:
        super().__init__()
        self._value = False

    def is_set(self) -> bool:
        return self._value

    def set(self) -> None:
        if not self._value:
            self._value = True
            self._wake_all()

    def clear(self) -> None:
        self._value = False

    async def wait(self) -> bool:
        if not self._value:
            await self._park()
        return True


class Pulse(_Waiters):
    """A condition without a lock (one event loop needs none): ``notify_all`` wakes whoever waits
    now; ``wait_for`` returns once ``predicate`` holds, checked at once and after each wake-up."""

    __slots__ = ()

    def notify_all(self) -> None:
        self._wake_all()

    async def wait_for(self, predicate: Callable[[], bool]) -> None:
        while not predicate():
            await self._park()
