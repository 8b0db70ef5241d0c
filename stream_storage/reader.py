"""Reading a stream's committed offsets from objects: tail GET for the index, ranged GET for blocks.

Indexes are cached by object key (an object never changes once written), blocks by position,
so a sequential reader costs one GET per block and one per object index.
"""
from __future__ import annotations

from stream_storage.batches import iter_batches, slice_from
from stream_storage.cache import BlockCache, IndexCache
from stream_storage.control import ObjectRef
from stream_storage.object_format import TAIL_READ_BYTES, IndexEntry, ObjectIndex, check_block, parse_footer, parse_index, parse_tail
from stream_storage.object_store import ObjectStore


class ObjectReader:
    def __init__(self, store: ObjectStore, index_cache: IndexCache, block_cache: BlockCache) -> None:
        self.store = store
        self.index_cache = index_cache
        self.block_cache = block_cache
        self.gets = 0

    async def index(self, key: str, size: int) -> ObjectIndex:
        cached = self.index_cache.get(key)
        if cached is not None:
            return cached
        tail_start = max(0, size - TAIL_READ_BYTES)
        tail = await self.store.get(key, tail_start, size)
        self.gets += 1
        parsed = parse_tail(tail, tail_start, key)
        if isinstance(parsed, tuple):
            index_position, _size, index_crc = parse_footer(tail[-32:], key)
            body = await self.store.get(key, parsed[0], parsed[1])
            self.gets += 1
            parsed = parse_index(body, index_position, index_crc, key)
        self.index_cache.put(key, parsed)
        return parsed

    async def _blocks(self, key: str, blocks: list[IndexEntry]) -> list[bytes]:
        out: list[bytes | None] = [self.block_cache.get((key, b.position)) for b in blocks]
        i = 0
        while i < len(blocks):
            if out[i] is not None:
                i += 1
                continue
            j = i
            while j < len(blocks) and out[j] is None:
                j += 1
            first, last = blocks[i], blocks[j - 1]
            data = await self.store.get(key, first.position, last.position + last.size)
            self.gets += 1
            view = memoryview(data)
            for k in range(i, j):
                rel = blocks[k].position - first.position
                block = data if j - i == 1 else bytes(view[rel: rel + blocks[k].size])
                check_block(block, blocks[k], key)
                self.block_cache.put((key, blocks[k].position), block)
                out[k] = block
            i = j
        return [b for b in out if b is not None]

    async def read(self, stream_id: int, ref: ObjectRef, start_offset: int, max_bytes: int,
                   first: bool = True) -> bytes:
        """Whole batches of ``stream_id`` from the one holding ``start_offset``, up to ``max_bytes``
        (at least one batch when ``first``), within the object's committed range. When not
        ``first``, a block that cannot fit is not fetched at all (the next fetch starts there)."""
        index = await self.index(ref.object_key, ref.size)
        blocks = index.blocks_for(stream_id, start_offset, max_bytes)
        if not blocks:
            return b""
        if not first and blocks[0].size > max_bytes and self.block_cache.get((ref.object_key, blocks[0].position)) is None:
            return b""
        data = b"".join(await self._blocks(ref.object_key, blocks))
        return slice_from(data, start_offset, max_bytes)


def next_offset_of(data: bytes) -> int | None:
    last = None
    for info in iter_batches(data):
        last = info
    return None if last is None else last.next_offset
