from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from metadata_quorum.kernel.errors import ErrorCode, FerryError
from stream_storage.batches import assign_offsets, build_batch, read_records
from stream_storage.object_format import (
    FOOTER_BYTES, Chunk, build_object, check_block, parse_footer, parse_index, parse_tail,
)


def chunks_for(stream_id: int, start: int, sizes: list[int]) -> list[Chunk]:
    out, offset = [], start
    for i, n in enumerate(sizes):
        buf = bytearray(build_batch([(f"{stream_id}-{offset + j}".encode(), b"v" * (i % 7 * 50)) for j in range(n)]))
        assign_offsets(buf, offset)
        out.append(Chunk(offset, offset + n, bytes(buf)))
        offset += n
    return out


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2**40), st.lists(st.integers(1, 5), min_size=1, max_size=12)),
                min_size=1, max_size=5, unique_by=lambda t: t[0]),
       st.integers(64, 4096))
def test_round_trip_every_stream_every_offset(streams: list[tuple[int, list[int]]], block_bytes: int) -> None:
    layout = [(sid, chunks_for(sid, sid % 1000, sizes)) for sid, sizes in streams]
    built = build_object(layout, block_bytes)
    index = parse_tail(built.data, 0)
    assert not isinstance(index, tuple)
    assert sorted((r.stream_id, r.start_offset, r.end_offset) for r in index.ranges()) == \
        sorted((r.stream_id, r.start_offset, r.end_offset) for r in built.ranges)
    for sid, chunks in layout:
        start, end = chunks[0].start_offset, chunks[-1].end_offset
        # reading block by block from the start reaches every offset exactly once, in order
        seen: list[int] = []
        cursor = start
        while cursor < end:
            blocks = index.blocks_for(sid, cursor, 1)
            assert len(blocks) == 1
            block = built.data[blocks[0].position: blocks[0].position + blocks[0].size]
            check_block(block, blocks[0])
            offsets = [r.offset for r in read_records(block)]
            seen += [o for o in offsets if o >= cursor]
            cursor = blocks[0].end_offset
        assert seen == list(range(start, end))
    assert index.blocks_for(10**15, 0, 100) == []


def test_one_get_reads_a_run_of_blocks_up_to_max_bytes() -> None:
    built = build_object([(1, chunks_for(1, 0, [4] * 20))], block_bytes=300)
    index = parse_tail(built.data, 0)
    assert not isinstance(index, tuple)
    assert len(index.entries) > 3
    few = index.blocks_for(1, 0, index.entries[0].size + index.entries[1].size)
    assert [b.position for b in few] == [index.entries[0].position, index.entries[1].position]
    assert few[0].position + few[0].size == few[1].position  # contiguous: one ranged GET


def test_corrupt_footer_is_detected() -> None:
    built = build_object([(5, chunks_for(5, 0, [3, 3]))])
    for i in range(FOOTER_BYTES):
        bad = bytearray(built.data)
        bad[len(bad) - FOOTER_BYTES + i] ^= 0x01
        with pytest.raises(FerryError) as err:
            parse_tail(bytes(bad), 0, "obj")
        assert err.value.error == ErrorCode.CORRUPT_MESSAGE
    with pytest.raises(FerryError):
        parse_footer(b"\x00" * (FOOTER_BYTES - 1))


def test_corrupt_index_and_block_are_detected() -> None:
    built = build_object([(5, chunks_for(5, 0, [3, 3]))])
    bad = bytearray(built.data)
    bad[built.index.index_position + 6] ^= 0x10
    with pytest.raises(FerryError) as err:
        parse_tail(bytes(bad), 0)
    assert "index" in err.value.message
    entry = built.index.entries[0]
    block = bytearray(built.data[entry.position: entry.position + entry.size])
    block[20] ^= 0x01
    with pytest.raises(FerryError):
        check_block(bytes(block), entry)


def test_index_longer_than_the_tail_read_asks_for_its_bytes() -> None:
    built = build_object([(sid, chunks_for(sid, 0, [1])) for sid in range(200)], block_bytes=64)
    tail_start = len(built.data) - 1000
    need = parse_tail(built.data[tail_start:], tail_start)
    assert isinstance(need, tuple)
    start, end = need
    pos, _size, crc = parse_footer(built.data[-FOOTER_BYTES:])
    index = parse_index(built.data[start:end], pos, crc)
    assert len(index.entries) == 200


def test_chunks_must_be_contiguous() -> None:
    a, b = chunks_for(1, 0, [2]), chunks_for(1, 5, [2])
    with pytest.raises(ValueError):
        build_object([(1, a + b)])
