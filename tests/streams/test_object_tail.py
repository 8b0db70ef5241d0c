"""An object's tail handed over by the broker that stored it (``ObjectReader.accept_tail``): kept
only when well formed, and then read as if this reader's own index GET had fetched it."""
from __future__ import annotations

from stream_storage import batches
from stream_storage.cache import BlockCache, IndexCache
from stream_storage.control import ObjectRef
from stream_storage.memory_store import MemoryObjectStore
from stream_storage.object_format import Chunk, build_object
from stream_storage.reader import ObjectReader, index_tail_start


def _object(records: int = 30, value_bytes: int = 3000) -> tuple[bytes, list[int]]:
    """Two streams in one object: stream 7 (data, in front) and stream 8 (meta, at the end)."""
    data = batches.build_batch([(None, b"d" * value_bytes)] * records, base_offset=0)
    meta = batches.build_batch([(None, b"partition-meta")], base_offset=0)
    built = build_object([(7, [Chunk(0, records, data)]), (8, [Chunk(0, 1, meta)])], block_bytes=16 * 1024)
    return built.data, [records, 1]


def _reader(store: MemoryObjectStore) -> ObjectReader:
    return ObjectReader(store, IndexCache(), BlockCache(64 * 1024 * 1024))


async def test_a_handed_over_tail_serves_the_meta_read_without_a_get() -> None:
    store = MemoryObjectStore()
    obj, ends = _object()
    await store.put("streams/1/k", obj)
    reader = _reader(store)
    start = index_tail_start(len(obj))
    assert reader.accept_tail("streams/1/k", len(obj), start, obj[start:])
    store.calls.clear()
    ref = ObjectRef("streams/1/k", 0, ends[1], len(obj), 0)
    got = await reader.read(8, ref, 0, 1 << 20)
    assert [r.value for r in batches.read_records(got)] == [b"partition-meta"]
    assert reader.gets == 0 and dict(store.calls) == {}
    # the same bytes a reader without the hand-off GETs from S3
    cold = _reader(store)
    assert await cold.read(8, ref, 0, 1 << 20) == got and cold.gets == 1


async def test_a_tail_that_is_not_the_objects_own_is_refused_and_the_reader_gets_s3() -> None:
    store = MemoryObjectStore()
    obj, ends = _object()
    await store.put("streams/1/k", obj)
    reader = _reader(store)
    start = index_tail_start(len(obj))
    tail = obj[start:]
    flipped = bytearray(tail)
    flipped[len(flipped) // 2] ^= 0xFF  # a block or the index no longer passes its CRC
    assert not reader.accept_tail("streams/1/k", len(obj), start, bytes(flipped))
    assert not reader.accept_tail("streams/1/k", len(obj), start, tail[1:])  # not [start, size)
    assert not reader.accept_tail("streams/1/k", len(obj), start + 1, tail)  # does not end at size
    assert not reader.accept_tail("streams/1/k", len(obj), len(obj) - 10, obj[-10:])  # no whole index
    assert reader.index_cache.get("streams/1/k") is None
    got = await reader.read(8, ObjectRef("streams/1/k", 0, ends[1], len(obj), 0), 0, 1 << 20)
    assert [r.value for r in batches.read_records(got)] == [b"partition-meta"] and reader.gets == 1


async def test_index_tail_start_is_where_the_readers_index_get_starts() -> None:
    store = MemoryObjectStore()
    obj, _ends = _object(records=200)  # larger than the tail the index GET reads
    await store.put("streams/1/big", obj)
    reader = _reader(store)
    ranges: list[tuple[int | None, int | None]] = []
    get = store.get

    async def spy(key: str, start: int | None = None, end: int | None = None) -> bytes:
        ranges.append((start, end))
        return await get(key, start, end)

    store.get = spy  # type: ignore[method-assign]
    await reader.index("streams/1/big", len(obj))
    assert ranges == [(index_tail_start(len(obj)), len(obj))] and index_tail_start(len(obj)) > 0
    assert index_tail_start(100) == 0
