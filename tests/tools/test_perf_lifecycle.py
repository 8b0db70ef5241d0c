"""`ferry perf lifecycle`: its pure parts (compressed thresholds, object classes, the read-back
check, the verdicts), and a few seconds of a highly compressed run against a real moto server
holding compaction's structural promise and reading every byte back."""
from __future__ import annotations

import tempfile
from itertools import pairwise
from typing import Any, Iterator

import pytest

from stream_storage.batches import build_batch, stamp_offsets, validate_batches
from stream_storage.config import MIB, StreamStorageConfig
from stream_storage.control import ObjectRef
from stream_storage.s3_server import S3Server
from tools.perf.lifecycle import (Lifecycle, Plan, ReadCheck, broker_rate_for_wal_put_target, classify,
                                  compressed_overrides, objects_bound, real_upload_every_ms, real_wal_object_bytes,
                                  verdicts)
from tools.perf.streams import Bench

DEFAULTS = StreamStorageConfig(wal_dir="-")


def test_compression_divides_every_time_threshold_and_no_size() -> None:
    over: dict[str, Any] = compressed_overrides(DEFAULTS, 10)
    assert over == {"upload_interval_ms": 1_000, "compaction_min_age_ms": 6_000, "compaction_interval_ms": 3_000,
                    "compaction_delete_delay_ms": 1_000}
    fast = StreamStorageConfig(wal_dir="-", upload_interval_ms=250)
    assert compressed_overrides(fast, 1000)["upload_interval_ms"] == 1  # never 0 ("never" to some settings)
    cfg = StreamStorageConfig(wal_dir="-", **over)
    assert (cfg.upload_bytes, cfg.compaction_target_bytes, cfg.compaction_max_small_objects) == \
        (DEFAULTS.upload_bytes, DEFAULTS.compaction_target_bytes, DEFAULTS.compaction_max_small_objects)


def test_a_plan_carries_compress_seconds_of_bytes_per_wall_second() -> None:
    plan = Plan(partitions=4, rate_bytes_s=256 * 1024, compress=10, hours=1, batch_bytes=64 * 1024)
    assert plan.wall_s == 360
    assert plan.wall_rate_bytes_s == 2_560 * 1024
    assert plan.tick_s == pytest.approx(0.025)
    assert plan.ticks == 14_400  # an append per partition per tick: the hour's bytes
    assert plan.sample_every_s == 30
    # 4 partitions x 256 KiB/s fill the 8 MiB of an upload in 8 s, before the 10 s interval
    assert real_wal_object_bytes(plan, DEFAULTS) == 8 * MIB
    assert real_upload_every_ms(plan, DEFAULTS) == pytest.approx(8_000)
    slow = Plan(partitions=4, rate_bytes_s=64 * 1024, compress=10, hours=1, batch_bytes=64 * 1024)
    assert real_wal_object_bytes(slow, DEFAULTS) == 2_560 * 1024  # the interval comes first: 10 s x 256 KiB/s
    assert real_upload_every_ms(slow, DEFAULTS) == pytest.approx(10_000)
    with pytest.raises(ValueError):
        Plan(partitions=0, rate_bytes_s=1, compress=1, hours=1, batch_bytes=1)


def _ref(key_ms: int, start: int, end: int, stream_bytes: int) -> ObjectRef:
    return ObjectRef(f"streams/1/{key_ms:013d}-abc", start, end, stream_bytes, 0, stream_bytes)


def test_objects_are_young_small_or_large_as_compaction_sees_them() -> None:
    now = 1_800_000_000_000
    objects = [_ref(now - 120_000, 0, 10, 40 * MIB), _ref(now - 90_000, 10, 20, 1 * MIB),
               _ref(now - 1_000, 20, 30, 40 * MIB)]
    assert classify(objects, now, DEFAULTS) == {"large": 1, "small": 1, "young": 1}


def test_the_objects_bound_is_the_large_objects_the_small_tail_and_the_young_uploads() -> None:
    # 1 GiB: 32 large at most; 64 small; 60 s of min age and 2 x 30 s of passes at one upload per 8 s
    assert objects_bound(1024 * MIB, DEFAULTS, 8_000) == 32 + 64 + 15
    assert objects_bound(1024 * MIB, DEFAULTS, 250) == 32 + 64 + 480


def _stamped(batch: bytes, base: int) -> bytes:
    buf = bytearray(batch)
    stamp_offsets(buf, validate_batches(buf), base)
    return bytes(buf)


def test_the_read_check_wants_each_acknowledged_batch_once_in_order_byte_for_byte() -> None:
    pool = [build_batch([(None, b"a" * 100), (None, b"b" * 100)]), build_batch([(None, b"c" * 100), (None, b"d" * 100)])]
    check = ReadCheck(pool)
    check.appended(7, 0, 0)
    check.appended(7, 2, 1)
    assert check.expected_bytes(7) == len(pool[0]) + len(pool[1])
    assert check.check(7, _stamped(pool[0], 0) + _stamped(pool[1], 2), 0) == 4
    assert check.errors == []
    check.check(7, _stamped(pool[1], 0), 0)  # another batch at offset 0
    assert check.errors and "differs" in check.errors[-1]
    check.check(7, _stamped(pool[0], 4), 2)  # offsets 2-3 skipped, 4 never acknowledged
    assert any("expected 2" in e for e in check.errors) and "never acknowledged" in check.errors[-1]


def test_a_figure_over_its_target_is_not_met() -> None:
    out = {"max_objects_per_stream": 100, "objects_bound": 576, "gets_per_8mib_read": 3.2,
           "gets_per_8mib_read_settled": 0.8, "gets_per_8mib_alone": 1.01, "gets_per_8mib_alone_settled": 1.0,
           "puts_per_gib": 4200.0, "achieved_over_asked": 0.99, "wal_object_over_real": 1.1}
    assert [row["verdict"] for row in verdicts(out)] == ["ok", "not met", "ok", "not met", "ok", "not met", "ok", "ok"]


def test_the_rate_for_the_put_target_follows_the_upload_interval() -> None:
    # 200 PUTs per GiB need 5.12 MiB per upload; one upload every 10 s at least
    assert broker_rate_for_wal_put_target(DEFAULTS) == pytest.approx(0.5)
    assert broker_rate_for_wal_put_target(StreamStorageConfig(wal_dir="-", upload_interval_ms=250)) == \
        pytest.approx(20.5)
    assert broker_rate_for_wal_put_target(StreamStorageConfig(wal_dir="-", upload_bytes=4 * MIB)) is None


@pytest.fixture(scope="module")
def s3_server(tmp_path_factory: Any) -> Iterator[S3Server]:
    server = S3Server(bucket="ferry-lifecycle-test", log_path=str(tmp_path_factory.mktemp("s3") / "s3.log")).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.mark.integration
async def test_a_compressed_run_levels_off_objects_and_reads_every_byte_back(s3_server: S3Server) -> None:
    """An hour at 300x (12 s of produce, an upload every 33 ms, the min age 200 ms, a pass every
    100 ms; the machine keeps up with about two thirds of the uploads, well over the 64 small
    objects a run may hold): the WAL uploads keep coming while the objects per stream stop
    growing; every cold read (all streams at once, then each alone) returns every acknowledged
    byte, in order."""
    plan = Plan(partitions=2, rate_bytes_s=16 * 1024, compress=300, hours=1, batch_bytes=16 * 1024)
    with tempfile.TemporaryDirectory() as work_dir:
        out = await Lifecycle(plan, Bench(s3_server.endpoint_url, s3_server.bucket, work_dir, 0)).run()
    assert out["append_errors"] == [] and out["read_errors"] == [] and out["compaction_errors"] == []
    assert out["ok"]
    assert out["read_at_end"]["bytes"] == out["read_settled"]["bytes"] == out["produced_bytes"] > 0
    for alone in (out["read_alone_at_end"], out["read_alone_settled"]):  # each stream alone, all of it
        assert len(alone) == plan.partitions and sum(r["bytes"] for r in alone) == out["produced_bytes"]
    series = out["objects_per_stream_series"]
    assert len(series) >= 5
    half = len(series) // 2
    last = series[-1]
    for i in range(plan.partitions):
        uploads = [s["wal_uploads_per_stream"][i] for s in series]
        assert all(a < b for a, b in pairwise(uploads)), series  # uploads keep coming ...
        # ... and compaction keeps up with them: the count goes up and down (a run of
        # max_small_objects is rewritten at once) but does not grow with the uploads (they
        # double from the first half to the second)
        first_most = max(s["objects_per_stream"][i] for s in series[:half])
        second_most = max(s["objects_per_stream"][i] for s in series[half:])
        assert second_most <= 1.5 * first_most and second_most < last["wal_uploads_per_stream"][i] / 2, series
    assert out["settled"], out["objects_settled"]
    for layout in out["objects_settled"].values():  # what is left: large ones and a short small tail
        assert layout["young"] == 0 and layout["small"] < DEFAULTS.compaction_max_small_objects
    assert sum(out["compaction_rewrites_per_stream"]) > 0
