"""Builds the broker's stream storage from its config (S3 endpoint, WAL dir, upload thresholds)."""
from __future__ import annotations

import logging
from typing import Any, Callable

from broker.config import BrokerConfig
from stream_storage.config import s3_config_from_dict, storage_config_from_dict
from stream_storage.control import HttpStreamControl
from stream_storage.object_store import RetryingObjectStore
from stream_storage.s3_store import S3ObjectStore
from stream_storage.storage import StreamStorage

log = logging.getLogger("ferry.broker.storage")


def open_object_store(config: BrokerConfig) -> Any:
    s3 = s3_config_from_dict(dict(config.s3))
    return RetryingObjectStore(S3ObjectStore(s3), s3.retry)


async def open_storage(config: BrokerConfig, store: Any, client: Any, broker_id: int,
                       broker_epoch: Callable[[], int]) -> StreamStorage:
    """A started StreamStorage on this broker's WAL dir; its own WAL tail is kept for re-opens."""
    settings = dict(config.storage)
    settings["wal_dir"] = config.effective_wal_dir
    storage = StreamStorage(storage_config_from_dict(settings), store, HttpStreamControl(client), broker_id,
                            broker_epoch())
    replay = await storage.start()
    if replay.entries:
        log.info("WAL %s holds %d entries from before the restart (%d torn bytes cut)", config.effective_wal_dir,
                 len(replay.entries), replay.torn_bytes)
    return storage


async def close_storage(storage: Any, store: Any) -> None:
    """Stop the storage without closing streams (partitions were closed one by one before)."""
    try:
        await storage.uploader.stop()
        await storage.wal.close()
    finally:
        try:
            await store.close()
        except Exception as exc:  # noqa: BLE001 - shutting down
            log.debug("closing the object store: %r", exc)
