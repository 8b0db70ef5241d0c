"""The broker's compaction loop over the data streams of the partitions it leads: object
compaction (``stream_storage/compaction.py``, ``StreamStorage.compact_stream``) for every
partition, and key compaction (``stream_storage/key_compaction.py``, ``StreamStorage.clean_keys``)
for topics whose ``cleanup.policy`` includes ``compact`` — once new data was committed since
the last clean (each clean reads the partition's committed objects)."""
from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable, Iterator, Mapping

from metadata_quorum.kernel.clock import wall_ms
from metadata_quorum.kernel.errors import FerryError
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


def passes(interval_ms: int, key_interval_ms: int) -> Iterator[tuple[int, bool]]:
    """The loop's schedule: (ms to sleep, whether object compaction runs this pass). Key
    compaction looks every pass (it does nothing where no new data was committed), object
    compaction once every ``interval_ms``, both in one pass so they never touch one stream at once."""
    tick_ms = min(interval_ms, key_interval_ms)
    elapsed_ms, objects_at_ms = 0, interval_ms
    while True:
        elapsed_ms += tick_ms
        due = elapsed_ms >= objects_at_ms
        if due:
            objects_at_ms = elapsed_ms + interval_ms
        yield tick_ms, due


async def compaction_loop(interval_ms: int, partitions: Callable[[], list[Any]], policy: CompactionPolicy,
                          configs_of: Callable[[str], Mapping[str, str]] | None = None,
                          key_interval_ms: int | None = None) -> None:
    """One partition after another: key compaction where the topic asks for it and new data was
    committed (every ``key_interval_ms``), then object compaction (every ``interval_ms``)."""
    cleaned_to: dict[int, int] = {}  # data stream id -> its end offset when last cleaned by key
    for sleep_ms, objects_due in passes(interval_ms, key_interval_ms or interval_ms):
        await asyncio.sleep(sleep_ms / 1000)
        for part in partitions():
            if part.closed or part.fenced:
                continue
            try:
                retention_ms = key_compaction_settings(configs_of(part.topic)) if configs_of else None
                handle = part.storage.stream(part.data_stream_id)
                end = handle.committed_end if handle is not None else -1
                if retention_ms is not None and end > 0 and cleaned_to.get(part.data_stream_id) != end:
                    # as Kafka's cleaner: below the last stable offset, aborted transactions removed
                    aborted = [(a.producer_id, a.first_offset, a.last_offset)
                               for a in part.aborted_transactions(0, part.high_watermark)]
                    await part.storage.clean_keys(part.data_stream_id, wall_ms(), retention_ms,
                                                  policy.target_bytes, part.last_stable_offset, aborted)
                    cleaned_to[part.data_stream_id] = end
                if objects_due:
                    await part.storage.compact_stream(part.data_stream_id, policy)
            except FerryError as exc:  # moved away or fenced meanwhile: its next owner compacts
                log.info("%s: compaction stopped: %s", part.topic, exc)
            except Exception:  # S3 trouble: the next pass tries again
                log.exception("%s: compaction failed", part.topic)
