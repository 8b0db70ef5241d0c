"""Stream operations with AutoMQ's StreamControlManager fencing rules.

A stream is owned by at most one broker at a time, under an epoch:

* ``open_stream(epoch)``: the caller must be a registered, unfenced broker with its current
  broker epoch. If the stream is OPENED by the same incarnation at the same epoch the call is a
  retry and gets the same reply. Otherwise ``epoch`` must be greater than the stream's epoch
  (``STREAM_FENCED`` if not; the one exception: the incarnation that closed the stream may reopen
  it at the same epoch, since nobody else can have written since), and the stream must be CLOSED — or OPENED by this same broker id, or
  by an incarnation that is gone (unregistered, fenced, silent past the session timeout, or
  replaced by a newer registration), whose ownership is then taken over and whose later calls are
  fenced by the higher epoch. An incarnation unregistered while its session was live is not gone
  until that session would have expired (``cluster.unregister_broker``). A stream OPENED by another live broker answers
  ``STREAM_NOT_CLOSED`` (retriable: the owner is closing it).
* ``close_stream``, ``commit_object``, ``trim_stream``: the caller must be the owner incarnation
  (broker id and the broker epoch it opened with) and give the stream's current epoch
  (``STREAM_FENCED`` otherwise); commit and trim need the stream OPENED
  (``STREAM_NOT_OPENED``). Closing a stream already closed by the same owner at the same epoch
  succeeds (a retry).
* ``commit_object``: each range must start exactly at its stream's end offset
  (``OFFSET_NOT_MATCHED``); all ranges commit or none; committing an object key that is already
  recorded for those streams succeeds without new records (a retry). Streams listed in
  ``close_stream_ids`` are closed by the same records (a closing owner's last upload: one
  controller write instead of two).
* ``open_stream`` taking the stream over from an owner that did not close it adds that owner to
  ``wal_owners`` (the WALs that may hold an acknowledged tail past ``end_offset``);
  ``stream_recovered`` from the owner clears the list once it has recovered and committed them.
* A stale broker epoch is refused with ``STALE_BROKER_EPOCH`` before anything else.
"""
from __future__ import annotations

from dataclasses import replace
from itertools import pairwise
from typing import Any

from metadata_quorum.controller_result import ControllerResult, OpContext
from metadata_quorum.kernel.errors import ErrorCode, FerryError
from metadata_quorum.kernel.messages.streams import (CloseStreamReply, CollectGarbageReply, CommitObjectReply,
                                                     CreateStreamReply, DescribeStreamReply, OpenStreamReply,
                                                     RemovedObjectsReply, StreamRecoveredReply)
from metadata_quorum.image import STREAM_ID_COUNTER_KEY, MetadataImage, StreamMetadata
from metadata_quorum.ops.cluster import (check_broker_epoch, heartbeat_expired, unregistered_lease_live,
                                        unregistered_session_key)
from metadata_quorum.kernel.object_keys import object_created_ms
from metadata_quorum.kernel.validation import as_int, as_mapping, invalid, req_int, req_list, req_str
from metadata_quorum.records import (
    STREAM_CLOSED,
    STREAM_OPENED,
    KVRecord,
    Record,
    RemoveStreamObjectRecord,
    StreamObjectRecord,
    StreamRecord,
)

NO_OWNER = -1
INITIAL_STREAM_EPOCH = -1
GC_HORIZON_KEY = "gc/horizon_ms"
GC_MAX_CANDIDATES = 10_000


def gc_horizon_ms(image: MetadataImage) -> int:
    """Objects created at or before the horizon can no longer be committed (-1: no GC ran yet)."""
    raw = image.kv.get(GC_HORIZON_KEY)
    return int(raw) if raw is not None else -1


def new_stream_records(image_next_id: int, count: int) -> tuple[list[Record], list[int]]:
    """Records creating ``count`` CLOSED streams from ``image_next_id`` on, plus the id counter."""
    ids = list(range(image_next_id, image_next_id + count))
    records: list[Record] = [
        StreamRecord(stream_id=s, epoch=INITIAL_STREAM_EPOCH, state=STREAM_CLOSED, owner=NO_OWNER) for s in ids
    ]
    records.append(KVRecord(key=STREAM_ID_COUNTER_KEY, value=str(image_next_id + count)))
    return records, ids


def _stream(image: MetadataImage, stream_id: int) -> StreamMetadata:
    stream = image.streams.streams.get(stream_id)
    if stream is None:
        raise FerryError(ErrorCode.STREAM_NOT_EXIST, f"stream {stream_id} does not exist")
    return stream


def _fenced(stream: StreamMetadata, broker_id: int, epoch: int) -> FerryError:
    return FerryError(
        ErrorCode.STREAM_FENCED,
        f"stream {stream.stream_id} is at epoch {stream.epoch} owned by broker {stream.owner}; "
        f"broker {broker_id} with epoch {epoch} is fenced",
        {"stream_epoch": stream.epoch, "owner": stream.owner},
    )


def _check_owner(stream: StreamMetadata, broker_id: int, broker_epoch: int, epoch: int, need_opened: bool) -> None:
    if stream.owner != broker_id or stream.epoch != epoch or stream.owner_epoch not in (-1, broker_epoch):
        raise _fenced(stream, broker_id, epoch)
    if need_opened and stream.state != STREAM_OPENED:
        raise FerryError(ErrorCode.STREAM_NOT_OPENED, f"stream {stream.stream_id} is not opened")


def _caller(image: MetadataImage, args: dict[str, Any]) -> tuple[int, int]:
    broker_id = req_int(args, "broker_id", 0)
    broker_epoch = req_int(args, "broker_epoch")
    check_broker_epoch(image, broker_id, broker_epoch)
    return broker_id, broker_epoch


def create_stream(image: MetadataImage, args: dict[str, Any], ctx: OpContext) -> ControllerResult:
    records, ids = new_stream_records(image.next_stream_id, 1)
    reply: CreateStreamReply = {"stream_id": ids[0]}
    return ControllerResult(tuple(records), reply)


def _owner_gone(image: MetadataImage, stream: StreamMetadata, ctx: OpContext) -> bool:
    """The incarnation that opened the stream is gone: unregistered, fenced, silent, or replaced.
    Not while an incarnation unregistered with a live session may still acknowledge
    (``cluster.unregister_broker``)."""
    if unregistered_lease_live(ctx, stream.owner, image.kv.get(unregistered_session_key(stream.owner))):
        return False
    reg = image.cluster.brokers.get(stream.owner)
    return reg is None or reg.fenced or heartbeat_expired(ctx, stream.owner) or \
        stream.owner_epoch not in (-1, reg.broker_epoch)


def open_stream(image: MetadataImage, args: dict[str, Any], ctx: OpContext) -> ControllerResult:
    broker_id, broker_epoch = _caller(image, args)
    stream_id = req_int(args, "stream_id", 0)
    epoch = req_int(args, "epoch", 0)
    stream = _stream(image, stream_id)
    if stream.state == STREAM_OPENED and stream.owner == broker_id and stream.epoch == epoch and \
            stream.owner_epoch == broker_epoch:
        return ControllerResult((), _open_reply(stream))
    reg = image.cluster.brokers[broker_id]
    if reg.fenced:
        raise FerryError(ErrorCode.STREAM_FENCED,
                         f"broker {broker_id} is fenced and may not open stream {stream_id}")
    same_incarnation = stream.owner == broker_id and stream.owner_epoch == broker_epoch
    reopen = stream.state == STREAM_CLOSED and same_incarnation and epoch == stream.epoch
    if epoch <= stream.epoch and not reopen:
        raise _fenced(stream, broker_id, epoch)
    if stream.state == STREAM_OPENED and stream.owner != broker_id and not _owner_gone(image, stream, ctx):
        raise FerryError(
            ErrorCode.STREAM_NOT_CLOSED,
            f"stream {stream_id} is still opened by broker {stream.owner} at epoch {stream.epoch}",
            {"owner": stream.owner, "stream_epoch": stream.epoch},
        )
    wal_owners = stream.wal_owners
    if stream.state == STREAM_OPENED and stream.owner >= 0:
        # a takeover: the owner replaced did not close the stream, so its WAL may hold an
        # acknowledged tail; it joins those of earlier owners nobody has recovered yet
        wal_owners = add_wal_owner(wal_owners, stream.owner, stream.epoch)
    record = replace(stream.to_record(), epoch=epoch, state=STREAM_OPENED, owner=broker_id, owner_epoch=broker_epoch,
                     wal_owners=wal_owners)
    reply: OpenStreamReply = {
        "stream_id": stream_id, "epoch": epoch, "start_offset": stream.start_offset, "end_offset": stream.end_offset,
        "wal_owners": [list(o) for o in wal_owners],
    }
    return ControllerResult((record,), reply)


def add_wal_owner(wal_owners: tuple[tuple[int, int], ...], broker_id: int,
                  epoch: int) -> tuple[tuple[int, int], ...]:
    """``wal_owners`` with ``(broker_id, epoch)`` added: one entry per broker, with the highest
    epoch it held the stream with (its WAL's entries of earlier epochs are read under it too)."""
    kept = tuple(o for o in wal_owners if o[0] != broker_id)
    top = max([epoch] + [e for b, e in wal_owners if b == broker_id])
    return kept + ((broker_id, top),)


def _open_reply(stream: StreamMetadata) -> OpenStreamReply:
    return {"stream_id": stream.stream_id, "epoch": stream.epoch,
            "start_offset": stream.start_offset, "end_offset": stream.end_offset,
            "wal_owners": [list(o) for o in stream.wal_owners]}


def stream_recovered(image: MetadataImage, args: dict[str, Any], ctx: OpContext) -> ControllerResult:
    """The owner has recovered the tails of every WAL in ``wal_owners`` (its open's reply) and
    committed them: no later owner needs to read those WALs again. Only the owner at the
    stream's current epoch may say so (``STREAM_FENCED``); an empty list is a retry."""
    broker_id, broker_epoch = _caller(image, args)
    stream = _stream(image, req_int(args, "stream_id", 0))
    epoch = req_int(args, "epoch", 0)
    _check_owner(stream, broker_id, broker_epoch, epoch, need_opened=True)
    reply: StreamRecoveredReply = {}
    if not stream.wal_owners:
        return ControllerResult((), reply)
    return ControllerResult((replace(stream.to_record(), wal_owners=()),), reply)


def close_stream(image: MetadataImage, args: dict[str, Any], ctx: OpContext) -> ControllerResult:
    broker_id, broker_epoch = _caller(image, args)
    stream = _stream(image, req_int(args, "stream_id", 0))
    epoch = req_int(args, "epoch", 0)
    _check_owner(stream, broker_id, broker_epoch, epoch, need_opened=False)
    reply: CloseStreamReply = {}
    if stream.state == STREAM_CLOSED:
        return ControllerResult((), reply)
    record = replace(stream.to_record(), state=STREAM_CLOSED)
    return ControllerResult((record,), reply)


def commit_object(image: MetadataImage, args: dict[str, Any], ctx: OpContext) -> ControllerResult:
    broker_id, broker_epoch = _caller(image, args)
    object_key = req_str(args, "object_key")
    size = req_int(args, "size", 0)
    raw_ranges = req_list(args, "ranges")
    if not raw_ranges:
        raise invalid("ranges must not be empty")
    ranges: list[tuple[int, int, int, int]] = []
    range_bytes: dict[int, int] = {}
    for raw in raw_ranges:
        item = as_mapping(raw, "ranges[]")
        stream_id = as_int(item.get("stream_id"), "stream_id", 0)
        epoch = as_int(item.get("epoch"), "epoch", 0)
        start = as_int(item.get("start_offset"), "start_offset", 0)
        end = as_int(item.get("end_offset"), "end_offset", 0)
        if end <= start:
            raise invalid(f"range of stream {stream_id} is empty or reversed: [{start}, {end})")
        if item.get("size_bytes") is not None:
            range_bytes[stream_id] = as_int(item.get("size_bytes"), "size_bytes", 0, size)
        ranges.append((stream_id, epoch, start, end))
    if len({r[0] for r in ranges}) != len(ranges):
        raise invalid("an object holds at most one range per stream")
    close_ids = {as_int(v, "close_stream_ids[]", 0) for v in (args.get("close_stream_ids") or [])}
    if not close_ids <= {r[0] for r in ranges}:
        raise invalid("close_stream_ids must name streams of this commit's ranges")
    committed = [
        any(o.object_key == object_key for o in _stream(image, stream_id).objects)
        for stream_id, _e, _s, _end in ranges
    ]
    reply: CommitObjectReply = {}
    if all(committed):
        return ControllerResult((), reply)  # a retry of a commit that already happened
    if any(committed):
        raise FerryError(ErrorCode.INVALID_REQUEST,
                         f"object {object_key} is already committed for some, not all, of these ranges")
    horizon = gc_horizon_ms(image)
    created = object_created_ms(object_key)
    if horizon >= 0 and (created is None or created <= horizon):
        # the garbage collector may have deleted it: the uploader uploads the data again under a new key
        raise FerryError(ErrorCode.OBJECT_NOT_EXIST,
                         f"object {object_key} was created at or before the garbage-collection horizon "
                         f"{horizon}; upload it again under a new key", {"gc_horizon_ms": horizon})
    records: list[Record] = []
    for stream_id, epoch, start, end in ranges:
        stream = _stream(image, stream_id)
        _check_owner(stream, broker_id, broker_epoch, epoch, need_opened=True)
        if start != stream.end_offset:
            raise FerryError(
                ErrorCode.OFFSET_NOT_MATCHED,
                f"stream {stream_id} ends at offset {stream.end_offset}; a commit must start there, not at {start}",
                {"stream_id": stream_id, "end_offset": stream.end_offset},
            )
        # replaying the object record moves the stream's end offset to ``end`` (one record per range)
        records.append(StreamObjectRecord(object_key=object_key, stream_id=stream_id, start_offset=start,
                                          end_offset=end, size=size, epoch=epoch, committed_ms=ctx.wall_now_ms,
                                          range_bytes=range_bytes.get(stream_id, 0)))
        if stream_id in close_ids:  # the owner's last upload closes the stream in the same write (step 4)
            records.append(replace(stream.to_record(), state=STREAM_CLOSED, end_offset=end))
    return ControllerResult(tuple(records), reply)


def trim_stream(image: MetadataImage, args: dict[str, Any], ctx: OpContext) -> ControllerResult:
    """Move the stream's start offset forward; objects wholly below it are removed and the keys no
    stream references any more are returned, for the caller to delete from object storage."""
    broker_id, broker_epoch = _caller(image, args)
    stream = _stream(image, req_int(args, "stream_id", 0))
    epoch = req_int(args, "epoch", 0)
    new_start = req_int(args, "new_start_offset", 0)
    _check_owner(stream, broker_id, broker_epoch, epoch, need_opened=True)
    if new_start > stream.end_offset:
        raise FerryError(
            ErrorCode.OFFSET_OUT_OF_RANGE,
            f"cannot trim stream {stream.stream_id} to {new_start}: it ends at {stream.end_offset}",
        )
    if new_start <= stream.start_offset:
        nothing: RemovedObjectsReply = {"removed_objects": []}
        return ControllerResult((), nothing)
    records: list[Record] = []
    removed: list[str] = []
    refs = image.streams.object_refs
    for obj in stream.objects:
        if obj.end_offset <= new_start:
            records.append(RemoveStreamObjectRecord(object_key=obj.object_key, stream_id=stream.stream_id))
            if refs.get(obj.object_key, ()) == (stream.stream_id,):
                removed.append(obj.object_key)
    records.append(replace(stream.to_record(), start_offset=new_start))
    trimmed: RemovedObjectsReply = {"removed_objects": removed}
    return ControllerResult(tuple(records), trimmed)


def compact_objects(image: MetadataImage, args: dict[str, Any], ctx: OpContext) -> ControllerResult:
    """Replace consecutive objects of one stream by one new object holding the same offsets
    (AutoMQ's stream-object compaction), atomically: the replaced objects' records out, the new
    one in. Only the owner at the stream's current epoch may (``STREAM_FENCED``); ``replaces``
    must be exactly the stream's objects covering ``[start_offset, end_offset)``, back to back
    (``OFFSET_NOT_MATCHED`` if a trim or another compaction changed them). The same call again
    after it succeeded is a retry. The reply's ``removed_objects`` are the replaced keys no stream
    names any more (the caller deletes them)."""
    broker_id, broker_epoch = _caller(image, args)
    stream = _stream(image, req_int(args, "stream_id", 0))
    epoch = req_int(args, "epoch", 0)
    object_key = req_str(args, "object_key")
    size = req_int(args, "size", 0)
    start, end = req_int(args, "start_offset", 0), req_int(args, "end_offset", 0)
    range_bytes = as_int(args.get("range_bytes", 0), "range_bytes", 0, size)
    replaces = [as_str_key(k) for k in req_list(args, "replaces")]
    if end <= start:
        raise invalid(f"range [{start}, {end}) is empty or reversed")
    if not replaces or len(set(replaces)) != len(replaces) or object_key in replaces:
        raise invalid("replaces must name distinct objects (at least one), not the new one")
    _check_owner(stream, broker_id, broker_epoch, epoch, need_opened=True)
    current = {o.object_key: o for o in stream.objects}
    new = current.get(object_key)
    if new is not None:
        if (new.start_offset, new.end_offset) == (start, end) and not any(k in current for k in replaces):
            retried: RemovedObjectsReply = {"removed_objects": []}
            return ControllerResult((), retried)  # a retry of a compaction that happened
        raise invalid(f"object {object_key} is already committed for stream {stream.stream_id}")
    horizon = gc_horizon_ms(image)
    created = object_created_ms(object_key)
    if horizon >= 0 and (created is None or created <= horizon):
        raise FerryError(ErrorCode.OBJECT_NOT_EXIST,
                         f"object {object_key} was created at or before the garbage-collection horizon {horizon}",
                         {"gc_horizon_ms": horizon})
    old = sorted((current[k] for k in replaces if k in current), key=lambda o: o.start_offset)
    contiguous = len(old) == len(replaces) and old[0].start_offset == start and old[-1].end_offset == end and \
        all(a.end_offset == b.start_offset for a, b in pairwise(old))
    if not contiguous:
        raise FerryError(ErrorCode.OFFSET_NOT_MATCHED,
                         f"objects {replaces} are not the objects of stream {stream.stream_id} covering "
                         f"[{start}, {end}) (trimmed or compacted meanwhile?)", {"stream_id": stream.stream_id})
    records: list[Record] = [RemoveStreamObjectRecord(object_key=o.object_key, stream_id=stream.stream_id)
                             for o in old]
    records.append(StreamObjectRecord(object_key=object_key, stream_id=stream.stream_id, start_offset=start,
                                      end_offset=end, size=size, epoch=epoch, committed_ms=ctx.wall_now_ms,
                                      range_bytes=range_bytes))
    refs = image.streams.object_refs
    removed = [o.object_key for o in old if tuple(refs.get(o.object_key, ())) == (stream.stream_id,)]
    compacted: RemovedObjectsReply = {"removed_objects": removed}
    return ControllerResult(tuple(records), compacted)


def collect_garbage(image: MetadataImage, args: dict[str, Any], ctx: OpContext) -> ControllerResult:
    """One garbage-collection step, atomic at the controller: advance the horizon to ``horizon_ms``
    (never backwards, never past now) and answer which ``candidates`` (keys found in the bucket)
    may be deleted — those no stream names and created at or before the horizon. From this
    record on, ``commit_object`` refuses such keys, so no commit can name an object the
    collector deletes: a live upload that had not committed yet is refused and uploaded again."""
    broker_id, _broker_epoch = _caller(image, args)
    requested = req_int(args, "horizon_ms", 0)
    keys = [as_str_key(k) for k in req_list(args, "candidates")]
    if len(keys) > GC_MAX_CANDIDATES:
        raise invalid(f"at most {GC_MAX_CANDIDATES} candidates per call, got {len(keys)}")
    horizon = max(gc_horizon_ms(image), min(requested, ctx.wall_now_ms))
    refs = image.streams.object_refs
    deletable = []
    for key in keys:
        created = object_created_ms(key)
        if created is not None and created <= horizon and not refs.get(key):
            deletable.append(key)
    records: list[Record] = []
    if horizon != gc_horizon_ms(image):
        records.append(KVRecord(key=GC_HORIZON_KEY, value=str(horizon)))
    reply: CollectGarbageReply = {"horizon_ms": horizon, "deletable": deletable, "collector": broker_id}
    return ControllerResult(tuple(records), reply)


def as_str_key(value: Any) -> str:
    if not isinstance(value, str) or not value or len(value) > 1024:
        raise invalid(f"candidates[] must be object keys (non-empty strings of at most 1024 characters), "
                      f"got {value!r}"[:200])
    return value


def describe_stream(image: MetadataImage, args: dict[str, Any]) -> DescribeStreamReply:
    return _stream(image, req_int(args, "stream_id", 0)).describe()


__all__ = ["create_stream", "open_stream", "close_stream", "commit_object", "trim_stream",
           "collect_garbage", "compact_objects", "stream_recovered", "add_wal_owner", "gc_horizon_ms", "describe_stream", "new_stream_records", "INITIAL_STREAM_EPOCH", "NO_OWNER"]
