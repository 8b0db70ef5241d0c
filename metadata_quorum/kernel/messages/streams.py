"""Messages of the stream operations (metadata_quorum/ops/streams.py)."""
# No ``from __future__ import annotations`` here: the TypedDicts must see ``NotRequired`` at class
# creation, or their __required_keys__ / __optional_keys__ are wrong at run time.

from typing import NotRequired, TypedDict

from metadata_quorum.kernel.messages.common import Empty

CreateStreamRequest = Empty


class CreateStreamReply(TypedDict):
    stream_id: int


class StreamOwnerRequest(TypedDict):
    """Who calls, at which stream epoch: open, close and stream_recovered carry only this."""

    stream_id: int
    epoch: int
    broker_id: int
    broker_epoch: int


OpenStreamRequest = StreamOwnerRequest
CloseStreamRequest = StreamOwnerRequest
StreamRecoveredRequest = StreamOwnerRequest
CloseStreamReply = Empty
StreamRecoveredReply = Empty


class OpenStreamReply(TypedDict):
    stream_id: int
    epoch: int
    start_offset: int
    end_offset: int
    # [broker_id, stream epoch] of earlier owners whose WALs may hold an acknowledged tail
    wal_owners: list[list[int]]


class CommitRange(TypedDict):
    stream_id: int
    epoch: int
    start_offset: int
    end_offset: int
    size_bytes: NotRequired[int]  # this stream's bytes in the object


class CommitObjectRequest(TypedDict):
    object_key: str
    size: int
    broker_id: int
    broker_epoch: int
    ranges: list[CommitRange]
    close_stream_ids: NotRequired[list[int]]  # closed by the same records


CommitObjectReply = Empty


class TrimStreamRequest(StreamOwnerRequest):
    new_start_offset: int


class RemovedObjectsReply(TypedDict):
    removed_objects: list[str]  # keys no stream names any more: the caller deletes them


TrimStreamReply = RemovedObjectsReply


class CompactObjectsRequest(StreamOwnerRequest):
    object_key: str  # the new object
    size: int
    range_bytes: NotRequired[int]
    start_offset: int
    end_offset: int
    replaces: list[str]  # the stream's objects covering [start_offset, end_offset), back to back


CompactObjectsReply = RemovedObjectsReply


class CollectGarbageRequest(TypedDict):
    broker_id: int
    broker_epoch: int
    horizon_ms: int
    candidates: list[str]  # keys found in the bucket


class CollectGarbageReply(TypedDict):
    horizon_ms: int
    deletable: list[str]
    collector: int


class DescribeStreamRequest(TypedDict):
    stream_id: int


class StreamObjectEntry(TypedDict):
    object_key: str
    start_offset: int
    end_offset: int
    size: int
    epoch: int
    committed_ms: int
    range_bytes: int


class DescribeStreamReply(TypedDict):
    stream_id: int
    epoch: int
    state: str
    owner: int
    owner_epoch: int
    wal_owners: list[list[int]]
    start_offset: int
    end_offset: int
    objects: list[StreamObjectEntry]
