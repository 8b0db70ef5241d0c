"""How much acknowledged data may wait for S3, and when an append must wait for it (pure).

Every byte a broker acknowledged but has not committed in S3 is a byte the partition's close must
upload before it can change hands (step 4 of a move): the close's own PUT carries what no upload
has taken yet, and its commit waits for every earlier upload of the stream to commit (commits of
a stream go in offset order). So the backlog — bytes on their way to the WAL, durable but not
taken by an upload, and taken by an upload not yet committed — is bounded, as AutoMQ bounds its
WAL cache: an append waits while the backlog is at the bound, and a close never has more than the
bound to push, whatever was produced just before it. Counting the uploads in flight matters: a
burst of produce (a partition filled at the disk's speed) otherwise piles up whole uploads behind
a slow store, and the first close after it waits for all of them.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Backlog:
    """A broker's (one storage's) acknowledged-or-about-to-be bytes not yet committed in S3."""

    admitted_bytes: int = 0  # appends admitted, on their way to the WAL
    pending_bytes: int = 0  # durable in the WAL, not taken by an upload yet
    uploading_bytes: int = 0  # taken by an upload (PUT or commit under way), not committed yet

    @property
    def total_bytes(self) -> int:
        return self.admitted_bytes + self.pending_bytes + self.uploading_bytes


def limit_bytes(upload_bytes: int, max_uncommitted_uploads: int) -> int:
    """The bound: ``max_uncommitted_uploads`` uploads' worth (at least one upload, so that an
    upload is always due before appends wait on it)."""
    return max(1, max_uncommitted_uploads) * upload_bytes


def admits(backlog: Backlog, size_bytes: int, limit: int, urgent: bool = False) -> bool:
    """Whether an append of ``size_bytes`` may go to the WAL now.

    Always when nothing is uncommitted (one append larger than the bound still goes through,
    alone). ``urgent`` appends are not held by the bound: a closing partition's meta snapshot, a
    few hundred bytes on the move's critical path, which the close uploads itself anyway."""
    if urgent or backlog.total_bytes == 0:
        return True
    return backlog.total_bytes + size_bytes <= limit


def has_room(backlog: Backlog, limit: int) -> bool:
    """Whether appends waiting for room should look again (some room is free)."""
    return backlog.total_bytes < limit
