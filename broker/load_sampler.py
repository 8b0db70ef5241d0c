"""Per-partition load samples written to the bucket every ``metrics_interval_ms``.

The format (one JSON line per partition, one object per broker per interval) is defined in
``broker/load_samples.py`` and docs/load-samples.md; the rebalancer plans moves from it. Counters here are cumulative per partition; each sample carries the difference since the
previous one, so a partition that arrived mid-interval reports only what it took in here.
"""
from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from metadata_quorum.kernel.clock import wall_ms
from broker.load_samples import PartitionSample, encode_samples, sample_key

log = logging.getLogger("ferry.broker.load")


@dataclass
class LoadCounters:
    """Cumulative traffic of one partition on this broker."""

    bytes_in: int = 0
    bytes_out: int = 0
    records_in: int = 0
    records_out: int = 0


@dataclass(frozen=True)
class PartitionLoad:
    topic: str
    partition: int
    counters: LoadCounters
    size_bytes: int


class LoadSampler:
    """Diffs cumulative counters into per-interval samples (pure apart from ``run``)."""

    def __init__(self, broker_id: int, interval_ms: int) -> None:
        self.broker_id = broker_id
        self.interval_ms = interval_ms
        self._last: dict[tuple[str, int], tuple[int, int, int, int]] = {}

    def sample(self, now_ms: int, loads: Iterable[PartitionLoad]) -> list[PartitionSample]:
        out: list[PartitionSample] = []
        seen: set[tuple[str, int]] = set()
        for load in loads:
            key = (load.topic, load.partition)
            seen.add(key)
            c = load.counters
            cur = (c.bytes_in, c.bytes_out, c.records_in, c.records_out)
            prev = self._last.get(key, (0, 0, 0, 0))
            if any(a < b for a, b in zip(cur, prev, strict=True)):
                prev = (0, 0, 0, 0)  # counters were reset (the partition left and came back)
            self._last[key] = cur
            out.append(PartitionSample(ts_ms=now_ms, interval_ms=self.interval_ms, broker_id=self.broker_id,
                                       topic=load.topic, partition=load.partition,
                                       bytes_in=cur[0] - prev[0], bytes_out=cur[1] - prev[1],
                                       records_in=cur[2] - prev[2], records_out=cur[3] - prev[3],
                                       size_bytes=load.size_bytes))
        for key in list(self._last):
            if key not in seen:
                del self._last[key]
        return out

    async def run(self, store: Any, loads: Callable[[], list[PartitionLoad]]) -> None:
        """Write one object per interval until cancelled; a failed write is logged and skipped."""
        while True:
            await asyncio.sleep(self.interval_ms / 1000.0)
            now_ms = wall_ms()  # names the sample object; read by other processes
            samples = self.sample(now_ms, loads())
            if not samples:
                continue
            try:
                await store.put(sample_key(self.broker_id, now_ms), encode_samples(samples))
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - samples are best effort
                log.warning("could not write load samples: %r", exc)
