"""Which WAL entries are a stream's acknowledged tail: this broker's own WAL, or dead owners'.

Pure: the reading of WALs and the appending of what they hold is ``owner_recovery.py``.
"""
from __future__ import annotations

from typing import Iterable, Sequence

from stream_storage.wal import KIND_VOID, WalEntry


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
