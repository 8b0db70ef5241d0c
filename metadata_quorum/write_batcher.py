"""Coalesces concurrent controller writes into a few ``POST /v1/write`` requests.

A move of thousands of partitions makes each broker issue thousands of stream operations (open,
close, commit) within milliseconds. One HTTP request each cost the active controller several
milliseconds of CPU apiece, queued the broker's requests behind its connection pool, and every
timeout retried all of them together. Here, operations issued within ``linger_ms`` of each other go
out together (at most ``max_batch_ops`` per request, ``max_inflight_requests`` requests at once);
the controller still runs each one on its own, in order, and answers each one. An operation whose
own answer is a retriable error (``THROTTLING_QUOTA_EXCEEDED`` from a controller shedding load,
``STREAM_NOT_CLOSED`` while another broker closes, …) is retried alone with jittered backoff until
``timeout_ms``, exactly as ``ControllerClient.write`` retries a single write.

``plan_retry`` is the decision, pure: given an answer, the attempt and the time left, retry (and
after how long) or settle.
"""
from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Mapping

from metadata_quorum.kernel.backoff import CONTROLLER_BACKOFF, Backoff, retry_after_ms_of
from metadata_quorum.kernel.errors import ErrorCode, FerryError

WriteMany = Callable[[list[tuple[str, dict[str, Any]]]], Awaitable[list[dict[str, Any]]]]


@dataclass(frozen=True)
class Settle:
    """Answer the caller: ``reply`` or ``error``."""

    reply: dict[str, Any] | None = None
    error: FerryError | None = None


@dataclass(frozen=True)
class Retry:
    delay_ms: float


def plan_retry(answer: dict[str, Any], attempt: int, remaining_ms: float, backoff: Backoff,
               draw: float) -> Settle | Retry:
    """One operation's answer from ``/v1/write``: settle it, or retry after a delay."""
    if "error" not in answer:
        reply = answer.get("reply")
        if not isinstance(reply, dict):
            return Settle(error=FerryError(ErrorCode.UNKNOWN_SERVER_ERROR, f"malformed answer {answer!r}"))
        return Settle(reply=reply)
    try:
        err = FerryError.from_json(answer)
    except (KeyError, TypeError, ValueError):
        return Settle(error=FerryError(ErrorCode.UNKNOWN_SERVER_ERROR, f"malformed error answer {answer!r}"))
    if not err.retriable:
        return Settle(error=err)
    delay_ms = backoff.delay_ms(attempt, draw, retry_after_ms_of(err.details))
    if delay_ms >= remaining_ms:
        return Settle(error=FerryError(err.error, f"{err.message} (gave up after {attempt + 1} attempts)",
                                       err.details))
    return Retry(delay_ms)


@dataclass
class _Op:
    op: str
    args: dict[str, Any]
    future: asyncio.Future[dict[str, Any]]
    deadline_mono_s: float
    attempt: int = 0
    not_before_mono_s: float = field(default=0.0)


class WriteBatcher:
    """``await write(op, args)`` returns the reply, as ``ControllerClient.write`` does."""

    def __init__(self, write_many: WriteMany, timeout_ms: int, linger_ms: float = 2.0,
                 max_batch_ops: int = 1000, max_inflight_requests: int = 4,
                 backoff: Backoff = CONTROLLER_BACKOFF) -> None:
        self._write_many = write_many
        self.timeout_ms = timeout_ms
        self.linger_s = linger_ms / 1000
        self.max_batch_ops = max_batch_ops
        self.backoff = backoff
        self._queue: list[_Op] = []
        self._slots = asyncio.Semaphore(max_inflight_requests)
        self._flusher: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.requests = 0  # HTTP requests sent (a metric for tests and benchmarks)
        self.retried_ops = 0

    async def write(self, op: str, args: Mapping[str, Any], timeout_ms: int | None = None) -> dict[str, Any]:
        """Queue one write; its reply, or its error once retries are spent (``timeout_ms``, the
        batcher's own when None, bounds them)."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[dict[str, Any]] = loop.create_future()
        budget_ms = self.timeout_ms if timeout_ms is None else timeout_ms
        self._enqueue(_Op(op, dict(args), fut, time.monotonic() + budget_ms / 1000))
        return await fut

    def _enqueue(self, item: _Op) -> None:
        self._queue.append(item)
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.get_running_loop().create_task(self._flush())

    async def _flush(self) -> None:
        await asyncio.sleep(self.linger_s)
        while self._queue:
            batch, self._queue = self._queue[:self.max_batch_ops], self._queue[self.max_batch_ops:]
            await self._slots.acquire()
            task = asyncio.get_running_loop().create_task(self._send(batch))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _send(self, batch: list[_Op]) -> None:
        try:
            live = [b for b in batch if not b.future.done()]
            if not live:
                return
            self.requests += 1
            try:
                answers = await self._write_many([(b.op, b.args) for b in live])
                if len(answers) != len(live):
                    raise FerryError(ErrorCode.UNKNOWN_SERVER_ERROR,
                                     f"{len(answers)} answers to {len(live)} operations")
            except FerryError as exc:  # the whole request failed after the client's own retries
                for b in live:
                    if not b.future.done():
                        b.future.set_exception(exc)
                return
            except Exception as exc:  # noqa: BLE001 - hand every failure to its caller
                for b in live:
                    if not b.future.done():
                        b.future.set_exception(exc)
                return
            now = time.monotonic()
            for b, answer in zip(live, answers, strict=True):
                if b.future.done():
                    continue
                decision = plan_retry(answer, b.attempt, (b.deadline_mono_s - now) * 1000, self.backoff,
                                      random.random())
                if isinstance(decision, Settle):
                    if decision.error is not None:
                        b.future.set_exception(decision.error)
                    else:
                        assert decision.reply is not None
                        b.future.set_result(decision.reply)
                else:
                    b.attempt += 1
                    self.retried_ops += 1
                    self._schedule_retry(b, decision.delay_ms)
        finally:
            self._slots.release()

    def _schedule_retry(self, item: _Op, delay_ms: float) -> None:
        loop = asyncio.get_running_loop()
        loop.call_later(delay_ms / 1000, self._enqueue, item)

    async def close(self) -> None:
        for task in list(self._tasks) + ([self._flusher] if self._flusher else []):
            task.cancel()
        for item in self._queue:
            if not item.future.done():
                item.future.cancel()
        self._queue.clear()
