"""ListOffsets by timestamp (and -3, the max timestamp) over a partition's data stream: the
indexes say where to start, a bounded read of the stream finds the record. ``read`` is the
partition's stream read (``StreamStorage.fetch`` of its data stream)."""
from __future__ import annotations

from typing import Awaitable, Callable, Protocol

from broker.max_timestamp import Candidate, MaxTimestampIndex, first_at, largest_first
from broker.partition_meta import TimeIndex
from stream_storage import batches

TIMESTAMP_SCAN_BYTES = 1024 * 1024
TIMESTAMP_SCAN_ROUNDS = 64
SCAN_BYTES = 64 * 1024 * 1024  # what a largest-timestamp scan reads at most


class FetchedRange(Protocol):
    @property
    def data(self) -> bytes | bytearray | memoryview: ...
    @property
    def next_offset(self) -> int: ...


Read = Callable[[int, int], Awaitable[FetchedRange]]  # (offset, max bytes) -> whole batches from there


async def offset_for_timestamp(read: Read, time_index: TimeIndex, log_start_offset: int, high_watermark: int,
                               timestamp_ms: int) -> tuple[int, int]:
    """Kafka's ListOffsets by timestamp: (offset, timestamp) of the first record at or after it."""
    start = time_index.lookup(timestamp_ms)
    if start is None:
        return -1, -1
    offset = max(start, log_start_offset)
    for _ in range(TIMESTAMP_SCAN_ROUNDS):
        if offset >= high_watermark:
            break
        result = await read(offset, TIMESTAMP_SCAN_BYTES)
        if not result.data:
            break
        for rec in batches.read_records(result.data):
            if rec.offset >= offset and rec.timestamp_ms >= timestamp_ms:
                return rec.offset, rec.timestamp_ms
        offset = max(offset + 1, int(result.next_offset))
    return -1, -1


async def max_timestamp_offset(read: Read, time_index: TimeIndex, index: MaxTimestampIndex, log_start_offset: int,
                               high_watermark: int) -> tuple[int, int]:
    """ListOffsets -3 (KIP-734): (offset, timestamp) of the first record with the largest
    timestamp still in the log, (-1, -1) when it has none. The index says which batch; one
    read of it answers (a few more when the log start cut into the batch or range that held
    the maximum)."""
    start, end = log_start_offset, high_watermark
    plan = index.plan(start, end)
    if plan is None:
        return -1, -1
    target: tuple[int, int] | Candidate | None = plan.front
    if plan.scan_from is not None and plan.scan_to is not None:
        target = plan.after_scan(await largest_in(read, plan.scan_from, min(plan.scan_to, end)))
    if target is None:
        return -1, -1
    if not isinstance(target, Candidate):
        return target
    result = await read(max(start, target.base_offset), TIMESTAMP_SCAN_BYTES)
    found = first_at(((r.offset, r.timestamp_ms) for r in batches.read_records(result.data)), target, start)
    if found is None:
        # an index seeded from an old meta may name a batch before the one; key compaction may
        # have removed the record: then the largest of what remains, read (bounded)
        found_offset, found_ts = await offset_for_timestamp(read, time_index, start, end, target.timestamp_ms)
        if found_offset >= 0:
            return found_offset, found_ts
        return await largest_in(read, start, end) or (-1, -1)
    return found


async def largest_in(read: Read, from_offset: int, to_offset: int) -> tuple[int, int] | None:
    """The first record with the largest timestamp in ``[from_offset, to_offset)``, reading at
    most ``SCAN_BYTES`` (past that, the best seen so far)."""
    best: tuple[int, int] | None = None
    offset, scanned = from_offset, 0
    while offset < to_offset and scanned < SCAN_BYTES:
        result = await read(offset, TIMESTAMP_SCAN_BYTES)
        if not result.data:
            break
        found = largest_first(((r.offset, r.timestamp_ms) for r in batches.read_records(result.data)),
                              from_offset, to_offset)
        if found is not None and (best is None or found[1] > best[1]):
            best = found
        scanned += len(result.data)
        offset = max(offset + 1, int(result.next_offset))
    return best

