"""Reading a stream's committed offsets from objects: tail GET for the index, ranged GET for blocks.

Indexes are cached by object key (an object never changes once written), blocks by position.
A read that finds none of its blocks here fetches the stream's blocks from its offset up to
``readahead_bytes`` in one ranged GET (S3 bills per request, and its first-byte latency dwarfs
the transfer of a few MiB); after serving a read, the next run of the same stream is fetched
ahead in the background the same way, so a sequential reader of a compacted stream costs one
GET per ``readahead_bytes`` plus one index GET per object; a small object the stream holds a fair
share of comes whole with its index (``index_get_before_bytes``). Everything fetched sits in the
bounded block cache.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Awaitable

from metadata_quorum.kernel.errors import FerryError
from stream_storage.batches import iter_batches, slice_from
from stream_storage.cache import BlockCache, IndexCache
from stream_storage.control import ObjectRef
from stream_storage.object_format import (
    TAIL_READ_BYTES,
    IndexEntry,
    ObjectIndex,
    check_block,
    parse_footer,
    parse_index,
    parse_tail,
)
from stream_storage.object_store import ObjectStore

log = logging.getLogger(__name__)
SMALL_TAIL_BLOCKS_BYTES = 192 * 1024  # taken with every index GET (a move's meta streams sit there)
WHOLE_OBJECT_MIN_SHARE = 8  # a small object is read whole when the stream holds >= 1/8 of it


def index_tail_start(size: int, before_bytes: int = SMALL_TAIL_BLOCKS_BYTES) -> int:
    """Where an index GET of an object of ``size`` bytes starts: the index and footer
    (within ``TAIL_READ_BYTES``) and ``before_bytes`` of the blocks before them. A broker that
    hands an object's tail to another (``accept_tail``) sends the same span, so the receiver
    holds what its own index GET would have read."""
    return max(0, size - TAIL_READ_BYTES - before_bytes)


class ObjectReader:
    def __init__(self, store: ObjectStore, index_cache: IndexCache, block_cache: BlockCache,
                 readahead: bool = True, readahead_bytes: int = 8 * 1024 * 1024) -> None:
        self.store = store
        self.index_cache = index_cache
        self.block_cache = block_cache
        self.readahead = readahead
        self.readahead_bytes = readahead_bytes
        self.gets = 0
        self.readahead_gets = 0
        self._inflight: dict[tuple[str, int], asyncio.Future[bytes]] = {}
        self._index_inflight: dict[str, asyncio.Future[ObjectIndex]] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    async def index(self, key: str, size: int, before_bytes: int = SMALL_TAIL_BLOCKS_BYTES) -> ObjectIndex:
        """The object's index. Its GET also takes ``before_bytes`` of the blocks before the index:
        a little by default (the last streams of an object, e.g. the meta streams a move's new
        owner reads, are there), the readahead's worth when a stream fills the object (the last
        blocks of a sequential read, or all of a small object, cost no GET of their own)."""
        cached = self.index_cache.get(key)
        if cached is not None:
            return cached
        pending = self._index_inflight.get(key)
        if pending is not None:  # e.g. a move's prefetch already asked for it: one GET, not two
            try:
                return await asyncio.shield(pending)
            except asyncio.CancelledError:
                if not pending.cancelled():
                    raise  # we were cancelled ourselves
                # the first asker was cancelled before its GET finished: ask again ourselves
        fut: asyncio.Future[ObjectIndex] = asyncio.get_running_loop().create_future()
        self._index_inflight[key] = fut
        try:
            index = await self._fetch_index(key, size, before_bytes)
        except BaseException as exc:
            if isinstance(exc, asyncio.CancelledError):
                fut.cancel()
            else:
                fut.set_exception(exc)
                fut.exception()  # retrieved: nobody else may be waiting
            raise
        finally:
            self._index_inflight.pop(key, None)
        fut.set_result(index)
        return index

    async def _fetch_index(self, key: str, size: int, before_bytes: int) -> ObjectIndex:
        tail_start = index_tail_start(size, before_bytes if self.readahead else 0)
        tail = await self.store.get(key, tail_start, size)
        self.gets += 1
        parsed = parse_tail(tail, tail_start, key)
        if isinstance(parsed, tuple):
            index_position, _size, index_crc = parse_footer(tail[-32:], key)
            body = await self.store.get(key, parsed[0], parsed[1])
            self.gets += 1
            parsed = parse_index(body, index_position, index_crc, key)
        self.index_cache.put(key, parsed)
        self._keep_blocks(key, parsed, tail, tail_start)
        return parsed

    def accept_tail(self, key: str, size: int, tail_start: int, tail: bytes) -> bool:
        """Take bytes ``[tail_start, size)`` of object ``key`` from the broker that built and
        stored it (a move's old owner hands the new owner its last object this way), as if this
        reader's own index GET had read them. Returns whether they were kept: the index must lie
        wholly within them and pass its CRC, and each block kept passes its own.

        Safe to take before the object is committed, or if it never is: an object's key is
        unique and its bytes never change once stored (a failed upload is retried under the same
        key with the same bytes, or rebuilt under a new key), and a read only ever asks for keys
        the metadata names as committed, so bytes of a key never committed are never read."""
        if self.index_cache.get(key) is not None:
            return True
        if tail_start < 0 or size <= 0 or tail_start + len(tail) != size:
            return False
        try:
            parsed = parse_tail(tail, tail_start, key)
            if isinstance(parsed, tuple):
                return False  # a longer index than was sent: the reader GETs it when needed
            self._keep_blocks(key, parsed, tail, tail_start)
        except FerryError as exc:  # CORRUPT_MESSAGE: bytes not of a well-formed object
            log.warning("object tail of %s not taken: %s", key, exc)
            return False
        self.index_cache.put(key, parsed)
        return True

    def _keep_blocks(self, key: str, index: ObjectIndex, tail: bytes, tail_start: int) -> None:
        view = memoryview(tail)
        for entry in index.entries:
            if entry.position >= tail_start and entry.position + entry.size <= index.index_position and \
                    not self.block_cache.peek((key, entry.position)):
                body = bytes(view[entry.position - tail_start: entry.position - tail_start + entry.size])
                check_block(body, entry, key)
                self.block_cache.put((key, entry.position), body)

    def _claim(self, key: str, run: list[IndexEntry]) -> list[asyncio.Future[bytes]]:
        """Mark blocks as being fetched (synchronously, so no second GET starts for them)."""
        loop = asyncio.get_running_loop()
        futures = []
        for block in run:
            fut: asyncio.Future[bytes] = loop.create_future()
            self._inflight[(key, block.position)] = fut
            futures.append(fut)
        return futures

    async def _get_run(self, key: str, run: list[IndexEntry],
                       futures: list[asyncio.Future[bytes]] | None = None) -> list[bytes]:
        """One ranged GET for contiguous blocks; concurrent readers of them wait for it."""
        if futures is None:
            futures = self._claim(key, run)
        try:
            first, last = run[0], run[-1]
            data = await self.store.get(key, first.position, last.position + last.size)
            self.gets += 1
            view = memoryview(data)
            bodies = []
            for block, fut in zip(run, futures, strict=True):
                rel = block.position - first.position
                body = data if len(run) == 1 else bytes(view[rel: rel + block.size])
                check_block(body, block, key)
                self.block_cache.put((key, block.position), body)
                fut.set_result(body)
                bodies.append(body)
            return bodies
        except BaseException as exc:
            for fut in futures:
                if fut.done():
                    continue
                if isinstance(exc, asyncio.CancelledError):
                    fut.cancel()
                else:
                    fut.set_exception(exc)
                    fut.exception()  # marked retrieved: a readahead nobody waits for must not warn
            raise
        finally:
            for block in run:
                self._inflight.pop((key, block.position), None)

    async def _blocks(self, key: str, blocks: list[IndexEntry]) -> list[bytes]:
        found: dict[int, bytes] = {}
        waiting: dict[int, asyncio.Future[bytes]] = {}
        run: list[IndexEntry] = []
        runs: list[list[IndexEntry]] = []
        for block in blocks:
            cached = self.block_cache.get((key, block.position))
            inflight = self._inflight.get((key, block.position))
            if cached is not None:
                found[block.position] = cached
            elif inflight is not None:
                waiting[block.position] = inflight
            else:
                if run and run[-1].position + run[-1].size != block.position:
                    runs.append(run)
                    run = []
                run.append(block)
        if run:
            runs.append(run)
        for one_run in runs:
            for block, body in zip(one_run, await self._get_run(key, one_run), strict=True):
                found[block.position] = body
        for position, fut in waiting.items():
            found[position] = await asyncio.shield(fut)
        return [found[block.position] for block in blocks]

    def _uncached_run(self, key: str, blocks: list[IndexEntry]) -> list[IndexEntry]:
        """The leading blocks neither cached nor being fetched, back to back in the object."""
        run: list[IndexEntry] = []
        for block in blocks:
            if (key, block.position) in self._inflight or self.block_cache.peek((key, block.position)):
                break
            if run and run[-1].position + run[-1].size != block.position:
                break
            run.append(block)
        return run

    def _read_ahead(self, key: str, index: ObjectIndex, stream_id: int, after: IndexEntry) -> None:
        if not self.readahead:
            return
        nxt = index.blocks_for(stream_id, after.end_offset, self.readahead_bytes)
        if not nxt or nxt[0].start_offset != after.end_offset:
            return
        run = self._uncached_run(key, nxt)
        if not run or run[0] is not nxt[0]:
            return  # the next block is here or on its way: its run was fetched ahead already
        self.readahead_gets += 1
        futures = self._claim(key, run)
        task = asyncio.create_task(self._quiet(self._get_run(key, run, futures)))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    @staticmethod
    async def _quiet(coro: Awaitable[object]) -> None:
        try:
            await coro
        except Exception as exc:  # noqa: BLE001 - a failed readahead only costs the reader its own GET later
            log.debug("readahead failed: %s", exc)

    async def prefetch(self, key: str, size: int, stream_ids: set[int] | frozenset[int]) -> int:
        """Read the blocks of ``stream_ids`` in one object into the block cache (contiguous blocks
        in one ranged GET), so that later reads of those streams need no S3 request. Returns how
        many blocks were read or already cached."""
        index = await self.index(key, size)
        wanted = sorted((e for e in index.entries if e.stream_id in stream_ids), key=lambda e: e.position)
        if wanted:
            await self._blocks(key, wanted)
        return len(wanted)

    def index_get_before_bytes(self, ref: ObjectRef) -> int:
        """How much of the blocks before the index the index GET of ``ref``'s object takes.

        A stream that fills its object (compacted) is read whole: its last run comes with the
        index. An object no larger than a readahead in which the stream holds at least
        1/``WHOLE_OBJECT_MIN_SHARE`` comes whole with its index: one GET instead of an index GET
        and a block GET (a broker's WAL uploads hold a few streams each; reading one of them back
        cost two GETs per object, the most GETs of a full read). Below that share, the
        other streams' bytes would cost more transfer than the GET saved."""
        if ref.range_bytes > 0 and ref.range_bytes * 10 >= ref.size * 9:
            return self.readahead_bytes
        if ref.size <= self.readahead_bytes and ref.range_bytes * WHOLE_OBJECT_MIN_SHARE >= ref.size:
            return ref.size
        return SMALL_TAIL_BLOCKS_BYTES

    async def read(self, stream_id: int, ref: ObjectRef, start_offset: int, max_bytes: int,
                   first: bool = True) -> bytes:
        """Whole batches of ``stream_id`` from the one holding ``start_offset``, up to ``max_bytes``
        (at least one batch when ``first``), within the object's committed range. When not
        ``first``, a block that cannot fit is not fetched at all (the next fetch starts there)."""
        index = await self.index(ref.object_key, ref.size, self.index_get_before_bytes(ref))
        blocks = index.blocks_for(stream_id, start_offset, max_bytes)
        if not blocks:
            return b""
        key = ref.object_key
        if not first and blocks[0].size > max_bytes and self.block_cache.get((key, blocks[0].position)) is None:
            self._read_ahead(key, index, stream_id, _before(blocks[0]))
            return b""
        if self.readahead and len(self._uncached_run(key, blocks)) == len(blocks):
            # nothing of it here: one GET for the blocks asked for and the readahead after them
            wider = index.blocks_for(stream_id, start_offset, max(max_bytes, self.readahead_bytes))
            run = self._uncached_run(key, wider)
            if len(run) > len(blocks):
                await self._get_run(key, run)
        data = b"".join(await self._blocks(key, blocks))
        self._read_ahead(key, index, stream_id, blocks[-1])
        return slice_from(data, start_offset, max_bytes)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


def _before(block: IndexEntry) -> IndexEntry:
    """A zero-size entry ending where ``block`` starts (to read ahead ``block`` itself)."""
    return IndexEntry(block.stream_id, block.start_offset, block.start_offset, block.position, 0, 0)


def next_offset_of(data: bytes) -> int | None:
    last = None
    for info in iter_batches(data):
        last = info
    return None if last is None else last.next_offset
