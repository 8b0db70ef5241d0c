"""Injected object-store and controller faults end in retries, with no lost and no doubly committed object."""
from __future__ import annotations

import asyncio
import random
from collections import Counter
from typing import Any

import pytest

from metadata_quorum.kernel.errors import ErrorCode, FerryError
from stream_storage.control import LocalStreamControl
from stream_storage.memory_store import FAULT_LOST_REPLY, MemoryObjectStore
from stream_storage.object_format import parse_tail
from tests.streams.conftest import batch_of, read_all, retrying


class FlakyControl(LocalStreamControl):
    """Commits fail before the controller acts, or after it acted (a lost reply), from a seed."""

    def __init__(self, controller: Any, seed: int, rate: float) -> None:
        super().__init__(controller)
        self.random = random.Random(seed)
        self.rate = rate
        self.faults: Counter[str] = Counter()

    async def commit_object(self, object_key, size, broker_id, broker_epoch, ranges) -> None:  # type: ignore[override]
        draw = self.random.random()
        if draw < self.rate / 2:
            self.faults["before"] += 1
            raise FerryError(ErrorCode.REQUEST_TIMED_OUT, "injected: controller did not answer")
        await super().commit_object(object_key, size, broker_id, broker_epoch, ranges)
        if draw < self.rate:
            self.faults["after"] += 1
            raise FerryError(ErrorCode.REQUEST_TIMED_OUT, "injected: reply lost after commit")


def check_committed_objects(controller: Any, store: MemoryObjectStore, stream_ids: list[int]) -> None:
    """Each object key committed once per stream, ranges contiguous from 0, every key in the store."""
    seen: Counter[tuple[str, int]] = Counter()
    for sid in stream_ids:
        desc = controller.read("describe_stream", {"stream_id": sid})
        cursor = 0
        for obj in desc["objects"]:
            seen[(obj["object_key"], sid)] += 1
            assert obj["start_offset"] == cursor
            cursor = obj["end_offset"]
            assert obj["object_key"] in store.objects
            index = parse_tail(store.objects[obj["object_key"]], 0)
            assert not isinstance(index, tuple)
            assert any(r.stream_id == sid and r.start_offset == obj["start_offset"]
                       and r.end_offset == obj["end_offset"] for r in index.ranges())
        assert cursor == desc["end_offset"]
    assert all(n == 1 for n in seen.values())
    records = [r for _o, r in controller.log if type(r).__name__ == "StreamObjectRecord"]
    assert len(records) == len({(r.object_key, r.stream_id) for r in records})


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_faulty_store_and_controller_lose_nothing_and_commit_nothing_twice(make_storage, controller, tmp_path,
                                                                                  seed: int) -> None:
    store = MemoryObjectStore(seed=seed, error_rate=0.15, lost_reply_rate=0.1, latency_ms=1)
    a = make_storage(1, retrying(store), upload_bytes=4096, upload_interval_ms=5)
    a.control = a.uploader.control = FlakyControl(controller, seed, 0.3)
    await a.start()
    sids = [await a.create_stream() for _ in range(3)]
    for sid in sids:
        await a.open_stream(sid, 0)
    rng = random.Random(seed)
    acked: dict[int, list[str]] = {sid: [] for sid in sids}

    async def producer(sid: int, n: int) -> None:
        for i in range(n):
            tag = f"s{sid}-{i}"
            await a.append(sid, batch_of(tag, count=2, value_bytes=rng.randint(10, 400)))
            acked[sid].append(tag)
            if i % 17 == 0:
                await asyncio.sleep(0.003)

    await asyncio.gather(*(producer(sid, 60) for sid in sids))
    await a.force_upload(sids[0])
    for sid in sids:
        await a.close_stream(sid)
    assert store.faults["put:error"] and store.faults["put:lost_reply"], store.faults  # faults were injected...
    assert a.control.faults["after"] + a.control.faults["before"] > 0  # type: ignore[attr-defined]
    check_committed_objects(controller, store, sids)  # ...and retried without double commits
    b = make_storage(2, retrying(store))
    await b.start()
    for sid in sids:
        await b.open_stream(sid, 1)
        got = [r.key.decode() for r in await read_all(b, sid)]
        assert got == [f"{t}-{j}" for t in acked[sid] for j in range(2)]
    await a.close()
    await b.close()


async def test_lost_put_reply_is_retried_with_the_same_key(make_storage, controller) -> None:
    store = MemoryObjectStore()
    store.fail_next("put", count=2, kind=FAULT_LOST_REPLY)
    a = make_storage(1, retrying(store))
    await a.start()
    sid = await a.create_stream()
    await a.open_stream(sid, 0)
    await a.append(sid, batch_of("only"))
    await a.force_upload(sid)
    assert len(store.put_keys) == 3 and len(set(store.put_keys)) == 1  # one object, written three times
    assert len(store.objects) == 1
    check_committed_objects(controller, store, [sid])
    await a.close()


async def test_store_down_longer_than_retries_fails_upload_but_keeps_wal(make_storage, controller) -> None:
    store = MemoryObjectStore()
    store.fail_next("put", count=100, kind="fatal")
    a = make_storage(1, retrying(store))
    await a.start()
    sid = await a.create_stream()
    await a.open_stream(sid, 0)
    await a.append(sid, batch_of("kept"))
    with pytest.raises(FerryError) as err:
        await a.force_upload(sid)
    assert err.value.error == ErrorCode.KAFKA_STORAGE_ERROR
    with pytest.raises(FerryError):
        await a.append(sid, batch_of("refused"))
    assert a.wal.size_bytes > 0  # the acknowledged data stays in the WAL for recovery
    await a.abort()


class CommitThenRefuse(LocalStreamControl):
    """The first commit is applied but its reply is lost; the retry is refused as if the broker
    had re-registered meanwhile (STALE_BROKER_EPOCH is checked before the idempotent-retry rule)."""

    def __init__(self, controller: Any) -> None:
        super().__init__(controller)
        self.calls = 0

    async def commit_object(self, object_key, size, broker_id, broker_epoch, ranges) -> None:  # type: ignore[override]
        self.calls += 1
        if self.calls == 1:
            await super().commit_object(object_key, size, broker_id, broker_epoch, ranges)
            raise FerryError(ErrorCode.REQUEST_TIMED_OUT, "injected: reply lost after commit")
        raise FerryError(ErrorCode.STALE_BROKER_EPOCH, "injected: broker epoch moved on")


async def test_refused_retry_after_an_unanswered_commit_never_deletes_the_object(make_storage, controller) -> None:
    store = MemoryObjectStore()
    a = make_storage(1, retrying(store))
    a.control = a.uploader.control = CommitThenRefuse(controller)
    await a.start()
    sid = await a.create_stream()
    await a.open_stream(sid, 0)
    await a.append(sid, batch_of("kept"))
    await a.force_upload(sid)  # the first attempt did commit: found out, not deleted, not fenced
    desc = controller.read("describe_stream", {"stream_id": sid})
    assert desc["end_offset"] == 3 and len(desc["objects"]) == 1
    assert desc["objects"][0]["object_key"] in store.objects
    check_committed_objects(controller, store, [sid])
    assert [r.key for r in await read_all(a, sid)] == [b"kept-0", b"kept-1", b"kept-2"]
    await a.close()
