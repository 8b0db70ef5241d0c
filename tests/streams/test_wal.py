from __future__ import annotations

import asyncio
import os
import threading
from typing import Any

import pytest

from metadata_quorum.kernel.errors import ErrorCode, FerryError
import stream_storage.wal as wal_mod
from stream_storage.wal import ENTRY_OVERHEAD, WriteAheadLog, must_wait_for_zeros, read_wal


async def test_concurrent_appends_share_fsyncs_and_replay_in_order(tmp_path) -> None:
    wal = WriteAheadLog(str(tmp_path))
    assert wal.open().entries == []
    await asyncio.gather(*(wal.append(i % 3, 1, i * 10, i * 10 + 10, f"payload-{i}".encode()) for i in range(50)))
    assert wal.fsyncs < 50  # group commit: concurrent appends waited on shared fsyncs
    await wal.close()
    replay = WriteAheadLog(str(tmp_path)).open()
    assert [e.payload for e in replay.entries] == [f"payload-{i}".encode() for i in range(50)]
    assert [(e.stream_id, e.start_offset) for e in replay.entries] == [(i % 3, i * 10) for i in range(50)]
    assert replay.torn_bytes == 0


@pytest.mark.parametrize("cut", ["half-entry", "garbage", "zeros", "bad-crc"])
async def test_torn_tail_is_cut_and_never_replayed(tmp_path, cut: str) -> None:
    wal = WriteAheadLog(str(tmp_path))
    wal.open()
    for i in range(5):
        await wal.append(7, 1, i, i + 1, b"x" * 100)
    await wal.close()
    (segment,) = [os.path.join(tmp_path, n) for n in os.listdir(tmp_path)]
    size = 5 * (ENTRY_OVERHEAD + 100)  # the end of the valid entries; preallocated zeros may follow
    with open(segment, "rb") as fh:
        assert fh.read()[size:].count(0) == os.path.getsize(segment) - size
    with open(segment, "r+b") as fh:
        if cut == "half-entry":  # the last entry's end never reached the disk
            fh.seek(size - 60)
            fh.write(b"\x00" * 60)
        elif cut == "garbage":
            fh.seek(size)
            fh.write(b"\x00\x00\x01\x00garbage-that-claims-256-bytes")
        elif cut == "zeros":
            fh.seek(size)
            fh.write(b"\x00" * 4096)
        else:
            fh.seek(size - 1)
            fh.write(b"\xff")
    expected = 4 if cut in ("half-entry", "bad-crc") else 5
    damaged_size = os.path.getsize(segment)
    assert len(read_wal(str(tmp_path)).entries) == expected
    assert os.path.getsize(segment) == damaged_size  # read-only: the file is not repaired
    wal2 = WriteAheadLog(str(tmp_path))
    replay = wal2.open()
    assert [e.start_offset for e in replay.entries] == list(range(expected))
    # zeros past the last entry are preallocated space (the clean end), anything else a torn tail
    assert (replay.torn_bytes > 0) == (cut != "zeros")
    await wal2.append(7, 2, expected, expected + 1, b"after-repair")
    await wal2.close()
    again = WriteAheadLog(str(tmp_path)).open()
    assert again.torn_bytes == 0
    assert [e.payload for e in again.entries][-1] == b"after-repair"
    assert len(again.entries) == expected + 1


async def test_corruption_before_the_last_segment_refuses_replay(tmp_path) -> None:
    wal = WriteAheadLog(str(tmp_path), segment_bytes=300)
    wal.open()
    for i in range(6):
        await wal.append(1, 1, i, i + 1, b"y" * 200)
    await wal.close()
    first = sorted(os.listdir(tmp_path))[0]
    with open(os.path.join(tmp_path, first), "r+b") as fh:
        fh.seek(20)
        fh.write(b"\xff\xff")
    with pytest.raises(FerryError) as err:
        WriteAheadLog(str(tmp_path)).open()
    assert err.value.error == ErrorCode.KAFKA_STORAGE_ERROR


async def test_trim_deletes_segments_once_committed(tmp_path) -> None:
    wal = WriteAheadLog(str(tmp_path), segment_bytes=500)
    wal.open()
    for i in range(10):
        await wal.append(1 + i % 2, 1, i, i + 1, b"z" * 200)
    assert wal.segment_count > 3
    assert await wal.trim() == 0  # nothing committed yet
    wal.mark_committed(1, 100)
    assert await wal.trim() == 0  # stream 2 still pins every segment
    wal.mark_committed(2, 5)
    await wal.trim()
    remaining = read_wal(str(tmp_path)).entries
    assert len(remaining) < 10  # the oldest segment went
    needed = {(2, i) for i in (5, 7, 9)}  # stream 2 offsets not yet committed survive
    assert needed <= {(e.stream_id, e.start_offset) for e in remaining}
    wal.release_stream(2)
    await wal.trim()
    assert read_wal(str(tmp_path)).entries == []
    await wal.append(3, 1, 0, 1, b"still works")
    await wal.close()
    assert [e.payload for e in WriteAheadLog(str(tmp_path)).open().entries] == [b"still works"]


def test_recoverable_tail_prefers_newer_epochs_honours_void_markers_and_stops_at_gaps() -> None:
    from stream_storage.recovery import recoverable_tail
    from stream_storage.wal import KIND_VOID, WalEntry

    def e(pos: int, epoch: int, start: int, end: int, kind: int = 1, sid: int = 1) -> WalEntry:
        return WalEntry(sid, epoch, start, end, b"", pos, kind)

    entries = [e(0, 1, 0, 5), e(1, 1, 5, 8), e(2, 2, 5, 9), e(3, 2, 9, 10), e(4, 2, 12, 13), e(5, 9, 0, 99, sid=2)]
    assert [(x.epoch, x.start_offset) for x in recoverable_tail(entries, 1, 5)] == [(2, 5), (2, 9)]
    assert recoverable_tail(entries, 1, 11) == []
    voided = entries + [e(6, 3, 9, 9, KIND_VOID)]  # epoch 3 took over at 9: older entries from 9 on are stale
    assert [(x.epoch, x.start_offset) for x in recoverable_tail(voided, 1, 5)] == [(2, 5)]
    later = voided + [e(7, 3, 9, 11)]  # written after the marker, at the new epoch: kept
    assert [(x.epoch, x.start_offset) for x in recoverable_tail(later, 1, 5)] == [(2, 5), (3, 9)]


async def test_segments_are_preallocated_and_zero_tails_replay_as_clean_ends(tmp_path) -> None:
    wal = WriteAheadLog(str(tmp_path), segment_bytes=4 * 1024 * 1024)
    wal.open()
    await wal.append(1, 1, 0, 1, b"a" * 1000)
    for _ in range(500):  # bounded: the preallocating thread writes zeros ahead of the writer
        if wal.preallocated_bytes > 0:
            break
        await asyncio.sleep(0.01)
    assert wal.preallocated_bytes > 0
    for i in range(1, 20):
        await wal.append(1, 1, i, i + 1, b"b" * 1000)
    assert wal.extending_syncs < wal.fsyncs  # most syncs wrote into preallocated space
    (first,) = os.listdir(tmp_path)
    assert os.path.getsize(os.path.join(tmp_path, first)) > wal.size_bytes
    # roll while the old segment still has preallocated zeros after its entries (as an idle roll does)
    active = wal._segments[-1]
    await asyncio.get_running_loop().run_in_executor(wal._pool, wal._new_segment, active.base + active.size)
    await wal.append(2, 1, 0, 1, b"next segment")
    await wal.close()  # no trim: both segments stay, the first one ending in zeros
    assert len(os.listdir(tmp_path)) == 2
    seen = read_wal(str(tmp_path))
    assert seen.torn_bytes == 0 and [e.start_offset for e in seen.entries] == list(range(20)) + [0]
    again = WriteAheadLog(str(tmp_path))
    replay = again.open()
    assert replay.torn_bytes == 0 and len(replay.entries) == 21
    await again.append(2, 1, 1, 2, b"after restart")
    await again.close()
    assert [e.payload for e in read_wal(str(tmp_path)).entries][-2:] == [b"next segment", b"after restart"]


async def test_a_failed_sync_fails_its_batch_and_stops_the_wal(tmp_path, monkeypatch) -> None:
    """After a failed fdatasync the kernel may have dropped the written pages: nothing written
    since the last good sync is acknowledged, and the WAL refuses further appends."""
    import errno

    import stream_storage.wal as wal_mod
    wal = WriteAheadLog(str(tmp_path))
    wal.open()
    await asyncio.gather(*(wal.append(1, 1, i, i + 1, b"ok") for i in range(3)))
    real = os.fdatasync

    def broken(fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(wal_mod.os, "fdatasync", broken)
    results = await asyncio.gather(*(wal.append(1, 1, i, i + 1, b"lost") for i in range(3, 6)),
                                   return_exceptions=True)
    assert all(isinstance(r, FerryError) and r.error == ErrorCode.KAFKA_STORAGE_ERROR for r in results)
    monkeypatch.setattr(wal_mod.os, "fdatasync", real)
    with pytest.raises(FerryError) as err:
        await wal.append(1, 1, 6, 7, b"after")
    assert err.value.error == ErrorCode.KAFKA_STORAGE_ERROR
    await wal.close()
    replayed = [e.payload for e in WriteAheadLog(str(tmp_path)).open().entries]
    assert replayed[:3] == [b"ok"] * 3 and b"after" not in replayed


async def test_appends_racing_trims_rolls_and_preallocation_replay_in_order(tmp_path) -> None:
    """Writes run on the loop, rolls and trims on the writer thread, zeros on the preallocating
    thread: whatever interleaves, every acknowledged entry replays, in order, intact."""
    wal = WriteAheadLog(str(tmp_path), segment_bytes=256 * 1024)
    wal.open()
    payloads = [bytes([i % 251]) * (3000 + 7 * i) for i in range(300)]

    async def writer(first: int) -> None:
        for i in range(first, len(payloads), 4):
            await wal.append(1, 1, i, i + 1, payloads[i])

    async def trimmer() -> None:
        for _ in range(40):  # nothing is committed: a trim may roll the segment but deletes nothing
            await wal.trim()
            await asyncio.sleep(0)

    await asyncio.gather(*(writer(k) for k in range(4)), trimmer())
    assert wal.segment_count > 3 and wal.preallocated_bytes > 0
    await wal.close()
    replay = WriteAheadLog(str(tmp_path)).open()
    assert replay.torn_bytes == 0
    assert sorted(e.start_offset for e in replay.entries) == list(range(300))
    positions = [e.position for e in replay.entries]
    assert positions == sorted(positions)
    assert all(e.payload == payloads[e.start_offset] for e in replay.entries)


def test_a_write_waits_for_zeros_only_where_it_overlaps_them() -> None:
    zeroing = (1000, 2000)
    assert not must_wait_for_zeros(0, 1000, zeroing)  # ends where the zeros start
    assert must_wait_for_zeros(0, 1001, zeroing)
    assert must_wait_for_zeros(1000, 1, zeroing)
    assert must_wait_for_zeros(1999, 10, zeroing)
    assert not must_wait_for_zeros(2000, 10, zeroing)


class _BlockedZeros:
    """os.pwrite with writes of preallocation zeros held until ``release`` (or 10 s)."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.entered = threading.Event()
        self.release = threading.Event()
        self.finished = threading.Event()

    def __call__(self, fd: int, data: Any, position: int) -> int:
        if isinstance(data, memoryview) and data.obj is wal_mod._ZEROS:
            self.entered.set()
            self.release.wait(10)
            try:
                return int(self.real(fd, data, position))
            finally:
                self.finished.set()
        return int(self.real(fd, data, position))


async def test_an_append_does_not_wait_for_zeros_written_ahead_of_it(tmp_path, monkeypatch) -> None:
    wal = WriteAheadLog(str(tmp_path), segment_bytes=8 * 1024 * 1024)
    wal.open()
    await wal.append(1, 1, 0, 1, b"a" * 1000)
    for _ in range(500):  # bounded: the first zeros (up to ~512 KiB) go ahead of the writer
        if wal.preallocated_bytes > 0:
            break
        await asyncio.sleep(0.01)
    assert wal.preallocated_bytes > 0
    blocked = _BlockedZeros(os.pwrite)
    monkeypatch.setattr(wal_mod.os, "pwrite", blocked)
    await wal.append(1, 1, 1, 2, b"b" * 300 * 1024)  # past half the zeros: more are claimed, beyond them
    assert await asyncio.to_thread(blocked.entered.wait, 10)
    await wal.append(1, 1, 2, 3, b"c" * 1000)  # inside the zeros already written
    done_while_blocked = not blocked.finished.is_set()
    blocked.release.set()
    assert done_while_blocked and wal.zeroing_waits == 0
    await wal.close()
    assert [e.payload[:1] for e in read_wal(str(tmp_path)).entries] == [b"a", b"b", b"c"]


async def test_an_append_into_zeros_being_written_waits_and_survives_them(tmp_path, monkeypatch) -> None:
    blocked = _BlockedZeros(os.pwrite)
    monkeypatch.setattr(wal_mod.os, "pwrite", blocked)
    wal = WriteAheadLog(str(tmp_path), segment_bytes=8 * 1024 * 1024)
    wal.open()
    await wal.append(1, 1, 0, 1, b"a" * 1000)
    assert await asyncio.to_thread(blocked.entered.wait, 10)  # zeros claimed right after "a"

    def release_once_waiting() -> None:
        for _ in range(1000):
            if wal.zeroing_waits:
                break
            threading.Event().wait(0.01)
        blocked.release.set()

    releaser = threading.Thread(target=release_once_waiting)
    releaser.start()
    await wal.append(1, 1, 1, 2, b"b" * 1000)  # reaches into the claimed zeros: waits for them
    releaser.join()
    assert wal.zeroing_waits == 1 and blocked.finished.is_set()
    await wal.close()
    assert [e.payload for e in read_wal(str(tmp_path)).entries] == [b"a" * 1000, b"b" * 1000]


async def test_zeros_still_being_written_in_a_rolled_segment_hold_up_no_append(tmp_path, monkeypatch) -> None:
    blocked = _BlockedZeros(os.pwrite)
    monkeypatch.setattr(wal_mod.os, "pwrite", blocked)
    wal = WriteAheadLog(str(tmp_path), segment_bytes=8 * 1024 * 1024)
    wal.open()
    await wal.append(1, 1, 0, 1, b"a" * 1000)
    assert await asyncio.to_thread(blocked.entered.wait, 10)  # zeros claimed right after "a", held
    active = wal._segments[-1]
    await asyncio.get_running_loop().run_in_executor(wal._pool, wal._new_segment, active.base + active.size)
    await wal.append(2, 1, 0, 1, b"b" * 3000)  # over the same offsets, in the next segment: no wait
    done_while_blocked = not blocked.finished.is_set()
    blocked.release.set()
    assert done_while_blocked and wal.zeroing_waits == 0
    await wal.close()
    assert [e.payload for e in read_wal(str(tmp_path)).entries] == [b"a" * 1000, b"b" * 3000]
