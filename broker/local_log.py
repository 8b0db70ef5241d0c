"""A ``storage=local`` replica's log on disk: segments, indexes and leader epochs (the I/O shell).

Decisions (names, roll, index entries, the valid prefix after a crash, epoch bookkeeping, file
formats) are in ``local_layout.py``; this module only reads and writes files. Appends are written
to the page cache and fsynced when a segment rolls or ``flush`` runs, as Kafka does by default
(``flush.messages`` unset): a record acknowledged with ``acks=all`` is safe because every in-sync
replica has it, not because one disk synced it. Start-up recovery scans every segment from the
recovery point (the last flushed offset) and truncates a torn tail.
"""
from __future__ import annotations

import bisect
import dataclasses
import logging
import os
import struct
from dataclasses import dataclass, field
from typing import Callable

from metadata_quorum.kernel.clock import mono_ms
from broker import local_layout as lay
from metadata_quorum.kernel.errors import ErrorCode, FerryError
from stream_storage import batches

log = logging.getLogger("ferry.broker.local_log")

SCAN_CHUNK_BYTES = 4 * 1024 * 1024
READ_SLACK_BYTES = 64 * 1024
_LENGTH = struct.Struct(">i")


def _now_ms() -> int:
    return mono_ms()  # rates, ages and lags are durations: a wall-clock step must not move them


@dataclass
class Segment:
    base_offset: int
    dir_path: str
    next_offset: int
    size_bytes: int = 0
    created_ms: int = 0
    max_timestamp_ms: int = -1
    index: list[tuple[int, int]] = field(default_factory=list)
    time_index: list[tuple[int, int]] = field(default_factory=list)
    bytes_since_index: int = 0
    last_batch_base: int = -1
    fd: int = -1

    def path(self, suffix: str = lay.LOG_SUFFIX) -> str:
        return os.path.join(self.dir_path, lay.segment_file_name(self.base_offset, suffix))

    def open(self) -> None:
        if self.fd < 0:
            self.fd = os.open(self.path(), os.O_RDWR | os.O_CREAT, 0o644)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def pread(self, size: int, position: int) -> bytes:
        return os.pread(self.fd, size, position)


class LocalLog:
    """One replica's segments in ``<log dir>/<topic>-<partition>/``."""

    def __init__(self, dir_path: str, topic_id: str, policy: lay.RollPolicy,
                 clock_ms: Callable[[], int] = _now_ms) -> None:
        self.dir_path = dir_path
        self.topic_id = topic_id
        self.policy = policy
        self._clock_ms = clock_ms
        self.segments: list[Segment] = []
        self.epochs: list[tuple[int, int]] = []  # (leader epoch, start offset)
        self.recovery_point = 0
        self.recovered_bytes_truncated = 0

    # ------------------------------------------------------------------ open and recovery
    def open(self, recovery_point: int = 0) -> "LocalLog":
        """Load the segments; scan those at or after ``recovery_point`` and cut a torn tail."""
        os.makedirs(self.dir_path, exist_ok=True)
        meta = os.path.join(self.dir_path, lay.PARTITION_METADATA)
        if os.path.exists(meta):
            with open(meta, encoding="utf-8") as f:
                found = lay.parse_partition_metadata(f.read())
            if found != self.topic_id:
                raise FerryError(ErrorCode.KAFKA_STORAGE_ERROR, f"{self.dir_path} belongs to topic id {found}, "
                                 f"not {self.topic_id}: a deleted topic's leftover")
        else:
            _write_atomic(meta, lay.render_partition_metadata(self.topic_id))
        names = os.listdir(self.dir_path)
        for name in names:  # index files of a segment that no longer exists
            parsed = lay.parse_segment_file_name(name)
            if parsed is not None and parsed[1] != lay.LOG_SUFFIX and \
                    lay.segment_file_name(parsed[0]) not in names:
                os.remove(os.path.join(self.dir_path, name))
        bases = lay.segment_bases(names)
        expected: int | None = None
        for i, base in enumerate(bases):
            seg = Segment(base, self.dir_path, base, created_ms=self._clock_ms())
            seg.open()
            last_segment = i == len(bases) - 1
            needs_scan = last_segment or (i + 1 < len(bases) and bases[i + 1] > recovery_point)
            torn = self._load(seg, scan=needs_scan or not os.path.exists(seg.path(lay.INDEX_SUFFIX)),
                              expected=expected)
            self.segments.append(seg)
            expected = seg.next_offset
            if torn:  # Kafka deletes every segment after a corrupt one
                for later in bases[i + 1:]:
                    for suffix in (lay.LOG_SUFFIX, lay.INDEX_SUFFIX, lay.TIME_INDEX_SUFFIX):
                        _remove(os.path.join(self.dir_path, lay.segment_file_name(later, suffix)))
                break
        if not self.segments:
            self._new_segment(0)
        epoch_path = os.path.join(self.dir_path, lay.LEADER_EPOCH_CHECKPOINT)
        if os.path.exists(epoch_path):
            with open(epoch_path, encoding="utf-8") as f:
                self.epochs = lay.parse_epoch_checkpoint(f.read())
        self.epochs = lay.truncate_epochs_from_end(self.epochs, self.log_end_offset)
        self.recovery_point = min(recovery_point, self.log_end_offset)
        return self

    def _load(self, seg: Segment, scan: bool, expected: int | None) -> bool:
        """Fill ``seg`` from its files; with ``scan``, read every batch (CRC checked) and truncate
        what does not validate. Returns whether a torn tail was cut."""
        file_size = os.fstat(seg.fd).st_size
        if not scan:
            seg.index = lay.decode_index(_read_file(seg.path(lay.INDEX_SUFFIX)))
            seg.time_index = lay.decode_time_index(_read_file(seg.path(lay.TIME_INDEX_SUFFIX)))
            seg.size_bytes = file_size
            last = self._last_batch(seg, file_size)
            if last is not None:
                seg.next_offset = last.next_offset
                seg.max_timestamp_ms = max([ts for ts, _ in seg.time_index], default=-1)
                return False
            if file_size == 0:
                return False
            scan = True  # the index did not lead to a whole last batch: rebuild it
        seg.index, seg.time_index, seg.bytes_since_index = [], [], 0
        position, next_offset = 0, expected if expected is not None else seg.base_offset
        while position < file_size:
            chunk = seg.pread(SCAN_CHUNK_BYTES, position)
            result = lay.scan_valid_prefix(chunk, next_offset)
            if result.valid_bytes == 0 and len(chunk) >= batches.LOG_OVERHEAD:
                claimed = _LENGTH.unpack_from(chunk, 8)[0] + batches.LOG_OVERHEAD
                if len(chunk) < claimed <= file_size - position:  # one batch larger than a chunk
                    chunk = seg.pread(claimed, position)
                    result = lay.scan_valid_prefix(chunk, next_offset)
            if result.valid_bytes == 0:
                break
            for info in result.infos:
                self._index_batch(seg, dataclasses.replace(info, position=position + info.position), write=False)
            position += result.valid_bytes
            next_offset = result.infos[-1].next_offset
        seg.size_bytes = position
        seg.next_offset = next_offset if position else seg.base_offset
        torn = position < file_size
        if torn:
            log.warning("%s: truncating a torn tail of %d bytes at offset %d (unclean shutdown)",
                        seg.path(), file_size - position, seg.next_offset)
            self.recovered_bytes_truncated += file_size - position
            os.ftruncate(seg.fd, position)
        self._rewrite_indexes(seg)
        return torn

    def _last_batch(self, seg: Segment, file_size: int) -> lay.BatchBounds | None:
        """Walk from the last index entry to the end of the file: the last whole batch, or None
        when the walk does not end exactly at the end (the caller then scans the segment)."""
        position = seg.index[-1][1] if seg.index else 0
        last = None
        while position < file_size:
            try:
                bounds = lay.batch_bounds(seg.pread(batches.HEADER_BYTES, position))
            except FerryError:
                return None
            if position + bounds.size_bytes > file_size:
                return None
            last = bounds
            position += bounds.size_bytes
        return last

    # ------------------------------------------------------------------ properties
    @property
    def active(self) -> Segment:
        return self.segments[-1]

    @property
    def log_end_offset(self) -> int:
        return self.active.next_offset

    @property
    def log_start_offset(self) -> int:
        return self.segments[0].base_offset

    @property
    def size_bytes(self) -> int:
        return sum(s.size_bytes for s in self.segments)

    @property
    def latest_epoch(self) -> int:
        return lay.latest_epoch(self.epochs)

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        return lay.end_offset_for_epoch(self.epochs, epoch, self.log_end_offset)

    # ------------------------------------------------------------------ append
    def append_as_leader(self, body: bytearray, leader_epoch: int) -> tuple[int, int]:
        """Stamp offsets from the log end and ``leader_epoch`` on validated batches, append them.
        Returns (base offset, last offset)."""
        base = self.log_end_offset
        next_offset = batches.assign_offsets(body, base, leader_epoch)
        self.assign_epoch(leader_epoch, base)
        self._write(body, next_offset)
        return base, next_offset - 1

    def append_replicated(self, data: bytes) -> int:
        """A follower appends what the leader sent (offsets and epochs as they are); batches it has
        already are skipped. Returns how many offsets were added."""
        infos = batches.validate_batches(data)
        start = self.log_end_offset
        keep = [i for i in infos if i.next_offset > start]
        if not keep:
            return 0
        if keep[0].base_offset != start:
            raise FerryError(ErrorCode.OFFSET_OUT_OF_RANGE, f"replicated batch at offset {keep[0].base_offset} "
                             f"does not follow the log end offset {start}")
        for info in keep:
            self.assign_epoch(info.leader_epoch, info.base_offset)
        self._write(memoryview(data)[keep[0].position:], keep[-1].next_offset)
        return self.log_end_offset - start

    def assign_epoch(self, epoch: int, start_offset: int) -> None:
        updated = lay.assign_epoch(self.epochs, epoch, start_offset)
        if updated != self.epochs:
            self.epochs = updated
            self._write_epochs()

    def _write(self, body: bytes | bytearray | memoryview, next_offset: int) -> None:
        seg = self.active
        if lay.should_roll(self.policy, seg.size_bytes, seg.created_ms, self._clock_ms(), len(body), next_offset,
                           seg.base_offset):
            seg = self.roll()
        position = seg.size_bytes
        saved = (list(seg.index), list(seg.time_index), seg.bytes_since_index, seg.max_timestamp_ms,
                 seg.last_batch_base)
        try:
            written = os.pwrite(seg.fd, body, position)
            if written != len(body):
                raise OSError(28, f"short write ({written} of {len(body)} bytes): the disk is full")
            for info in batches.iter_batches(body):
                self._index_batch(seg, dataclasses.replace(info, position=position + info.position), write=True)
        except OSError as exc:  # ENOSPC (KIP-928) or an I/O error: nothing of the batch counts
            seg.index, seg.time_index, seg.bytes_since_index, seg.max_timestamp_ms, seg.last_batch_base = saved
            _cut(seg, position)
            for path, entries in ((seg.path(lay.INDEX_SUFFIX), len(seg.index) * 8),
                                  (seg.path(lay.TIME_INDEX_SUFFIX), len(seg.time_index) * 12)):
                try:
                    os.truncate(path, entries)
                except OSError:
                    pass
            raise FerryError(ErrorCode.KAFKA_STORAGE_ERROR, f"writing to {seg.path()} failed: {exc}") from exc
        seg.size_bytes = position + len(body)
        seg.next_offset = next_offset

    def _index_batch(self, seg: Segment, info: batches.BatchInfo, write: bool) -> None:
        """Kafka's sparse indexes: an entry once ``index.interval.bytes`` were appended since the last."""
        seg.max_timestamp_ms = max(seg.max_timestamp_ms, info.max_timestamp_ms)
        seg.last_batch_base = info.base_offset
        if seg.index and seg.bytes_since_index < self.policy.index_interval_bytes:
            seg.bytes_since_index += info.size_bytes
            return
        rel = info.base_offset - seg.base_offset
        seg.index.append((rel, info.position))
        if not seg.time_index or seg.max_timestamp_ms > seg.time_index[-1][0]:
            seg.time_index.append((seg.max_timestamp_ms, rel))
            if write:
                _append_file(seg.path(lay.TIME_INDEX_SUFFIX), lay.encode_time_index_entry(seg.max_timestamp_ms, rel))
        seg.bytes_since_index = info.size_bytes
        if write:
            _append_file(seg.path(lay.INDEX_SUFFIX), lay.encode_index_entry(rel, info.position))

    def roll(self) -> Segment:
        """Close the active segment (fsynced: everything before the new one is recovered without a
        scan) and start a new one at the log end offset."""
        old = self.active
        if old.last_batch_base >= 0 and (not old.time_index or old.max_timestamp_ms > old.time_index[-1][0]):
            entry = (old.max_timestamp_ms, old.last_batch_base - old.base_offset)
            old.time_index.append(entry)  # Kafka's final time index entry: the segment's largest timestamp
            _append_file(old.path(lay.TIME_INDEX_SUFFIX), lay.encode_time_index_entry(*entry))
        os.fsync(old.fd)
        self.recovery_point = old.next_offset
        return self._new_segment(old.next_offset)

    def _new_segment(self, base: int) -> Segment:
        seg = Segment(base, self.dir_path, base, created_ms=self._clock_ms())
        seg.open()
        os.ftruncate(seg.fd, 0)
        self._rewrite_indexes(seg)
        self.segments.append(seg)
        return seg

    def flush(self) -> int:
        """fsync the active segment; the recovery point moves to the log end offset."""
        os.fsync(self.active.fd)
        self.recovery_point = self.log_end_offset
        return self.recovery_point

    # ------------------------------------------------------------------ read
    def read(self, offset: int, max_bytes: int, max_offset: int) -> bytes:
        """Whole batches from the one holding ``offset``, none starting at or after ``max_offset``
        (the high watermark for consumers, the log end for followers), up to ``max_bytes`` but
        always at least one batch (as Kafka's fetch)."""
        if offset < self.log_start_offset or offset > self.log_end_offset:
            raise FerryError(ErrorCode.OFFSET_OUT_OF_RANGE,
                             f"offset {offset} is outside [{self.log_start_offset}, {self.log_end_offset}]")
        i = bisect.bisect_right([s.base_offset for s in self.segments], offset) - 1
        while i < len(self.segments) and offset >= self.segments[i].next_offset:
            i += 1
        if i >= len(self.segments):
            return b""
        seg = self.segments[i]
        position = lay.lookup_position(seg.index, offset - seg.base_offset)
        chunk = seg.pread(max_bytes + READ_SLACK_BYTES, position)
        out_start = out_end = -1
        p = 0
        while p < len(chunk):
            if len(chunk) - p < batches.LOG_OVERHEAD:
                break
            size = _LENGTH.unpack_from(chunk, p + 8)[0] + batches.LOG_OVERHEAD
            if p + size > len(chunk):
                if out_start < 0:  # the first batch is larger than the chunk: read it whole
                    whole = seg.pread(size, position + p)
                    info = batches.header(whole, 0)
                    return whole if info.base_offset < max_offset else b""
                break
            info = batches.header(chunk, p)
            if info.base_offset >= max_offset:
                break
            if info.next_offset > offset:
                if out_start < 0:
                    out_start = p
                elif p + size - out_start > max_bytes:
                    break
                out_end = p + size
            p += size
        return bytes(chunk[out_start:out_end]) if out_start >= 0 else b""

    def offset_for_timestamp(self, timestamp_ms: int, max_offset: int) -> tuple[int, int]:
        """(offset, timestamp) of the first record at or after ``timestamp_ms`` below ``max_offset``."""
        for seg in self.segments:
            if seg.max_timestamp_ms < timestamp_ms:
                continue
            offset = seg.base_offset + lay.lookup_time(seg.time_index, timestamp_ms)
            while offset < min(seg.next_offset, max_offset):
                data = self.read(offset, 1024 * 1024, max_offset)
                if not data:
                    break
                for rec in batches.read_records(data):
                    if rec.offset >= offset and rec.timestamp_ms >= timestamp_ms and rec.offset < max_offset:
                        return rec.offset, rec.timestamp_ms
                offset = max(offset + 1, [i.next_offset for i in batches.iter_batches(data)][-1])
        return -1, -1

    def max_timestamp_offset(self, max_offset: int) -> tuple[int, int]:
        """ListOffsets -3: (offset, timestamp) of the first record with the largest timestamp, as
        Kafka finds it: each segment knows its largest timestamp (kept as batches are indexed,
        recovered from its time index), and the first segment holding the overall largest is
        searched through its time index. (-1, -1) when the log has no timestamped record, or
        when that record is not below ``max_offset`` (the high watermark) yet."""
        largest = max((seg.max_timestamp_ms for seg in self.segments), default=-1)
        if largest < 0:
            return -1, -1
        return self.offset_for_timestamp(largest, max_offset)

    # ------------------------------------------------------------------ truncation
    def truncate_to(self, offset: int) -> int:
        """Remove everything at and after ``offset`` (a follower's divergent suffix; whole batches:
        a batch holding ``offset`` goes too). Returns the new log end offset."""
        if offset >= self.log_end_offset:
            # Kafka's rule: a replica that led, recorded its epoch's start and appended nothing
            # before losing leadership keeps that epoch entry at the log end; it conflicts with
            # the new leader's epochs and goes, or the follower would report it forever
            pruned = lay.truncate_epochs_from_end(self.epochs, self.log_end_offset)
            if pruned != self.epochs:
                self.epochs = pruned
                self._write_epochs()
            return self.log_end_offset
        if offset <= self.log_start_offset:
            for seg in self.segments:
                self._delete_segment(seg)
            self.segments = []
            self._new_segment(max(offset, 0))
        else:
            while self.segments and self.segments[-1].base_offset >= offset and len(self.segments) > 1:
                self._delete_segment(self.segments.pop())
            seg = self.active
            cut = self._position_of(seg, offset)
            os.ftruncate(seg.fd, cut)
            self._load(seg, scan=True, expected=seg.base_offset)
        self.epochs = lay.truncate_epochs_from_end(self.epochs, self.log_end_offset)
        self._write_epochs()
        self.recovery_point = min(self.recovery_point, self.log_end_offset)
        return self.log_end_offset

    def reset(self, offset: int) -> None:
        """Delete every segment and start an empty log at ``offset``."""
        for seg in self.segments:
            self._delete_segment(seg)
        self.segments = []
        self._new_segment(max(offset, 0))
        self.epochs = []
        self._write_epochs()
        self.recovery_point = self.log_end_offset

    def _position_of(self, seg: Segment, offset: int) -> int:
        position = lay.lookup_position(seg.index, offset - seg.base_offset)
        while position < seg.size_bytes:
            bounds = lay.batch_bounds(seg.pread(batches.HEADER_BYTES, position))
            if bounds.next_offset > offset:
                return position
            position += bounds.size_bytes
        return seg.size_bytes

    def _delete_segment(self, seg: Segment) -> None:
        seg.close()
        for suffix in (lay.LOG_SUFFIX, lay.INDEX_SUFFIX, lay.TIME_INDEX_SUFFIX):
            _remove(seg.path(suffix))

    # ------------------------------------------------------------------ files
    def _rewrite_indexes(self, seg: Segment) -> None:
        _write_atomic(seg.path(lay.INDEX_SUFFIX), b"".join(lay.encode_index_entry(r, p) for r, p in seg.index))
        _write_atomic(seg.path(lay.TIME_INDEX_SUFFIX),
                      b"".join(lay.encode_time_index_entry(t, r) for t, r in seg.time_index))

    def _write_epochs(self) -> None:
        _write_atomic(os.path.join(self.dir_path, lay.LEADER_EPOCH_CHECKPOINT), lay.render_epoch_checkpoint(self.epochs))

    def bytes_after(self, offset: int) -> int:
        """How many bytes of batches the log holds at and after ``offset`` (about: from the index
        entry at or before it)."""
        total = 0
        for seg in self.segments:
            if seg.next_offset <= offset:
                continue
            total += seg.size_bytes - (lay.lookup_position(seg.index, offset - seg.base_offset)
                                       if seg.base_offset <= offset else 0)
        return total

    def moved_to(self, dir_path: str) -> None:
        """The replica dir was renamed (a log-dir move's swap): the open files stay, the paths follow."""
        self.dir_path = dir_path
        for seg in self.segments:
            seg.dir_path = dir_path

    def write_epochs(self, epochs: list[tuple[int, int]]) -> None:
        """Take another log's epochs as they are (a log-dir move copies the current log's)."""
        self.epochs = list(epochs)
        self._write_epochs()

    def release(self) -> None:
        """Close the files without syncing them (a log being deleted)."""
        for seg in self.segments:
            seg.close()

    def close(self) -> None:
        for seg in self.segments:
            if seg.fd >= 0:
                os.fsync(seg.fd)
            seg.close()

    def delete(self) -> None:
        """The replica left this broker: its directory goes (Kafka renames it ``-delete`` first)."""
        for seg in self.segments:
            seg.close()
        _remove_tree(self.dir_path)


def _cut(seg: Segment, position: int) -> None:
    """Drop a partly written batch, so no read or later append sees it."""
    try:
        os.ftruncate(seg.fd, position)
    except OSError:
        pass


def _read_file(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return b""


def fsync_dir(path: str) -> None:
    """Make the renames and creations inside directory ``path`` durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _append_file(path: str, data: bytes) -> None:
    with open(path, "ab") as f:
        f.write(data)


def _write_atomic(path: str, data: str | bytes) -> None:
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass


def _remove_tree(path: str) -> None:
    import shutil
    shutil.rmtree(path, ignore_errors=True)
