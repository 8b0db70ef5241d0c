from __future__ import annotations

import json

import pytest

from metadata_quorum.kernel.errors import FerryError
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


async def test_load_from_the_last_object_reads_only_it_when_it_holds_a_snapshot(make_storage, memory_store,
                                                                                 controller) -> None:
    """``load(latest_from=...)`` (where the metadata says the last object starts) replays from the
    last snapshot there; with no snapshot there it replays the whole stream, so no key is lost."""
    a = make_storage(1, memory_store)
    await a.start()
    sid = await a.create_stream()
    await a.open_stream(sid, 0)
    meta = MetaStream(a, sid, snapshot_min_bytes=1 << 40)
    for i in range(4):  # one object per update: a history to skip
        await meta.put(f"k{i}", b"v%d" % i)
        await a.force_upload(sid)
    expected = {f"k{i}": b"v%d" % i for i in range(4)}

    def last_start() -> int:
        return max(o.start_offset for o in controller.image.streams.streams[sid].objects)

    no_snapshot_at_end = last_start()
    await meta.compact()
    await a.force_upload(sid)
    with_snapshot_at_end = last_start()
    await a.close_stream(sid)

    b = make_storage(2, memory_store)
    await b.start()
    await b.open_stream(sid, 1)
    before = memory_store.calls["get"]
    reader = MetaStream(b, sid)
    assert await reader.load(latest_from=with_snapshot_at_end) == expected
    assert memory_store.calls["get"] - before == 1  # the last object only (its index tail holds the blocks)
    assert reader.state.snapshot_offset is not None and reader.state.bytes_since_snapshot == 0
    await b.close_stream(sid)

    c = make_storage(3, memory_store)
    await c.start()
    await c.open_stream(sid, 2)
    fallback = MetaStream(c, sid)
    # from an object holding updates only: the start is read too, and every key is there
    assert await fallback.load(latest_from=no_snapshot_at_end) == expected
    assert await MetaStream(c, sid).load() == expected
    for s in (b, c):
        await s.close()
