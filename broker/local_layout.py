"""Kafka's on-disk layout of a ``storage=local`` partition, as pure functions (no file I/O).

A replica is a directory ``topic-partition/`` in one of the broker's log dirs holding segments
named by their base offset (``00000000000000000042.log`` of v2 RecordBatches, with a sparse
``.index`` of (relative offset, position) and a ``.timeindex`` of (timestamp, relative offset)),
a ``leader-epoch-checkpoint`` and a ``partition.metadata``; each log dir has
``recovery-point-offset-checkpoint`` and ``replication-offset-checkpoint`` files. The formats are
Kafka's, so that a person who knows Kafka's log dirs reads these the same way. Everything here
decides or encodes; ``local_log.py`` reads and writes the files.
"""
from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from typing import Iterable, Sequence

from metadata_quorum.kernel.errors import ErrorCode, FerryError
from stream_storage import batches

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
PARTITION_METADATA = "partition.metadata"
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
REPLICATION_CHECKPOINT = "replication-offset-checkpoint"
CHECKPOINT_VERSION = 0
OFFSET_DIGITS = 20

_INDEX_ENTRY = struct.Struct(">ii")   # relative offset, position
_TIME_ENTRY = struct.Struct(">qi")    # timestamp, relative offset
INDEX_ENTRY_BYTES = _INDEX_ENTRY.size
TIME_INDEX_ENTRY_BYTES = _TIME_ENTRY.size
_SEGMENT_NAME = re.compile(r"(\d{20})(\.log|\.index|\.timeindex)")


def segment_file_name(base_offset: int, suffix: str = LOG_SUFFIX) -> str:
    """``<base offset, 20 digits>.log`` (or ``.index`` / ``.timeindex``), as Kafka names them."""
    if base_offset < 0:
        raise ValueError(f"a segment's base offset is never negative, got {base_offset}")
    return f"{base_offset:0{OFFSET_DIGITS}d}{suffix}"


def parse_segment_file_name(name: str) -> tuple[int, str] | None:
    """(base offset, suffix) of a segment file, or None for anything else in the directory."""
    m = _SEGMENT_NAME.fullmatch(name)
    return (int(m.group(1)), m.group(2)) if m else None


def segment_bases(names: Iterable[str]) -> list[int]:
    """The base offsets of the ``.log`` files among ``names``, in order."""
    return sorted(p[0] for n in names if (p := parse_segment_file_name(n)) is not None and p[1] == LOG_SUFFIX)


@dataclass(frozen=True)
class RollPolicy:
    """``segment.bytes`` and ``segment.ms`` of the topic (Kafka's defaults: 1 GiB, 7 days)."""

    segment_bytes: int = 1024 * 1024 * 1024
    segment_ms: int = 7 * 24 * 3600 * 1000
    index_interval_bytes: int = 4096

    def __post_init__(self) -> None:
        if self.segment_bytes < batches.HEADER_BYTES or self.segment_ms <= 0 or self.index_interval_bytes <= 0:
            raise ValueError(f"invalid roll policy {self!r}")


def should_roll(policy: RollPolicy, segment_bytes: int, segment_created_ms: int, now_ms: int,
                incoming_bytes: int, incoming_next_offset: int, segment_base_offset: int) -> bool:
    """Kafka's LogSegment.shouldRoll: a non-empty segment rolls when the next batch would take it
    past ``segment.bytes``, when it is older than ``segment.ms``, or when an offset would no longer
    fit in the 4-byte relative offset of its index."""
    if segment_bytes == 0:
        return False
    return (segment_bytes + incoming_bytes > policy.segment_bytes
            or now_ms - segment_created_ms >= policy.segment_ms
            or incoming_next_offset - segment_base_offset > 2 ** 31 - 1)


# ---------------------------------------------------------------------------------- indexes
def encode_index_entry(relative_offset: int, position: int) -> bytes:
    return _INDEX_ENTRY.pack(relative_offset, position)


def encode_time_index_entry(timestamp_ms: int, relative_offset: int) -> bytes:
    return _TIME_ENTRY.pack(timestamp_ms, relative_offset)


def decode_index(buf: bytes) -> list[tuple[int, int]]:
    """(relative offset, position) entries; a torn last entry and trailing zeroes (a
    preallocated index) are ignored; entries must increase or the index is rebuilt."""
    out: list[tuple[int, int]] = []
    for i in range(len(buf) // INDEX_ENTRY_BYTES):
        rel, pos = _INDEX_ENTRY.unpack_from(buf, i * INDEX_ENTRY_BYTES)
        if out and (rel <= out[-1][0] or pos <= out[-1][1]):
            break
        if not out and rel == 0 and pos == 0 and i > 0:
            break
        out.append((rel, pos))
    return out


def decode_time_index(buf: bytes) -> list[tuple[int, int]]:
    """(timestamp, relative offset) entries, non-decreasing in both."""
    out: list[tuple[int, int]] = []
    for i in range(len(buf) // TIME_INDEX_ENTRY_BYTES):
        ts, rel = _TIME_ENTRY.unpack_from(buf, i * TIME_INDEX_ENTRY_BYTES)
        if out and (ts < out[-1][0] or rel < out[-1][1]):
            break
        out.append((ts, rel))
    return out


def lookup_position(entries: Sequence[tuple[int, int]], relative_offset: int) -> int:
    """The byte position to start scanning for ``relative_offset``: the entry at or below it, else 0."""
    lo, hi, best = 0, len(entries) - 1, 0
    while lo <= hi:
        mid = (lo + hi) // 2
        if entries[mid][0] <= relative_offset:
            best = entries[mid][1]
            lo = mid + 1
        else:
            hi = mid - 1
    return best


def lookup_time(entries: Sequence[tuple[int, int]], timestamp_ms: int) -> int:
    """The relative offset to start scanning for the first record at or after ``timestamp_ms``:
    that of the last entry older than it (or 0)."""
    start = 0
    for ts, rel in entries:
        if ts >= timestamp_ms:
            return start
        start = rel
    return start


# ---------------------------------------------------------------------------------- batch bounds
_BOUNDS = struct.Struct(">qi")  # base offset, batch length
_DELTA = struct.Struct(">i")


@dataclass(frozen=True)
class BatchBounds:
    """Where a batch starts and ends, read from its first 61 bytes only (no CRC check)."""

    base_offset: int
    size_bytes: int
    next_offset: int


def batch_bounds(head: bytes | bytearray | memoryview) -> BatchBounds:
    """The bounds of the batch whose header starts ``head`` (at least ``HEADER_BYTES`` long)."""
    if len(head) < batches.HEADER_BYTES:
        raise FerryError(ErrorCode.CORRUPT_MESSAGE, f"record batch header truncated ({len(head)} bytes)")
    base, length = _BOUNDS.unpack_from(head, 0)
    (delta,) = _DELTA.unpack_from(head, batches.LAST_OFFSET_DELTA_OFFSET)
    if length < batches.HEADER_BYTES - batches.LOG_OVERHEAD or delta < 0:
        raise FerryError(ErrorCode.CORRUPT_MESSAGE, f"record batch at offset {base} has a bad header")
    return BatchBounds(base, length + batches.LOG_OVERHEAD, base + delta + 1)


# ---------------------------------------------------------------------------------- recovery
@dataclass(frozen=True)
class ScanResult:
    """What a scan of a segment's bytes found: the valid prefix and its batches."""

    valid_bytes: int
    infos: tuple[batches.BatchInfo, ...]
    torn: bool  # bytes after the valid prefix (a partial or corrupt batch): truncate them


def scan_valid_prefix(buf: bytes | bytearray | memoryview, expected_base: int | None = None) -> ScanResult:
    """Walk the batches of a segment and stop at the first one that is cut short, fails its CRC
    or does not follow the previous one: Kafka's recovery truncates the segment there."""
    view = memoryview(buf)
    position, infos, next_offset = 0, [], expected_base
    while position < len(view):
        try:
            info = batches.header(view, position)
        except FerryError:
            break
        if info.last_offset_delta < 0 or not batches.crc_ok(view, info):
            break
        if next_offset is not None and info.base_offset < next_offset:
            break
        infos.append(info)
        next_offset = info.next_offset
        position += info.size_bytes
    return ScanResult(position, tuple(infos), position < len(view))


# ---------------------------------------------------------------------------------- checkpoints
def render_offset_checkpoint(entries: dict[tuple[str, int], int]) -> str:
    """Kafka's OffsetCheckpointFile: version, count, then ``topic partition offset`` lines."""
    lines = [str(CHECKPOINT_VERSION), str(len(entries))]
    lines += [f"{t} {p} {o}" for (t, p), o in sorted(entries.items())]
    return "\n".join(lines) + "\n"


def parse_offset_checkpoint(text: str) -> dict[tuple[str, int], int]:
    """The inverse of :func:`render_offset_checkpoint`; KAFKA_STORAGE_ERROR on anything malformed."""
    lines = _checkpoint_lines(text, "offset checkpoint")
    out: dict[tuple[str, int], int] = {}
    for line in lines:
        parts = line.split(" ")
        if len(parts) != 3:
            raise _malformed("offset checkpoint", line)
        try:
            out[(parts[0], int(parts[1]))] = int(parts[2])
        except ValueError:
            raise _malformed("offset checkpoint", line) from None
    return out


def render_epoch_checkpoint(entries: Sequence[tuple[int, int]]) -> str:
    """Kafka's leader-epoch-checkpoint: version, count, then ``epoch start_offset`` lines."""
    lines = [str(CHECKPOINT_VERSION), str(len(entries))] + [f"{e} {o}" for e, o in entries]
    return "\n".join(lines) + "\n"


def parse_epoch_checkpoint(text: str) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for line in _checkpoint_lines(text, "leader-epoch-checkpoint"):
        parts = line.split(" ")
        if len(parts) != 2:
            raise _malformed("leader-epoch-checkpoint", line)
        try:
            out.append((int(parts[0]), int(parts[1])))
        except ValueError:
            raise _malformed("leader-epoch-checkpoint", line) from None
    return out


def render_partition_metadata(topic_id: str) -> str:
    return f"version: 0\ntopic_id: {topic_id}\n"


def parse_partition_metadata(text: str) -> str:
    """The topic id of a ``partition.metadata`` file (its ``topic_id`` line)."""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "topic_id" and value.strip():
            return value.strip()
    raise FerryError(ErrorCode.KAFKA_STORAGE_ERROR, "partition.metadata has no topic_id line")


def _checkpoint_lines(text: str, what: str) -> list[str]:
    lines = [ln for ln in text.split("\n") if ln != ""]
    if len(lines) < 2 or lines[0] != str(CHECKPOINT_VERSION):
        raise FerryError(ErrorCode.KAFKA_STORAGE_ERROR, f"{what} file has an unknown version or no header")
    try:
        count = int(lines[1])
    except ValueError:
        raise _malformed(what, lines[1]) from None
    if count != len(lines) - 2:
        raise FerryError(ErrorCode.KAFKA_STORAGE_ERROR, f"{what} file says {count} entries, has {len(lines) - 2}")
    return lines[2:]


def _malformed(what: str, line: str) -> FerryError:
    return FerryError(ErrorCode.KAFKA_STORAGE_ERROR, f"malformed {what} line {line[:80]!r}")


# ---------------------------------------------------------------------------------- leader epochs
def assign_epoch(entries: Sequence[tuple[int, int]], epoch: int, start_offset: int) -> list[tuple[int, int]]:
    """Kafka's LeaderEpochFileCache.assign: a new epoch starting at ``start_offset`` is recorded
    when it is above the latest; an entry starting at or after it is an older leader's that was
    truncated away and is dropped."""
    out = list(entries)
    if out and epoch <= out[-1][0]:
        return out
    out = [(e, o) for e, o in out if o < start_offset]
    out.append((epoch, start_offset))
    return out


def truncate_epochs_from_end(entries: Sequence[tuple[int, int]], end_offset: int) -> list[tuple[int, int]]:
    """After truncating the log to ``end_offset``: epochs that start at or after it are gone."""
    return [(e, o) for e, o in entries if o < end_offset]


def truncate_epochs_from_start(entries: Sequence[tuple[int, int]], start_offset: int) -> list[tuple[int, int]]:
    """After moving the log start to ``start_offset``: the epoch covering it starts there."""
    kept = [(e, o) for e, o in entries if o >= start_offset]
    before = [(e, o) for e, o in entries if o < start_offset]
    if before and (not kept or kept[0][1] > start_offset):
        kept.insert(0, (before[-1][0], start_offset))
    return kept


def latest_epoch(entries: Sequence[tuple[int, int]]) -> int:
    return entries[-1][0] if entries else -1


def end_offset_for_epoch(entries: Sequence[tuple[int, int]], epoch: int, log_end_offset: int) -> tuple[int, int]:
    """Kafka's OffsetsForLeaderEpoch answer: (the largest epoch ≤ ``epoch``, the offset where it
    ends: the next epoch's start, or the log end offset for the latest); (-1, -1) when ``epoch``
    is older than every epoch known."""
    found = -1
    for i, (e, _start) in enumerate(entries):
        if e > epoch:
            break
        found = i
    if found < 0:
        return -1, -1
    end = entries[found + 1][1] if found + 1 < len(entries) else log_end_offset
    return entries[found][0], end
