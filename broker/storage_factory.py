"""Builds the broker's stream storage from its config (S3 endpoint, WAL dir, upload thresholds)."""
from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
from typing import Callable

from broker.config import BrokerConfig
from metadata_quorum.client import ControllerClient
from metadata_quorum.kernel.controller_api import ControllerApi, SplitTransport, WriteTransport
from stream_storage.control import HttpStreamControl, OpStreamControl
from stream_storage.object_store import ObjectStore, RetryingObjectStore
from stream_storage.s3_cost import S3RequestObserver
from stream_storage.s3_store import S3ObjectStore
from stream_storage.storage import StreamStorage

log = logging.getLogger("ferry.broker.storage")


def open_object_store(config: BrokerConfig, observer: S3RequestObserver | None = None) -> ObjectStore:
    """The broker's S3 store with bounded retries; ``observer`` counts its requests (``/metrics``)."""
    return RetryingObjectStore(S3ObjectStore(config.s3, observer=observer), config.s3.retry)


async def open_storage(config: BrokerConfig, store: ObjectStore, client: ControllerClient, broker_id: int,
                       broker_epoch: Callable[[], int], wal_dir: str,
                       writes: WriteTransport | None = None) -> StreamStorage:
    """A started StreamStorage on ``wal_dir``; its own WAL tail is kept for re-opens. Stream
    operations go through ``writes`` when given (the broker's batcher), else one request each."""
    control = HttpStreamControl(client) if writes is None else \
        OpStreamControl(ControllerApi(SplitTransport(writes, client)))
    # in S3 each of the broker's WALs (one per log dir) has a name: "main", or the log dir's id
    # basename/normpath are string work, no I/O
    wal_name = "main" if len(config.log_dirs) == 1 else os.path.basename(os.path.normpath(wal_dir))  # noqa: ASYNC240
    storage = StreamStorage(dataclasses.replace(config.storage, wal_dir=wal_dir), store, control, broker_id, broker_epoch(), wal_name)
    replay = await storage.start()
    if replay.entries:
        log.info("WAL %s holds %d entries from before the restart (%d torn bytes cut)", wal_dir,
                 len(replay.entries), replay.torn_bytes)
    return storage


def wal_dirs_for(config: BrokerConfig, dir_ids: dict[str, str]) -> dict[str, str]:
    """Log dir -> its WAL dir: the broker's WAL dir with one log dir, one sub-directory (named by
    the log dir's id) per log dir with several, so that a partition's WAL follows its log dir."""
    if len(config.log_dirs) == 1:
        return {config.log_dirs[0]: config.effective_wal_dir}
    return {path: os.path.join(config.effective_wal_dir, dir_ids[path]) for path in config.log_dirs}


async def upload_together(storage: StreamStorage, stream_ids: list[int], close: bool = False) -> None:
    """Upload what many streams buffer as ONE object with one commit, so that closing many
    partitions at once costs a few PUTs instead of one per stream. Errors are not raised here:
    each caller's own ``force_upload`` afterwards reports its stream's outcome (and uploads
    anything this pass left)."""
    many = getattr(storage, "force_upload_many", None)
    if many is not None:
        # per-stream failures come back as a map; the callers re-check
        await (many(stream_ids, close=True) if close else many(stream_ids))
        return
    await asyncio.gather(*(storage.force_upload(sid) for sid in stream_ids), return_exceptions=True)


class UploadBatcher:
    """Coalesces the force-uploads of partitions closing at about the same time (step 4)."""

    def __init__(self, storage: StreamStorage, window_s: float = 0.002, max_streams: int = 1000) -> None:
        self.storage = storage
        self.window_s = window_s
        self.max_streams = max_streams
        self._queue: list[tuple[list[int], list[int], asyncio.Future[None], bool]] = []
        self._task: asyncio.Task[None] | None = None

    async def upload(self, stream_ids: list[int], last_ids: list[int] = (),  # type: ignore[assignment]
                     close: bool = False) -> None:
        """Upload ``stream_ids`` and ``last_ids``; the latter go after every other stream of the
        object (the meta streams: contiguous, so a new owner can read them all with one GET).
        With ``close`` (the partition takes no more appends) the commit closes those streams too."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue.append((list(stream_ids), list(last_ids), fut, close))
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())
        await fut
        for sid in list(stream_ids) + list(last_ids):  # the per-stream outcome (fenced, failed) is raised here
            await self.storage.force_upload(sid)

    async def _run(self) -> None:
        await asyncio.sleep(self.window_s)
        while self._queue:
            batch: list[tuple[list[int], list[int], asyncio.Future[None], bool]] = []
            count = 0
            while self._queue and count < self.max_streams:
                item = self._queue.pop(0)
                batch.append(item)
                count += len(item[0]) + len(item[1])
            try:
                for close in (True, False):  # closing partitions' streams in one object, the others in another
                    part = [item for item in batch if item[3] is close]
                    if part:
                        await upload_together(self.storage, [sid for ids, _l, _f, _c in part for sid in ids] +
                                              [sid for _i, last, _f, _c in part for sid in last], close=close)
            finally:
                for _ids, _last, fut, _close in batch:
                    if not fut.done():
                        fut.set_result(None)


async def prefetch_streams(storage: StreamStorage, object_key: str, size: int, stream_ids: set[int]) -> None:
    """Read the blocks of ``stream_ids`` in one object into the storage's caches (contiguous
    blocks come in one ranged GET), so that a later fetch of those streams needs no S3 request."""
    await storage.prefetch(object_key, size, stream_ids)


async def close_storage(storages: list[StreamStorage], store: ObjectStore) -> None:
    """Stop the storages without closing streams (partitions were closed one by one before)."""
    try:
        for storage in storages:
            await storage.uploader.stop()
            await storage.wal.close()
    finally:
        try:
            await store.close()
        except Exception as exc:  # noqa: BLE001 - shutting down
            log.debug("closing the object store: %r", exc)
