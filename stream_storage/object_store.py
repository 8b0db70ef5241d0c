"""The object-store seam: what stream storage needs from S3, and nothing more.

Implementations raise the three errors below and never retry themselves; :class:`RetryingObjectStore`
wraps any store with one bounded backoff policy, so the in-memory store's injected faults exercise
exactly the retry path S3 takes.
"""
from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Awaitable, Callable, Protocol, Sequence, TypeVar, runtime_checkable

from stream_storage.config import RetryPolicy

log = logging.getLogger(__name__)
T = TypeVar("T")


class ObjectStoreError(Exception):
    """A failure of the store. ``retriable`` is True for 5xx, SlowDown, throttling and timeouts."""

    def __init__(self, message: str, retriable: bool = True) -> None:
        super().__init__(message)
        self.retriable = retriable


class ObjectNotFound(ObjectStoreError):
    def __init__(self, key: str) -> None:
        super().__init__(f"object {key!r} does not exist", retriable=False)
        self.key = key


class PreconditionFailed(ObjectStoreError):
    """A conditional put lost: the key exists (If-None-Match) or changed (If-Match)."""

    def __init__(self, key: str) -> None:
        super().__init__(f"precondition failed for object {key!r}", retriable=False)
        self.key = key


@dataclass(frozen=True)
class ObjectInfo:
    key: str
    size: int
    etag: str = ""


@runtime_checkable
class ObjectStore(Protocol):
    """Async object store. ``get``'s ``end`` is exclusive; ``None`` means the object's end."""

    async def put(self, key: str, data: bytes | bytearray | memoryview, if_none_match: bool = False,
                  if_match: str | None = None) -> str:
        """Store ``data`` under ``key``; returns the ETag. Conditional forms raise PreconditionFailed."""
        ...

    async def get(self, key: str, start: int | None = None, end: int | None = None) -> bytes:
        ...

    async def list(self, prefix: str) -> list[ObjectInfo]:
        ...

    async def delete(self, keys: Sequence[str]) -> None:
        """Delete keys; missing keys are not an error."""
        ...

    async def close(self) -> None:
        ...


class RetryingObjectStore:
    """Wraps a store with bounded retries and exponential backoff on retriable errors.

    A put is retried as is: object keys are unique per upload, so a retry after a lost reply
    rewrites the same bytes. A conditional put that fails with 412 after a retried attempt may
    have been our own first attempt; callers that need to know compare contents.
    """

    def __init__(self, inner: ObjectStore, policy: RetryPolicy | None = None) -> None:
        self.inner = inner
        self.policy = policy or RetryPolicy()
        self.retries = 0

    async def _run(self, what: str, factory: Callable[[], Awaitable[T]]) -> T:
        attempt = 1
        while True:
            try:
                return await factory()
            except ObjectStoreError as exc:
                if not exc.retriable or attempt >= self.policy.max_attempts:
                    raise
                delay_ms = self.policy.backoff_ms(attempt)
                log.info("object store %s failed (attempt %d): %s; retrying in %d ms", what, attempt, exc, delay_ms)
                self.retries += 1
                attempt += 1
                await asyncio.sleep(delay_ms / 1000)

    async def put(self, key: str, data: bytes | bytearray | memoryview, if_none_match: bool = False,
                  if_match: str | None = None) -> str:
        return await self._run(f"PUT {key}", lambda: self.inner.put(key, data, if_none_match, if_match))

    async def get(self, key: str, start: int | None = None, end: int | None = None) -> bytes:
        return await self._run(f"GET {key}", lambda: self.inner.get(key, start, end))

    async def list(self, prefix: str) -> list[ObjectInfo]:
        return await self._run(f"LIST {prefix}", lambda: self.inner.list(prefix))

    async def delete(self, keys: Sequence[str]) -> None:
        await self._run(f"DELETE {len(keys)} keys", lambda: self.inner.delete(keys))

    async def close(self) -> None:
        await self.inner.close()
