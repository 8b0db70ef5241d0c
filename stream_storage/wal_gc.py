"""Deleting the WAL objects of brokers that are gone (``wal.mode = s3``).

A live broker deletes its own WAL objects once what they hold is committed (``S3WriteAheadLog.
trim``). A broker that crashed, was fenced or lost its machine trims nothing any more: once its
partitions were recovered elsewhere, its ``<wal prefix>/broker-<id>/`` objects would stay in the
bucket for ever. The garbage-collecting broker (the lowest live id, as for stream objects) lists
the WAL prefix, reads each object of a broker that is not live once (WAL objects never change),
and deletes those ``wal_objects.orphan_deletable`` says no recovery can need, judged on its
metadata (a :class:`StreamDirectory`, which the broker builds from its metadata image). This module
is the shell: list, read, ask the pure rule, delete.
"""
from __future__ import annotations

import asyncio
import logging
import re
from typing import Callable, Protocol
from stream_storage.object_store import ObjectNotFound, ObjectStore, ObjectStoreError
from stream_storage.wal_objects import (
    HEADER_BYTES, ObjectSummary, StreamView, orphan_deletable, parse_key, parse_object, summarize)

log = logging.getLogger("ferry.storage.wal_gc")
_BROKER_RE = re.compile(r"/broker-(\d+)/[^/]+$")
_GET_CONCURRENCY = 8


class StreamDirectory(Protocol):
    """What the collector needs of the cluster's metadata, at one point in time."""

    def live_brokers(self) -> set[int]:
        """Registered and not fenced: such a broker trims its own WAL."""
        ...

    def stream_view(self, stream_id: int) -> StreamView | None:
        """The stream's epoch, end offset, owner and WAL owners; None if it does not exist."""
        ...


class DeadWalCollector:
    """One pass per :meth:`run_once`; parsed summaries are kept between passes (by key)."""

    def __init__(self, store: ObjectStore, key_prefix: str, directory: Callable[[], StreamDirectory | None]) -> None:
        self.store = store
        self.prefix = key_prefix.rstrip("/") + "/"
        self.directory = directory
        self._summaries: dict[str, ObjectSummary] = {}
        self.deleted_total = 0

    async def run_once(self) -> int:
        """Delete what no recovery needs of non-live brokers' WAL objects; returns how many."""
        directory = self.directory()
        if directory is None:
            return 0
        live = directory.live_brokers()
        wals: dict[tuple[int, str], list[str]] = {}  # (broker, WAL prefix) -> keys
        for info in await self.store.list(self.prefix):
            parsed = parse_key(info.key)
            match = _BROKER_RE.search(parsed.wal) if parsed is not None else None
            if parsed is None or match is None or int(match.group(1)) in live:
                continue
            wals.setdefault((int(match.group(1)), parsed.wal), []).append(info.key)
        listed = {k for keys in wals.values() for k in keys}
        self._summaries = {k: v for k, v in self._summaries.items() if k in listed}
        await self._read([k for k in listed if k not in self._summaries])
        directory = self.directory() or directory  # judged on metadata at least as new as the listing
        doomed: list[str] = []
        for (broker_id, _wal), keys in wals.items():
            summaries = [self._summaries[k] for k in keys if k in self._summaries]
            doomed += orphan_deletable(summaries, broker_id, directory.stream_view)
        if not doomed:
            return 0
        try:
            await self.store.delete(doomed)
        except ObjectStoreError as exc:  # the next pass finds them again
            log.info("deleting %d WAL objects of brokers that are gone failed: %s", len(doomed), exc)
            return 0
        for key in doomed:
            self._summaries.pop(key, None)
        self.deleted_total += len(doomed)
        log.info("deleted %d WAL objects of brokers that are not live (%s)", len(doomed),
                 ", ".join(sorted({str(b) for b, _w in wals})))
        return len(doomed)

    async def _read(self, keys: list[str]) -> None:
        gate = asyncio.Semaphore(_GET_CONCURRENCY)

        async def read(key: str) -> None:
            async with gate:
                try:
                    data = await self.store.get(key)
                except ObjectNotFound:
                    return
            obj = parse_object(key, data)
            self._summaries[key] = summarize(key, obj.seq, HEADER_BYTES + sum(len(e.payload) for e in obj.entries),
                                             obj.entries)

        await asyncio.gather(*(read(k) for k in keys))

    async def loop(self, interval_ms: int, is_collector: Callable[[], bool]) -> None:
        """A pass every ``interval_ms`` while ``is_collector()`` says this broker is the one."""
        while True:
            await asyncio.sleep(interval_ms / 1000)
            if not is_collector():
                continue
            try:
                await self.run_once()
            except Exception as exc:  # noqa: BLE001 - a failed pass (S3 away, a corrupt object) is retried
                log.info("WAL garbage collection pass failed: %r", exc)
