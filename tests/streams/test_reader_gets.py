"""How many GETs a cold read of one stream costs, by the object it reads (``ObjectReader``)."""
from __future__ import annotations

from stream_storage import batches
from stream_storage.cache import BlockCache, IndexCache
from stream_storage.control import ObjectRef
from stream_storage.memory_store import MemoryObjectStore
from stream_storage.object_format import Chunk, build_object
from stream_storage.reader import ObjectReader

KIB = 1024
READAHEAD_BYTES = 1024 * KIB


def _stream_set(shares: list[int]) -> tuple[bytes, list[tuple[int, int]]]:
    """Streams 1..n in one object, stream i holding ``shares[i-1]`` records of 1 KiB:
    the object's bytes and (records, range_bytes) per stream."""
    streams, sizes = [], []
    for sid, records in enumerate(shares, start=1):
        data = batches.build_batch([(None, bytes([sid]) * KIB)] * records, base_offset=0)
        streams.append((sid, [Chunk(0, records, data)]))
        sizes.append((records, len(data)))
    return build_object(streams, block_bytes=16 * KIB).data, sizes


async def _cold_read(obj: bytes, sid: int, records: int, range_bytes: int) -> tuple[list[bytes | None], int, int]:
    store = MemoryObjectStore()
    await store.put("streams/1/k", obj)
    reader = ObjectReader(store, IndexCache(), BlockCache(64 * 1024 * KIB), readahead_bytes=READAHEAD_BYTES)
    ref = ObjectRef("streams/1/k", 0, records, len(obj), 0, range_bytes)
    got = await reader.read(sid, ref, 0, 1 << 30)
    await reader.close()
    return [r.value for r in batches.read_records(got)], reader.gets, reader.readahead_gets


async def test_a_small_object_holding_a_fair_share_of_the_stream_comes_whole_in_one_get() -> None:
    obj, sizes = _stream_set([200, 200, 200, 200])  # a WAL upload of four equally busy streams
    assert len(obj) <= READAHEAD_BYTES
    records, range_bytes = sizes[0]  # the first, far from the tail an index GET takes anyway
    values, gets, readahead = await _cold_read(obj, 1, records, range_bytes)
    assert values == [bytes([1]) * KIB] * records
    assert (gets, readahead) == (1, 0)


async def test_a_stream_with_a_sliver_of_an_object_gets_the_index_then_its_blocks() -> None:
    obj, sizes = _stream_set([2, 400, 400])  # stream 2 holds far less than 1/8 of the object
    records, range_bytes = sizes[0]
    assert range_bytes * 8 < len(obj) <= READAHEAD_BYTES
    values, gets, _ = await _cold_read(obj, 1, records, range_bytes)
    assert values == [bytes([1]) * KIB] * records
    assert gets == 2  # not the whole object for a sliver of it


async def test_an_object_larger_than_a_readahead_is_not_read_whole_for_a_share() -> None:
    obj, sizes = _stream_set([700, 700])  # each half of an object of ~1.4 MiB
    records, range_bytes = sizes[0]
    assert len(obj) > READAHEAD_BYTES and range_bytes * 8 >= len(obj)
    values, gets, _ = await _cold_read(obj, 1, records, range_bytes)
    assert values == [bytes([1]) * KIB] * records
    assert gets >= 2
