"""When the uploader starts an upload (pure: the clock is the caller's).

Uploads start when the buffered bytes reach ``upload_bytes`` (few, large PUTs under load) or when
the oldest buffered byte has waited ``upload_interval_ms`` (a trickle still reaches S3 within a
bound, so that the WAL is trimmed and a reader elsewhere sees it). Between uploads the uploader
sleeps until the next moment one could become due, or until an append kicks it.
"""
from __future__ import annotations

from dataclasses import dataclass

MIN_WAIT_MS = 1.0  # never spin: wait at least this long before looking again


@dataclass(frozen=True)
class UploadPolicy:
    upload_bytes: int
    upload_interval_ms: int


@dataclass(frozen=True)
class UploadCheck:
    """``due``: start an upload now; otherwise look again after ``next_check_ms`` (sooner if an
    append brings the buffered bytes to the threshold)."""

    due: bool
    next_check_ms: float


def upload_due(buffered_bytes: int, oldest_buffered_ms: float | None, now_ms: float,
               policy: UploadPolicy) -> UploadCheck:
    """Whether to upload now, given the bytes buffered (durable, not taken by an upload) and the
    time the oldest of them became durable (None: nothing buffered), on the same clock as
    ``now_ms``."""
    if oldest_buffered_ms is None:
        return UploadCheck(buffered_bytes >= policy.upload_bytes, float(policy.upload_interval_ms))
    waited_ms = now_ms - oldest_buffered_ms
    due = buffered_bytes >= policy.upload_bytes or waited_ms >= policy.upload_interval_ms
    return UploadCheck(due, max(MIN_WAIT_MS, policy.upload_interval_ms - waited_ms))
