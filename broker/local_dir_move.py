"""KIP-113 for ``storage=local`` replicas, as pure decisions: the next step of a log-dir move, and
what start-up does with the ``-future`` / ``-delete`` dirs it finds across all of a broker's dirs.

A move copies the replica's batches (offsets and leader epochs as they are) from its current log
into ``<topic>-<partition>.<uid>-future`` in the target dir, at most at the throttle rate, while
the current log keeps taking appends. Once the future log is within one chunk of the current
log's end, the rest is copied and the two are swapped under the partition's lock (no append in
between): the future log is flushed, the current dir is renamed ``…-delete``, the future dir takes
the partition's name, and the ``-delete`` dir is removed. Because the current dir is renamed only
after the future log is complete and flushed, every crash point has exactly one right answer at
start-up (KIP-113's recovery rules):

- ``-delete`` dirs are removed;
- a ``-future`` dir whose partition has no current dir in any dir finished its swap half-way: it
  becomes the current dir (unless some dir is offline: the current copy may be there, so the
  future is left alone and the partition stays offline, as KIP-113 says);
- a ``-future`` dir beside a current dir in another dir is an unfinished move: a local replica's
  (it holds segments) is resumed where its copy stopped; one without segments (a ``storage=s3``
  replica dir, or a move that died before its first segment) is dropped;
- a ``-future`` dir in the same dir as its current one, or a second one for the same partition,
  is dropped.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

from broker import local_layout as lay
from broker.log_dirs import MAX_DIR_NAME_CHARS, parse_dir_name

STEP_RESET = "reset"  # the future log starts over at the current log's start
STEP_TRUNCATE = "truncate"  # the current log lost a suffix the future log copied: cut it there too
STEP_COPY = "copy"  # copy a chunk from the future log's end
STEP_SWAP = "swap"  # copy the last bytes and swap, under the partition's lock

ACTION_DELETE = "delete"
ACTION_PROMOTE = "promote"
ACTION_RESUME = "resume"
ACTION_KEEP = "keep"  # a current dir, or a future dir left alone while some dir is offline


@dataclass(frozen=True)
class LogPosition:
    """What the move needs to know of one log."""

    start_offset: int
    end_offset: int
    epochs: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True)
class CopyStep:
    action: str
    offset: int  # reset/truncate: the new end; copy: where the next read starts; swap: the future's end


def future_valid_end(current: LogPosition, future: LogPosition) -> int:
    """How much of the future log the current log still agrees with: the end of the future's
    latest epoch in the current log's epochs (KIP-279's rule, as a follower checks its leader)."""
    latest = lay.latest_epoch(future.epochs)
    if latest < 0:
        return min(future.end_offset, current.end_offset)
    epoch, end = lay.end_offset_for_epoch(current.epochs, latest, current.end_offset)
    if epoch < 0:
        return min(future.start_offset, current.end_offset)
    return min(future.end_offset, end, current.end_offset)


def next_copy_step(current: LogPosition, future: LogPosition, lag_bytes: int, swap_max_lag_bytes: int) -> CopyStep:
    """The next step of a move whose future log is at ``future`` while the current one is at
    ``current``; ``lag_bytes`` is what the current log holds past the future log's end."""
    if future.end_offset < current.start_offset or \
            (future.end_offset == future.start_offset and future.start_offset != current.start_offset):
        return CopyStep(STEP_RESET, current.start_offset)
    valid = future_valid_end(current, future)
    if valid < future.end_offset:
        if valid < current.start_offset or valid <= future.start_offset:
            return CopyStep(STEP_RESET, current.start_offset)
        return CopyStep(STEP_TRUNCATE, valid)
    if lag_bytes <= swap_max_lag_bytes:
        return CopyStep(STEP_SWAP, future.end_offset)
    return CopyStep(STEP_COPY, future.end_offset)


@dataclass(frozen=True)
class DirAction:
    """What start-up does with one entry of one log dir."""

    log_dir: str
    name: str
    action: str


def recovery_actions(listing: Mapping[str, Sequence[str]], resumable: Iterable[tuple[str, str]] = (),
                     offline_dirs: Iterable[str] = ()) -> list[DirAction]:
    """KIP-113 start-up recovery across every online dir of a broker. ``listing`` maps each online
    dir to its entries; ``resumable`` names the (dir, future entry) pairs that hold segments.

    A future dir whose topic was cut to fit 255 characters matches the current dir whose topic
    starts with the cut one (same partition).
    """
    can_resume = set(resumable)
    any_offline = any(True for _ in offline_dirs)
    current_in: dict[tuple[str, int], str] = {}
    futures: dict[tuple[str, int], list[tuple[str, str]]] = {}
    out: list[DirAction] = []
    for log_dir in sorted(listing):
        for name in sorted(listing[log_dir]):
            parsed = parse_dir_name(name)
            if parsed is None:
                continue
            key = (parsed.topic, parsed.partition)
            if parsed.kind == "delete":
                out.append(DirAction(log_dir, name, ACTION_DELETE))
            elif parsed.kind == "future":
                futures.setdefault(key, []).append((log_dir, name))
            else:
                current_in.setdefault(key, log_dir)
                out.append(DirAction(log_dir, name, ACTION_KEEP))
    for key in sorted(futures):
        found = futures[key]
        home = current_in.get(key)
        if home is None and any(len(name) == MAX_DIR_NAME_CHARS for _d, name in found):
            home = next((d for (t, p), d in sorted(current_in.items()) if p == key[1] and t.startswith(key[0])), None)
        chosen: tuple[str, str] | None = None
        for log_dir, name in found:
            if chosen is not None or log_dir == home:
                out.append(DirAction(log_dir, name, ACTION_DELETE))
                continue
            chosen = (log_dir, name)
            if home is None:
                out.append(DirAction(log_dir, name, ACTION_KEEP if any_offline else ACTION_PROMOTE))
            elif (log_dir, name) in can_resume:
                out.append(DirAction(log_dir, name, ACTION_RESUME))
            else:
                out.append(DirAction(log_dir, name, ACTION_DELETE))
    return out
