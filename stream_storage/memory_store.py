"""An in-memory object store that injects errors and latency deterministically, for fast tests.

Faults come from a script (``fail_next``) and from seeded rates, so a failing run repeats with
its seed. Two kinds matter: ``error`` fails before the operation takes effect (a 503), and
``lost_reply`` applies the operation and then fails (a timeout after the server acted) — the case
that tempts a writer into committing one object twice.
"""
from __future__ import annotations

import asyncio
import hashlib
import random
from collections import Counter, deque
from dataclasses import dataclass
from typing import Sequence

from stream_storage.object_store import ObjectInfo, ObjectNotFound, ObjectStoreError, PreconditionFailed

FAULT_ERROR = "error"
FAULT_LOST_REPLY = "lost_reply"
FAULT_FATAL = "fatal"


@dataclass
class _Scripted:
    op: str
    kind: str
    key_prefix: str


class MemoryObjectStore:
    """Objects in a dict. ``latency_ms`` applies to every call, ``latency_ms_per_mib`` to bodies."""

    def __init__(self, latency_ms: float = 0.0, latency_ms_per_mib: float = 0.0, seed: int = 0,
                 error_rate: float = 0.0, lost_reply_rate: float = 0.0) -> None:
        self.objects: dict[str, bytes] = {}
        self.latency_ms = latency_ms
        self.latency_ms_per_mib = latency_ms_per_mib
        self.error_rate = error_rate
        self.lost_reply_rate = lost_reply_rate
        self._random = random.Random(seed)
        self._script: deque[_Scripted] = deque()
        self.calls: Counter[str] = Counter()
        self.faults: Counter[str] = Counter()
        self.put_keys: list[str] = []

    def fail_next(self, op: str = "*", count: int = 1, kind: str = FAULT_ERROR, key_prefix: str = "") -> None:
        """Make the next ``count`` matching calls (``op`` = put/get/list/delete or *) fail."""
        for _ in range(count):
            self._script.append(_Scripted(op, kind, key_prefix))

    def _fault_for(self, op: str, key: str) -> str | None:
        for item in list(self._script):
            if item.op in ("*", op) and key.startswith(item.key_prefix):
                self._script.remove(item)
                return item.kind
        draw = self._random.random()
        if draw < self.error_rate:
            return FAULT_ERROR
        if draw < self.error_rate + self.lost_reply_rate:
            return FAULT_LOST_REPLY
        return None

    async def _delay(self, size_bytes: int) -> None:
        delay_ms = self.latency_ms + self.latency_ms_per_mib * size_bytes / (1024 * 1024)
        await asyncio.sleep(delay_ms / 1000 if delay_ms > 0 else 0)

    def _before(self, op: str, key: str) -> str | None:
        self.calls[op] += 1
        kind = self._fault_for(op, key)
        if kind is not None:
            self.faults[f"{op}:{kind}"] += 1
        if kind == FAULT_ERROR:
            raise ObjectStoreError(f"injected 503 SlowDown on {op} {key}", retriable=True)
        if kind == FAULT_FATAL:
            raise ObjectStoreError(f"injected 403 AccessDenied on {op} {key}", retriable=False)
        return kind

    @staticmethod
    def _after(kind: str | None, op: str, key: str) -> None:
        if kind == FAULT_LOST_REPLY:
            raise ObjectStoreError(f"injected read timeout after {op} {key} took effect", retriable=True)

    @staticmethod
    def etag(data: bytes) -> str:
        return '"' + hashlib.md5(data, usedforsecurity=False).hexdigest() + '"'

    async def put(self, key: str, data: bytes | bytearray | memoryview, if_none_match: bool = False,
                  if_match: str | None = None) -> str:
        body = bytes(data)
        await self._delay(len(body))
        kind = self._before("put", key)
        if if_none_match and key in self.objects:
            raise PreconditionFailed(key)
        if if_match is not None and (key not in self.objects or self.etag(self.objects[key]) != if_match):
            raise PreconditionFailed(key)
        self.objects[key] = body
        self.put_keys.append(key)
        self._after(kind, "put", key)
        return self.etag(body)

    async def get(self, key: str, start: int | None = None, end: int | None = None) -> bytes:
        kind = self._before("get", key)
        if key not in self.objects:
            raise ObjectNotFound(key)
        body = self.objects[key]
        chunk = body[start or 0: len(body) if end is None else end]
        await self._delay(len(chunk))
        self._after(kind, "get", key)
        return chunk

    async def list(self, prefix: str) -> list[ObjectInfo]:
        await self._delay(0)
        kind = self._before("list", prefix)
        found = [ObjectInfo(k, len(v), self.etag(v)) for k, v in sorted(self.objects.items()) if k.startswith(prefix)]
        self._after(kind, "list", prefix)
        return found

    async def delete(self, keys: Sequence[str]) -> None:
        await self._delay(0)
        kind = self._before("delete", keys[0] if keys else "")
        for key in keys:
            self.objects.pop(key, None)
        self._after(kind, "delete", keys[0] if keys else "")

    async def close(self) -> None:
        return None
