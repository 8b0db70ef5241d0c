"""The broker's log dirs on disk (the I/O shell around log_dirs.py).

Each dir gets a stable id in ``meta.properties`` on first start (Kafka's directory id), a
reserved-space file that is released to make room when the dir fills up (KIP-928), and KIP-113
start-up recovery of ``-future``/``-delete`` leftovers. In ``storage=s3`` a replica's dir holds
its ``partition.metadata``; its records live in the streams (buffered in the broker's WAL), so an
AlterReplicaLogDirs move copies the replica dir through ``<topic>-<partition>.<uid>-future``,
swaps it in, and deletes the old copy as ``…-delete``.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import time
import uuid
from dataclasses import dataclass
from typing import AsyncIterator, Awaitable, Callable

from broker.local_dir_move import ACTION_DELETE, ACTION_PROMOTE, ACTION_RESUME, recovery_actions
from broker.local_log import fsync_dir
from broker.log_dirs import (FUTURE_SUFFIX, MAX_DIR_NAME_CHARS, LogDirInfo, LogDirState, delete_dir_name,
                             future_dir_name, next_dir_state, parse_dir_name, partition_dir_name, validate_log_dir)
from metadata_quorum.kernel.errors import ErrorCode, FerryError

log = logging.getLogger("ferry.broker.logdirs")
META_PROPERTIES = "meta.properties"
RESERVED_FILE = ".ferry-reserved"
DISK_FULL_MIN_FREE_BYTES = 256 * 1024  # a dir saturated by ENOSPC is online again with this much free


@dataclass(frozen=True)
class LogDir:
    dir_id: str
    path: str


class LogDirsManager:
    def __init__(self, paths: list[str], reserved_bytes: int = 0, alter_max_bytes_per_second: int = 0) -> None:
        self.paths = [os.path.normpath(p) for p in paths]
        self.reserved_bytes = reserved_bytes
        self.alter_max_bytes_per_second = alter_max_bytes_per_second
        self.dirs: list[LogDir] = []
        self._state: dict[str, LogDirState] = {p: LogDirState.ONLINE for p in self.paths}
        self._space: dict[str, tuple[int, int]] = {}
        self._futures: dict[tuple[str, int], str] = {}
        self._resumable: list[str] = []  # local replicas' -future dirs whose move resumes
        self._full: set[str] = set()  # dirs saturated by a failed write, not by the reserve check
        self._alter_lock = asyncio.Lock()

    # ------------------------------------------------------------------ start-up
    def prepare(self) -> None:
        """Create the dirs, read or write their ids, recover KIP-113 leftovers."""
        self.dirs = []
        for path in self.paths:
            try:
                os.makedirs(path, exist_ok=True)
                self.dirs.append(LogDir(self._dir_id(path), path))
            except OSError as exc:
                self._offline(path, exc)
        self._recover_all()
        for path in self.paths:
            if self._state[path] is LogDirState.OFFLINE:
                continue
            try:
                self._reserve(path)
                self._refresh(path)
            except OSError as exc:
                self._offline(path, exc)

    def _offline(self, path: str, exc: OSError) -> None:
        log.error("log dir %s is offline: %s", path, exc)
        self._state[path] = LogDirState.OFFLINE
        if not any(d.path == path for d in self.dirs):
            self.dirs.append(LogDir(uuid.uuid5(uuid.NAMESPACE_URL, path).hex, path))

    @staticmethod
    def _dir_id(path: str) -> str:
        meta = os.path.join(path, META_PROPERTIES)
        if os.path.exists(meta):
            with open(meta, encoding="utf-8") as f:
                for line in f:
                    if line.startswith("directory.id="):
                        return line.split("=", 1)[1].strip()
        dir_id = uuid.uuid4().hex
        tmp = meta + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(f"version=1\ndirectory.id={dir_id}\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, meta)
        return dir_id

    def _recover_all(self) -> None:
        """KIP-113 start-up recovery across all online dirs (local_dir_move.recovery_actions): a
        local replica's unfinished move is left for its partition to resume (``take_future``)."""
        listing: dict[str, list[str]] = {}
        for path in self.paths:
            if self._state[path] is LogDirState.OFFLINE:
                continue
            try:
                listing[path] = os.listdir(path)
            except OSError as exc:
                self._offline(path, exc)
        resumable = [(p, n) for p, names in listing.items() for n in names
                     if n.endswith(FUTURE_SUFFIX) and _holds_segments(os.path.join(p, n))]
        offline = [p for p in self.paths if self._state[p] is LogDirState.OFFLINE]
        for step in recovery_actions(listing, resumable, offline):
            full = os.path.join(step.log_dir, step.name)
            try:
                if step.action == ACTION_DELETE:
                    log.info("log dir recovery: deleting %s", full)
                    shutil.rmtree(full, ignore_errors=True)
                elif step.action == ACTION_RESUME:
                    log.info("log dir recovery: %s resumes its move", full)
                    self._resumable.append(full)
                elif step.action == ACTION_PROMOTE:
                    self._promote(step.log_dir, step.name)
            except OSError as exc:
                log.warning("log dir recovery of %s failed: %r", full, exc)

    def _promote(self, log_dir: str, name: str) -> None:
        full = os.path.join(log_dir, name)
        parsed = parse_dir_name(name)
        topic_partition = _read_topic_partition(full)
        if topic_partition is None and parsed is not None and len(name) < MAX_DIR_NAME_CHARS:
            topic_partition = (parsed.topic, parsed.partition)  # the name was not cut: it is whole
        if topic_partition is None:
            log.warning("log dir recovery: %s finished its swap but its full topic name is unknown; left alone",
                        full)
            return
        dest = os.path.join(log_dir, partition_dir_name(*topic_partition))
        log.info("log dir recovery: promoting %s to %s", full, dest)
        os.replace(full, dest)

    def take_future(self, topic: str, partition: int) -> str | None:
        """The future dir of a move of ``topic-partition`` found at start-up, handed over once."""
        for full in self._resumable:
            parsed = parse_dir_name(os.path.basename(full))
            if parsed is not None and parsed.partition == partition and \
                    (parsed.topic == topic or (len(os.path.basename(full)) == MAX_DIR_NAME_CHARS
                                               and topic.startswith(parsed.topic))):
                self._resumable.remove(full)
                return full
        return None

    def _reserve(self, path: str) -> None:
        """KIP-928: hold ``reserved_bytes`` in a file, released when the dir fills up so that
        deletes, retention and meta writes still find room."""
        reserved = os.path.join(path, RESERVED_FILE)
        if self.reserved_bytes <= 0:
            if os.path.exists(reserved):
                os.unlink(reserved)
            return
        if os.path.exists(reserved) and os.path.getsize(reserved) >= self.reserved_bytes:
            return
        try:
            with open(reserved, "wb") as f:
                f.truncate(0)
                os.posix_fallocate(f.fileno(), 0, self.reserved_bytes)
        except OSError as exc:
            log.warning("log dir %s: cannot reserve %d bytes (%s); it starts saturated", path,
                        self.reserved_bytes, exc)
            try:
                os.unlink(reserved)
            except OSError:
                pass

    # ------------------------------------------------------------------ state
    def _refresh(self, path: str) -> None:
        try:
            st = shutil.disk_usage(path)
            self._space[path] = (st.total, st.free)
            before = self._state[path]
            self._state[path] = next_dir_state(before, st.free, self.reserved_bytes,
                                               min_free_bytes=DISK_FULL_MIN_FREE_BYTES if path in self._full else 0)
            if self._state[path] is LogDirState.ONLINE:
                self._full.discard(path)
            if self._state[path] is LogDirState.SATURATED and before is not LogDirState.SATURATED:
                reserved = os.path.join(path, RESERVED_FILE)
                if os.path.exists(reserved):
                    log.warning("log dir %s is full: releasing its %d reserved bytes", path, self.reserved_bytes)
                    os.unlink(reserved)
            elif self._state[path] is LogDirState.ONLINE and before is LogDirState.SATURATED:
                self._reserve(path)
        except OSError:
            self._state[path] = next_dir_state(self._state[path], 0, self.reserved_bytes, io_error=True)

    async def monitor(self, interval_ms: int,
                      on_saturated: Callable[[str], Awaitable[None]] | None = None) -> None:
        """Re-check free space every interval; a dir that becomes saturated is handed to
        ``on_saturated`` (which uploads what its WAL buffers so the WAL can shrink)."""
        while True:
            await asyncio.sleep(interval_ms / 1000)
            for path in self.paths:
                before = self._state[path]
                await asyncio.to_thread(self._refresh, path)
                if self._state[path] is not before:
                    log.warning("log dir %s is now %s", path, self._state[path].value)
                    if self._state[path] is LogDirState.SATURATED and on_saturated is not None:
                        try:
                            await on_saturated(path)
                        except Exception as exc:  # noqa: BLE001 - retried at the next transition
                            log.warning("relieving saturated log dir %s failed: %r", path, exc)

    def mark_full(self, path: str) -> None:
        """A write in ``path`` failed with ENOSPC (KIP-928): saturated now, not at the next check;
        online again once the space a write needs is free (``DISK_FULL_MIN_FREE_BYTES``)."""
        path = os.path.normpath(path)
        before = self._state.get(path)
        if before is None or before is LogDirState.OFFLINE:
            return
        self._full.add(path)
        self._state[path] = next_dir_state(before, 0, self.reserved_bytes, disk_full=True)
        if before is not LogDirState.SATURATED:
            log.warning("log dir %s is full (a write failed with ENOSPC): SATURATED", path)
            reserved = os.path.join(path, RESERVED_FILE)
            if os.path.exists(reserved):
                os.unlink(reserved)

    def info(self, path: str) -> LogDirInfo:
        total, free = self._space.get(path, (0, 0))
        return LogDirInfo(path, self._state.get(path, LogDirState.OFFLINE), free, total)

    def infos(self) -> list[LogDirInfo]:
        return [self.info(d.path) for d in self.dirs]

    def is_saturated(self, path: str | None) -> bool:
        return path is not None and self._state.get(path) in (LogDirState.SATURATED, LogDirState.OFFLINE)

    def heartbeat_dirs(self) -> tuple[list[str], list[str]]:
        """(saturated dir ids, offline dir ids) for the heartbeat."""
        sat = [d.dir_id for d in self.dirs if self._state[d.path] is LogDirState.SATURATED]
        off = [d.dir_id for d in self.dirs if self._state[d.path] is LogDirState.OFFLINE]
        return sat, off

    def future_moves(self) -> dict[tuple[str, int], str]:
        return dict(self._futures)

    # ------------------------------------------------------------------ AlterReplicaLogDirs
    def validate_target(self, path: str) -> str:
        """The normalized target dir of a move; LOG_DIR_NOT_FOUND / KAFKA_STORAGE_ERROR if unusable."""
        return validate_log_dir(path, self.infos()).path

    @contextlib.asynccontextmanager
    async def future_move(self, topic: str, partition: int,
                          target: str) -> AsyncIterator[Callable[[str, str, str, int], Awaitable[None]]]:
        """One move at a time; while it runs the replica is reported as a future in ``target``.
        Yields the directory copy (KIP-113's ``-future`` / ``-delete`` dance) for the mover to run."""
        async with self._alter_lock:
            self._futures[(topic, partition)] = target
            try:
                yield self._move_dir
            finally:
                self._futures.pop((topic, partition), None)

    async def _move_dir(self, src_root: str, dst_root: str, topic: str, partition: int) -> None:
        try:
            await asyncio.to_thread(_move_replica_dir, src_root, dst_root, topic, partition,
                                    self.alter_max_bytes_per_second)
        except OSError as exc:
            raise FerryError(ErrorCode.KAFKA_STORAGE_ERROR, f"moving {topic}-{partition} to {dst_root} failed: "
                             f"{exc}") from exc


def _read_topic_partition(replica_dir: str) -> tuple[str, int] | None:
    try:
        with open(os.path.join(replica_dir, "partition.metadata"), encoding="utf-8") as f:
            fields = dict(line.strip().split(": ", 1) for line in f if ": " in line)
        return fields["topic"], int(fields["partition"])
    except (OSError, KeyError, ValueError):
        return None


def _holds_segments(path: str) -> bool:
    """A local replica's dir (it has ``.log`` segments), not an s3 replica's metadata-only dir."""
    try:
        return any(n.endswith(".log") for n in os.listdir(path))
    except OSError:
        return False


def _move_replica_dir(src_root: str, dst_root: str, topic: str, partition: int,
                      max_bytes_per_second: int = 0) -> None:
    """KIP-113: copy to ``-future`` in the target dir (at most ``max_bytes_per_second``, Kafka's
    replica.alter.log.dirs.io.max.bytes.per.second; 0 = unlimited), swap it in, retire the old
    copy as ``-delete``."""
    uid = uuid.uuid4().hex
    current = os.path.join(src_root, partition_dir_name(topic, partition))
    future = os.path.join(dst_root, future_dir_name(topic, partition, uid))
    started = time.monotonic()
    shutil.copytree(current, future)
    if max_bytes_per_second > 0:
        copied = sum(os.path.getsize(os.path.join(d, f)) for d, _s, files in os.walk(future) for f in files)
        time.sleep(max(0.0, copied / max_bytes_per_second - (time.monotonic() - started)))
    fsync_dir(dst_root)
    doomed = os.path.join(src_root, delete_dir_name(topic, partition, uid))
    os.replace(current, doomed)
    os.replace(future, os.path.join(dst_root, partition_dir_name(topic, partition)))
    fsync_dir(dst_root)
    fsync_dir(src_root)
    shutil.rmtree(doomed, ignore_errors=True)
