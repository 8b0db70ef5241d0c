"""Bringing back the acknowledged tail that earlier owners of a stream left in their WALs.

A stream taken over from an owner that did not close it (it died, or was fenced) may have an
acknowledged tail that never reached S3: it is in that owner's WAL only — its WAL dirs (a shared
volume) or, with ``wal.mode = s3``, its WAL objects. The controller names those owners in the
open's reply (``wal_owners``); :class:`OwnerRecovery` reads their WALs, appends the tail to the
stream (through :class:`RecoveryTarget`, the storage that opened it), commits it in S3 and then
tells the controller, so that no later owner reads those WALs again. Which entries count is
decided by the pure functions of ``recovery.py`` and ``wal_objects.recovery_plan``.

A failover recovers every partition of the dead broker, each with its own call; a dead WAL is read
(or listed) once and its entries handed out stream by stream, so N partitions cost one read.
"""
from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass
from typing import Callable, Protocol, Sequence

from stream_storage.control import StreamControl
from stream_storage.recovery import recoverable_chain, recoverable_tail
from stream_storage.s3_wal import PeerWalReader
from stream_storage.stream import StreamHandle
from stream_storage.wal import WalEntry, list_segments, read_wal
from stream_storage.wal_objects import recovery_plan

# (broker id, the epoch it held the stream with), as the controller records wal_owners
WalOwner = tuple[int, int]


class RecoveryTarget(Protocol):
    """The storage that opened the stream and takes its recovered tail."""

    def writable(self, stream_id: int) -> StreamHandle:
        """The open handle (STREAM_NOT_OPENED / STREAM_FENCED otherwise)."""
        ...

    async def append_recovered(self, stream_id: int, entries: Sequence[WalEntry]) -> None:
        """Append ``entries`` at the offsets they were acknowledged with; when this returns they
        are durable here and committed in S3."""
        ...


@dataclass(frozen=True)
class Recovered:
    """What :meth:`OwnerRecovery.recover_from_owners` brought back: ``offsets`` recovered, and
    the owners none of whose WALs could be read (what they had not uploaded is lost, and said so)."""

    offsets: int
    unreachable: tuple[int, ...] = ()


class OwnerRecovery:
    """One per stream storage. ``identity`` gives ``(broker_id, broker_epoch)`` at call time."""

    def __init__(self, target: RecoveryTarget, control: StreamControl, identity: Callable[[], tuple[int, int]],
                 peer_wals: PeerWalReader, s3_mode: bool) -> None:
        self.target = target
        self.control = control
        self.identity = identity
        self.peer_wals = peer_wals
        self.foreign_wals = ForeignWals()
        self.s3_mode = s3_mode
        # stream -> the open's wal_owners, until recover_from_owners has told the controller
        self._unrecovered: dict[int, tuple[WalOwner, ...]] = {}

    # -- bookkeeping of opens whose owners are not recovered yet ----------------------------

    def opened(self, stream_id: int, wal_owners: tuple[WalOwner, ...]) -> None:
        """The stream was opened here and the controller named these owners (maybe none)."""
        if wal_owners:
            self._unrecovered[stream_id] = wal_owners
        else:
            self._unrecovered.pop(stream_id, None)

    def pending(self, stream_id: int) -> tuple[WalOwner, ...]:
        """The owners an open named that are not recovered yet (an idempotent re-open repeats them)."""
        return self._unrecovered.get(stream_id, ())

    def forget(self, stream_id: int) -> None:
        self._unrecovered.pop(stream_id, None)

    # -- recovery ----------------------------------------------------------------------------

    async def recover_from_owners(self, stream_id: int, owners: Sequence[WalOwner],
                                  wal_dirs_of: Callable[[int], list[str]] | None = None) -> Recovered:
        """After opening ``stream_id``, bring back the acknowledged tail that ``owners`` (the
        open's ``wal_owners``: ``(broker_id, epoch it held the stream with)``) left in their WALs —
        their WAL objects with ``wal.mode = s3``, else their WAL dirs (``wal_dirs_of``, a shared
        volume) — then tell the controller, so that no later owner reads those WALs again.

        All of them are read, not only the last owner's: an owner that died before it recovered
        its predecessor's tail left that tail in the predecessor's WAL alone. When this returns,
        what was recovered is committed in S3 and the controller's list is empty."""
        opened_mono = time.monotonic()  # the stream is opened: a listing from now on is complete
        self.target.writable(stream_id)
        unreachable: list[int] = []
        read_dirs: list[str] = []
        if self.s3_mode:
            listed = await asyncio.gather(*(self.peer_wals.objects(b, opened_mono) for b, _e in owners))
            handle = self.target.writable(stream_id)
            tail = recovery_plan([(objs, e) for objs, (_b, e) in zip(listed, owners, strict=True)], stream_id,
                                 handle.next_offset)
        else:
            sources: list[tuple[list[WalEntry], int | None]] = []
            for broker_id, epoch in owners:
                dirs = await asyncio.to_thread(_existing_dirs, wal_dirs_of(broker_id) if wal_dirs_of else [])
                if not dirs:
                    unreachable.append(broker_id)
                for wal_dir in dirs:
                    sources.append((await self.foreign_wals.entries(wal_dir, stream_id), epoch))
                    read_dirs.append(wal_dir)
            handle = self.target.writable(stream_id)
            tail = recoverable_chain(sources, stream_id, handle.next_offset)
        await self.target.append_recovered(stream_id, tail)
        for wal_dir in read_dirs:
            self.foreign_wals.done(wal_dir, stream_id)
        broker_id, broker_epoch = self.identity()
        await self.control.stream_recovered(stream_id, handle.epoch, broker_id, broker_epoch)
        self._unrecovered.pop(stream_id, None)
        return Recovered(_span(tail), tuple(unreachable))

    async def recover_from_wal(self, wal_dir: str, stream_id: int, previous_epoch: int | None = None) -> int:
        """After opening ``stream_id``, bring back its uncommitted tail from another broker's WAL
        (read-only; that WAL is not changed). ``previous_epoch`` is the epoch that broker held the
        stream with (entries of later epochs are not its tail). Returns how many offsets were
        recovered; they are durable here and in S3 when this returns."""
        handle = self.target.writable(stream_id)
        tail = recoverable_tail(await self.foreign_wals.entries(wal_dir, stream_id), stream_id, handle.next_offset,
                                previous_epoch)
        await self.target.append_recovered(stream_id, tail)
        self.foreign_wals.done(wal_dir, stream_id)
        return _span(tail)

    async def recover_from_peer_wal(self, broker_id: int, stream_id: int, previous_epoch: int | None = None) -> int:
        """After opening ``stream_id``, bring back its uncommitted tail from broker ``broker_id``'s
        WAL objects in S3 (``wal.mode = s3``; nothing of that broker but the bucket is needed).
        ``previous_epoch`` is the epoch that broker held the stream with: entries of later epochs
        are not its tail. Returns how many offsets were recovered; they are durable here and
        committed in S3 when this returns."""
        opened_mono = time.monotonic()  # the stream is opened: a listing from now on is complete
        self.target.writable(stream_id)
        objects = await self.peer_wals.objects(broker_id, opened_mono)
        handle = self.target.writable(stream_id)
        tail = recovery_plan([(objects, previous_epoch)], stream_id, handle.next_offset)
        await self.target.append_recovered(stream_id, tail)
        return _span(tail)


def _span(tail: Sequence[WalEntry]) -> int:
    return tail[-1].end_offset - tail[0].start_offset if tail else 0


def _existing_dirs(dirs: list[str]) -> list[str]:
    return [d for d in dirs if os.path.isdir(d)]


def _signature(wal_dir: str) -> tuple[tuple[str, int, int], ...]:
    out = []
    for _base, path in list_segments(wal_dir):
        try:
            st = os.stat(path)
        except FileNotFoundError:
            continue
        out.append((os.path.basename(path), st.st_size, st.st_mtime_ns))
    return tuple(out)


@dataclass
class _Read:
    signature: tuple[tuple[str, int, int], ...]
    by_stream: dict[int, list[WalEntry]]
    read_at: float


class ForeignWals:
    """Other brokers' WALs, read once (read-only) and served per stream; kept ``keep_s`` at most."""

    def __init__(self, keep_s: float = 60.0) -> None:
        self.keep_s = keep_s
        self._reads: dict[str, _Read] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self.reads = 0

    async def entries(self, wal_dir: str, stream_id: int) -> list[WalEntry]:
        wal_dir = os.path.abspath(wal_dir)  # noqa: ASYNC240 - abspath is string work (getcwd at most)
        self._expire()
        lock = self._locks.setdefault(wal_dir, asyncio.Lock())
        async with lock:
            loop = asyncio.get_running_loop()
            signature = await loop.run_in_executor(None, _signature, wal_dir)
            cached = self._reads.get(wal_dir)
            if cached is None or cached.signature != signature:
                replay = await loop.run_in_executor(None, read_wal, wal_dir)
                self.reads += 1
                by_stream: dict[int, list[WalEntry]] = {}
                for entry in replay.entries:
                    by_stream.setdefault(entry.stream_id, []).append(entry)
                cached = self._reads[wal_dir] = _Read(signature, by_stream, time.monotonic())
            return list(cached.by_stream.get(stream_id, []))

    def done(self, wal_dir: str, stream_id: int) -> None:
        """The stream is recovered: drop its entries (and the whole read once none are left)."""
        wal_dir = os.path.abspath(wal_dir)
        cached = self._reads.get(wal_dir)
        if cached is not None:
            cached.by_stream.pop(stream_id, None)
            if not cached.by_stream:
                self._reads.pop(wal_dir, None)

    def _expire(self) -> None:
        now = time.monotonic()
        for wal_dir in [d for d, r in self._reads.items() if now - r.read_at > self.keep_s]:
            self._reads.pop(wal_dir, None)
