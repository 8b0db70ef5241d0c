"""A key/value stream for partition metadata, compacted so that opening it reads a bounded amount.

Each write is one Kafka v2 RecordBatch of ``key -> value`` records (``None`` value = delete, as
Kafka's tombstones). Now and then the whole map is written as a snapshot batch — its first record
has the key ``\\x00snapshot`` — and the stream is trimmed to that batch, so a reader replays at
most one snapshot plus the updates written after it, however long the history. The
partition's keys (clean-shutdown flag, start and recovery offsets, leader-epoch checkpoint,
producer state, stream ids) are the broker's business; this module only stores bytes.
"""
from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Mapping

from metadata_quorum.kernel.errors import ErrorCode, FerryError
from stream_storage.batches import build_batch, iter_batches, read_records

if TYPE_CHECKING:
    from stream_storage.storage import StreamStorage

SNAPSHOT_KEY = b"\x00snapshot"


# -- pure encoding -----------------------------------------------------------------------------

def _check_key(key: str) -> bytes:
    raw = key.encode()
    if not raw or raw.startswith(b"\x00"):
        raise FerryError(ErrorCode.INVALID_REQUEST, f"meta stream key {key!r} must be non-empty and not start with NUL")
    return raw


def encode_update(items: Mapping[str, bytes | None]) -> bytes:
    if not items:
        raise FerryError(ErrorCode.INVALID_REQUEST, "a meta stream update needs at least one key")
    return build_batch([(_check_key(k), v) for k, v in items.items()], timestamp_ms=0)


def encode_snapshot(state: Mapping[str, bytes]) -> bytes:
    records = [(SNAPSHOT_KEY, str(len(state)).encode())]
    records += [(_check_key(k), v) for k, v in sorted(state.items())]
    return build_batch(records, timestamp_ms=0)


class KVState:
    """The map rebuilt from batches; knows where the last snapshot was and how much came after."""

    def __init__(self) -> None:
        self.values: dict[str, bytes] = {}
        self.snapshot_offset: int | None = None
        self.snapshot_bytes = 0
        self.bytes_since_snapshot = 0
        self.read_bytes = 0

    def apply(self, data: bytes | bytearray | memoryview) -> None:
        view = memoryview(data)
        for info in iter_batches(view):
            batch = view[info.position: info.position + info.size_bytes]
            records = read_records(batch)
            self.read_bytes += info.size_bytes
            if records and records[0].key == SNAPSHOT_KEY:
                self.values = {}
                self.snapshot_offset = info.base_offset
                self.snapshot_bytes = info.size_bytes
                self.bytes_since_snapshot = 0
                records = records[1:]
            else:
                self.bytes_since_snapshot += info.size_bytes
            for rec in records:
                if rec.key is None:
                    continue
                key = rec.key.decode()
                if rec.value is None:
                    self.values.pop(key, None)
                else:
                    self.values[key] = rec.value

    def needs_snapshot(self, min_bytes: int, ratio: float) -> bool:
        """Compact once the updates since the last snapshot outweigh it (and a floor)."""
        return self.bytes_since_snapshot > max(min_bytes, ratio * self.snapshot_bytes)


# -- the stream shell --------------------------------------------------------------------------

class MetaStream:
    """A KV map over a stream the caller has opened in ``storage`` (same epoch rules as data)."""

    def __init__(self, storage: "StreamStorage", stream_id: int, snapshot_min_bytes: int = 16 * 1024,
                 snapshot_ratio: float = 1.0, fetch_bytes: int = 1024 * 1024) -> None:
        self.storage = storage
        self.stream_id = stream_id
        self.snapshot_min_bytes = snapshot_min_bytes
        self.snapshot_ratio = snapshot_ratio
        self.fetch_bytes = fetch_bytes
        self.state = KVState()
        self._trim_to: int | None = None

    async def load(self, latest_from: int | None = None) -> dict[str, bytes]:
        """Replay from the stream's start (the last snapshot, once compacted) to its end.

        ``latest_from`` (e.g. where the stream's last committed object starts, as the metadata
        says) is read first: when a snapshot lies between it and the end, nothing before that
        snapshot can change the map, so the stream's older objects are not read at all.
        """
        start = self._log_start()
        if latest_from is not None and latest_from > start:
            tail = await self._replay(latest_from)
            if tail.snapshot_offset is not None:
                self.state = tail
                return dict(tail.values)
        self.state = await self._replay(start)
        return dict(self.state.values)

    async def _replay(self, from_offset: int) -> KVState:
        state = KVState()
        result = await self.storage.fetch(self.stream_id, from_offset, self.fetch_bytes)
        offset = result.start_offset
        while True:
            if result.data:
                state.apply(_from_offset(result.data, offset))
            if result.next_offset >= result.high_watermark or not result.data:
                break
            offset = result.next_offset
            result = await self.storage.fetch(self.stream_id, offset, self.fetch_bytes)
        return state

    def _log_start(self) -> int:
        handle = self.storage.stream(self.stream_id)
        if handle is None:
            raise FerryError(ErrorCode.STREAM_NOT_OPENED, f"meta stream {self.stream_id} is not opened")
        return handle.start_offset

    def get(self, key: str) -> bytes | None:
        return self.state.values.get(key)

    def get_json(self, key: str) -> Any:
        raw = self.get(key)
        return None if raw is None else json.loads(raw)

    def items(self) -> dict[str, bytes]:
        return dict(self.state.values)

    async def put_many(self, items: Mapping[str, bytes | None]) -> int:
        """Durably write several keys at once (one batch, one fsync); returns its offset."""
        batch = encode_update(items)
        offset = await self.storage.append(self.stream_id, batch)
        self.state.apply(bytearray(batch))
        if self.state.needs_snapshot(self.snapshot_min_bytes, self.snapshot_ratio):
            await self.compact()
        else:
            await self._trim_if_committed()
        return offset

    async def put(self, key: str, value: bytes | None) -> int:
        return await self.put_many({key: value})

    async def put_json(self, items: Mapping[str, Any]) -> int:
        return await self.put_many({k: None if v is None else json.dumps(v, sort_keys=True).encode()
                                    for k, v in items.items()})

    async def compact(self, urgent: bool = False) -> int:
        """Write a snapshot of the whole map and trim the stream to it; returns the snapshot offset.
        ``urgent``: on a move's critical path (a closing partition's meta), so not held behind the
        broker's upload backlog (``StreamStorage.append``)."""
        batch = encode_snapshot(self.state.values)
        offset = await self.storage.append(self.stream_id, batch, urgent=urgent)
        self.state.snapshot_offset = offset
        self.state.snapshot_bytes = len(batch)
        self.state.bytes_since_snapshot = 0
        self._trim_to = offset
        await self._trim_if_committed()
        return offset

    async def _trim_if_committed(self, force: bool = False) -> None:
        """Trim to the last snapshot once the uploader has committed it (no extra PUT for it);
        ``force`` uploads it now instead."""
        handle = self.storage.stream(self.stream_id)
        if self._trim_to is None or handle is None:
            return
        if force or handle.committed_end > self._trim_to:
            target, self._trim_to = self._trim_to, None
            await self.storage.trim(self.stream_id, target)

    async def flush(self) -> None:
        """Upload what is buffered and apply a pending trim (before a close, for a tidy stream)."""
        await self.storage.force_upload(self.stream_id)
        await self._trim_if_committed(force=True)


def _from_offset(data: bytes, offset: int) -> bytes:
    """Drop leading batches that end before ``offset`` (a fetch may start mid-object)."""
    for info in iter_batches(data):
        if info.next_offset > offset:
            return data[info.position:]
    return b""
