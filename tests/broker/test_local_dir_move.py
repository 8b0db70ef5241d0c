"""KIP-113 for storage=local replicas: the move's decisions (pure), start-up recovery across dirs
(pure, then on real dirs), and a move of a live log between two real directories in one process
(the real-process kill -9 cases are in test_local_dir_move_crash.py)."""
from __future__ import annotations

import asyncio
import os

from broker import local_dir_move as mv
from broker import local_dir_mover as mover
from broker import local_layout as lay
from broker.local_log import LocalLog
from broker.local_partitions import LocalSlot
from broker.local_replica import LocalReplica, ReplicationSettings
from broker.log_dirs import MAX_DIR_NAME_CHARS, future_dir_name
from broker.log_dirs_manager import LogDirsManager
from metadata_quorum.delta import TopicIdPartition
from stream_storage import batches

UID = "0123456789abcdef0123456789abcdef"


def pos(start: int, end: int, *epochs: tuple[int, int]) -> mv.LogPosition:
    return mv.LogPosition(start, end, tuple(epochs))


# ------------------------------------------------------------------ the next step (pure)
def test_copy_until_one_chunk_behind_then_swap() -> None:
    current = pos(0, 100, (0, 0))
    assert mv.next_copy_step(current, pos(0, 0), 10_000, 1000) == mv.CopyStep(mv.STEP_COPY, 0)
    assert mv.next_copy_step(current, pos(0, 60, (0, 0)), 5000, 1000) == mv.CopyStep(mv.STEP_COPY, 60)
    assert mv.next_copy_step(current, pos(0, 95, (0, 0)), 800, 1000) == mv.CopyStep(mv.STEP_SWAP, 95)
    assert mv.next_copy_step(current, pos(0, 100, (0, 0)), 0, 0).action == mv.STEP_SWAP


def test_a_future_log_follows_the_current_logs_start_and_truncation() -> None:
    # the current log starts later (a follower reset): an empty future log starts there too
    assert mv.next_copy_step(pos(50, 80, (1, 50)), pos(0, 0), 1000, 10) == mv.CopyStep(mv.STEP_RESET, 50)
    # the future log ends before the current log's start: start over
    assert mv.next_copy_step(pos(50, 80, (1, 50)), pos(0, 20, (0, 0)), 1000, 10) == mv.CopyStep(mv.STEP_RESET, 50)
    # the current log was truncated below what the future copied (a follower's divergent suffix)
    assert mv.next_copy_step(pos(0, 40, (0, 0)), pos(0, 60, (0, 0)), 0, 10) == mv.CopyStep(mv.STEP_TRUNCATE, 40)
    # ... and then took other records at the same offsets under a newer epoch: cut at the epoch's end
    current = pos(0, 90, (0, 0), (1, 30), (3, 45))
    future = pos(0, 60, (0, 0), (1, 30), (2, 50))
    assert mv.future_valid_end(current, future) == 45
    assert mv.next_copy_step(current, future, 10_000, 10) == mv.CopyStep(mv.STEP_TRUNCATE, 45)
    # nothing in common at all: start over
    assert mv.next_copy_step(pos(0, 90, (5, 0)), pos(0, 60, (2, 0)), 1, 10).action == mv.STEP_RESET


# ------------------------------------------------------------------ start-up recovery (pure)
def actions(listing: dict[str, list[str]], resumable: tuple[tuple[str, str], ...] = (),
            offline: tuple[str, ...] = ()) -> set[tuple[str, str, str]]:
    return {(a.log_dir, a.name, a.action) for a in mv.recovery_actions(listing, resumable, offline)}


def test_recovery_at_each_crash_point_of_a_move() -> None:
    fut = f"t-0.{UID}-future"
    dele = f"t-0.{UID}-delete"
    # copying (or flushed, before the rename): current in /a, future in /b with segments: resumed
    assert actions({"/a": ["t-0"], "/b": [fut]}, (("/b", fut),)) == {
        ("/a", "t-0", "keep"), ("/b", fut, "resume")}
    # a future without segments (died before its first one, or an s3 replica's dir): dropped
    assert actions({"/a": ["t-0"], "/b": [fut]}) == {("/a", "t-0", "keep"), ("/b", fut, "delete")}
    # the current dir renamed -delete, the future not yet renamed: the future is complete, promoted
    assert actions({"/a": [dele], "/b": [fut]}, (("/b", fut),)) == {
        ("/a", dele, "delete"), ("/b", fut, "promote")}
    # the future renamed, the -delete dir not yet removed
    assert actions({"/a": [dele], "/b": ["t-0"]}) == {("/a", dele, "delete"), ("/b", "t-0", "keep")}
    # a future with no current while a dir is offline: the current may be there; left alone
    assert actions({"/b": [fut]}, (("/b", fut),), offline=("/a",)) == {("/b", fut, "keep")}
    # a future beside its current in the same dir, or a second future: dropped
    fut2 = f"t-0.{'f' * 32}-future"
    assert actions({"/a": ["t-0", fut], "/b": [fut2]}, (("/a", fut), ("/b", fut2))) == {
        ("/a", "t-0", "keep"), ("/a", fut, "delete"), ("/b", fut2, "resume")}
    assert ("/c", "meta.properties", "keep") not in actions({"/c": ["meta.properties"]})


def test_a_future_name_is_cut_to_255_characters_and_still_matches_its_partition() -> None:
    topic = "x" * 249
    name = future_dir_name(topic, 7, UID)
    assert len(name) == MAX_DIR_NAME_CHARS and name.endswith(f"-7.{UID}-future")
    assert actions({"/a": [f"{topic}-7"], "/b": [name]}, (("/b", name),)) == {
        ("/a", f"{topic}-7", "keep"), ("/b", name, "resume")}


# ------------------------------------------------------------------ recovery on real dirs
def write_log(path: str, n: int, first: int = 0) -> LocalLog:
    log = LocalLog(path, "tid", lay.RollPolicy(segment_bytes=4096, index_interval_bytes=200)).open(0)
    for i in range(first, first + n):
        log.append_as_leader(bytearray(batches.build_batch([(None, b"v%04d" % i)], timestamp_ms=1000)), 0)
    return log


def test_log_dirs_manager_recovers_each_crash_point_on_real_dirs(tmp_path) -> None:
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    os.makedirs(a), os.makedirs(b)
    # p0: mid-copy; p1: current renamed -delete, future complete; p2: only the -delete left over
    write_log(os.path.join(a, "t-0"), 50).close()
    write_log(os.path.join(b, future_dir_name("t", 0, UID)), 20).close()
    write_log(os.path.join(a, f"t-1.{UID}-delete"), 30).close()
    write_log(os.path.join(b, future_dir_name("t", 1, UID)), 30).close()
    write_log(os.path.join(b, "t-2"), 10).close()
    write_log(os.path.join(a, f"t-2.{'e' * 32}-delete"), 10).close()
    m = LogDirsManager([a, b])
    m.prepare()
    assert sorted(n for n in os.listdir(a) if n.startswith("t-")) == ["t-0"]
    assert sorted(n for n in os.listdir(b) if n.startswith("t-")) == [future_dir_name("t", 0, UID), "t-1", "t-2"]
    assert LocalLog(os.path.join(b, "t-1"), "tid", lay.RollPolicy()).open(0).log_end_offset == 30
    assert m.take_future("t", 0) == os.path.join(b, future_dir_name("t", 0, UID))
    assert m.take_future("t", 0) is None, "handed over once"


def read_all(log: LocalLog) -> list[bytes | None]:
    out: list[bytes | None] = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20, log.log_end_offset)
        out.extend(r.value for r in batches.read_records(data))
        offset = [i.next_offset for i in batches.iter_batches(data)][-1]
    return out


# ------------------------------------------------------------------ a live move between real dirs
def test_a_live_log_moves_to_another_dir_while_appends_go_on(tmp_path) -> None:
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    os.makedirs(a), os.makedirs(b)

    async def run() -> None:
        current = write_log(os.path.join(a, "t-0"), 400)
        replica = LocalReplica("t", "tid", 0, 1, current, a, 0, _no_isr, lambda: ReplicationSettings())
        replica.become_leader(0, 0, [1], [1])
        slot = LocalSlot(TopicIdPartition("tid", 0), "t", replica=replica, log_dir=a)
        future = LocalLog(mover.future_path(b, "t", 0), "tid", lay.RollPolicy(segment_bytes=4096)).open(0)
        swapped: list[str] = []
        rate = 64 * 1024
        task = asyncio.get_running_loop().create_task(
            mover.move(slot, future, b, lambda: rate, swapped.append))
        n = 400
        while not task.done():  # a producer keeps appending during the copy
            replica.log.append_as_leader(bytearray(batches.build_batch([(None, b"v%04d" % n)], timestamp_ms=1000)), 0)
            n += 1
            await asyncio.sleep(0.005)
        await task
        assert swapped == [a] and slot.log_dir == b and replica.log is future
        for _ in range(5):  # appends after the swap go to the new dir
            replica.log.append_as_leader(bytearray(batches.build_batch([(None, b"v%04d" % n)], timestamp_ms=1000)), 0)
            n += 1
        got = read_all(replica.log)
        assert got == [b"v%04d" % i for i in range(n)], "every record once, in order"
        await asyncio.sleep(0.2)  # the old dir is removed in the background
        assert [x for x in os.listdir(a)] == []
        assert sorted(os.listdir(b)) and "t-0" in os.listdir(b)
        reopened = LocalLog(os.path.join(b, "t-0"), "tid", lay.RollPolicy()).open(0)
        assert reopened.log_end_offset == n and reopened.epochs == [(0, 0)]
        assert read_all(reopened) == [b"v%04d" % i for i in range(n)]

    asyncio.run(run())


async def _no_isr(_replica: LocalReplica, _isr: tuple[int, ...]) -> None:
    return None
