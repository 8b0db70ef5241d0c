"""The WAL in S3 (``wal.mode = s3``) on the in-memory store: acknowledged only once stored,
recovered by a restart or by another broker from the bucket alone, deleted once committed."""
from __future__ import annotations

import asyncio
import random
import shutil
from typing import Any

import pytest

from metadata_quorum.kernel.errors import ErrorCode, FerryError
from stream_storage.batches import build_batch
from stream_storage.config import WalConfig
from stream_storage.memory_store import MemoryObjectStore
from broker.stream_directory import ImageStreamDirectory, image_directory
from stream_storage.wal_gc import DeadWalCollector
from stream_storage.wal_objects import broker_prefix
from tests.streams.conftest import heartbeat, read_all, retrying


def s3_wal(interval_ms: int = 5, **kw: Any) -> WalConfig:
    return WalConfig(mode="s3", object_interval_ms=interval_ms, **kw)


def wal_keys(store: MemoryObjectStore, broker_id: int) -> list[str]:
    return sorted(k for k in store.objects if k.startswith(broker_prefix("wal", broker_id)))


def batch(tag: str, n: int = 2) -> bytes:
    return build_batch([(f"{tag}-{i}".encode(), f"{tag}-{i}".encode()) for i in range(n)], timestamp_ms=1_700_000_000_000)


def keys_of(records: list[Any]) -> list[bytes]:
    return [r.key for r in records]


async def test_append_is_acknowledged_only_after_its_object_is_stored(make_storage, controller) -> None:
    store = MemoryObjectStore()
    a = make_storage(1, store, wal=s3_wal(interval_ms=60_000, object_bytes=10 ** 9), upload_interval_ms=60_000)
    await a.start()
    sid = await a.create_stream()
    await a.open_stream(sid, 0)
    pending = asyncio.ensure_future(a.append(sid, batch("a")))
    await asyncio.sleep(0.05)
    assert not pending.done() and wal_keys(store, 1) == []  # waiting for its object: not acknowledged
    await a.wal.close()  # closing seals what waits
    assert await pending == 0
    (key,) = wal_keys(store, 1)
    assert key.startswith("wal/broker-1/main/")
    await a.abort()


async def test_a_put_that_keeps_failing_fails_the_append(make_storage, controller) -> None:
    store = MemoryObjectStore()
    a = make_storage(1, retrying(store), wal=s3_wal())
    await a.start()
    sid = await a.create_stream()
    await a.open_stream(sid, 0)
    store.fail_next("put", count=1000, key_prefix="wal/")
    with pytest.raises(FerryError) as err:
        await a.append(sid, batch("lost"))
    assert err.value.error == ErrorCode.KAFKA_STORAGE_ERROR
    assert a.stream(sid).durable_end == 0  # nothing acknowledged, nothing served
    await a.abort()


async def test_dead_broker_with_its_disk_gone_is_recovered_from_s3(make_storage, controller, clock, tmp_path) -> None:
    store = MemoryObjectStore()
    a = make_storage(1, store, wal=s3_wal(), upload_interval_ms=60_000)
    b = make_storage(2, store, wal=s3_wal())
    await a.start()
    await b.start()
    sid = await a.create_stream()
    await a.open_stream(sid, 0)
    await a.append(sid, batch("up"))
    await a.force_upload(sid)
    for i in range(4):
        await a.append(sid, batch(f"tail{i}"))
    a._started = False  # a crash: nothing more happens on broker 1
    await a.uploader.stop()
    shutil.rmtree(a.config.wal_dir, ignore_errors=True)  # and its disk is gone
    assert wal_keys(store, 1)
    clock.skew_ms += 60_000
    heartbeat(controller, 2, b.broker_epoch)
    await b.open_stream(sid, 1)
    assert await b.recovery.recover_from_peer_wal(1, sid, previous_epoch=0) == 8
    assert keys_of(await read_all(b, sid)) == [f"{t}-{i}".encode() for t in ["up"] + [f"tail{j}" for j in range(4)]
                                               for i in range(2)]
    assert (await b.control.describe_stream(sid)).end_offset == 10  # committed, not only in b's WAL
    await b.close()
    assert wal_keys(store, 2) == []  # b's own WAL objects went once committed


async def test_restart_replays_own_wal_objects_and_trims_them(make_storage, controller, tmp_path) -> None:
    store = MemoryObjectStore()
    a = make_storage(1, store, wal=s3_wal(), upload_interval_ms=60_000)
    await a.start()
    sid = await a.create_stream()
    await a.open_stream(sid, 0)
    for i in range(3):
        await a.append(sid, batch(f"r{i}"))
    await a.uploader.stop()  # crash
    a2 = make_storage(1, store, register=False, wal_dir=str(tmp_path / "elsewhere"), wal=s3_wal())
    a2.broker_epoch = a.broker_epoch
    replay = await a2.start()
    assert sum(e.end_offset - e.start_offset for e in replay.entries) == 6
    info = await a2.open_stream(sid, 1)
    assert info.recovered_offsets == 6
    assert keys_of(await read_all(a2, sid)) == [f"r{j}-{i}".encode() for j in range(3) for i in range(2)]
    await a2.wal.trim()
    assert wal_keys(store, 1) == []
    await a2.close()


async def test_a_late_object_of_a_stopped_owner_never_counts(make_storage, controller, clock) -> None:
    """Broker 1 seals a WAL object, stops before its PUT lands; broker 2 takes the stream over
    and recovers; the late object lands; broker 2 crashes and broker 3 recovers: only what 1 and
    2 acknowledged, each once, in order."""
    store = MemoryObjectStore()
    gate = asyncio.Event()

    class Stalling:
        """Broker 1's view of the store: its WAL PUTs wait for ``gate`` once ``stall`` is set."""
        stall = False

        def __getattr__(self, name: str) -> Any:
            return getattr(store, name)

        async def put(self, key: str, data: Any, *args: Any) -> str:
            if self.stall and key.startswith("wal/"):
                await gate.wait()
            return await store.put(key, data, *args)

    stalling = Stalling()
    a = make_storage(1, stalling, wal=s3_wal(), upload_interval_ms=60_000)
    b = make_storage(2, store, wal=s3_wal(), upload_interval_ms=60_000)
    c = make_storage(3, store, wal=s3_wal())
    for s in (a, b, c):
        await s.start()
    sid = await a.create_stream()
    await a.open_stream(sid, 0)
    await a.append(sid, batch("a0"))
    stalling.stall = True
    late = asyncio.ensure_future(a.append(sid, batch("late")))  # never acknowledged before the fence
    await asyncio.sleep(0.05)
    clock.skew_ms += 60_000
    heartbeat(controller, 2, b.broker_epoch)
    heartbeat(controller, 3, c.broker_epoch)
    await b.open_stream(sid, 1)
    assert await b.recovery.recover_from_peer_wal(1, sid, previous_epoch=0) == 2
    await b.append(sid, batch("b0"))
    gate.set()  # broker 1 resumes: its late object lands after the takeover
    await late
    assert any(store.objects[k].find(b"late-0") >= 0 for k in wal_keys(store, 1))
    await b.uploader.stop()  # broker 2 crashes with b0 only in its WAL objects
    clock.skew_ms += 60_000
    heartbeat(controller, 3, c.broker_epoch)
    await c.open_stream(sid, 2)
    assert await c.recovery.recover_from_peer_wal(2, sid, previous_epoch=1) == 2
    # even a recovery that wrongly read broker 1's WAL again would stop at its epoch and offsets
    assert await c.recovery.recover_from_peer_wal(1, sid, previous_epoch=0) == 0
    assert keys_of(await read_all(c, sid)) == [b"a0-0", b"a0-1", b"b0-0", b"b0-1"]
    await c.close()
    await a.abort()


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_seeded_crash_recovery_with_s3_errors_loses_nothing_acknowledged(make_storage, controller, clock,
                                                                              seed: int) -> None:
    """Appends to several streams through a store that fails and loses replies at random; the
    broker crashes at a random point; another recovers every stream from the bucket alone."""
    rng = random.Random(seed)
    store = MemoryObjectStore(seed=seed, error_rate=0.05, lost_reply_rate=0.05)
    a = make_storage(1, retrying(store), wal=s3_wal(interval_ms=rng.choice([0, 2, 10]), object_bytes=4096),
                     upload_interval_ms=rng.choice([20, 60_000]))
    b = make_storage(2, retrying(store), wal=s3_wal())
    await a.start()
    await b.start()
    sids = [await a.create_stream() for _ in range(3)]
    for sid in sids:
        await a.open_stream(sid, 0)
    acked: dict[int, list[bytes]] = {sid: [] for sid in sids}

    async def writer(sid: int) -> None:
        for i in range(rng.randint(5, 30)):
            tag = f"s{sid}-{i}"
            try:
                await a.append(sid, batch(tag, 1))
            except FerryError:
                return  # a failed append stops its stream, as a failed WAL write does
            acked[sid].append(f"{tag}-0".encode())
            if rng.random() < 0.2:
                await asyncio.sleep(0.003)

    tasks = [asyncio.ensure_future(writer(sid)) for sid in sids]
    await asyncio.sleep(rng.uniform(0.01, 0.08))
    for t in tasks:  # the crash: appends in flight are never answered
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await a.uploader.stop()
    store.error_rate = store.lost_reply_rate = 0.0  # b's own reads go through the same retries
    clock.skew_ms += 60_000
    heartbeat(controller, 2, b.broker_epoch)
    for sid in sids:
        desc = await b.control.describe_stream(sid)
        await b.open_stream(sid, desc.epoch + 1)
        await b.recovery.recover_from_peer_wal(1, sid, previous_epoch=desc.epoch)
        got = keys_of(await read_all(b, sid))
        assert got[:len(acked[sid])] == acked[sid]  # every acknowledged record, once, in order
        assert len(set(got)) == len(got)  # an unanswered append may be there too, never twice
    await b.close()


@pytest.mark.parametrize("mode", ["s3", "local"])
async def test_owner_that_dies_before_recovering_leaves_both_wals_to_the_next(make_storage, controller, clock,
                                                                               mode: str) -> None:
    """Broker 1 acknowledges a tail and dies; broker 2 takes the stream over and dies too before it
    has recovered that tail; broker 3 must read broker 1's WAL as well as broker 2's."""
    store = MemoryObjectStore()
    wal = (lambda: s3_wal()) if mode == "s3" else (lambda: WalConfig())
    a = make_storage(1, store, wal=wal(), upload_interval_ms=60_000)
    b = make_storage(2, store, wal=wal(), upload_interval_ms=60_000)
    c = make_storage(3, store, wal=wal())
    by_id = {1: a, 2: b, 3: c}
    for s in (a, b, c):
        await s.start()
    sid = await a.create_stream()
    await a.open_stream(sid, 0)
    await a.append(sid, batch("up"))
    await a.force_upload(sid)
    for i in range(3):
        await a.append(sid, batch(f"tail{i}"))
    await a.uploader.stop()  # broker 1 crashes with its tail only in its WAL
    clock.skew_ms += 60_000
    heartbeat(controller, 2, b.broker_epoch)
    heartbeat(controller, 3, c.broker_epoch)
    info = await b.open_stream(sid, 1, previous_owner=1, previous_epoch=0)
    assert info.wal_owners == ((1, 0),)
    await b.uploader.stop()  # broker 2 crashes before recovering anything
    clock.skew_ms += 60_000
    heartbeat(controller, 3, c.broker_epoch)
    info = await c.open_stream(sid, 2, previous_owner=2, previous_epoch=1)
    assert info.wal_owners == ((1, 0), (2, 1))
    # the predecessor's WAL alone does not hold the tail: reading only it was the loss
    if mode == "s3":
        assert await c.recovery.recover_from_peer_wal(2, sid, previous_epoch=1) == 0
    else:
        assert await c.recovery.recover_from_wal(b.config.wal_dir, sid, previous_epoch=1) == 0
    got = await c.recovery.recover_from_owners(sid, info.wal_owners, lambda bid: [by_id[bid].config.wal_dir])
    assert got.offsets == 6 and got.unreachable == ()
    assert keys_of(await read_all(c, sid)) == [f"{t}-{i}".encode() for t in ["up", "tail0", "tail1", "tail2"]
                                               for i in range(2)]
    stream = controller.image.streams.streams[sid]
    assert stream.end_offset == 8 and stream.wal_owners == ()  # committed, and nobody reads those WALs again
    await c.append(sid, batch("c0"))
    await c.uploader.stop()  # broker 3 dies after recovering and serving: only its own WAL is named
    heartbeat(controller, 1, a.broker_epoch)
    clock.skew_ms += 60_000
    heartbeat(controller, 1, a.broker_epoch)
    d = make_storage(4, store, wal=wal())
    await d.start()
    info = await d.open_stream(sid, 3, previous_owner=3, previous_epoch=2)
    assert info.wal_owners == ((3, 2),)
    assert (await d.recovery.recover_from_owners(sid, info.wal_owners, lambda bid: [by_id[bid].config.wal_dir])).offsets == 2
    assert keys_of(await read_all(d, sid))[-2:] == [b"c0-0", b"c0-1"]
    await d.close()


async def test_dead_brokers_wal_objects_are_deleted_once_no_recovery_needs_them(make_storage, controller,
                                                                                 clock) -> None:
    """Broker 1 dies with a tail of two streams in its WAL objects. While a stream is not yet
    recovered (and while a recovery is pending after a takeover) its objects stay; once both
    streams are recovered and committed elsewhere, the garbage collector deletes them all."""
    store = MemoryObjectStore()
    a = make_storage(1, store, wal=s3_wal(), upload_interval_ms=60_000)
    b = make_storage(2, store, wal=s3_wal(), upload_interval_ms=60_000)
    for s in (a, b):
        await s.start()
    s1, s2 = await a.create_stream(), await a.create_stream()
    for sid in (s1, s2):
        await a.open_stream(sid, 0)
        await a.append(sid, batch(f"s{sid}-up"))
        await a.force_upload(sid)
        await a.append(sid, batch(f"s{sid}-tail"))
    await a.uploader.stop()  # broker 1 crashes
    dead = wal_keys(store, 1)
    assert dead
    gc = DeadWalCollector(store, "wal", lambda: image_directory(controller.image))
    assert await gc.run_once() == 0  # broker 1 is still live as far as the metadata says
    clock.skew_ms += 60_000
    heartbeat(controller, 2, b.broker_epoch)
    controller.write("tick", {})
    assert 1 not in ImageStreamDirectory(controller.image).live_brokers()
    assert await gc.run_once() == 0 and wal_keys(store, 1) == dead  # s1 and s2: tails not recovered
    info = await b.open_stream(s1, 1, previous_owner=1, previous_epoch=0)
    assert await gc.run_once() == 0  # taken over, recovery pending: broker 1 is in wal_owners
    assert (await b.recovery.recover_from_owners(s1, info.wal_owners)).offsets == 2
    holding_s2 = {k for k in dead if store.objects[k].find(f"s{s2}-tail".encode()) >= 0}
    await gc.run_once()
    assert holding_s2 and holding_s2 <= set(wal_keys(store, 1))  # s2's tail is still only there
    info = await b.open_stream(s2, 1, previous_owner=1, previous_epoch=0)
    assert (await b.recovery.recover_from_owners(s2, info.wal_owners)).offsets == 2
    await gc.run_once()
    assert wal_keys(store, 1) == [] and gc.deleted_total == len(dead)
    for sid in (s1, s2):  # nothing acknowledged was lost on the way
        assert keys_of(await read_all(b, sid)) == [f"s{sid}-{t}-{i}".encode() for t in ("up", "tail") for i in range(2)]
    await b.close()


@pytest.mark.parametrize("seed", [4, 5, 6])
async def test_seeded_second_crash_during_recovery_loses_nothing_acknowledged(make_storage, controller, clock,
                                                                             seed: int) -> None:
    """Broker 1 acknowledges appends to several streams and dies; broker 2 takes them over and, per
    stream at random, recovers all, nothing, or dies part-way through the recovery (S3 errors
    injected meanwhile); broker 3 recovers from what the controller names."""
    rng = random.Random(seed)
    store = MemoryObjectStore(seed=seed)
    a = make_storage(1, retrying(store), wal=s3_wal(interval_ms=rng.choice([0, 2, 10]), object_bytes=2048),
                     upload_interval_ms=60_000)
    b = make_storage(2, retrying(store), wal=s3_wal(interval_ms=rng.choice([0, 5])), upload_interval_ms=60_000)
    c = make_storage(3, retrying(store), wal=s3_wal())
    for s in (a, b, c):
        await s.start()
    sids = [await a.create_stream() for _ in range(4)]
    acked: dict[int, list[bytes]] = {sid: [] for sid in sids}
    for sid in sids:
        await a.open_stream(sid, 0)
        for i in range(rng.randint(3, 12)):
            await a.append(sid, batch(f"s{sid}-{i}", 1))
            acked[sid].append(f"s{sid}-{i}-0".encode())
            if rng.random() < 0.2:
                await a.force_upload(sid)
    await a.uploader.stop()  # broker 1 dies
    clock.skew_ms += 60_000
    heartbeat(controller, 2, b.broker_epoch)
    heartbeat(controller, 3, c.broker_epoch)
    store.error_rate = store.lost_reply_rate = 0.03
    for sid in sids:
        info = await b.open_stream(sid, 1, previous_owner=1, previous_epoch=0)
        fate = rng.choice(["all", "none", "part"])
        if fate == "none":
            continue
        task = asyncio.ensure_future(b.recovery.recover_from_owners(sid, info.wal_owners))
        if fate == "part":
            await asyncio.sleep(rng.uniform(0, 0.01))
            task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    await b.uploader.stop()  # broker 2 dies too
    store.error_rate = store.lost_reply_rate = 0.0
    clock.skew_ms += 60_000
    heartbeat(controller, 3, c.broker_epoch)
    for sid in sids:
        info = await c.open_stream(sid, 2, previous_owner=2, previous_epoch=1)
        assert (2, 1) in info.wal_owners
        await c.recovery.recover_from_owners(sid, info.wal_owners)
        got = keys_of(await read_all(c, sid))
        assert got == acked[sid]  # every acknowledged record, once, in order
        assert controller.image.streams.streams[sid].wal_owners == ()
    await c.close()
