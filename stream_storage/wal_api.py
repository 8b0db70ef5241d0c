"""The seam between stream storage and its write-ahead log: a local file WAL (``wal.py``) or WAL
objects in S3 (``s3_wal.py``). The uploader and ``StreamStorage`` use only this."""
from __future__ import annotations

from typing import Protocol

from stream_storage.wal import KIND_DATA, ReplayResult


class WalLog(Protocol):
    directory: str
    fsyncs: int  # durable writes: fdatasyncs, or PUTs of WAL objects
    appended_bytes: int
    extending_syncs: int
    preallocated_bytes: int
    sync_seconds: float

    async def start(self) -> ReplayResult:
        """Open, and return what an earlier process of this broker left in this WAL."""
        ...

    async def append(self, stream_id: int, epoch: int, start_offset: int, end_offset: int,
                     payload: bytes | bytearray | memoryview, kind: int = KIND_DATA) -> int:
        """Returns once the entry is durable; raises KAFKA_STORAGE_ERROR if it cannot be."""
        ...

    def mark_committed(self, stream_id: int, end_offset: int) -> None: ...

    def reset_committed(self, stream_id: int, end_offset: int) -> None: ...

    def committed_end(self, stream_id: int) -> int: ...

    def release_stream(self, stream_id: int) -> None: ...

    def holds(self, stream_id: int) -> bool: ...

    async def trim(self) -> int: ...

    async def close(self) -> None: ...

    @property
    def is_open(self) -> bool: ...

    @property
    def size_bytes(self) -> int: ...

    @property
    def segment_count(self) -> int: ...
