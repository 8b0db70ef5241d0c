"""The broker's object-compaction loop over the data streams of the partitions it leads
(the work itself: ``stream_storage/compaction.py`` and ``StreamStorage.compact_stream``)."""
from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable

from metadata_quorum.errors import FerryError
from stream_storage.compaction import CompactionPolicy

log = logging.getLogger("ferry.broker.compaction")


async def compaction_loop(interval_ms: int, partitions: Callable[[], list[Any]], policy: CompactionPolicy) -> None:
    """Object compaction of the data streams this broker leads (``stream_storage/compaction.py``),
    one partition after another, every ``interval_ms``."""
    while True:
        await asyncio.sleep(interval_ms / 1000)
        for part in partitions():
            if part.closed or part.fenced:
                continue
            try:
                await part.storage.compact_stream(part.data_stream_id, policy)
            except FerryError as exc:  # moved away or fenced meanwhile: its next owner compacts
                log.info("%s: compaction stopped: %s", part.topic, exc)
            except Exception:  # noqa: BLE001 - S3 trouble: the next pass tries again
                log.exception("%s: compaction failed", part.topic)
