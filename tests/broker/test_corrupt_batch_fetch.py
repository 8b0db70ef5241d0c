"""A corrupt stored batch (storage damage: every produce path validates) is reported as
CORRUPT_MESSAGE with its offsets and can be skipped; the rest of the partition stays readable."""
from __future__ import annotations

import time

import pytest
from crc32c import crc32c

from broker.fetch_guard import sound_batches
from metadata_quorum.kernel.errors import ErrorCode, FerryError
from stream_storage import batches
from tests.broker.test_move_inprocess import InProcessCluster, cluster  # noqa: F401 - the fixture


def damaged(values: list[bytes]) -> tuple[bytes, list[batches.BatchInfo]]:
    """A batch with garbage records under a correct CRC (the framing a storage layer checks is intact)."""
    body = bytearray(batches.build_batch([(None, v) for v in values], timestamp_ms=int(time.time() * 1000)))
    body[batches.HEADER_BYTES:] = b"\xff" * (len(body) - batches.HEADER_BYTES)
    body[batches.CRC_OFFSET:batches.CRC_OFFSET + 4] = crc32c(bytes(body[batches.ATTRIBUTES_OFFSET:])).to_bytes(4, "big")
    return bytes(body), batches.validate_batches(body)


async def append(slot, values: list[bytes]) -> None:  # type: ignore[no-untyped-def]
    body = batches.build_batch([(None, v) for v in values], timestamp_ms=int(time.time() * 1000))
    await slot.replica.append(body, batches.validate_batches(body))


async def read_from(slot, offset: int) -> list[batches.Record]:  # type: ignore[no-untyped-def]
    data = sound_batches(await slot.replica.fetch(offset, 1 << 20, 0), offset)
    return [r for r in batches.read_records(data) if r.offset >= offset]


async def test_a_corrupt_stored_batch_is_named_and_skippable(cluster: InProcessCluster) -> None:  # noqa: F811
    cluster.controller.write("create_topics", {"topics": [{"name": "c", "assignments": {"0": [1]}}]})
    slot = await cluster.serving(1, "c", 0)
    await append(slot, [b"a0", b"a1"])
    body, infos = damaged([b"x2", b"x3", b"x4"])
    await slot.replica.append(body, infos)  # straight into the stream, as storage damage would leave it
    await append(slot, [b"b5"])
    # a fetch from the start answers the sound batches before the bad one
    assert [r.value for r in await read_from(slot, 0)] == [b"a0", b"a1"]
    # a fetch at (or inside) the bad batch names it and where to resume
    for offset in (2, 3):
        with pytest.raises(FerryError) as info:
            await read_from(slot, offset)
        assert info.value.error is ErrorCode.CORRUPT_MESSAGE
        assert info.value.details == {"base_offset": 2, "next_offset": 5}
        assert "offsets 2..4" in info.value.message
    # past it, the partition reads on
    assert [(r.offset, r.value) for r in await read_from(slot, 5)] == [(5, b"b5")]
    await append(slot, [b"b6"])
    assert [r.value for r in await read_from(slot, 5)] == [b"b5", b"b6"]


def test_sound_data_passes_unchanged_and_garbage_is_named_at_the_fetch_offset() -> None:
    good = batches.build_batch([(None, b"v")])
    assert sound_batches(good, 0) == good
    assert sound_batches(b"", 0) == b""
    with pytest.raises(FerryError) as info:
        sound_batches(b"\x00" * 70, 9)
    assert info.value.error is ErrorCode.CORRUPT_MESSAGE and info.value.details["next_offset"] >= 10
