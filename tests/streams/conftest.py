"""Fixtures for stream storage tests: an in-process controller, brokers registered on it,
StreamStorage instances over a memory store, and a real moto server process."""
from __future__ import annotations

import time
from typing import Any, AsyncIterator, Callable, Iterator

import pytest

from metadata_quorum.local_controller import LocalController
from stream_storage.batches import build_batch
from stream_storage.config import RetryPolicy, StreamStorageConfig
from stream_storage.control import LocalStreamControl
from stream_storage.memory_store import MemoryObjectStore
from stream_storage.object_store import ObjectStore, RetryingObjectStore
from stream_storage.s3_server import S3Server
from stream_storage.storage import StreamStorage

FAST_RETRY = RetryPolicy(max_attempts=8, base_backoff_ms=1, max_backoff_ms=10)


class Clock:
    """Wall-clock milliseconds plus a skew tests can add (to expire a broker's session)."""

    def __init__(self) -> None:
        self.skew_ms = 0

    def __call__(self) -> int:
        return int(time.time() * 1000) + self.skew_ms


def now_ms() -> int:
    return int(time.time() * 1000)


def register_broker(controller: LocalController, broker_id: int) -> int:
    """Register and unfence a broker; returns its broker epoch."""
    epoch = int(controller.write("register_broker", {
        "broker_id": broker_id, "incarnation_id": f"inc-{broker_id}-{controller.next_offset}",
        "endpoints": [f"http://127.0.0.1:{10000 + broker_id}"], "rack": None, "log_dirs": []})["broker_epoch"])
    controller.write("broker_heartbeat", {
        "broker_id": broker_id, "broker_epoch": epoch, "metadata_offset": controller.next_offset - 1,
        "want_shutdown": False, "saturated_log_dirs": [], "offline_log_dirs": []})
    return epoch


def batch_of(tag: str, count: int = 3, value_bytes: int = 16) -> bytes:
    return build_batch([(f"{tag}-{i}".encode(), (f"{tag}-{i}:".encode() + b"x" * value_bytes)) for i in range(count)],
                       timestamp_ms=1_700_000_000_000)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def controller(clock: Clock) -> LocalController:
    return LocalController(clock)


def heartbeat(controller: LocalController, broker_id: int, broker_epoch: int) -> None:
    controller.write("broker_heartbeat", {
        "broker_id": broker_id, "broker_epoch": broker_epoch, "metadata_offset": controller.next_offset - 1,
        "want_shutdown": False, "saturated_log_dirs": [], "offline_log_dirs": []})


def all_records(controller: LocalController, stream_id: int) -> list[Any]:
    return [r for _o, r in controller.log if type(r).__name__ == "StreamObjectRecord" and getattr(r, "stream_id", None) == stream_id]


async def read_all(storage: StreamStorage, stream_id: int, max_bytes: int = 1 << 20) -> list[Any]:
    """Every record of the stream from its start, by repeated fetches."""
    from stream_storage.batches import read_records
    handle = storage.stream(stream_id)
    desc = None if handle is not None else await storage.control.describe_stream(stream_id)
    offset = handle.start_offset if handle is not None else desc.start_offset  # type: ignore[union-attr]
    out: list[Any] = []
    for _ in range(100_000):
        res = await storage.fetch(stream_id, offset, max_bytes)
        if not res.data:
            break
        out += [r for r in read_records(res.data) if r.offset >= offset]
        offset = res.next_offset
    return out


@pytest.fixture
async def make_storage(tmp_path: Any, controller: LocalController) -> AsyncIterator[Callable[..., StreamStorage]]:
    created: list[StreamStorage] = []

    def make(broker_id: int, store: ObjectStore, wal_dir: str | None = None, register: bool = True,
             control_delay_ms: float = 0.0, **overrides: Any) -> StreamStorage:
        epoch = register_broker(controller, broker_id) if register else 0
        cfg = StreamStorageConfig(wal_dir=wal_dir or str(tmp_path / f"wal-{broker_id}"),
                                  controller_retry=FAST_RETRY, **overrides)
        storage = StreamStorage(cfg, store, LocalStreamControl(controller, control_delay_ms), broker_id, epoch)
        created.append(storage)
        return storage

    yield make
    for storage in created:  # whatever a test left running: stop tasks, close files
        if storage._started and storage.wal.is_open:
            await storage.abort()


@pytest.fixture(scope="module")
def s3_server(tmp_path_factory: Any) -> Iterator[S3Server]:
    """A real ``ferry s3 serve`` process for the module's tests (killed at the end)."""
    log = str(tmp_path_factory.mktemp("s3") / "s3.log")
    server = S3Server(bucket="ferry-streams-test", log_path=log).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def memory_store() -> MemoryObjectStore:
    return MemoryObjectStore()


def retrying(store: ObjectStore) -> RetryingObjectStore:
    return RetryingObjectStore(store, FAST_RETRY)
