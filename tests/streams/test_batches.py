from __future__ import annotations

import pytest

from metadata_quorum.kernel.errors import ErrorCode, FerryError
from stream_storage.batches import (
    assign_offsets, build_batch, header, offset_count, read_records, slice_from, stamp_offsets, validate_batches,
)


def test_build_and_stamp_offsets_keeps_crc_valid() -> None:
    buf = bytearray(build_batch([(b"a", b"1"), (b"b", b"2")]) + build_batch([(None, b"3")]))
    assert offset_count(buf) == 3
    assert assign_offsets(buf, 100, leader_epoch=7) == 103
    infos = validate_batches(buf)
    assert [(i.base_offset, i.leader_epoch) for i in infos] == [(100, 7), (102, 7)]
    assert [(r.offset, r.key, r.value) for r in read_records(buf)] == [(100, b"a", b"1"), (101, b"b", b"2"),
                                                                      (102, None, b"3")]


def test_stamping_walked_batches_is_assigning_offsets() -> None:
    parts = [build_batch([(b"a", b"1"), (b"b", b"2")]), build_batch([(None, b"3")]), build_batch([(b"c", None)] * 5)]
    walked, parsed = bytearray(b"".join(parts)), bytearray(b"".join(parts))
    infos = validate_batches(walked)
    assert stamp_offsets(walked, infos, 40, leader_epoch=3) == assign_offsets(parsed, 40, leader_epoch=3) == 48
    assert walked == parsed
    assert stamp_offsets(walked, infos, 7) == 15 and [i.base_offset for i in validate_batches(walked)] == [7, 9, 10]


def test_corrupted_payload_fails_crc() -> None:
    buf = bytearray(build_batch([(b"k", b"value")]))
    buf[-2] ^= 0xFF
    with pytest.raises(FerryError) as err:
        validate_batches(buf)
    assert err.value.error == ErrorCode.CORRUPT_MESSAGE


def test_truncated_batch_and_wrong_magic_are_refused() -> None:
    buf = build_batch([(b"k", b"value")])
    with pytest.raises(FerryError):
        validate_batches(buf[:-1])
    bad = bytearray(buf)
    bad[16] = 1
    with pytest.raises(FerryError) as err:
        header(bad)
    assert "magic" in err.value.message
    with pytest.raises(FerryError):
        validate_batches(b"")


def test_slice_from_returns_whole_batches_and_at_least_one() -> None:
    buf = bytearray(b"".join(build_batch([(b"k", b"x" * 100)] * 2) for _ in range(4)))
    assign_offsets(buf, 0)
    one = slice_from(buf, 3, 1)  # offset 3 is in the second batch; budget too small -> still one batch
    assert [i.base_offset for i in validate_batches(one)] == [2]
    both = slice_from(buf, 3, 10_000)
    assert [i.base_offset for i in validate_batches(both)] == [2, 4, 6]
    assert slice_from(buf, 8, 10_000) == b""
