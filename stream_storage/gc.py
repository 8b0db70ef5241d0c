"""Garbage collection of objects no committed record names.

An object in the bucket that no stream names is garbage once nobody can commit it any more: an
upload by a broker that was fenced, crashed or gave up before its commit, or a leftover of a
discarded attempt. Deciding that is the controller's (``collect_garbage`` in
``metadata_quorum/ops/streams.py``): one atomic step advances the **GC horizon** and answers which
listed keys are deletable — created at or before the horizon (keys carry their creation time)
and named by no stream. From that record on ``commit_object`` refuses keys created at or before
the horizon, so an upload still in flight is re-uploaded under a new key instead of being
committed after its object was deleted: a pass never deletes an object a committed record names,
or one a live upload may still commit. The grace period (horizon = now − grace) only spares
uploads that are about to commit from being redone.

This module is the shell: list, ask, delete. Any broker may run it (the lowest live broker id
does); two passes at once are harmless.
"""
from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Callable

from metadata_quorum.kernel.clock import wall_ms
from metadata_quorum.kernel.controller_api import ControllerWrites
from stream_storage.object_store import ObjectStore, ObjectStoreError

log = logging.getLogger("ferry.storage.gc")
CANDIDATES_PER_CALL = 10_000  # the controller's bound


@dataclass(frozen=True)
class GcResult:
    listed: int
    deletable: int
    deleted: int
    horizon_ms: int


class GarbageCollector:
    def __init__(self, store: ObjectStore, controller: ControllerWrites, caller: Callable[[], tuple[int, int]],
                 prefix: str, grace_ms: int, clock_ms: Callable[[], int] | None = None) -> None:
        """``caller()`` gives (broker id, broker epoch); ``controller`` runs ``collect_garbage``."""
        if grace_ms < 0:
            raise ValueError(f"gc grace must be >= 0 ms, got {grace_ms}")
        self.store = store
        self.controller = controller
        self.caller = caller
        self.prefix = prefix.rstrip("/") + "/"
        self.grace_ms = grace_ms
        self.clock_ms = clock_ms or wall_ms  # the horizon is compared with object keys' creation times
        self.deleted_total = 0

    async def run_once(self) -> GcResult:
        horizon = self.clock_ms() - self.grace_ms
        keys = [o.key for o in await self.store.list(self.prefix)]
        deletable: list[str] = []
        answered_horizon = horizon
        broker_id, broker_epoch = self.caller()
        for i in range(0, max(1, len(keys)), CANDIDATES_PER_CALL):
            reply = await self.controller.collect_garbage({"broker_id": broker_id, "broker_epoch": broker_epoch,
                                                           "horizon_ms": horizon,
                                                           "candidates": keys[i:i + CANDIDATES_PER_CALL]})
            deletable += [str(k) for k in reply.get("deletable", [])]
            answered_horizon = int(reply.get("horizon_ms", horizon))
        deleted = 0
        if deletable:
            try:
                await self.store.delete(deletable)
                deleted = len(deletable)
            except ObjectStoreError as exc:  # the next pass finds them again
                log.warning("garbage collection could not delete %d objects: %s", len(deletable), exc)
        self.deleted_total += deleted
        if deleted:
            log.info("garbage collection deleted %d of %d objects under %s (horizon %d)", deleted, len(keys),
                     self.prefix, answered_horizon)
        return GcResult(len(keys), len(deletable), deleted, answered_horizon)


async def gc_loop(collector: GarbageCollector, interval_ms: int, is_collector: Callable[[], bool]) -> None:
    """Run a pass every ``interval_ms`` while ``is_collector()`` says this broker is the one."""
    while True:
        await asyncio.sleep(interval_ms / 1000)
        if not is_collector():
            continue
        try:
            await collector.run_once()
        except Exception as exc:  # noqa: BLE001 - a failed pass (controller or S3 away) is retried next time
            log.info("garbage collection pass failed: %r", exc)
