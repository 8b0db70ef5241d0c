"""Garbage collection: a seeded race of appends, uploads, commits, fences (takeovers by another
broker) and GC passes with no grace at all — after every pass every object a committed record
names is still in the store, orphans are gone, and every acknowledged record is read back once,
in order. Plus the controller's collect_garbage rules on their own."""
from __future__ import annotations

import asyncio
import random
from typing import Any, Mapping

import pytest

from metadata_quorum.kernel.controller_api import ControllerWrites
from metadata_quorum.kernel.errors import ErrorCode, FerryError
from metadata_quorum.kernel.object_keys import object_created_ms
from metadata_quorum.ops.streams import GC_HORIZON_KEY
from stream_storage.gc import GarbageCollector
from stream_storage.memory_store import MemoryObjectStore
from tests.streams.conftest import batch_of, heartbeat, read_all, register_broker, retrying


def referenced_keys(controller) -> set[str]:  # type: ignore[no-untyped-def]
    return {k for k, refs in controller.image.streams.object_refs.items() if refs}


class YieldingTransport:
    """The in-process controller's writes, each after one turn of the loop (as a request would)."""

    def __init__(self, controller) -> None:  # type: ignore[no-untyped-def]
        self.controller = controller

    async def write(self, op: str, args: Mapping[str, Any], timeout_ms: int | None = None) -> Mapping[str, Any]:
        await asyncio.sleep(0)
        return self.controller.write(op, dict(args))  # type: ignore[no-any-return]


def gc_for(controller, store, broker_id: int, epoch: int, grace_ms: int, clock) -> GarbageCollector:  # type: ignore[no-untyped-def]
    return GarbageCollector(store, ControllerWrites(YieldingTransport(controller)), lambda: (broker_id, epoch),
                            "streams", grace_ms, clock)


def test_collect_garbage_rules(controller, clock) -> None:  # type: ignore[no-untyped-def]
    epoch = register_broker(controller, 7)
    sid = controller.write("create_stream", {})["stream_id"]
    controller.write("open_stream", {"stream_id": sid, "epoch": 0, "broker_id": 7, "broker_epoch": epoch})
    now = clock()
    old, new, named = f"streams/7/{now - 5000:013d}-a", f"streams/7/{now + 60_000:013d}-b", f"streams/7/{now - 9000:013d}-c"
    controller.write("commit_object", {"object_key": named, "size": 10, "broker_id": 7, "broker_epoch": epoch,
                                       "ranges": [{"stream_id": sid, "epoch": 0, "start_offset": 0, "end_offset": 3}]})
    reply = controller.write("collect_garbage", {"broker_id": 7, "broker_epoch": epoch, "horizon_ms": now - 1000,
                                                 "candidates": [old, new, named, "streams/7/legacy-key"]})
    assert reply["deletable"] == [old] and reply["horizon_ms"] == now - 1000
    assert controller.image.kv[GC_HORIZON_KEY] == str(now - 1000)
    # a key at or before the horizon can no longer be committed; a retry of a committed one still can
    with pytest.raises(FerryError) as info:
        controller.write("commit_object", {"object_key": old, "size": 10, "broker_id": 7, "broker_epoch": epoch,
                                           "ranges": [{"stream_id": sid, "epoch": 0, "start_offset": 3,
                                                       "end_offset": 5}]})
    assert info.value.error is ErrorCode.OBJECT_NOT_EXIST and info.value.details == {"gc_horizon_ms": now - 1000}
    controller.write("commit_object", {"object_key": named, "size": 10, "broker_id": 7, "broker_epoch": epoch,
                                       "ranges": [{"stream_id": sid, "epoch": 0, "start_offset": 0, "end_offset": 3}]})
    # the horizon never goes back, nor past the controller's now
    assert controller.write("collect_garbage", {"broker_id": 7, "broker_epoch": epoch, "horizon_ms": 5,
                                                "candidates": []})["horizon_ms"] == now - 1000
    assert controller.write("collect_garbage", {"broker_id": 7, "broker_epoch": epoch, "horizon_ms": now + 10**9,
                                                "candidates": []})["horizon_ms"] <= clock()
    for bad in ({"horizon_ms": 1, "candidates": [3]}, {"horizon_ms": 1, "candidates": "x"}, {"candidates": []}):
        with pytest.raises(FerryError) as info:
            controller.write("collect_garbage", {"broker_id": 7, "broker_epoch": epoch, **bad})
        assert info.value.error is ErrorCode.INVALID_REQUEST
    assert object_created_ms("streams/1/0001700000000000-ab") == 1700000000000
    assert object_created_ms("streams/1/abcdef") is None


@pytest.mark.parametrize("seed", range(6))
async def test_gc_racing_uploads_commits_and_fences_never_deletes_a_named_object(
        make_storage, controller, clock, tmp_path, seed: int) -> None:  # type: ignore[no-untyped-def]
    rng = random.Random(seed)
    store = MemoryObjectStore(seed=seed, error_rate=0.03, lost_reply_rate=0.03, latency_ms=1)
    wal_dirs = {b: str(tmp_path / f"gc-wal-{b}") for b in (1, 2)}
    brokers = {b: make_storage(b, retrying(store), wal_dir=wal_dirs[b], upload_bytes=1024,
                               upload_interval_ms=rng.choice([2, 10]), control_delay_ms=rng.choice([1, 3]))
               for b in (1, 2)}
    for s in brokers.values():
        await s.start()
    # an orphan of a broker that crashed between its PUT and its commit
    orphan = f"streams/9/{clock() - 10_000:013d}-orphan"
    await store.put(orphan, b"never committed")
    sids = [await brokers[1].create_stream() for _ in range(2)]
    owner = {sid: 1 for sid in sids}
    epoch = {sid: 0 for sid in sids}
    for sid in sids:
        await brokers[1].open_stream(sid, 0)
    acked: dict[int, list[str]] = {sid: [] for sid in sids}
    # a grace far below one upload's PUT→commit window under faults: passes race live uploads, and
    # every upload caught by a horizon is refused at its commit and made again under a new key
    collector = gc_for(controller, retrying(store), 1, brokers[1].broker_epoch, rng.choice([15, 30]), clock)
    stop = asyncio.Event()
    violations: list[str] = []
    # a move waits for the append in flight (the broker's drain); uploads stay in flight across it
    locks = {sid: asyncio.Lock() for sid in sids}

    async def appender(sid: int) -> None:
        n = 0
        while not stop.is_set():
            tag = f"{sid}-{n}"
            n += 1
            async with locks[sid]:
                await brokers[owner[sid]].append(sid, batch_of(tag, count=2, value_bytes=200))
                acked[sid].append(tag)
            await asyncio.sleep(rng.random() * 0.003)

    async def collector_passes() -> None:
        while not stop.is_set():
            await collector.run_once()
            missing = referenced_keys(controller) - set(store.objects)
            if missing:
                violations.append(f"named objects deleted: {sorted(missing)}")
            await asyncio.sleep(rng.random() * 0.01)

    tasks = [asyncio.ensure_future(appender(sid)) for sid in sids] + [asyncio.ensure_future(collector_passes())]
    try:
        for _ in range(12):
            await asyncio.sleep(rng.random() * 0.05)
            sid = rng.choice(sids)
            src = owner[sid]
            dst = 2 if src == 1 else 1
            await locks[sid].acquire()
            if rng.random() < 0.5:  # a graceful move: close, then open elsewhere
                await brokers[src].close_stream(sid)
                epoch[sid] += 1
                await brokers[dst].open_stream(sid, epoch[sid], previous_owner=src)
            else:  # a takeover: the old owner is fenced while its uploads are in flight
                clock.skew_ms += 10_000
                heartbeat(controller, dst, brokers[dst].broker_epoch)
                epoch[sid] += 1
                await brokers[dst].open_stream(sid, epoch[sid], previous_owner=src)
                await brokers[dst].recovery.recover_from_wal(wal_dirs[src], sid)
                brokers[src].fence(sid, "taken over")
            owner[sid] = dst
            locks[sid].release()
            heartbeat(controller, 1, brokers[1].broker_epoch)
            heartbeat(controller, 2, brokers[2].broker_epoch)
    finally:
        stop.set()
        await asyncio.gather(*tasks)
    for sid in sids:
        await brokers[owner[sid]].force_upload(sid)
    await collector.run_once()
    refused = sum(s.uploader.stats.rebuilds for s in brokers.values())
    assert refused > 0 and collector.deleted_total > 1, "the race did not happen: passes met no live upload"
    assert not violations, violations[:3]
    assert orphan not in store.objects, "an object nobody names outlives its grace"
    assert referenced_keys(controller) <= set(store.objects)
    assert set(store.objects) - referenced_keys(controller) == set(), "after a final pass only named objects stay"
    for sid in sids:
        reader = make_storage(10 + sid, retrying(store), wal_dir=str(tmp_path / f"reader-{sid}"))
        await reader.start()
        records = await read_all(reader, sid)
        tags = [r.key.decode().rsplit("-", 1)[0] for r in records]
        values = [t for i, t in enumerate(tags) if i % 2 == 0]
        assert values == acked[sid], f"stream {sid}: acknowledged records lost, duplicated or reordered"
        await reader.abort()
