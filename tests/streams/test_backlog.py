"""The bound on bytes not yet committed in S3 (backlog.py), pure."""
from __future__ import annotations

from stream_storage.backlog import Backlog, admits, has_room, limit_bytes

MIB = 1024 * 1024


def test_uploads_under_way_count_toward_the_bound() -> None:
    limit = limit_bytes(8 * MIB, 2)
    assert limit == 16 * MIB
    # nothing buffered, but two uploads' worth still being PUT: a close would wait for them
    assert not admits(Backlog(uploading_bytes=16 * MIB), 1, limit)
    assert not admits(Backlog(pending_bytes=4 * MIB, uploading_bytes=12 * MIB), 1, limit)
    assert admits(Backlog(pending_bytes=4 * MIB, uploading_bytes=8 * MIB), 4 * MIB, limit)
    assert not admits(Backlog(pending_bytes=4 * MIB, uploading_bytes=8 * MIB), 4 * MIB + 1, limit)
    assert not admits(Backlog(admitted_bytes=10 * MIB, uploading_bytes=6 * MIB), 1, limit)


def test_one_append_always_goes_when_nothing_is_uncommitted() -> None:
    limit = limit_bytes(8 * MIB, 2)
    assert admits(Backlog(), 64 * MIB, limit)  # larger than the bound, alone
    assert not admits(Backlog(pending_bytes=1), 64 * MIB, limit)


def test_urgent_appends_are_not_held() -> None:
    limit = limit_bytes(8 * MIB, 2)
    full = Backlog(pending_bytes=8 * MIB, uploading_bytes=8 * MIB, admitted_bytes=MIB)
    assert not admits(full, 300, limit)
    assert admits(full, 300, limit, urgent=True)


def test_room_and_a_bound_of_at_least_one_upload() -> None:
    assert limit_bytes(4096, 0) == 4096
    assert has_room(Backlog(pending_bytes=4095), 4096)
    assert not has_room(Backlog(pending_bytes=2048, uploading_bytes=2048), 4096)
