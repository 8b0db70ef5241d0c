"""The streaming source's pure planning (stream_plan) and the sink's error per failed partition."""
from __future__ import annotations

import pytest

from metadata_quorum.kernel.errors import ErrorCode, FerryError
from tools.spark_read.stream_plan import capped_end, from_json_offsets, split_range, to_json_offsets
from tools.spark_read.writer import failed_partitions


def test_offsets_round_trip_as_spark_kafka_sources_json_and_a_bad_checkpoint_is_refused() -> None:
    offsets = {("a", 0): 5, ("a", 1): 0, ("b", 0): 9}
    assert to_json_offsets(offsets) == {"a": {"0": 5, "1": 0}, "b": {"0": 9}}
    assert from_json_offsets(to_json_offsets(offsets)) == offsets
    for bad in ({"a": 3}, {"a": {"x": 1}}, {"a": {"0": -1}}, {"a": {"0": "5"}}, {"a": {"0": True}}):
        with pytest.raises(FerryError):
            from_json_offsets(bad)


def test_a_trigger_cap_is_shared_by_backlog_and_always_progresses() -> None:
    start = {("t", 0): 0, ("t", 1): 100}
    latest = {("t", 0): 300, ("t", 1): 200, ("t", 2): 100}  # partition 2 is new: it starts at 0
    assert capped_end(start, latest, None) == latest
    assert capped_end(start, latest, 1000) == latest
    assert capped_end(start, latest, 100) == {("t", 0): 60, ("t", 1): 120, ("t", 2): 20}
    assert capped_end({("t", 0): 0, ("t", 1): 0}, {("t", 0): 1, ("t", 1): 2}, 1) == {("t", 0): 0, ("t", 1): 1}


def test_a_range_splits_at_the_end_of_the_committed_objects() -> None:
    assert split_range(10, 50, 30) == ((10, 30), (30, 50))
    assert split_range(10, 50, 60) == ((10, 50), None)
    assert split_range(40, 50, 30) == (None, (40, 50))
    assert split_range(50, 50, 30) == (None, None)


def test_failed_rows_are_named_per_partition_with_their_error() -> None:
    assert failed_partitions([]) is None
    timeout = FerryError(ErrorCode.REQUEST_TIMED_OUT, "x")
    error = failed_partitions([("t", 1, timeout), ("t", 1, timeout), ("t", 0, FerryError(ErrorCode.MESSAGE_TOO_LARGE, "y"))])
    assert error is not None
    assert error.message == "t-0: 1 rows not written (MESSAGE_TOO_LARGE); t-1: 2 rows not written (REQUEST_TIMED_OUT)"
