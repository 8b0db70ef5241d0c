"""When the uploader starts an upload (``stream_storage/upload_trigger.py``), with the clock as an
input: by size, by age, and how long it sleeps otherwise."""
from __future__ import annotations

from stream_storage.upload_trigger import MIN_WAIT_MS, UploadCheck, UploadPolicy, upload_due

POLICY = UploadPolicy(upload_bytes=1000, upload_interval_ms=200)


def test_nothing_buffered_waits_one_interval() -> None:
    assert upload_due(0, None, 5_000.0, POLICY) == UploadCheck(False, 200.0)


def test_due_by_size_at_once() -> None:
    assert upload_due(1000, 4_990.0, 5_000.0, POLICY).due
    assert not upload_due(999, 4_990.0, 5_000.0, POLICY).due


def test_due_by_age_once_the_oldest_byte_waited_an_interval() -> None:
    assert not upload_due(10, 4_801.0, 5_000.0, POLICY).due
    assert upload_due(10, 4_800.0, 5_000.0, POLICY).due


def test_not_due_sleeps_until_the_oldest_byte_comes_of_age() -> None:
    check = upload_due(10, 4_950.0, 5_000.0, POLICY)
    assert check == UploadCheck(False, 150.0)
    assert upload_due(10, 4_950.0, 5_000.0 + check.next_check_ms, POLICY).due


def test_never_spins() -> None:
    assert upload_due(10, 1_000.0, 5_000.0, POLICY).next_check_ms == MIN_WAIT_MS
