"""Start a coroutine now: run it to its first suspension in the caller, then on as a task.

A Produce request for several partitions appends to each in a task of its own, so that one
partition's WAL wait does not hold the next. A task's first step runs only after the steps
already scheduled, among them the next pipelined request's task: that request's append to the
same partition would pass the idempotent sequence check first and be refused
OUT_OF_ORDER_SEQUENCE_NUMBER, although the client sent it second (Kafka answers a connection's
requests one after another). Each append runs without an await up to the point where its batch
has its place in the log (``broker.request_core.RequestCore.append_records``), so starting it eagerly keeps
arrival order. Python 3.12's eager task factory does the same; this is it for 3.11.
"""
from __future__ import annotations

import asyncio
from typing import Any, Coroutine, Generator, Generic, TypeVar

T = TypeVar("T")


def eager_start(coro: Coroutine[Any, Any, T]) -> asyncio.Future[T]:
    """Run ``coro`` until it first suspends (or ends), now; the rest runs as a task."""
    loop = asyncio.get_running_loop()
    try:
        yielded = coro.send(None)
    except StopIteration as done:
        finished: asyncio.Future[T] = loop.create_future()
        finished.set_result(done.value)
        return finished
    except Exception as exc:  # noqa: BLE001 - the caller gets it from the future, as from a task
        failed: asyncio.Future[T] = loop.create_future()
        failed.set_exception(exc)
        return failed
    return asyncio.ensure_future(_finish(_Resumed(coro, yielded)))


async def _finish(resumed: "_Resumed[T]") -> T:
    return await resumed


class _Resumed(Generic[T]):
    """The rest of a started coroutine, awaitable: what ``yield from`` would do."""

    def __init__(self, coro: Coroutine[Any, Any, T], yielded: Any) -> None:
        self.coro = coro
        self.yielded = yielded

    def __await__(self) -> Generator[Any, Any, T]:
        coro, value = self.coro, self.yielded
        result: T
        while True:
            try:
                sent = yield value
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:  # noqa: BLE001 - cancellation included: the coroutine decides
                try:
                    value = coro.throw(exc)
                except StopIteration as done:
                    result = done.value
                    return result
            else:
                try:
                    value = coro.send(sent)
                except StopIteration as done:
                    result = done.value
                    return result
