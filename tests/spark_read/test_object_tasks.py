"""``readBy=object``: input partitions of whole objects, each fetched once. The plan is pure; the
reader runs here over an in-memory S3 client holding objects in the real object format (the
real-endpoint read is in test_source.py)."""
from __future__ import annotations

from collections import Counter
from itertools import pairwise
from typing import Any

import pytest

from metadata_quorum.kernel.errors import ErrorCode, FerryError
from stream_storage.batches import Record, assign_offsets, build_batch
from stream_storage.config import S3Config
from stream_storage.object_format import Chunk, build_object
from stream_storage.object_store import ObjectNotFound
from tools.spark_read.object_tasks import object_reads, plan_object_tasks
from tools.spark_read.offsets import ObjectSpan, PartitionStream, ReadTask


def shared_streams() -> list[PartitionStream]:
    """Three partitions uploaded together: objects o0..o5 (100 offsets of each stream in each),
    of 1000 to 6000 bytes; partition 2 is absent from o3."""
    streams = []
    for p in range(3):
        keys = [i for i in range(6) if not (p == 2 and i == 3)]
        objects = tuple(ObjectSpan(f"o{i}", n * 100, (n + 1) * 100, 1000 * (i + 1), committed_ms=10 * i)
                        for n, i in enumerate(keys))
        streams.append(PartitionStream("t", p, 100 + p, 0, objects[-1].end_offset, objects))
    return streams


def test_each_object_is_read_once_by_one_task_and_every_offset_once():
    streams = shared_streams()
    ranges = [(s, 0, s.end_offset) for s in streams]
    tasks = plan_object_tasks(ranges)
    assert len(tasks) == 3  # as many input partitions as the default plan (one per topic-partition)
    keys = [r.object_key for t in tasks for r in t.reads]
    assert sorted(keys) == [f"o{i}" for i in range(6)] and len(set(keys)) == 6
    assert keys == [f"o{i}" for i in range(6)]  # commit order: each stream's objects in offset order
    for s in streams:  # every offset once, each task a contiguous, increasing run of the stream
        pieces = [(sl.start_offset, sl.end_offset) for t in tasks for r in t.reads for sl in r.slices
                  if sl.partition == s.partition]
        assert pieces[0][0] == 0 and pieces[-1][1] == s.end_offset
        assert all(a[1] == b[0] for a, b in pairwise(pieces))
    # runs of about equal bytes: 21000 bytes in 3 runs
    assert [t.size for t in tasks] == [6000, 9000, 6000]


def test_offset_ranges_min_partitions_and_nothing_to_read():
    streams = shared_streams()
    ranges = [(streams[0], 150, 320), (streams[1], 0, 0), (streams[2], 0, 100)]
    reads = object_reads(ranges)
    assert [(r.object_key, [(s.partition, s.start_offset, s.end_offset) for s in r.slices]) for r in reads] == [
        ("o0", [(2, 0, 100)]), ("o1", [(0, 150, 200)]), ("o2", [(0, 200, 300)]), ("o3", [(0, 300, 320)])]
    assert len(plan_object_tasks(ranges)) == 2  # two non-empty ranges
    assert len(plan_object_tasks(ranges, min_partitions=3)) == 3
    assert len(plan_object_tasks(ranges, min_partitions=50)) == 4  # at most one per object
    assert plan_object_tasks([(streams[0], 40, 40)]) == []


def test_stream_order_wins_over_commit_order_and_a_cycle_still_reads_everything():
    # compaction rewrote stream 0's first offsets late: committed after o1, yet read before it
    a = PartitionStream("t", 0, 1, 0, 200, (ObjectSpan("late", 0, 100, 10, committed_ms=99),
                                            ObjectSpan("o1", 100, 200, 10, committed_ms=5)))
    assert [r.object_key for r in object_reads([(a, 0, 200)])] == ["late", "o1"]
    # x before y for one stream, y before x for the other: no order exists; each is read once
    s1 = PartitionStream("t", 0, 1, 0, 20, (ObjectSpan("x", 0, 10, 1, 1), ObjectSpan("y", 10, 20, 1, 2)))
    s2 = PartitionStream("t", 1, 2, 0, 20, (ObjectSpan("y", 0, 10, 1, 2), ObjectSpan("x", 10, 20, 1, 1)))
    assert [r.object_key for r in object_reads([(s1, 0, 20), (s2, 0, 20)])] == ["x", "y"]


# -- the reader, over an in-memory S3 client ---------------------------------------------------------


class MemoryS3:
    """get_object over a dict, with Range: the part of boto3's client the reader uses."""

    def __init__(self, objects: dict[str, bytes]) -> None:
        self.objects = objects
        self.gets: list[tuple[str, str | None]] = []

    def get_object(self, Bucket: str, Key: str, Range: str | None = None) -> dict[str, Any]:  # noqa: N803
        import io

        self.gets.append((Key, Range))
        if Key not in self.objects:
            from botocore.exceptions import ClientError

            raise ClientError({"Error": {"Code": "NoSuchKey"}}, "GetObject")
        data = self.objects[Key]
        if Range is not None:
            first, last = (int(x) for x in Range.removeprefix("bytes=").split("-"))
            data = data[first:last + 1]
        return {"Body": io.BytesIO(data)}


def records_chunk(start: int, end: int, tag: str) -> Chunk:
    buf = bytearray(build_batch([Record(0, 1_700_000_000_000 + i, f"{tag}-k{i % 3}".encode(),
                                        f"{tag}-{start + i}".encode() * 20) for i in range(end - start)]))
    assign_offsets(buf, start)
    return Chunk(start, end, bytes(buf))


def stored_topic(gone: set[str] = frozenset()) -> tuple[list[PartitionStream], dict[str, bytes]]:
    """Two partitions in three shared objects of 50 offsets each (small blocks: several per slice)."""
    objects: dict[str, bytes] = {}
    spans: dict[int, list[ObjectSpan]] = {0: [], 1: []}
    for i in range(3):
        built = build_object([(100 + p, [records_chunk(i * 50 + j, i * 50 + j + 10, f"p{p}") for j in range(0, 50, 10)])
                              for p in (0, 1)], block_bytes=2000)
        key = f"obj-{i}"
        if key not in gone:
            objects[key] = built.data
        for p in (0, 1):
            spans[p].append(ObjectSpan(key, i * 50, i * 50 + 50, len(built.data), committed_ms=i))
    return [PartitionStream("t", p, 100 + p, 0, 150, tuple(spans[p])) for p in (0, 1)], objects


def offsets_of(batches: list[Any]) -> dict[int, list[int]]:
    got: dict[int, list[int]] = {}
    for b in batches:
        assert len(set(b.column("partition").to_pylist())) == 1
        got.setdefault(b.column("partition")[0].as_py(), []).extend(b.column("offset").to_pylist())
    return got


def test_object_task_reads_each_object_whole_once_and_every_record(monkeypatch):
    from tools.spark_read import source

    streams, objects = stored_topic()
    client = MemoryS3(objects)
    monkeypatch.setattr(source, "s3_client", lambda s3: client)
    tasks = plan_object_tasks([(streams[0], 20, 150), (streams[1], 0, 120)], min_partitions=2)

    def no_gone(task: ReadTask) -> Any:
        raise AssertionError("no object is gone")

    batches = [b for t in tasks for b in source.read_object_task(S3Config(bucket="b"), t, False, 7, no_gone)]
    assert offsets_of(batches) == {0: list(range(20, 150)), 1: list(range(0, 120))}
    assert Counter(k for k, _r in client.gets) == {"obj-0": 1, "obj-1": 1, "obj-2": 1}
    assert all(r is None for _k, r in client.gets)  # whole objects: no index GET, no ranged GET
    assert max(b.num_rows for b in batches) == 7
    values = {o: bytes(v) for b in batches if b.column("partition")[0].as_py() == 1
              for o, v in zip(b.column("offset").to_pylist(), b.column("value").to_pylist(), strict=True)}
    assert values[117] == b"p1-117" * 20


def test_object_gone_since_the_plan_is_read_the_default_way_and_damage_is_corrupt(monkeypatch):
    from tools.spark_read import source

    streams, objects = stored_topic(gone={"obj-1"})
    client = MemoryS3(objects)
    monkeypatch.setattr(source, "s3_client", lambda s3: client)
    tasks = plan_object_tasks([(s, 0, 150) for s in streams])
    handed: list[tuple[int, int, int, list[str]]] = []

    def read_gone(t: ReadTask) -> Any:
        handed.append((t.partition, t.start_offset, t.end_offset, [o.object_key for o in t.objects]))
        from tools.spark_read.records import Columns, to_arrow

        columns = Columns()
        columns.extend(range(t.start_offset, t.end_offset), *([[0] * 50] * 4), *([[-1] * 50] * 2))
        yield to_arrow(columns, t.topic, t.partition)

    got = offsets_of([b for t in tasks for b in source.read_object_task(S3Config(bucket="b"), t, False, 1000,
                                                                          read_gone)])
    assert got == {0: list(range(150)), 1: list(range(150))}  # in order: rows before it were handed on first
    assert handed == [(0, 50, 100, ["obj-1"]), (1, 50, 100, ["obj-1"])]

    damaged = bytearray(objects["obj-0"])
    damaged[100] ^= 0xFF
    objects["obj-0"] = bytes(damaged)
    with pytest.raises(FerryError) as err:
        list(source.read_object_task(S3Config(bucket="b"), tasks[0], False, 1000, read_gone))
    assert err.value.error == ErrorCode.CORRUPT_MESSAGE


def test_read_by_option_is_checked():
    from tools.spark_read.source import ReadOptions

    base = {"topic": "t", "bootstrap.controller": "127.0.0.1:1"}
    assert ReadOptions.parse(base).read_by == "partition"
    assert ReadOptions.parse(dict(base, readBy="Object")).read_by == "object"
    with pytest.raises(FerryError) as err:
        ReadOptions.parse(dict(base, readBy="objects"))
    assert err.value.error == ErrorCode.INVALID_REQUEST and "readBy" in err.value.message


def test_object_not_found_is_what_a_missing_whole_object_raises():
    from tools.spark_read.source import get_range

    with pytest.raises(ObjectNotFound):
        get_range(MemoryS3({}), "b", "nope")


def test_a_worker_builds_one_s3_client_per_endpoint_and_freezes_what_it_holds_out_of_the_gc(monkeypatch):
    """Spark runs a full gc.collect() after every task of a reused Python worker: the modules and
    the client's service model, built once, are frozen out of it instead of walked each time.
    Outside such a worker (a driver, this test process) nothing is frozen."""
    import gc

    from tools.spark_read import source

    monkeypatch.setattr(source, "_CLIENTS", {})
    monkeypatch.delenv(source.SPARK_REUSED_WORKER_ENV, raising=False)
    freezes: list[int] = []
    real_freeze = gc.freeze

    def counting_freeze() -> None:
        freezes.append(1)
        real_freeze()

    monkeypatch.setattr(gc, "freeze", counting_freeze)
    gc.unfreeze()
    try:
        config = S3Config(endpoint_url="http://127.0.0.1:9", bucket="b", region="us-east-1")
        client = source.s3_client(config)
        assert not freezes and gc.get_freeze_count() == 0 and source.s3_client(config) is client
        monkeypatch.setenv(source.SPARK_REUSED_WORKER_ENV, "1")
        other = source.s3_client(S3Config(endpoint_url="http://127.0.0.1:10", bucket="b"))
        assert other is not client and len(freezes) == 1 and gc.get_freeze_count() > 10_000
        # a client already built freezes nothing more (the count itself drifts as frozen objects die)
        assert source.s3_client(config) is client and len(freezes) == 1
    finally:
        gc.unfreeze()
