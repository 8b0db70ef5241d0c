"""StreamStorage over the in-memory store and the in-process controller (fast, deterministic)."""
from __future__ import annotations

import asyncio
import os
from typing import Any

import pytest

from metadata_quorum.kernel.errors import ErrorCode, FerryError
from stream_storage.batches import build_batch
from stream_storage.object_format import parse_tail
from stream_storage.wal import read_wal
from tests.streams.conftest import all_records, batch_of, heartbeat, read_all


def keys_of(records: list[Any]) -> list[bytes]:
    return [r.key for r in records]


def expected_keys(tags: list[str], count: int = 3) -> list[bytes]:
    return [f"{t}-{i}".encode() for t in tags for i in range(count)]


async def test_append_close_reopen_on_another_broker_reads_every_record(make_storage, memory_store) -> None:
    a = make_storage(1, memory_store, upload_interval_ms=10_000)
    await a.start()
    sid = await a.create_stream()
    assert (await a.open_stream(sid, 0)).end_offset == 0
    tags = [f"r{i}" for i in range(20)]
    bases = await asyncio.gather(*(a.append(sid, batch_of(t)) for t in tags))
    assert sorted(bases) == list(range(0, 60, 3))
    assert memory_store.calls["put"] == 0  # below the size and age thresholds: still only in the WAL
    await a.close_stream(sid)  # force upload + close
    assert memory_store.calls["put"] == 1
    await a.uploader.drain()
    assert not read_wal(a.config.wal_dir).entries  # committed: the WAL segment was deleted
    b = make_storage(2, memory_store)
    await b.start()
    info = await b.open_stream(sid, 1)
    assert (info.start_offset, info.end_offset) == (0, 60)
    records = await read_all(b, sid)
    order = sorted(range(20), key=lambda i: bases[i])
    assert keys_of(records) == expected_keys([tags[i] for i in order])
    assert [r.offset for r in records] == list(range(60))
    base = await b.append(sid, batch_of("after"))
    assert base == 60
    await a.close()
    await b.close()


async def test_reopen_by_same_owner_and_epoch_is_idempotent(make_storage, memory_store, controller) -> None:
    a = make_storage(1, memory_store)
    await a.start()
    sid = await a.create_stream()
    first = await a.open_stream(sid, 3)
    await a.append(sid, batch_of("x"))
    again = await a.open_stream(sid, 3)
    assert (again.epoch, again.end_offset) == (3, 3)
    assert first.epoch == again.epoch
    # the controller also treats a repeated open as a retry
    assert controller.write("open_stream", {"stream_id": sid, "epoch": 3, "broker_id": 1,
                                            "broker_epoch": a.broker_epoch})["epoch"] == 3
    await a.close()


async def test_two_brokers_race_to_open_exactly_one_wins(make_storage, memory_store) -> None:
    a = make_storage(1, memory_store, control_delay_ms=2)
    b = make_storage(2, memory_store, control_delay_ms=2)
    await a.start()
    await b.start()
    sid = await a.create_stream()
    results = await asyncio.gather(a.open_stream(sid, 5), b.open_stream(sid, 5), return_exceptions=True)
    winners = [s for s, r in zip((a, b), results, strict=True) if not isinstance(r, BaseException)]
    losers = [(s, r) for s, r in zip((a, b), results, strict=True) if isinstance(r, BaseException)]
    assert len(winners) == 1 and len(losers) == 1
    loser, error = losers[0]
    assert isinstance(error, FerryError) and error.error == ErrorCode.STREAM_FENCED
    winner = winners[0]
    await winner.append(sid, batch_of("win"))
    for _ in range(3):
        with pytest.raises(FerryError) as err:
            await loser.append(sid, batch_of("lose"))
        assert err.value.error in (ErrorCode.STREAM_NOT_OPENED, ErrorCode.STREAM_FENCED)
    await winner.close_stream(sid)
    assert keys_of(await read_all(loser, sid)) == expected_keys(["win"])
    await a.close()
    await b.close()


async def test_taken_over_owner_is_fenced_and_its_later_appends_never_show(make_storage, memory_store, controller,
                                                                           clock) -> None:
    a = make_storage(1, memory_store, upload_interval_ms=20)
    b = make_storage(2, memory_store)
    await a.start()
    await b.start()
    sid = await a.create_stream()
    await a.open_stream(sid, 0)
    await a.append(sid, batch_of("a1"))
    await a.force_upload(sid)
    # broker 1 goes silent past its session: broker 2 takes the stream over with a higher epoch
    clock.skew_ms += 60_000
    heartbeat(controller, 2, b.broker_epoch)
    await b.open_stream(sid, 1)
    assert await b.recovery.recover_from_wal(a.config.wal_dir, sid) == 0  # everything of a's was in S3
    await b.append(sid, batch_of("b1"))
    # a still believes it owns the stream; its next upload is refused and fences it
    late = a.append(sid, batch_of("a-late"))
    try:
        await late
    except FerryError as exc:
        assert exc.error == ErrorCode.STREAM_FENCED
    with pytest.raises(FerryError) as err:
        await a.force_upload(sid)
    assert err.value.error == ErrorCode.STREAM_FENCED
    for _ in range(3):  # at once, without asking anyone
        with pytest.raises(FerryError) as err:
            await a.append(sid, batch_of("a-later"))
        assert err.value.error in (ErrorCode.STREAM_FENCED, ErrorCode.STREAM_NOT_OPENED)
    await b.close_stream(sid)
    assert keys_of(await read_all(b, sid)) == expected_keys(["a1", "b1"])
    assert all(r.epoch == 0 or r.epoch == 1 for r in all_records(controller, sid))
    await a.abort()
    await b.close()


async def test_restart_recovers_acknowledged_tail_from_own_wal(make_storage, memory_store, controller, tmp_path,
                                                               clock) -> None:
    wal_dir = str(tmp_path / "wal-shared")
    a = make_storage(1, memory_store, wal_dir=wal_dir, upload_interval_ms=60_000)
    await a.start()
    sid = await a.create_stream()
    other = await a.create_stream()
    await a.open_stream(sid, 0)
    await a.open_stream(other, 0)
    await a.append(sid, batch_of("s0"))
    await a.force_upload(sid)
    await asyncio.gather(*(a.append(sid, batch_of(f"s{i}")) for i in range(1, 6)))
    await a.append(other, batch_of("o0"))
    await a.abort()  # a crash: nothing more reaches S3
    clock.skew_ms += 60_000
    a2 = make_storage(1, memory_store, wal_dir=wal_dir)  # same broker, new incarnation
    replay = await a2.start()
    assert len(replay.entries) >= 6
    info = await a2.open_stream(sid, 1)
    assert info.recovered_offsets == 15 and info.end_offset == 18
    got = keys_of(await read_all(a2, sid))
    assert got[:3] == expected_keys(["s0"]) and sorted(got) == sorted(expected_keys([f"s{i}" for i in range(6)]))
    await a2.close_stream(sid)
    assert len(read_wal(wal_dir).entries) >= 1  # the other stream's tail still pins the WAL
    await a2.open_stream(other, 1)
    assert keys_of(await read_all(a2, other)) == expected_keys(["o0"])
    await a2.close()
    assert read_wal(wal_dir).entries == []


async def test_live_broker_recovers_dead_brokers_wal_read_only(make_storage, memory_store, controller, clock) -> None:
    a = make_storage(1, memory_store, upload_interval_ms=60_000)
    b = make_storage(2, memory_store)
    await a.start()
    await b.start()
    sid = await a.create_stream()
    await a.open_stream(sid, 0)
    await a.append(sid, batch_of("up"))
    await a.force_upload(sid)
    for i in range(4):
        await a.append(sid, batch_of(f"tail{i}"))
    await a.abort()
    before = sorted(os.listdir(a.config.wal_dir))
    clock.skew_ms += 60_000
    heartbeat(controller, 2, b.broker_epoch)
    await b.open_stream(sid, 1)
    assert await b.recovery.recover_from_wal(a.config.wal_dir, sid) == 12
    assert sorted(os.listdir(a.config.wal_dir)) == before  # the dead broker's WAL is untouched
    assert keys_of(await read_all(b, sid)) == expected_keys(["up"] + [f"tail{i}" for i in range(4)])
    desc = await b.control.describe_stream(sid)
    assert desc.end_offset == 15  # recovered data is committed in S3, not only in b's WAL
    await b.close()


async def test_trim_removes_objects_and_refuses_reads_below_start(make_storage, memory_store) -> None:
    a = make_storage(1, memory_store)
    await a.start()
    sid = await a.create_stream()
    await a.open_stream(sid, 0)
    for i in range(3):
        await a.append(sid, batch_of(f"t{i}"))
        await a.force_upload(sid)
    assert len(memory_store.objects) == 3
    await a.trim(sid, 6)
    assert len(memory_store.objects) == 1
    with pytest.raises(FerryError) as err:
        await a.fetch(sid, 3, 1000)
    assert err.value.error == ErrorCode.OFFSET_OUT_OF_RANGE
    assert keys_of(await read_all(a, sid)) == expected_keys(["t2"])
    with pytest.raises(FerryError) as err:
        await a.trim(sid, 100)
    assert err.value.error == ErrorCode.OFFSET_OUT_OF_RANGE
    await a.close()


async def test_reads_from_s3_block_by_block_after_cache_eviction(make_storage, memory_store) -> None:
    a = make_storage(1, memory_store, cache_bytes=1, object_block_bytes=2048, upload_bytes=64 * 1024)
    await a.start()
    sid = await a.create_stream()
    await a.open_stream(sid, 0)
    tags = [f"k{i}" for i in range(300)]
    for t in tags:
        await a.append(sid, batch_of(t, value_bytes=200))
    await a.force_upload(sid)
    assert len(memory_store.objects) >= 2
    a.block_cache._items.clear()
    a.index_cache._items.clear()
    records = await read_all(a, sid, max_bytes=3000)
    assert keys_of(records) == expected_keys(tags)
    assert [r.offset for r in records] == list(range(900))
    blocks = 0
    for data in memory_store.objects.values():
        index = parse_tail(data, 0)
        assert not isinstance(index, tuple)
        blocks += len(index.entries)
    # one GET per object index and at most one per block: a sequential reader never re-reads a block
    assert a.reader.gets <= len(memory_store.objects) + blocks
    stats = a.stats()
    assert stats["object_gets_total"] == a.reader.gets and stats["uploaded_objects_total"] >= 2
    await a.close()


async def test_bad_input_is_refused_and_changes_nothing(make_storage, memory_store) -> None:
    a = make_storage(1, memory_store, max_append_bytes=10_000)
    await a.start()
    sid = await a.create_stream()
    with pytest.raises(FerryError) as err:
        await a.append(sid, batch_of("x"))
    assert err.value.error == ErrorCode.STREAM_NOT_OPENED
    await a.open_stream(sid, 0)
    bad = bytearray(batch_of("x"))
    bad[-1] ^= 1
    for payload, code in ((bytes(bad), ErrorCode.CORRUPT_MESSAGE), (b"", ErrorCode.INVALID_RECORD),
                          (batch_of("big", count=1, value_bytes=20_000), ErrorCode.MESSAGE_TOO_LARGE)):
        with pytest.raises(FerryError) as err:
            await a.append(sid, payload)
        assert err.value.error == code
    assert a.stream(sid).next_offset == 0
    assert await a.append(sid, batch_of("ok")) == 0
    with pytest.raises(FerryError) as err:
        await a.fetch(sid, 4, 100)
    assert err.value.error == ErrorCode.OFFSET_OUT_OF_RANGE
    assert (await a.fetch(sid, 3, 100)).data == b""
    await a.close()


async def test_close_waits_for_inflight_appends(make_storage, memory_store) -> None:
    a = make_storage(1, memory_store, upload_interval_ms=60_000)
    await a.start()
    sid = await a.create_stream()
    await a.open_stream(sid, 0)
    appends = [asyncio.create_task(a.append(sid, batch_of(f"c{i}"))) for i in range(30)]
    await asyncio.sleep(0)
    close = asyncio.create_task(a.close_stream(sid))
    results = await asyncio.gather(*appends, return_exceptions=True)
    await close
    acked = [i for i, r in enumerate(results) if isinstance(r, int)]
    assert acked  # appends started before the close were waited for
    b_records = await read_all(a, sid)
    assert sorted(keys_of(b_records)) == sorted(expected_keys([f"c{i}" for i in acked]))
    await a.close()


async def test_multi_record_and_multi_batch_appends_advance_by_record_count(make_storage, memory_store) -> None:
    a = make_storage(1, memory_store)
    await a.start()
    sid = await a.create_stream()
    await a.open_stream(sid, 0)
    two = build_batch([(b"a", b"1")]) + build_batch([(b"b", b"2"), (b"c", b"3")])
    assert await a.append(sid, two, leader_epoch=4) == 0
    assert await a.append(sid, batch_of("n", count=5)) == 3
    res = await a.fetch(sid, 0, 1 << 20)
    assert res.high_watermark == 8 and res.next_offset == 8
    await a.close()


async def test_reopen_at_a_newer_epoch_on_the_same_broker_keeps_acknowledged_data(make_storage, memory_store) -> None:
    a = make_storage(1, memory_store, upload_interval_ms=60_000)
    await a.start()
    sid = await a.create_stream()
    await a.open_stream(sid, 1)
    await a.append(sid, batch_of("e1"))
    info = await a.open_stream(sid, 2)  # e.g. the partition's leader epoch moved on, same leader
    assert (info.epoch, info.end_offset) == (2, 3)
    assert await a.append(sid, batch_of("e2")) == 3
    assert keys_of(await read_all(a, sid)) == expected_keys(["e1", "e2"])
    await a.close()


async def test_failover_reads_the_dead_wal_once_for_all_its_streams(make_storage, memory_store, controller,
                                                                    clock) -> None:
    a = make_storage(1, memory_store, upload_interval_ms=60_000)
    b = make_storage(2, memory_store)
    await a.start()
    await b.start()
    sids = [await a.create_stream() for _ in range(3)]
    for sid in sids:
        await a.open_stream(sid, 0)
        for i in range(10):
            await a.append(sid, batch_of(f"{sid}-{i}"))
    await a.abort()
    clock.skew_ms += 60_000
    heartbeat(controller, 2, b.broker_epoch)
    for sid in sids:
        await b.open_stream(sid, 1)
    fsyncs = b.wal.fsyncs
    recovered = await asyncio.gather(*(b.recovery.recover_from_wal(a.config.wal_dir, sid) for sid in sids))
    assert recovered == [30, 30, 30]
    assert b.recovery.foreign_wals.reads == 1
    assert b.wal.fsyncs - fsyncs < 30  # re-appended with group commit, not one fsync per entry
    for sid in sids:
        assert keys_of(await read_all(b, sid)) == expected_keys([f"{sid}-{i}" for i in range(10)])
    await b.close()


async def test_stream_returning_to_a_broker_pins_its_wal_again(make_storage, memory_store, controller, clock) -> None:
    """A close releases the stream's WAL entries; opening it again on the same broker must pin
    the new ones until they are in S3 (else a crash after trimming would lose them)."""
    a = make_storage(1, memory_store, upload_interval_ms=60_000, wal_segment_bytes=512)
    b = make_storage(2, memory_store)
    await a.start()
    await b.start()
    sid = await a.create_stream()
    await a.open_stream(sid, 0)
    await a.append(sid, batch_of("first"))
    await a.close_stream(sid)
    await b.open_stream(sid, 1)
    await b.close_stream(sid)
    await a.open_stream(sid, 2)
    for i in range(5):
        await a.append(sid, batch_of(f"back{i}"))
    await a.wal.trim()
    await a.abort()
    clock.skew_ms += 60_000
    heartbeat(controller, 2, b.broker_epoch)
    await b.open_stream(sid, 3)
    assert await b.recovery.recover_from_wal(a.config.wal_dir, sid) == 15
    assert keys_of(await read_all(b, sid)) == expected_keys(["first"] + [f"back{i}" for i in range(5)])
    await b.close()


async def test_zombie_appends_are_voided_when_the_stream_comes_back(make_storage, memory_store, controller,
                                                                    clock) -> None:
    """A fenced owner that has not noticed yet may still write to its WAL; when the stream later
    returns to it (previous owner: another broker), those entries are voided and a crash before
    its next append must not bring them back."""
    a = make_storage(1, memory_store, upload_interval_ms=60_000)
    b = make_storage(2, memory_store)
    c = make_storage(3, memory_store)
    for s in (a, b, c):
        await s.start()
    sid = await a.create_stream()
    await a.open_stream(sid, 1)
    await a.append(sid, batch_of("a1"))
    await a.force_upload(sid)
    clock.skew_ms += 60_000
    heartbeat(controller, 2, b.broker_epoch)
    await b.open_stream(sid, 2, previous_owner=1)
    assert await b.recovery.recover_from_wal(a.config.wal_dir, sid) == 0
    await a.append(sid, batch_of("zombie"))  # a has not learned it is fenced: only its WAL has this
    await b.close_stream(sid)
    heartbeat(controller, 1, a.broker_epoch)
    await a.open_stream(sid, 3, previous_owner=2)
    await a.abort()  # crashes before writing anything at epoch 3
    clock.skew_ms += 60_000
    heartbeat(controller, 3, c.broker_epoch)
    await c.open_stream(sid, 4, previous_owner=1)
    assert await c.recovery.recover_from_wal(a.config.wal_dir, sid) == 0
    assert keys_of(await read_all(c, sid)) == expected_keys(["a1"])
    await c.append(sid, batch_of("c1"))
    assert keys_of(await read_all(c, sid)) == expected_keys(["a1", "c1"])
    await b.close()
    await c.close()


async def test_fetch_finds_objects_in_the_brokers_image_without_asking_the_controller(make_storage, memory_store,
                                                                                      controller) -> None:
    from stream_storage.control import description_from_image

    a = make_storage(1, memory_store)
    b = make_storage(2, memory_store, cache_bytes=1)
    await a.start()
    await b.start()
    sid = await a.create_stream()
    await a.open_stream(sid, 0)
    for i in range(4):
        await a.append(sid, batch_of(f"i{i}"))
        await a.force_upload(sid)
    await a.close_stream(sid)
    await b.open_stream(sid, 1)
    asked = []
    real = b.control.describe_stream

    async def counting(stream_id: int):  # type: ignore[no-untyped-def]
        asked.append(stream_id)
        return await real(stream_id)

    b.control.describe_stream = counting  # type: ignore[method-assign]
    b.set_image_lookup(lambda s: description_from_image(controller.image, s))
    assert keys_of(await read_all(b, sid)) == expected_keys([f"i{i}" for i in range(4)])
    assert asked == []
    await a.close()
    await b.close()


async def test_force_upload_many_puts_one_object_for_many_streams(make_storage, memory_store, controller) -> None:
    a = make_storage(1, memory_store, upload_interval_ms=60_000)
    await a.start()
    sids = [await a.create_stream() for _ in range(5)]
    for sid in sids:
        await a.open_stream(sid, 0)
        await a.append(sid, batch_of(f"m{sid}"))
    missing = 10_000
    failed = await a.force_upload_many(sids + [missing])
    assert list(failed) == [missing]
    assert memory_store.calls["put"] == 1
    keys = {controller.read("describe_stream", {"stream_id": sid})["objects"][0]["object_key"] for sid in sids}
    assert len(keys) == 1
    for sid in sids:
        await a.close_stream(sid)
    assert memory_store.calls["put"] == 1  # nothing left to upload at close
    await a.close()


async def test_late_writes_of_a_cut_off_owner_never_reappear_after_a_clean_move_back(make_storage, memory_store,
                                                                                      controller, clock) -> None:
    """A cut-off owner keeps writing to its WAL past the new owner's end; the new owner closes the
    stream cleanly (previous owner: nobody) and the stream comes back. Neither the returning
    broker's own WAL nor a later peer recovery of that WAL may bring the late writes back."""
    a = make_storage(1, memory_store, upload_interval_ms=60_000)
    b = make_storage(2, memory_store)
    c = make_storage(3, memory_store)
    for s in (a, b, c):
        await s.start()
    sid = await a.create_stream()
    await a.open_stream(sid, 1)
    await a.append(sid, batch_of("a1"))
    await a.force_upload(sid)
    clock.skew_ms += 60_000
    heartbeat(controller, 2, b.broker_epoch)
    await b.open_stream(sid, 2, previous_owner=1, previous_epoch=1)
    assert await b.recovery.recover_from_wal(a.config.wal_dir, sid, previous_epoch=1) == 0
    for i in range(3):  # offsets 3..12 at epoch 1, beyond what b will have written
        await a.append(sid, batch_of(f"late{i}"))
    await b.append(sid, batch_of("b1"))  # offsets 3..6
    await b.close_stream(sid)
    a.fence(sid)  # a learns it lost the stream
    heartbeat(controller, 1, a.broker_epoch)
    info = await a.open_stream(sid, 3, previous_owner=-1, previous_epoch=2)  # a clean move back to a
    assert (info.end_offset, info.recovered_offsets) == (6, 0)
    assert keys_of(await read_all(a, sid)) == expected_keys(["a1", "b1"])
    await a.append(sid, batch_of("a3"))  # offsets 6..9, acknowledged at epoch 3
    await a.abort()  # crashes before uploading it
    clock.skew_ms += 60_000
    heartbeat(controller, 3, c.broker_epoch)
    await c.open_stream(sid, 4, previous_owner=1, previous_epoch=3)
    assert await c.recovery.recover_from_wal(a.config.wal_dir, sid, previous_epoch=3) == 3
    assert keys_of(await read_all(c, sid)) == expected_keys(["a1", "b1", "a3"])
    await b.close()
    await c.close()


def test_wal_recovery_keeps_only_epochs_the_owner_held() -> None:
    from stream_storage.recovery import recoverable_tail
    from stream_storage.wal import WalEntry
    entries = [WalEntry(7, 2, 0, 5, b"x", 0), WalEntry(7, 2, 5, 9, b"y", 10),
               WalEntry(7, 4, 9, 12, b"never held", 20), WalEntry(8, 2, 9, 12, b"other stream", 30)]
    assert [e.payload for e in recoverable_tail(entries, 7, 0, owner_epoch=2)] == [b"x", b"y"]
    assert [e.payload for e in recoverable_tail(entries, 7, 5, owner_epoch=2)] == [b"y"]
    assert len(recoverable_tail(entries, 7, 0)) == 3  # no epoch known: WAL order and void markers only


async def test_prefetch_warms_the_block_cache_so_reads_need_no_s3_request(make_storage, memory_store) -> None:
    a = make_storage(1, memory_store)
    b = make_storage(2, memory_store)
    await a.start()
    await b.start()
    sids = [await a.create_stream() for _ in range(2)]
    for sid in sids:
        await a.open_stream(sid, 0)
        await a.append(sid, batch_of(f"s{sid}", count=20, value_bytes=2000))
    assert await a.force_upload_many(sids) == {}
    for sid in sids:
        await a.close_stream(sid)
    (ref,) = (await b.control.describe_stream(sids[0])).objects
    assert await b.prefetch(ref.object_key, ref.size, {sids[0]}) >= 1
    gets = b.reader.gets
    assert keys_of(await read_all(b, sids[0])) == expected_keys([f"s{sids[0]}"], 20)
    assert b.reader.gets == gets  # index and blocks came from the caches
    with pytest.raises(FerryError) as err:
        await b.prefetch("streams/no-such-object", 100, {sids[0]})
    assert err.value.error == ErrorCode.KAFKA_STORAGE_ERROR
    await a.close()
    await b.close()
