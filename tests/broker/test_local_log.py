"""storage=local segments: Kafka's layout, roll, indexes, epochs, truncation and start-up recovery
of a torn tail, on real files in a temporary directory (no process, no socket)."""
from __future__ import annotations

import os

import pytest

from broker import local_layout as lay
from broker.local_log import LocalLog
from metadata_quorum.kernel.errors import ErrorCode, FerryError
from stream_storage import batches


def batch(*values: bytes, ts: int = 1000) -> bytearray:
    return bytearray(batches.build_batch([(None, v) for v in values], timestamp_ms=ts))


def values(data: bytes) -> list[bytes]:
    return [r.value or b"" for r in batches.read_records(data)]


def open_log(path: str, segment_bytes: int = 1 << 20, segment_ms: int = 10 ** 9, clock=None,
             recovery_point: int = 0) -> LocalLog:
    policy = lay.RollPolicy(segment_bytes=segment_bytes, segment_ms=segment_ms, index_interval_bytes=200)
    return LocalLog(path, "topicid1", policy, clock_ms=clock or (lambda: 0)).open(recovery_point)


# ------------------------------------------------------------------ pure layout
def test_segment_names_are_kafkas() -> None:
    assert lay.segment_file_name(42) == "00000000000000000042.log"
    assert lay.segment_file_name(7, lay.INDEX_SUFFIX) == "00000000000000000007.index"
    assert lay.parse_segment_file_name("00000000000000000042.timeindex") == (42, ".timeindex")
    assert lay.parse_segment_file_name("leader-epoch-checkpoint") is None
    assert lay.segment_bases(["00000000000000000100.log", "00000000000000000000.log",
                              "00000000000000000000.index", "partition.metadata"]) == [0, 100]


def test_roll_rules() -> None:
    policy = lay.RollPolicy(segment_bytes=1000, segment_ms=500)
    assert not lay.should_roll(policy, 0, 0, 10 ** 9, 5000, 10, 0), "an empty segment never rolls"
    assert lay.should_roll(policy, 900, 0, 1, 200, 10, 0), "past segment.bytes"
    assert not lay.should_roll(policy, 700, 0, 1, 200, 10, 0)
    assert lay.should_roll(policy, 10, 0, 500, 1, 10, 0), "older than segment.ms"
    assert lay.should_roll(policy, 10, 0, 1, 1, 2 ** 31 + 5, 0), "relative offsets must fit in 4 bytes"


def test_checkpoint_formats_round_trip_and_refuse_garbage() -> None:
    entries = {("t", 0): 5, ("t", 1): 9}
    text = lay.render_offset_checkpoint(entries)
    assert text == "0\n2\nt 0 5\nt 1 9\n"
    assert lay.parse_offset_checkpoint(text) == entries
    assert lay.parse_epoch_checkpoint(lay.render_epoch_checkpoint([(0, 0), (3, 17)])) == [(0, 0), (3, 17)]
    for bad in ("", "1\n0\n", "0\n2\nt 0 5\n", "0\n1\nt x 5\n"):
        with pytest.raises(FerryError) as e:
            lay.parse_offset_checkpoint(bad)
        assert e.value.error is ErrorCode.KAFKA_STORAGE_ERROR


def test_leader_epoch_bookkeeping() -> None:
    e = lay.assign_epoch([], 0, 0)
    e = lay.assign_epoch(e, 2, 10)
    assert lay.assign_epoch(e, 1, 12) == e, "an older epoch is never recorded"
    assert lay.end_offset_for_epoch(e, 0, 30) == (0, 10)
    assert lay.end_offset_for_epoch(e, 1, 30) == (0, 10), "the largest epoch at or below the one asked"
    assert lay.end_offset_for_epoch(e, 2, 30) == (2, 30)
    assert lay.end_offset_for_epoch(e, 5, 30) == (2, 30)
    assert lay.end_offset_for_epoch([(3, 5)], 1, 30) == (-1, -1)
    assert lay.truncate_epochs_from_end(e, 10) == [(0, 0)]
    assert lay.assign_epoch([(0, 0), (2, 10)], 3, 8) == [(0, 0), (3, 8)], "a truncated epoch is replaced"
    assert lay.truncate_epochs_from_start([(0, 0), (2, 10)], 5) == [(0, 5), (2, 10)]


def test_index_lookup() -> None:
    entries = [(0, 0), (10, 400), (25, 900)]
    assert lay.lookup_position(entries, 0) == 0
    assert lay.lookup_position(entries, 24) == 400
    assert lay.lookup_position(entries, 99) == 900
    raw = b"".join(lay.encode_index_entry(r, p) for r, p in entries) + b"\0" * 16
    assert lay.decode_index(raw) == entries, "trailing zeroes of a preallocated index are not entries"


def test_scan_stops_at_a_torn_or_corrupt_batch() -> None:
    good = batch(b"a", b"b")
    second = batch(b"c")
    batches.set_base_offset(second, 2)
    assert lay.scan_valid_prefix(bytes(good + second)).valid_bytes == len(good) + len(second)
    torn = lay.scan_valid_prefix(bytes(good + second[:30]))
    assert (torn.valid_bytes, torn.torn) == (len(good), True)
    flipped = bytearray(second)
    flipped[-1] ^= 0xFF
    assert lay.scan_valid_prefix(bytes(good + flipped)).valid_bytes == len(good)
    again = batch(b"x")  # base offset 0 again: does not follow
    assert lay.scan_valid_prefix(bytes(good + again)).valid_bytes == len(good)


# ------------------------------------------------------------------ the log on files
def test_append_read_and_layout(tmp_path) -> None:
    d = str(tmp_path / "t-0")
    log = open_log(d)
    assert log.append_as_leader(batch(b"a", b"b"), 0) == (0, 1)
    assert log.append_as_leader(batch(b"c"), 1) == (2, 2)
    names = sorted(os.listdir(d))
    assert names == ["00000000000000000000.index", "00000000000000000000.log", "00000000000000000000.timeindex",
                     "leader-epoch-checkpoint", "partition.metadata"]
    assert values(log.read(0, 1 << 20, 3)) == [b"a", b"b", b"c"]
    assert values(log.read(2, 1 << 20, 3)) == [b"c"]
    assert values(log.read(0, 1 << 20, 2)) == [b"a", b"b"], "nothing at or past max_offset"
    assert log.read(3, 1 << 20, 3) == b""
    first = [i.leader_epoch for i in batches.iter_batches(log.read(0, 1 << 20, 3))]
    assert first == [0, 1], "each batch carries the epoch of the leader that appended it"
    assert log.epochs == [(0, 0), (1, 2)]
    with open(os.path.join(d, "leader-epoch-checkpoint")) as f:
        assert f.read() == "0\n2\n0 0\n1 2\n"
    with pytest.raises(FerryError) as e:
        log.read(9, 100, 9)
    assert e.value.error is ErrorCode.OFFSET_OUT_OF_RANGE


def test_segments_roll_by_bytes_and_time_and_reads_cross_them(tmp_path) -> None:
    now = [0]
    log = open_log(str(tmp_path / "t-0"), segment_bytes=300, segment_ms=1000, clock=lambda: now[0])
    for i in range(10):
        log.append_as_leader(batch(b"v%03d" % i), 0)
    assert len(log.segments) > 2, "segment.bytes rolls"
    assert [s.base_offset for s in log.segments] == sorted(s.base_offset for s in log.segments)
    got = []
    offset = 0
    while offset < log.log_end_offset:
        data = log.read(offset, 10, log.log_end_offset)  # tiny max_bytes: still one batch each
        got += values(data)
        offset = [i.next_offset for i in batches.iter_batches(data)][-1]
    assert got == [b"v%03d" % i for i in range(10)]
    count = len(log.segments)
    now[0] = 5000
    log.append_as_leader(batch(b"late"), 0)
    assert len(log.segments) == count + 1, "segment.ms rolls"


def test_restart_keeps_everything_and_recovers_a_torn_tail(tmp_path) -> None:
    d = str(tmp_path / "t-0")
    log = open_log(d, segment_bytes=400)
    for i in range(12):
        log.append_as_leader(batch(b"r%02d" % i), 0 if i < 6 else 3)
    end = log.log_end_offset
    log.close()
    again = open_log(d, segment_bytes=400, recovery_point=end)
    assert again.log_end_offset == end and again.epochs == [(0, 0), (3, 6)]
    assert values(again.read(0, 1 << 20, end))[:1] == [b"r00"]
    last = again.active
    again.close()
    with open(last.path(), "ab") as f:  # a crash in the middle of writing a batch
        f.write(bytes(batch(b"torn"))[:25])
    recovered = open_log(d, segment_bytes=400, recovery_point=0)
    assert recovered.log_end_offset == end
    assert recovered.recovered_bytes_truncated == 25
    assert os.path.getsize(recovered.active.path()) == recovered.active.size_bytes
    recovered.append_as_leader(batch(b"after"), 4)
    all_values = []
    offset = 0
    while offset < recovered.log_end_offset:
        data = recovered.read(offset, 1 << 20, recovered.log_end_offset)
        all_values += values(data)
        offset = [i.next_offset for i in batches.iter_batches(data)][-1]
    assert all_values == [b"r%02d" % i for i in range(12)] + [b"after"]


def test_truncate_to_removes_the_suffix_and_its_epochs(tmp_path) -> None:
    log = open_log(str(tmp_path / "t-0"), segment_bytes=300)
    for i in range(8):
        log.append_as_leader(batch(b"x%d" % i), 0 if i < 4 else 2)
    assert log.truncate_to(4) == 4
    assert log.epochs == [(0, 0)]
    assert log.segments[-1].next_offset == 4
    log.append_as_leader(batch(b"new"), 3)
    assert values(log.read(4, 1 << 20, 5)) == [b"new"]
    assert log.truncate_to(0) == 0 and log.log_end_offset == 0 and log.epochs == []


def test_follower_append_keeps_offsets_and_epochs(tmp_path) -> None:
    leader = open_log(str(tmp_path / "l"))
    follower = open_log(str(tmp_path / "f"))
    leader.append_as_leader(batch(b"a"), 0)
    leader.append_as_leader(batch(b"b", b"c"), 2)
    data = leader.read(0, 1 << 20, leader.log_end_offset)
    assert follower.append_replicated(data) == 3
    assert follower.append_replicated(data) == 0, "what it has already is skipped"
    assert follower.epochs == leader.epochs == [(0, 0), (2, 1)]
    gap = leader.read(1, 1 << 20, 3)
    other = open_log(str(tmp_path / "o"))
    with pytest.raises(FerryError) as e:
        other.append_replicated(gap)
    assert e.value.error is ErrorCode.OFFSET_OUT_OF_RANGE


def test_offset_for_timestamp(tmp_path) -> None:
    log = open_log(str(tmp_path / "t-0"), segment_bytes=300)
    for i in range(8):
        log.append_as_leader(batch(b"x", ts=1000 + 100 * i), 0)
    assert log.offset_for_timestamp(1250, log.log_end_offset) == (3, 1300)
    assert log.offset_for_timestamp(5000, log.log_end_offset) == (-1, -1)


def test_max_timestamp_offset_is_the_first_record_with_the_largest_timestamp(tmp_path) -> None:
    d = str(tmp_path / "t-0")
    log = open_log(d, segment_bytes=300)
    assert log.max_timestamp_offset(0) == (-1, -1)
    log.append_as_leader(bytearray(batches.build_batch([batches.Record(0, ts, None, b"m", ()) for ts in
                                                        (10_000_100, 10_000_400, 10_000_250)])), 0)
    for i in range(6):  # later segments: older timestamps, then one that ties
        log.append_as_leader(batch(b"x", ts=10_000_400 if i == 5 else 9_000 + i), 0)
    assert len(log.segments) > 1
    assert log.max_timestamp_offset(log.log_end_offset) == (1, 10_000_400)
    assert log.max_timestamp_offset(1) == (-1, -1), "not yet below the high watermark"
    end = log.log_end_offset
    log.close()
    assert open_log(d, segment_bytes=300, recovery_point=end).max_timestamp_offset(end) == (1, 10_000_400)


def test_a_directory_of_another_topic_id_is_refused(tmp_path) -> None:
    d = str(tmp_path / "t-0")
    open_log(d).close()
    with pytest.raises(FerryError) as e:
        LocalLog(d, "othertopic", lay.RollPolicy()).open()
    assert e.value.error is ErrorCode.KAFKA_STORAGE_ERROR


def test_an_epoch_started_without_records_goes_on_truncation_at_the_end(tmp_path) -> None:
    """A replica that became leader (recording epoch 5 at its end) and appended nothing before
    losing leadership must not keep reporting epoch 5 as its last (Kafka's truncateTo rule)."""
    log = open_log(str(tmp_path / "t-0"))
    log.append_as_leader(batch(b"a"), 3)
    log.assign_epoch(5, log.log_end_offset)
    assert log.latest_epoch == 5
    assert log.truncate_to(log.log_end_offset) == 1
    assert log.epochs == [(3, 0)]


# ------------------------------------------------------------------ a full disk (KIP-928)
@pytest.fixture
def small_tmpfs(tmp_path):  # type: ignore[no-untyped-def]
    """A 256 KiB tmpfs, so ENOSPC is real; skipped (saying why) where mounting is not permitted."""
    import subprocess

    mnt = tmp_path / "full"
    mnt.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mnt)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs CAP_SYS_ADMIN): {done.stderr.decode().strip()}")
    yield str(mnt)
    subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_enospc_refuses_the_batch_with_kafka_storage_error_and_keeps_what_was_written(small_tmpfs) -> None:
    filler = os.path.join(small_tmpfs, "other-data")
    with open(filler, "wb") as f:
        f.write(b"\0" * 64 * 1024)
    log = open_log(os.path.join(small_tmpfs, "t-0"))
    written = []
    with pytest.raises(FerryError) as e:
        for i in range(10_000):
            log.append_as_leader(batch(b"%05d" % i + b"x" * 4000), 0)
            written.append(b"%05d" % i + b"x" * 4000)
    assert e.value.error is ErrorCode.KAFKA_STORAGE_ERROR
    assert "No space left" in e.value.message or "the disk is full" in e.value.message
    assert len(written) > 10
    end = log.log_end_offset
    assert end == len(written), "the refused batch took no offset"
    got = []
    offset = 0
    while offset < end:
        data = log.read(offset, 1 << 20, end)
        got += values(data)
        offset = [i.next_offset for i in batches.iter_batches(data)][-1]
    assert got == written, "reads go on and every appended record is there"
    log.close()
    os.remove(filler)  # deleting data makes room: the log opens again (its active segment is re-indexed)
    reopened = open_log(os.path.join(small_tmpfs, "t-0"))
    assert reopened.log_end_offset == end and reopened.recovered_bytes_truncated == 0, "no torn batch left behind"
    reopened.close()
