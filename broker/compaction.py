"""The broker's compaction loop over the data streams of the partitions it leads: object
compaction (``stream_storage/compaction.py``, ``StreamStorage.compact_stream``) for every
partition, and key compaction (``stream_storage/key_compaction.py``, ``StreamStorage.clean_keys``)
for topics whose ``cleanup.policy`` includes ``compact`` — once new data was committed since
the last clean (each clean reads the partition's committed objects)."""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Callable, Mapping

from metadata_quorum.errors import FerryError
from stream_storage.compaction import CompactionPolicy

log = logging.getLogger("ferry.broker.compaction")


DEFAULT_DELETE_RETENTION_MS = 86_400_000  # Kafka's delete.retention.ms


def key_compaction_settings(configs: Mapping[str, str]) -> int | None:
    """``delete.retention.ms`` when the topic is compacted by key, else None."""
    policies = {p.strip() for p in str(configs.get("cleanup.policy", "delete")).split(",")}
    if "compact" not in policies:
        return None
    try:
        return max(0, int(str(configs.get("delete.retention.ms", DEFAULT_DELETE_RETENTION_MS))))
    except ValueError:
        return DEFAULT_DELETE_RETENTION_MS


async def compaction_loop(interval_ms: int, partitions: Callable[[], list[Any]], policy: CompactionPolicy,
                          configs_of: Callable[[str], Mapping[str, str]] | None = None) -> None:
    """Every ``interval_ms``, one partition after another: key compaction where the topic asks
    for it, then object compaction."""
    cleaned_to: dict[int, int] = {}  # data stream id -> its end offset when last cleaned by key
    while True:
        await asyncio.sleep(interval_ms / 1000)
        for part in partitions():
            if part.closed or part.fenced:
                continue
            try:
                retention_ms = key_compaction_settings(configs_of(part.topic)) if configs_of else None
                handle = part.storage.stream(part.data_stream_id)
                end = handle.committed_end if handle is not None else -1
                if retention_ms is not None and end > 0 and cleaned_to.get(part.data_stream_id) != end:
                    await part.storage.clean_keys(part.data_stream_id, int(time.time() * 1000), retention_ms,
                                                  policy.target_bytes)
                    cleaned_to[part.data_stream_id] = end
                await part.storage.compact_stream(part.data_stream_id, policy)
            except FerryError as exc:  # moved away or fenced meanwhile: its next owner compacts
                log.info("%s: compaction stopped: %s", part.topic, exc)
            except Exception:  # noqa: BLE001 - S3 trouble: the next pass tries again
                log.exception("%s: compaction failed", part.topic)
