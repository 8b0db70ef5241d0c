"""Recovering streams' acknowledged tails from WALs: this broker's own, or a dead broker's.

A failover recovers every partition of the dead broker, each with its own call; the dead WAL is
read once and its entries are handed out stream by stream (re-read only if its files change),
so recovering N partitions costs one WAL read, not N.
"""
from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass
from typing import Iterable, Sequence

from stream_storage.wal import KIND_VOID, WalEntry, list_segments, read_wal


def recoverable_tail(entries: Iterable[WalEntry], stream_id: int, from_offset: int,
                     owner_epoch: int | None = None) -> list[WalEntry]:
    """The contiguous run of ``stream_id``'s WAL entries starting at ``from_offset``.

    Entries are in WAL order. Where two epochs wrote the same offsets the higher epoch wins (the
    older owner had been fenced), and a void marker drops the earlier entries it covers (written
    when this broker took the stream back after another owner had it). ``owner_epoch`` is the
    epoch the WAL's broker last held the stream with (the controller's record): entries of a later
    epoch were never that owner's to acknowledge and are dropped, and so are void markers of a
    later epoch (the broker's current open wrote them, after that ownership).
    """
    return recoverable_chain([(entries, owner_epoch)], stream_id, from_offset)


def _candidates(entries: Iterable[WalEntry], stream_id: int, from_offset: int,
                owner_epoch: int | None) -> dict[int, WalEntry]:
    """One WAL's entries of the stream that may be recovered, by start offset."""
    ordered = sorted((e for e in entries if e.stream_id == stream_id), key=lambda e: e.position)
    by_start: dict[int, WalEntry] = {}
    for entry in ordered:
        if owner_epoch is not None and entry.epoch > owner_epoch:
            continue
        if entry.kind == KIND_VOID:
            for start in [s for s, e in by_start.items() if s >= entry.start_offset and e.epoch < entry.epoch]:
                del by_start[start]
            continue
        if entry.start_offset < from_offset:
            continue
        known = by_start.get(entry.start_offset)
        if known is None or entry.epoch >= known.epoch:
            by_start[entry.start_offset] = entry
    return by_start


def recoverable_chain(wals: Sequence[tuple[Iterable[WalEntry], int | None]], stream_id: int,
                      from_offset: int) -> list[WalEntry]:
    """The acknowledged tail of ``stream_id`` from several WALs, each given with the epoch its
    broker last held the stream with (``recoverable_tail``'s fencing applies within each WAL).

    Several WALs take part when owners died one after another before any recovered its
    predecessor's tail (the controller's ``wal_owners``), and when a broker has one WAL per log
    dir. From ``from_offset`` on, each next entry is the one starting there with the highest
    epoch in any of them (a later owner's copy of a recovered entry holds the same records), so
    the run crosses from one WAL to the next where the first ends.
    """
    per_wal = [_candidates(entries, stream_id, from_offset, epoch) for entries, epoch in wals]
    run: list[WalEntry] = []
    cursor = from_offset
    while True:
        here = [c[cursor] for c in per_wal if cursor in c]
        if not here:
            return run
        entry = max(here, key=lambda e: (e.epoch, e.end_offset))
        if entry.end_offset <= cursor:
            return run
        run.append(entry)
        cursor = entry.end_offset


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
        wal_dir = os.path.abspath(wal_dir)
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
