"""Uploading a partition's buffered bytes before it moves, while it still serves.

A move's step 4 (the old owner's close) force-uploads what the WAL buffers for the partition and
closes its streams in the same commit; produce to the partition waits for it. A hot partition
buffers up to ``upload_interval_ms`` of its traffic (megabytes), so that upload is most of the
close. A mover that asks the old owner to upload those bytes first (``POST /v1/pre-upload``, just
before it submits the reassignment) leaves the close only what arrived since: tens of
milliseconds of traffic.

This is the uploader's ordinary upload, the one its size and age triggers run at any time while
the partition serves: it closes nothing, fences nothing and changes no state, so the close and
its order (stop appends, drain, persist the meta, the closing upload, the election) stay as they
are, and every acknowledged write is still uploaded by the close if not by this. A partition this
broker does not serve (moved already, closing, not here) is answered ``NOT_LEADER_OR_FOLLOWER``
and left alone; the mover goes on with the move either way.
"""
from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Callable, Protocol, Sequence

from metadata_quorum.kernel.errors import ErrorCode, FerryError

if TYPE_CHECKING:
    from broker.partition_manager import Slot
    from stream_storage.storage import StreamStorage

#: partitions one request may name (a plan's moves off one broker)
PRE_UPLOAD_MAX_PARTITIONS = 10_000


class Uploads(Protocol):
    async def upload(self, stream_ids: list[int], last_ids: list[int] = ..., close: bool = ...) -> None: ...


def servable(slot: "Slot | None") -> bool:
    """Whether the partition is served here now (the only state whose buffered bytes are worth
    uploading ahead: any other is closing, closed or opening)."""
    return slot is not None and slot.status.accepts_produce and slot.replica is not None and not slot.replica.closed


async def pre_upload(broker_id: int, named: Sequence[tuple[str, int]], slot_by_name: Callable[[str, int], "Slot | None"],
                     uploads_for: Callable[["StreamStorage"], Uploads]) -> list[FerryError | None]:
    """Upload the buffered bytes of each named partition served here, per storage in one object;
    one result per partition (None: uploaded)."""
    results: list[FerryError | None] = []
    groups: dict[int, tuple["StreamStorage", list[int], list[int], list[int]]] = {}
    for i, (topic, partition) in enumerate(named):
        slot = slot_by_name(topic, partition)
        if not servable(slot):
            results.append(FerryError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                      f"broker {broker_id} does not serve {topic}-{partition}"))
            continue
        assert slot is not None and slot.replica is not None
        replica = slot.replica
        storage, data, meta, rows = groups.setdefault(id(replica.storage), (replica.storage, [], [], []))
        data.append(replica.data_stream_id)
        meta.append(replica.meta_stream_id)
        rows.append(i)
        results.append(None)
    outcomes = await asyncio.gather(*(uploads_for(storage).upload(data, meta)
                                      for storage, data, meta, _rows in groups.values()), return_exceptions=True)
    for (_storage, _data, _meta, rows), outcome in zip(groups.values(), outcomes, strict=True):
        if isinstance(outcome, asyncio.CancelledError):
            raise outcome
        if isinstance(outcome, BaseException):
            err = outcome if isinstance(outcome, FerryError) else \
                FerryError(ErrorCode.KAFKA_STORAGE_ERROR, f"upload ahead of the move failed: {outcome!r}")
            for i in rows:
                results[i] = err
    return results
