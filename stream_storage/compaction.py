"""Object compaction: a stream's many small objects become few large ones (AutoMQ's stream objects).

The WAL uploads stream-set objects (a few streams each, at 8 MiB or every 10 s); a long
stream would be held in thousands of them, and a cold read would pay an index GET and a ranged
GET per object. The owner of a stream rewrites runs of its small, settled objects as one
single-stream object, committed through the controller's ``compact_objects`` (the old records
out, the new one in, in one step, fenced by the stream's epoch like every commit). A stream-set
object leaves S3 once no stream names it any more.

:func:`plan` (pure) chooses the runs: consecutive objects, back to back in offsets, each holding
less than half of ``target_bytes`` of the stream, older than ``min_age_ms``, grouped greedily up
to ``target_bytes``. A run is rewritten only once it holds at least half the target (or
``max_small_objects`` objects): each byte is rewritten about once, into an object that is never
small again, rather than again and again as a growing object absorbs each new small one. (Not
quite for a slow stream: a run closed by the count, below half the target, is small and is
rewritten again with the next run; at ~120 KiB of the stream per upload a byte is rewritten
2-4 times on its way to half the target, docs/s3.md.) So a stream of B bytes is held in at most about 2·B/target large objects plus a tail of fewer than
``max_small_objects`` small ones (and its young objects): bounded by its size, and a full read
costs few GETs.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from metadata_quorum.kernel.clock import wall_ms
from metadata_quorum.kernel.object_keys import object_created_ms
from stream_storage.batches import iter_batches
from stream_storage.control import ObjectRef
from stream_storage.object_format import Chunk

MIB = 1024 * 1024


@dataclass(frozen=True)
class CompactionPolicy:
    target_bytes: int = 64 * MIB  # a compacted object holds up to this much of its stream
    min_age_ms: int = 60_000  # objects younger than this are left to gather first
    max_runs_per_pass: int = 4  # bounded work (and memory: one run in memory at a time)
    max_small_objects: int = 64  # a run this long is rewritten even below half the target

    def __post_init__(self) -> None:
        if self.target_bytes < 2 or self.min_age_ms < 0 or self.max_runs_per_pass < 1:
            raise ValueError(f"invalid compaction policy {self!r}")


def stream_bytes(obj: ObjectRef) -> int:
    """The stream's own bytes in ``obj`` (older commits did not record it: the whole object)."""
    return obj.range_bytes if obj.range_bytes > 0 else obj.size


def plan(objects: Sequence[ObjectRef], now_ms: int, policy: CompactionPolicy) -> list[list[ObjectRef]]:
    """Runs of ≥ 2 consecutive small settled objects to rewrite as one object each."""
    small_limit = policy.target_bytes // 2
    runs: list[list[ObjectRef]] = []
    run: list[ObjectRef] = []
    run_bytes = 0

    def close() -> None:
        nonlocal run, run_bytes
        if len(run) >= 2 and (run_bytes >= small_limit or len(run) >= policy.max_small_objects):
            runs.append(run)
        run, run_bytes = [], 0

    for obj in sorted(objects, key=lambda o: o.start_offset):
        created = object_created_ms(obj.object_key)
        settled = created is None or now_ms - created >= policy.min_age_ms
        size = stream_bytes(obj)
        if not settled or size >= small_limit:
            close()
            if not settled:
                break  # younger objects follow: they gather first
            continue
        if run and (run[-1].end_offset != obj.start_offset or run_bytes + size > policy.target_bytes):
            close()
        run.append(obj)
        run_bytes += size
        if len(run) >= policy.max_small_objects:
            close()
    close()
    return runs[:policy.max_runs_per_pass]


def chunks_of(data: bytes, block_bytes: int, start: int | None = None, end: int | None = None) -> list[Chunk]:
    """Whole batches, grouped into chunks of about ``block_bytes`` (the new object's blocks). With
    ``start``/``end`` the chunks cover exactly ``[start, end)`` even where batches were removed
    (key compaction): the first starts at ``start``, the last ends at ``end``."""
    chunks: list[Chunk] = []
    view = memoryview(data)
    first_offset: int | None = None
    first_pos = end_pos = end_offset = 0
    for info in iter_batches(data):
        if first_offset is None:
            first_offset, first_pos = info.base_offset, info.position
        elif info.position + info.size_bytes - first_pos > block_bytes:
            chunks.append(Chunk(first_offset, info.base_offset, bytes(view[first_pos:info.position])))
            first_offset, first_pos = info.base_offset, info.position
        end_offset, end_pos = info.next_offset, info.position + info.size_bytes
    if first_offset is not None:
        chunks.append(Chunk(first_offset, end_offset, bytes(view[first_pos:end_pos])))
    if chunks and start is not None and chunks[0].start_offset != start:
        chunks[0] = Chunk(start, chunks[0].end_offset, chunks[0].data)
    if chunks and end is not None and chunks[-1].end_offset != end:
        chunks[-1] = Chunk(chunks[-1].start_offset, end, chunks[-1].data)
    return chunks


def now_ms() -> int:
    return wall_ms()  # compared with objects' wall-time stamps
