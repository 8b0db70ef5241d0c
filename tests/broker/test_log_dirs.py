"""Log-dir policy: placement, validation, KIP-113 names and recovery, KIP-928 saturation."""
from __future__ import annotations

import pytest

from broker.log_dirs import (LogDirInfo, LogDirState, choose_log_dir, delete_dir_name,
                             future_dir_name, next_dir_state, parse_dir_name, recovery_plan, validate_log_dir)
from metadata_quorum.kernel.errors import ErrorCode, FerryError

UID = "0123456789abcdef0123456789abcdef"
DIRS = [LogDirInfo("/d/a"), LogDirInfo("/d/b"), LogDirInfo("/d/c", LogDirState.SATURATED), LogDirInfo("/d/x", LogDirState.OFFLINE)]


def test_fewest_partitions_first_ties_in_config_order() -> None:
    assert choose_log_dir(DIRS, {"/d/a": 2, "/d/b": 1}) == "/d/b"
    assert choose_log_dir(DIRS, {}) == "/d/a"
    assert choose_log_dir(DIRS, {"/d/a": 5, "/d/b": 5}) == "/d/a"


def test_saturated_and_offline_dirs_get_no_new_replicas() -> None:
    assert choose_log_dir(DIRS, {"/d/a": 9, "/d/b": 9, "/d/c": 0, "/d/x": 0}) == "/d/a"
    with pytest.raises(FerryError) as e:
        choose_log_dir([LogDirInfo("/d/c", LogDirState.SATURATED)], {})
    assert e.value.error is ErrorCode.KAFKA_STORAGE_ERROR


def test_requested_dir_wins_and_any_means_policy() -> None:
    assert choose_log_dir(DIRS, {"/d/b": 9}, requested="/d/b") == "/d/b"
    assert choose_log_dir(DIRS, {"/d/a": 9}, requested="any") == "/d/b"
    assert choose_log_dir(DIRS, {}, requested="/d/b/") == "/d/b"


@pytest.mark.parametrize("path,error", [
    ("relative/dir", ErrorCode.LOG_DIR_NOT_FOUND),
    ("", ErrorCode.LOG_DIR_NOT_FOUND),
    ("/d/nope", ErrorCode.LOG_DIR_NOT_FOUND),
    ("/d/x", ErrorCode.LOG_DIR_NOT_FOUND),
    ("/d/c", ErrorCode.KAFKA_STORAGE_ERROR),
])
def test_validation_errors(path: str, error: ErrorCode) -> None:
    with pytest.raises(FerryError) as e:
        validate_log_dir(path, DIRS)
    assert e.value.error is error and e.value.message


def test_future_and_delete_names_fit_255_and_parse_back() -> None:
    assert future_dir_name("t", 3, UID) == f"t-3.{UID}-future"
    long_topic = "x" * 249
    for name in (future_dir_name(long_topic, 12, UID), delete_dir_name(long_topic, 12, UID)):
        assert len(name) == 255
        parsed = parse_dir_name(name)
        assert parsed is not None and parsed.partition == 12 and parsed.uid == UID
        assert long_topic.startswith(parsed.topic)
    assert parse_dir_name("my.topic-7") == parse_dir_name("my.topic-7")
    assert parse_dir_name("my.topic-7").kind == "current"  # type: ignore[union-attr]
    assert parse_dir_name("wal") is None
    with pytest.raises(ValueError):
        future_dir_name("t", 0, "not-a-uid")


def test_recovery_plan_kip113() -> None:
    names = ["a-0", f"a-0.{UID}-future", f"b-1.{UID}-future", f"c-2.{UID}-delete", "wal"]
    plan = {s.name: s.action for s in recovery_plan(names)}
    assert plan == {"a-0": "keep", f"a-0.{UID}-future": "delete", f"b-1.{UID}-future": "promote",
                    f"c-2.{UID}-delete": "delete"}


def test_saturation_transitions() -> None:
    assert next_dir_state(LogDirState.ONLINE, usable_bytes=10, reserved_bytes=100) is LogDirState.SATURATED
    assert next_dir_state(LogDirState.SATURATED, usable_bytes=1000, reserved_bytes=100) is LogDirState.ONLINE
    # hysteresis: the released reserve alone does not bring it back
    assert next_dir_state(LogDirState.SATURATED, usable_bytes=150, reserved_bytes=100) is LogDirState.SATURATED
    assert next_dir_state(LogDirState.ONLINE, usable_bytes=150, reserved_bytes=100) is LogDirState.ONLINE
    assert next_dir_state(LogDirState.ONLINE, 1000, 100, io_error=True) is LogDirState.OFFLINE
    assert next_dir_state(LogDirState.OFFLINE, 1000, 100) is LogDirState.OFFLINE


def test_a_failed_write_saturates_a_dir_until_enough_is_free() -> None:
    assert next_dir_state(LogDirState.ONLINE, 10_000, 0, disk_full=True) is LogDirState.SATURATED
    assert next_dir_state(LogDirState.SATURATED, 1000, 0, min_free_bytes=4096) is LogDirState.SATURATED
    assert next_dir_state(LogDirState.SATURATED, 5000, 0, min_free_bytes=4096) is LogDirState.ONLINE
    assert next_dir_state(LogDirState.SATURATED, 5000, 3000, min_free_bytes=4096) is LogDirState.SATURATED
    assert next_dir_state(LogDirState.OFFLINE, 10_000, 0, disk_full=True) is LogDirState.OFFLINE
