"""Where the largest record timestamp of a partition is (ListOffsets -3, KIP-734), kept as batches
are appended, so that answering never scans the log (pure).

Kafka answers -3 with the offset and timestamp of the first record carrying the partition's
largest timestamp (a LogAppendTime batch's records all carry the batch's time, so its first
record). The largest timestamp alone is not enough once the log start moves (retention,
DeleteRecords): the answer is then the largest of what remains. So the index keeps the
*suffix maxima*: each batch whose timestamp is at least every later batch's, oldest first. Their
timestamps never increase along the list, the first is the maximum of the whole log, and the
first one at or after a log start offset is the maximum of everything from there — every batch
between two candidates is strictly below the later one (a batch equal to it would itself be a
candidate). With timestamps that grow, as they usually do, the list holds one or two entries.

Each candidate stands for the range from its batch up to the next candidate. When the list grows
past ``MAX_CANDIDATES`` (timestamps that keep falling) every other candidate is dropped and the one
before it marked ``merged``: its range may then hold batches above the next candidate, so a log
start inside that range is answered by reading the range (bounded), as after an upgrade from a
meta that did not record the index.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Any, Iterable

MAX_CANDIDATES = 1024


@dataclass(frozen=True)
class Candidate:
    """A batch whose largest timestamp is ≥ that of every later batch."""

    timestamp_ms: int
    base_offset: int
    next_offset: int  # the offset after the batch
    merged: bool = False  # its range may hold batches above the next candidate (after thinning)


@dataclass(frozen=True)
class MaxTimestampPlan:
    """How to answer for a log starting at some offset: ``front`` is the candidate whose range
    holds the log start or lies after it, ``following`` the one after it (None: ``front`` is the
    newest). ``scan_from``/``scan_to`` is the part of ``front``'s range that must be read (its
    batch was cut by the log start, or the range is merged); None when ``front``'s batch is whole,
    so that its first record at ``front.timestamp_ms`` is the answer."""

    front: Candidate
    following: Candidate | None
    scan_from: int | None = None
    scan_to: int | None = None

    def after_scan(self, best: tuple[int, int] | None) -> tuple[int, int] | Candidate | None:
        """Given the first record with the largest timestamp in ``[scan_from, scan_to)`` as
        (offset, timestamp) (None: no timestamped record there): that record when it is the
        answer (ties go to it: it comes first), else the candidate whose batch holds the answer
        (its first record at the candidate's timestamp), else None (nothing is left)."""
        if best is not None and (self.following is None or best[1] >= self.following.timestamp_ms):
            return best
        return self.following


def largest_first(records: Iterable[tuple[int, int]], from_offset: int, to_offset: int) -> tuple[int, int] | None:
    """The first (offset, timestamp) with the largest timestamp among ``records`` in
    ``[from_offset, to_offset)``; None when none there has a timestamp."""
    best: tuple[int, int] | None = None
    for offset, ts in records:
        if from_offset <= offset < to_offset and ts >= 0 and (best is None or ts > best[1]):
            best = (offset, ts)
    return best


def first_at(records: Iterable[tuple[int, int]], candidate: Candidate, from_offset: int) -> tuple[int, int] | None:
    """The first record of ``candidate``'s batch (at or after ``from_offset``) carrying its
    timestamp: Kafka's answer (a LogAppendTime batch: its first record)."""
    for offset, ts in records:
        if offset >= max(from_offset, candidate.base_offset) and ts >= candidate.timestamp_ms:
            return offset, ts
    return None


class MaxTimestampIndex:
    def __init__(self, candidates: list[Candidate] | None = None) -> None:
        self.candidates: list[Candidate] = list(candidates or [])

    def observe(self, max_timestamp_ms: int, base_offset: int, next_offset: int) -> None:
        """A batch was appended (or re-read after a crash: observing a batch twice changes
        nothing; batches may arrive out of order when appends finish out of order). Batches
        without timestamps (-1) never hold the maximum."""
        if max_timestamp_ms < 0:
            return
        bases = [c.base_offset for c in self.candidates]
        i = bisect.bisect_left(bases, base_offset)
        if i < len(self.candidates) and self.candidates[i].base_offset == base_offset:
            return
        if i < len(self.candidates) and self.candidates[i].timestamp_ms > max_timestamp_ms:
            return  # a later batch is above it: it is never the maximum of a suffix
        # the range this batch lands in (an earlier append finishing late) was its candidate's:
        # if that one stood for a thinned range, so does the part this batch takes over
        merged = i > 0 and self.candidates[i - 1].merged
        j = i
        while j > 0 and self.candidates[j - 1].timestamp_ms < max_timestamp_ms:
            j -= 1  # earlier candidates below it are no longer the maximum of any suffix
        self.candidates[j:i] = [Candidate(max_timestamp_ms, base_offset, next_offset, merged)]
        if len(self.candidates) > MAX_CANDIDATES:
            self._thin()

    def _thin(self) -> None:
        """Keep every other candidate (the newest always), each kept one now standing for its
        dropped successor's range too."""
        last = len(self.candidates) - 1
        self.candidates = [c if i == last else Candidate(c.timestamp_ms, c.base_offset, c.next_offset, True)
                           for i, c in enumerate(self.candidates) if i == last or i % 2 == 0]

    def _range_end(self, i: int) -> int | None:
        return self.candidates[i + 1].base_offset if i + 1 < len(self.candidates) else None

    def trim(self, log_start_offset: int) -> None:
        """Forget candidates whose whole range is below the new log start."""
        drop = 0
        while drop < len(self.candidates):
            end = self._range_end(drop)
            if end is None:
                if self.candidates[drop].next_offset <= log_start_offset and not self.candidates[drop].merged:
                    drop += 1
                break
            if end > log_start_offset:
                break
            drop += 1
        del self.candidates[:drop]

    def plan(self, log_start_offset: int, log_end_offset: int) -> MaxTimestampPlan | None:
        """What to read to answer for the log ``[log_start_offset, log_end_offset)``; None when it
        holds no timestamped batch."""
        for i, c in enumerate(self.candidates):
            end = self._range_end(i)
            if end is not None and end <= log_start_offset:
                continue
            following = self.candidates[i + 1] if end is not None else None
            if c.base_offset >= log_start_offset:
                return MaxTimestampPlan(c, following)
            if c.merged:
                return MaxTimestampPlan(c, following, log_start_offset, end if end is not None else log_end_offset)
            if log_start_offset < c.next_offset:
                return MaxTimestampPlan(c, following, log_start_offset, c.next_offset)
            if following is not None:
                return MaxTimestampPlan(following, self.candidates[i + 2] if i + 2 < len(self.candidates) else None)
            return None
        return None

    @property
    def max_timestamp_ms(self) -> int:
        return self.candidates[0].timestamp_ms if self.candidates else -1

    # ------------------------------------------------------------ persistence (the partition meta)
    def to_json(self) -> list[list[int]]:
        return [[c.timestamp_ms, c.base_offset, c.next_offset, int(c.merged)] for c in self.candidates]

    @classmethod
    def from_json(cls, data: Any) -> "MaxTimestampIndex":
        return cls([Candidate(int(t), int(b), int(n), bool(m)) for t, b, n, m in data])

    @classmethod
    def seeded(cls, time_index: list[tuple[int, int]], end_offset: int) -> "MaxTimestampIndex":
        """From a partition meta written before this index was kept: its sparse time index's
        last entry (the running maximum and a batch reaching it), as a merged candidate whose
        range runs to the end, so that a log start past it is answered by reading."""
        if not time_index or time_index[-1][0] < 0:
            return cls()
        ts, base = time_index[-1]
        return cls([Candidate(ts, base, max(base + 1, end_offset), True)])
