from __future__ import annotations

import json

import pytest

from metadata_quorum.errors import FerryError
from stream_storage.meta_stream import KVState, MetaStream, encode_snapshot, encode_update


def test_kv_state_applies_updates_deletes_and_snapshots() -> None:
    state = KVState()
    state.apply(encode_update({"a": b"1", "b": b"2"}))
    state.apply(encode_update({"a": None, "c": b"3"}))
    assert state.values == {"b": b"2", "c": b"3"}
    state.apply(encode_snapshot({"z": b"9"}))
    assert state.values == {"z": b"9"} and state.bytes_since_snapshot == 0
    state.apply(encode_update({"y": b"8"}))
    assert state.values == {"z": b"9", "y": b"8"}
    with pytest.raises(FerryError):
        encode_update({"\x00snapshot": b"x"})
    with pytest.raises(FerryError):
        encode_update({})


async def test_compaction_keeps_open_bounded_whatever_the_history(make_storage, memory_store, controller) -> None:
    a = make_storage(1, memory_store, upload_interval_ms=5)
    await a.start()
    sid = await a.create_stream()
    await a.open_stream(sid, 0)
    meta = MetaStream(a, sid, snapshot_min_bytes=4096)
    expected: dict[str, bytes] = {}
    for i in range(1500):
        key = f"k{i % 40}"
        if i % 11 == 0:
            expected.pop(key, None)
            await meta.put(key, None)
        else:
            value = json.dumps({"i": i, "pad": "p" * (i % 50)}).encode()
            expected[key] = value
            await meta.put(key, value)
    assert meta.items() == expected
    written = a.stream(sid).next_offset
    await meta.flush()
    await a.close_stream(sid)
    assert len(memory_store.objects) < 20  # trimmed objects were deleted from S3

    b = make_storage(2, memory_store)
    await b.start()
    info = await b.open_stream(sid, 1)
    assert info.start_offset > 0
    meta_b = MetaStream(b, sid, snapshot_min_bytes=4096)
    assert await meta_b.load() == expected
    snapshot_bytes = len(encode_snapshot(expected))
    # a reader replays one snapshot and at most the updates that trigger the next one
    assert meta_b.state.read_bytes <= 2 * snapshot_bytes + 4096 + 2000
    assert info.end_offset - info.start_offset < written / 5
    await meta_b.put_json({"clean_shutdown": True, "gone": None})
    assert meta_b.get_json("clean_shutdown") is True
    await b.close()
