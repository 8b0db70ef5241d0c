"""Bounds and failures: backpressure, a full disk under the WAL, and `ferry s3 serve` bad input."""
from __future__ import annotations

import asyncio
import errno

import pytest

from metadata_quorum.kernel.errors import ErrorCode, FerryError
from stream_storage import s3_server
from stream_storage.memory_store import MemoryObjectStore
from stream_storage.wal import WriteAheadLog
from tests.streams.conftest import batch_of, read_all


async def test_appends_wait_while_the_uncommitted_backlog_is_at_its_bound(make_storage) -> None:
    """Bytes admitted, buffered and being uploaded together never pass ``max_uncommitted_uploads``
    uploads' worth: what a close has to upload stays bounded however fast appends come."""
    store = MemoryObjectStore(latency_ms=20)
    a = make_storage(1, store, upload_bytes=4096, max_inflight_uploads=2, max_uncommitted_uploads=2)
    await a.start()
    sid = await a.create_stream()
    await a.open_stream(sid, 0)
    peak = peak_uploading = 0

    async def watch() -> None:
        nonlocal peak, peak_uploading
        while True:
            up = a.uploader
            peak = max(peak, up.pending_bytes + up.admitted_bytes + up.uploading_bytes)
            peak_uploading = max(peak_uploading, up.uploading_bytes)
            await asyncio.sleep(0.001)

    watcher = asyncio.create_task(watch())
    batch = batch_of("bp", count=4, value_bytes=250)
    await asyncio.gather(*(a.append(sid, batch) for _ in range(120)))
    watcher.cancel()
    assert peak <= 2 * 4096  # admitted + buffered + uploading never exceed two uploads
    assert peak_uploading > 0 and a.uploader.admit_waits > 0
    await a.close_stream(sid)
    assert a.uploader.uploading_bytes == 0
    assert len(await read_all(a, sid)) == 480
    await a.close()


async def test_an_urgent_append_is_not_held_behind_the_backlog(make_storage) -> None:
    """A closing partition's meta snapshot goes to the WAL while other appends wait for room."""
    store = MemoryObjectStore(latency_ms=200)
    a = make_storage(1, store, upload_bytes=4096, max_uncommitted_uploads=1)
    await a.start()
    data, meta = await a.create_stream(), await a.create_stream()
    await a.open_stream(data, 0)
    await a.open_stream(meta, 0)
    await a.append(data, batch_of("fill", count=20, value_bytes=250))  # at the bound: uploading for 200 ms
    held = asyncio.ensure_future(a.append(data, batch_of("held", count=1, value_bytes=10)))
    await asyncio.sleep(0.02)
    assert not held.done()
    assert await asyncio.wait_for(a.append(meta, batch_of("meta", count=1), urgent=True), 0.15) == 0
    assert not held.done()  # still waiting for the upload to commit
    assert await held == 20
    await a.close()


async def test_full_disk_fails_the_append_and_the_stream_keeps_what_was_acknowledged(make_storage, memory_store,
                                                                                  monkeypatch) -> None:
    a = make_storage(1, memory_store, upload_interval_ms=60_000)
    await a.start()
    sid = await a.create_stream()
    await a.open_stream(sid, 0)
    await a.append(sid, batch_of("ok"))
    real = WriteAheadLog._write_batch

    def full(self, entries, ranges):  # type: ignore[no-untyped-def]
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(WriteAheadLog, "_write_batch", full)
    with pytest.raises(FerryError) as err:
        await a.append(sid, batch_of("lost"))
    assert err.value.error == ErrorCode.KAFKA_STORAGE_ERROR
    monkeypatch.setattr(WriteAheadLog, "_write_batch", real)
    with pytest.raises(FerryError) as err:
        await a.append(sid, batch_of("after"))
    assert err.value.error == ErrorCode.KAFKA_STORAGE_ERROR
    assert (await a.fetch(sid, 0, 1 << 20)).high_watermark == 3
    assert [r.key for r in await read_all(a, sid)] == [b"ok-0", b"ok-1", b"ok-2"]
    await a.abort()


def test_s3_serve_refuses_a_bad_bucket_name(capsys) -> None:
    assert s3_server.main(["serve", "--bucket", "ab"]) == 2
    assert "3 to 63 characters" in capsys.readouterr().err


async def test_appends_waiting_for_room_get_offsets_in_the_order_they_asked(make_storage) -> None:
    """A small append never passes a larger one that waits for room: a pipelining idempotent
    producer's batches must reach the log in the order it sent them."""
    store = MemoryObjectStore(latency_ms=20)
    a = make_storage(1, store, upload_bytes=4096, max_inflight_uploads=1)
    await a.start()
    sid = await a.create_stream()
    await a.open_stream(sid, 0)
    large, small = batch_of("large", count=12, value_bytes=250), batch_of("small", count=1, value_bytes=10)
    sizes = [large if i % 3 else small for i in range(90)]
    bases = await asyncio.gather(*(a.append(sid, b) for b in sizes))
    assert a.uploader.admit_waits > 0  # the appends did wait for room
    assert bases == sorted(bases) and len(set(bases)) == len(bases), bases
    await a.close()
