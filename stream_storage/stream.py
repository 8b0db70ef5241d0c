"""One opened stream's state on its owner: offsets, ownership, and what is where.

Offsets only move forward: ``committed_end <= taken_end <= durable_end <= next_offset``.

* ``next_offset`` — the next offset an append will get (assigned before the WAL write);
* ``durable_end`` — everything below is fsynced in the WAL: readable and acknowledged;
* ``taken_end`` — everything below is in an upload (in flight or done);
* ``committed_end`` — everything below is in S3 and recorded by the controller.

Pure state: no I/O; the asyncio pieces are the idle event and the commit chain future.
"""
from __future__ import annotations

import asyncio
import bisect
from dataclasses import dataclass, field

from metadata_quorum.kernel.errors import ErrorCode, FerryError
from metadata_quorum.kernel.signals import LazyEvent
from stream_storage.control import ObjectRef

OPEN = "OPEN"
CLOSING = "CLOSING"
CLOSED = "CLOSED"
FENCED = "FENCED"
FAILED = "FAILED"


@dataclass
class StreamHandle:
    stream_id: int
    epoch: int
    start_offset: int
    next_offset: int
    durable_end: int
    taken_end: int
    committed_end: int
    state: str = OPEN
    reason: str = ""
    objects: list[ObjectRef] = field(default_factory=list)  # committed objects known here, by start
    inflight_appends: int = 0
    durable_limit: int | None = None  # set when a WAL write failed: nothing at or past it is valid
    idle: LazyEvent = field(default_factory=LazyEvent)
    last_commit: "asyncio.Future[None] | None" = None
    oldest_pending_ms: float | None = None

    def __post_init__(self) -> None:
        self.idle.set()

    def check_writable(self) -> None:
        if self.state == FENCED:
            raise FerryError(ErrorCode.STREAM_FENCED, f"stream {self.stream_id} at epoch {self.epoch} is fenced: "
                             f"{self.reason or 'another broker owns it now'}", {"stream_id": self.stream_id})
        if self.state == FAILED:
            raise FerryError(ErrorCode.KAFKA_STORAGE_ERROR, f"stream {self.stream_id} stopped after a storage "
                             f"failure: {self.reason}; close and re-open it", {"stream_id": self.stream_id})
        if self.state != OPEN:
            raise FerryError(ErrorCode.STREAM_NOT_OPENED, f"stream {self.stream_id} is {self.state.lower()}",
                             {"stream_id": self.stream_id})

    def fence(self, reason: str) -> None:
        if self.state not in (CLOSED,):
            self.state = FENCED
            self.reason = reason

    def fail(self, at_offset: int, reason: str) -> None:
        self.durable_limit = at_offset if self.durable_limit is None else min(self.durable_limit, at_offset)
        if self.state in (OPEN, CLOSING):
            self.state = FAILED
            self.reason = reason

    def mark_durable(self, end_offset: int) -> bool:
        """Advance ``durable_end``; False when the range lies past a failed write."""
        if self.durable_limit is not None and end_offset > self.durable_limit:
            return False
        if end_offset > self.durable_end:
            self.durable_end = end_offset
        return True

    def merge_objects(self, refs: "list[ObjectRef] | tuple[ObjectRef, ...]") -> None:
        """Merge the controller's list (a follower's may lag behind our own commits)."""
        for ref in refs:
            if ref.end_offset > self.start_offset:
                self.add_object(ref)

    def add_object(self, ref: ObjectRef) -> None:
        if any(o.object_key == ref.object_key for o in self.objects):
            return
        starts = [o.start_offset for o in self.objects]
        self.objects.insert(bisect.bisect_right(starts, ref.start_offset), ref)

    def object_for(self, offset: int) -> ObjectRef | None:
        if not self.objects:
            return None
        starts = [o.start_offset for o in self.objects]
        i = bisect.bisect_right(starts, offset) - 1
        if i >= 0 and self.objects[i].start_offset <= offset < self.objects[i].end_offset:
            return self.objects[i]
        return None

    def trim_objects(self, new_start: int) -> None:
        self.start_offset = max(self.start_offset, new_start)
        self.objects = [o for o in self.objects if o.end_offset > new_start]


def objects_for(objects: list[ObjectRef] | tuple[ObjectRef, ...], offset: int) -> ObjectRef | None:
    starts = [o.start_offset for o in objects]
    i = bisect.bisect_right(starts, offset) - 1
    if i >= 0 and objects[i].start_offset <= offset < objects[i].end_offset:
        return objects[i]
    return None
