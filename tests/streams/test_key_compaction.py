"""Key compaction against a reference model (hypothesis): Kafka's log cleaner semantics — the
latest value per key survives at its offset, older ones go, tombstones go after
delete.retention.ms, keyless records stay, offsets never change — on bytes (pure) and on a
stream cleaned while it is written and uploaded (in-memory store), read back by a cold reader."""
from __future__ import annotations

import asyncio
import os
import tempfile
from itertools import pairwise

from hypothesis import given, settings
from hypothesis import strategies as st

from stream_storage.batches import Record, assign_offsets, build_batch, crc_ok, iter_batches, read_records
from stream_storage.key_compaction import CleanRule, clean, latest_offsets
from stream_storage.memory_store import MemoryObjectStore
from metadata_quorum.local_controller import LocalController
from stream_storage.config import StreamStorageConfig
from stream_storage.control import LocalStreamControl
from stream_storage.storage import StreamStorage
from tests.streams.conftest import FAST_RETRY, now_ms, read_all, register_broker, retrying

NOW = 1_800_000_000_000
RETENTION_MS = 1000
KEYS = [b"a", b"b", b"c", b"d", None]
record_spec = st.tuples(st.sampled_from(KEYS), st.one_of(st.none(), st.binary(min_size=0, max_size=6)),
                        st.integers(NOW - 3000, NOW))
log_spec = st.lists(st.lists(record_spec, min_size=1, max_size=4), min_size=1, max_size=25)


def encode(batches: list[list[tuple[bytes | None, bytes | None, int]]]) -> tuple[bytes, list[Record]]:
    """The log as bytes (offsets stamped from 0) and as the records a reader sees."""
    buf = bytearray(b"".join(build_batch([Record(0, ts, k, v) for k, v, ts in b]) for b in batches))
    assign_offsets(buf, 0)
    return bytes(buf), read_records(buf)


def final_state(records: list[Record]) -> dict[bytes, bytes]:
    """What a consumer replaying the log ends with (a tombstone deletes its key)."""
    state: dict[bytes, bytes] = {}
    for r in records:
        if r.key is None:
            continue
        if r.value is None:
            state.pop(r.key, None)
        else:
            state[r.key] = r.value
    return state


def check_against_model(original: list[Record], kept: list[Record], cleaned_end: int) -> None:
    """``kept`` is what a reader sees after cleaning ``original``'s offsets below ``cleaned_end``."""
    by_offset = {r.offset: r for r in original}
    assert [r.offset for r in kept] == sorted({r.offset for r in kept}), "offsets reordered or duplicated"
    for r in kept:
        assert by_offset[r.offset] == r, f"record at {r.offset} changed"
    kept_offsets = {r.offset for r in kept}
    cleaned = [r for r in original if r.offset < cleaned_end]
    latest = latest_offsets(cleaned)
    last = cleaned_end - 1
    for r in original:
        if r.offset >= cleaned_end or r.key is None or r.offset == last:
            assert r.offset in kept_offsets, f"record {r} must stay"
        elif latest[r.key] != r.offset:
            assert r.offset not in kept_offsets, f"superseded record {r} survived"
        elif r.value is None and r.timestamp_ms < NOW - RETENTION_MS:
            assert r.offset not in kept_offsets, f"expired tombstone {r} survived"
        else:
            assert r.offset in kept_offsets, f"latest record {r} of its key went"
    assert final_state(kept) == final_state(original), "a consumer replaying the log ends elsewhere"


@settings(max_examples=300, deadline=None)
@given(log_spec)
def test_clean_matches_the_reference_model(batches) -> None:  # type: ignore[no-untyped-def]
    data, original = encode(batches)
    end = original[-1].offset + 1
    rule = CleanRule(latest_offsets(original), end - 1, NOW - RETENTION_MS)
    cleaned, removed = clean(data, rule)
    kept = read_records(cleaned)
    assert removed == len(original) - len(kept)
    infos = list(iter_batches(cleaned))
    assert all(crc_ok(cleaned, i) for i in infos)
    assert all(a.next_offset <= b.base_offset for a, b in pairwise(infos))
    check_against_model(original, kept, end)
    again, removed_again = clean(cleaned, CleanRule(latest_offsets(kept), end - 1, NOW - RETENTION_MS))
    assert removed_again == 0 and again == cleaned  # cleaning is idempotent


def storage_on(controller: LocalController, broker_id: int, store, wal_dir: str, **overrides) -> StreamStorage:  # type: ignore[no-untyped-def]
    epoch = register_broker(controller, broker_id)
    cfg = StreamStorageConfig(wal_dir=wal_dir, controller_retry=FAST_RETRY, **overrides)
    return StreamStorage(cfg, store, LocalStreamControl(controller), broker_id, epoch)


@settings(max_examples=25, deadline=None)
@given(log_spec, st.lists(st.integers(0, 24), max_size=4))
def test_a_stream_cleaned_while_written_reads_back_as_the_model(batches, clean_after) -> None:  # type: ignore[no-untyped-def]
    async def scenario(work: str) -> None:
        controller = LocalController(now_ms)
        store = MemoryObjectStore()
        owner = storage_on(controller, 1, retrying(store), os.path.join(work, "w1"), upload_bytes=1 << 30,
                           upload_interval_ms=60_000, compaction_delete_delay_ms=0)
        await owner.start()
        sid = await owner.create_stream()
        await owner.open_stream(sid, 0)
        original: list[Record] = []
        for i, batch in enumerate(batches):
            body = build_batch([Record(0, ts, k, v) for k, v, ts in batch])
            base = await owner.append(sid, body)
            original += [Record(base + j, r.timestamp_ms, r.key, r.value, r.headers)
                         for j, r in enumerate(read_records(body))]
            if i % 2 == 1:
                await owner.force_upload(sid)
            if i in clean_after:
                await owner.force_upload(sid)
                await owner.clean_keys(sid, NOW, RETENTION_MS, target_bytes=300)
        await owner.force_upload(sid)
        await owner.clean_keys(sid, NOW, RETENTION_MS, target_bytes=300)
        reader = storage_on(controller, 2, retrying(store), os.path.join(work, "w2"))
        await reader.start()
        kept = await read_all(reader, sid, max_bytes=64)
        check_against_model(original, kept, original[-1].offset + 1)
        await reader.abort()
        await owner.abort()

    with tempfile.TemporaryDirectory() as work:
        asyncio.run(scenario(work))


def test_markers_are_kept_whole_and_a_rebuilt_batch_stays_transactional() -> None:
    from stream_storage.batches import build_control_batch, control_marker, iter_batches as walk
    from stream_storage.key_compaction import data_records
    parts = [build_batch([(b"k", b"v0"), (b"\x00\x00\x00\x01", b"looks like a marker key")], timestamp_ms=NOW,
                         producer_id=9, producer_epoch=0, base_sequence=0, transactional=True),
             build_control_batch(9, 0, True, 3, NOW),
             build_batch([(b"k", b"v1")], timestamp_ms=NOW, producer_id=9, producer_epoch=0, base_sequence=2,
                         transactional=True),
             build_control_batch(9, 0, False, 3, NOW),
             build_control_batch(9, 0, True, 3, NOW)]
    buf = bytearray(b"".join(parts))
    assign_offsets(buf, 0)
    data = bytes(buf)
    latest = latest_offsets(data_records(data))
    assert latest == {b"k": 3, b"\x00\x00\x00\x01": 1}  # the markers' keys are not record keys
    cleaned, removed = clean(data, CleanRule(latest, 5, NOW - RETENTION_MS))
    assert removed == 1  # the first value of k
    infos = list(walk(cleaned))
    assert [(i.base_offset, i.is_transactional, i.is_control) for i in infos] == [
        (0, True, False), (2, True, True), (3, True, False), (4, True, True), (5, True, True)]
    assert all(crc_ok(cleaned, i) for i in infos)
    assert [control_marker(cleaned, i) is not None and control_marker(cleaned, i).commit  # type: ignore[union-attr]
            for i in infos if i.is_control] == [True, False, True]
    assert [r.value for r in read_records(cleaned[:infos[1].position])] == [b"looks like a marker key"]


def test_an_aborted_transactions_records_go_and_never_hide_the_committed_value() -> None:
    from stream_storage.batches import build_control_batch, iter_batches as walk
    from stream_storage.key_compaction import data_records
    parts = [build_batch([(b"k", b"committed")], timestamp_ms=NOW),
             build_batch([(b"k", b"aborted")], timestamp_ms=NOW, producer_id=9, producer_epoch=0, base_sequence=0,
                         transactional=True),
             build_control_batch(9, 0, False, 0, NOW),
             build_batch([(b"z", b"last")], timestamp_ms=NOW)]
    buf = bytearray(b"".join(parts))
    assign_offsets(buf, 0)
    data, aborted = bytes(buf), [(9, 1, 2)]
    latest = latest_offsets(data_records(data, aborted))
    assert latest == {b"k": 0, b"z": 3}  # without the aborted record, the committed one is k's latest
    cleaned, removed = clean(data, CleanRule(latest, 3, NOW - RETENTION_MS, tuple(aborted)))
    assert removed == 1
    assert [(i.base_offset, i.is_control) for i in walk(cleaned)] == [(0, False), (2, True), (3, False)]
    assert [r.value for r in read_records(cleaned)][0] == b"committed"
