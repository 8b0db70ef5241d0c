"""Object compaction: the plan (pure), the controller's compact_objects rules, and compaction on a
stream's owner over the in-memory store — same records before and after, fewer objects, replaced
objects gone, refused compactions leave nothing behind."""
from __future__ import annotations

import asyncio
import random
from itertools import pairwise

import pytest

from metadata_quorum.kernel.errors import ErrorCode, FerryError
from stream_storage.compaction import CompactionPolicy, chunks_of, plan
from stream_storage.control import ObjectRef
from stream_storage.memory_store import MemoryObjectStore
from tests.streams.conftest import batch_of, read_all, register_broker, retrying

OLD = "streams/1/0000000000001-"


def ref(i: int, start: int, end: int, size: int, key: str | None = None) -> ObjectRef:
    return ObjectRef(key or f"{OLD}{i}", start, end, size * 4, 0, size)


def test_plan_groups_small_settled_neighbours_up_to_the_target() -> None:
    policy = CompactionPolicy(target_bytes=100, min_age_ms=1000, max_runs_per_pass=10)
    objs = [ref(i, 10 * i, 10 * i + 10, 20) for i in range(12)]
    runs = plan(objs, 10_000, policy)
    # runs of 100 bytes; the last two objects (40 bytes, below half the target) wait for more
    assert [[o.object_key for o in r] for r in runs] == [[f"{OLD}{i}" for i in range(0, 5)],
                                                        [f"{OLD}{i}" for i in range(5, 10)]]
    # ... unless there are many of them
    many = CompactionPolicy(target_bytes=100, min_age_ms=1000, max_runs_per_pass=10, max_small_objects=2)
    assert [len(r) for r in plan(objs, 10_000, many)] == [2] * 6
    # a large object splits runs, a gap in offsets too, a young object stops the plan
    objs = [ref(0, 0, 10, 30), ref(1, 10, 20, 60), ref(2, 20, 30, 30), ref(3, 30, 40, 30), ref(4, 41, 50, 30),
            ref(5, 50, 60, 30), ref(6, 60, 70, 30, key="streams/1/0000000009500-young"), ref(7, 70, 80, 30)]
    assert [[o.object_key[-1] for o in r] for r in plan(objs, 10_000, policy)] == [["2", "3"], ["4", "5"]]
    assert plan(objs, 10_000, CompactionPolicy(100, 1000, max_runs_per_pass=1)) == [objs[2:4]]
    assert plan([ref(0, 0, 10, 20)], 10_000, policy) == []


def test_bounded_objects_after_compaction_reaches_its_fixed_point() -> None:
    """Whatever the sizes, compacting until nothing is left to do leaves only objects of at least
    half the target, and between them runs of small ones below half the target and the count limit;
    and no byte is rewritten more than a few times."""
    rng = random.Random(3)
    target = 1000
    policy = CompactionPolicy(target_bytes=target, min_age_ms=0, max_runs_per_pass=1000, max_small_objects=8)
    objs, offset = [], 0
    for i in range(400):
        n = rng.randint(1, 5)
        objs.append(ref(i, offset, offset + n, rng.choice([5, 30, 120, 480, 700])))
        offset += n
    total = sum(o.range_bytes for o in objs)
    rewritten = 0
    for round_ in range(50):
        runs = plan(objs, 10**9, policy)
        if not runs:
            break
        for j, run in enumerate(runs):
            rewritten += sum(o.range_bytes for o in run)
            merged = ObjectRef(f"{OLD}r{round_}-{j}", run[0].start_offset, run[-1].end_offset, 1,
                               0, sum(o.range_bytes for o in run))
            i = objs.index(run[0])
            objs[i:i + len(run)] = [merged]
    assert not plan(objs, 10**9, policy)
    big = [o for o in objs if o.range_bytes >= target // 2]
    assert len(big) <= 2 * total / target
    small_run: list[ObjectRef] = []
    for o in objs + [big[-1]]:
        if o.range_bytes >= target // 2:
            assert len(small_run) < 8 and sum(x.range_bytes for x in small_run) < target // 2 + 500
            small_run = []
        else:
            small_run.append(o)
    assert rewritten <= 3 * total
    assert [(a.end_offset == b.start_offset) for a, b in pairwise(objs)] == [True] * (len(objs) - 1)


def test_chunks_of_splits_at_batch_boundaries() -> None:
    data = b"".join(batch_of(f"b{i}", count=2, value_bytes=300) for i in range(10))
    # stamp consecutive offsets as the storage does
    from stream_storage.batches import assign_offsets
    buf = bytearray(data)
    assign_offsets(buf, 0)
    chunks = chunks_of(bytes(buf), 1500)
    assert len(chunks) > 1 and b"".join(c.data for c in chunks) == bytes(buf)
    assert chunks[0].start_offset == 0 and chunks[-1].end_offset == 20
    assert all(a.end_offset == b.start_offset for a, b in pairwise(chunks))


async def fill(storage, sid: int, batches: int) -> list[bytes]:  # type: ignore[no-untyped-def]
    keys = []
    for i in range(batches):
        await storage.append(sid, batch_of(f"v{i}", count=3, value_bytes=200))
        keys += [f"v{i}-{j}".encode() for j in range(3)]
        if i % 3 == 2:
            await storage.force_upload(sid)
    await storage.force_upload(sid)
    return keys


async def manual_upload_stream(make_storage, store: MemoryObjectStore):  # type: ignore[no-untyped-def]
    """A started storage uploading only when forced (replaced objects deleted at once), and an open stream."""
    st = make_storage(1, retrying(store), upload_bytes=1 << 30, upload_interval_ms=60_000,
                      compaction_delete_delay_ms=0)
    await st.start()
    sid = await st.create_stream()
    await st.open_stream(sid, 0)
    return st, sid


async def test_compaction_keeps_every_record_and_removes_the_small_objects(make_storage, controller) -> None:  # type: ignore[no-untyped-def]
    store = MemoryObjectStore()
    st, sid = await manual_upload_stream(make_storage, store)
    keys = await fill(st, sid, 30)
    before = list(controller.image.streams.streams[sid].objects)
    assert len(before) == 10
    policy = CompactionPolicy(target_bytes=8 * 1024, min_age_ms=0, max_runs_per_pass=100)
    assert await st.compact_stream(sid, policy) >= 2
    await asyncio.sleep(0.01)  # the delayed deletes
    after = controller.image.streams.streams[sid].objects
    assert len(after) < len(before) / 2
    assert all(o.object_key not in store.objects for o in before if o.object_key not in {a.object_key for a in after})
    assert {o.object_key for o in after} <= set(store.objects)
    assert [r.key for r in await read_all(st, sid)] == keys
    reader = make_storage(2, retrying(store))  # a cold reader elsewhere reads the compacted objects
    await reader.start()
    assert [r.key for r in await read_all(reader, sid)] == keys
    # appends go on after compaction
    await st.append(sid, batch_of("late", count=1))
    await st.force_upload(sid)
    assert [r.key for r in await read_all(st, sid)] == keys + [b"late-0"]


class _CountingGets(MemoryObjectStore):
    """GETs that take a while, counting how many are under way at once."""

    def __init__(self) -> None:
        super().__init__()
        self.in_flight = self.max_in_flight = 0

    async def get(self, key: str, start: int | None = None, end: int | None = None) -> bytes:
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            await asyncio.sleep(0.005)
            return await super().get(key, start, end)
        finally:
            self.in_flight -= 1


async def test_a_run_s_objects_are_read_a_few_at_a_time_and_rewritten_in_order(make_storage, controller) -> None:  # type: ignore[no-untyped-def]
    from stream_storage.storage import COMPACTION_READ_CONCURRENCY
    store = _CountingGets()
    st, sid = await manual_upload_stream(make_storage, store)
    keys = await fill(st, sid, 60)
    assert len(controller.image.streams.streams[sid].objects) == 20
    policy = CompactionPolicy(target_bytes=1 << 30, min_age_ms=0, max_runs_per_pass=1, max_small_objects=20)
    assert await st.compact_stream(sid, policy) == 1
    assert len(controller.image.streams.streams[sid].objects) == 1
    assert 1 < store.max_in_flight <= COMPACTION_READ_CONCURRENCY
    reader = make_storage(2, retrying(store))
    await reader.start()
    assert [r.key for r in await read_all(reader, sid)] == keys


async def test_a_fenced_compaction_commits_nothing_and_leaves_no_object(make_storage, controller, clock) -> None:  # type: ignore[no-untyped-def]
    store = MemoryObjectStore()
    st = make_storage(1, retrying(store), upload_bytes=1 << 30, upload_interval_ms=60_000)
    await st.start()
    sid = await st.create_stream()
    await st.open_stream(sid, 0)
    await fill(st, sid, 9)
    objects_before = set(store.objects)
    epoch = controller.image.cluster.brokers[1].broker_epoch
    real = st.control.compact_objects

    async def taken_over_first(*args, **kwargs):  # type: ignore[no-untyped-def]
        clock.skew_ms += 30_000  # broker 1's session expires; broker 2 takes the stream
        e2 = register_broker(controller, 2)
        controller.write("open_stream", {"stream_id": sid, "epoch": 1, "broker_id": 2, "broker_epoch": e2})
        return await real(*args, **kwargs)

    st.control.compact_objects = taken_over_first  # type: ignore[method-assign]
    policy = CompactionPolicy(target_bytes=1 << 20, min_age_ms=0, max_small_objects=2)
    assert await st.compact_stream(sid, policy) == 0
    assert set(store.objects) == objects_before, "the refused compaction's object must be deleted"
    assert st.stream(sid).state == "FENCED" and epoch >= 0


def test_compact_objects_rules(controller) -> None:  # type: ignore[no-untyped-def]
    epoch = register_broker(controller, 1)
    sid = controller.write("create_stream", {})["stream_id"]
    controller.write("open_stream", {"stream_id": sid, "epoch": 0, "broker_id": 1, "broker_epoch": epoch})
    for i in range(4):
        controller.write("commit_object", {"object_key": f"{OLD}{i}", "size": 100, "broker_id": 1,
                                           "broker_epoch": epoch, "ranges": [{"stream_id": sid, "epoch": 0,
                                                                              "start_offset": 5 * i,
                                                                              "end_offset": 5 * i + 5}]})
    base = {"stream_id": sid, "epoch": 0, "broker_id": 1, "broker_epoch": epoch, "size": 300, "range_bytes": 250}
    new = "streams/1/9999999999999-new"
    for bad, code in ((dict(object_key=new, start_offset=0, end_offset=10, replaces=[f"{OLD}0", f"{OLD}2"]),
                       ErrorCode.OFFSET_NOT_MATCHED),
                      (dict(object_key=new, start_offset=0, end_offset=15, replaces=[f"{OLD}0", f"{OLD}1"]),
                       ErrorCode.OFFSET_NOT_MATCHED),
                      (dict(object_key=new, start_offset=0, end_offset=5, replaces=[]),
                       ErrorCode.INVALID_REQUEST),
                      (dict(object_key=new, start_offset=0, end_offset=10, replaces=[f"{OLD}0", f"{OLD}1"], epoch=1),
                       ErrorCode.STREAM_FENCED)):
        with pytest.raises(FerryError) as info:
            controller.write("compact_objects", {**base, **bad})
        assert info.value.error is code
    assert len(controller.image.streams.streams[sid].objects) == 4
    args = {**base, "object_key": new, "start_offset": 5, "end_offset": 15, "replaces": [f"{OLD}1", f"{OLD}2"]}
    assert controller.write("compact_objects", args) == {"removed_objects": [f"{OLD}1", f"{OLD}2"]}
    assert controller.write("compact_objects", args) == {"removed_objects": []}  # a retry
    stream = controller.image.streams.streams[sid]
    assert [(o.object_key, o.start_offset, o.end_offset) for o in stream.objects] == [
        (f"{OLD}0", 0, 5), (new, 5, 15), (f"{OLD}3", 15, 20)]
    assert stream.end_offset == 20 and stream.objects[1].range_bytes == 250
    assert controller.image.indexes_consistent()


async def test_a_cold_full_read_of_a_compacted_stream_costs_one_get_per_readahead(make_storage, controller) -> None:  # type: ignore[no-untyped-def]
    store = MemoryObjectStore()
    small = dict(upload_bytes=1 << 30, upload_interval_ms=60_000, object_block_bytes=2048,
                 readahead_bytes=16 * 1024, compaction_delete_delay_ms=0)
    st = make_storage(1, retrying(store), **small)
    await st.start()
    sid = await st.create_stream()
    await st.open_stream(sid, 0)
    keys = await fill(st, sid, 300)  # ~200 KiB in 100 small objects
    policy = CompactionPolicy(64 * 1024, 0, max_runs_per_pass=100, max_small_objects=8)
    assert await st.compact_stream(sid, policy) >= 3
    for _ in range(5):  # until nothing is left to do (runs of 8 small objects are small again)
        if not await st.compact_stream(sid, policy):
            break
    objects = controller.image.streams.streams[sid].objects
    total = sum(o.range_bytes for o in objects)
    assert len(objects) <= 2 * total / (64 * 1024) + 8
    reader = make_storage(2, retrying(store), **small)
    await reader.start()
    gets_before = store.calls["get"]
    records, offset = [], 0
    while True:  # small fetches, as a consumer makes them
        res = await reader.fetch(sid, offset, 1024)
        if not res.data:
            break
        from stream_storage.batches import read_records
        records += [r for r in read_records(res.data) if r.offset >= offset]
        offset = res.next_offset
    await asyncio.sleep(0.01)
    gets = store.calls["get"] - gets_before
    assert [r.key for r in records] == keys
    # one index GET per object, one GET per 16 KiB readahead run (and a run ends at each object's end)
    assert gets <= len(objects) + total / (16 * 1024) + len(objects), (gets, len(objects), total)
