"""Stream operations with AutoMQ's fencing rules, one rule per test."""
from __future__ import annotations

from typing import Any

from metadata_quorum.kernel.errors import ErrorCode
from metadata_quorum.operations import READ_OPERATIONS
from metadata_quorum.records import STREAM_CLOSED, STREAM_OPENED
from tests.quorum.quorum_helpers import SESSION_TIMEOUT_MS, controller, epoch_of, expect_error, run


def setup(brokers: int = 2):  # type: ignore[no-untyped-def]
    c = controller(brokers)
    sid = c.write("create_stream")["stream_id"]
    return c, sid


def op_args(c, sid: int, broker: int, epoch: int, **extra: Any) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    return {"stream_id": sid, "epoch": epoch, "broker_id": broker, "broker_epoch": epoch_of(c.image, broker), **extra}


def commit_args(c, sid: int, broker: int, epoch: int, start: int, end: int, key: str = "obj") -> dict[str, Any]:  # type: ignore[no-untyped-def]
    return {"object_key": key, "size": 10 * (end - start), "broker_id": broker, "broker_epoch": epoch_of(c.image, broker),
            "ranges": [{"stream_id": sid, "epoch": epoch, "start_offset": start, "end_offset": end}]}


def test_create_stream_allocates_increasing_ids_closed_at_epoch_minus_one() -> None:
    c, sid = setup()
    out = run(c.image, "create_stream", {})
    assert out.reply == {"stream_id": sid + 1}
    stream = out.image.streams.streams[sid + 1]
    assert (stream.state, stream.epoch, stream.owner) == (STREAM_CLOSED, -1, -1)


def test_open_a_closed_stream_with_a_higher_epoch() -> None:
    c, sid = setup()
    out = run(c.image, "open_stream", op_args(c, sid, 0, 3))
    assert out.reply == {"stream_id": sid, "epoch": 3, "start_offset": 0, "end_offset": 0, "wal_owners": []}
    stream = out.image.streams.streams[sid]
    assert (stream.state, stream.epoch, stream.owner) == (STREAM_OPENED, 3, 0)


def test_open_retry_with_same_epoch_and_owner_is_idempotent() -> None:
    c, sid = setup()
    first = c.write("open_stream", op_args(c, sid, 0, 1))
    again = run(c.image, "open_stream", op_args(c, sid, 0, 1))
    assert again.records == () and again.reply == first


def test_open_with_an_epoch_not_above_the_current_is_fenced() -> None:
    c, sid = setup()
    c.write("open_stream", op_args(c, sid, 0, 5))
    c.write("close_stream", op_args(c, sid, 0, 5))
    expect_error(c.image, "open_stream", op_args(c, sid, 1, 5), ErrorCode.STREAM_FENCED)
    err = expect_error(c.image, "open_stream", op_args(c, sid, 1, 4), ErrorCode.STREAM_FENCED)
    assert err.details == {"stream_epoch": 5, "owner": 0}


def test_the_incarnation_that_closed_a_stream_may_reopen_it_at_the_same_epoch() -> None:
    c, sid = setup()
    c.write("open_stream", op_args(c, sid, 0, 4))
    c.write("close_stream", op_args(c, sid, 0, 4))
    out = run(c.image, "open_stream", op_args(c, sid, 0, 4))
    assert (out.image.streams.streams[sid].state, out.image.streams.streams[sid].epoch) == (STREAM_OPENED, 4)


def test_a_new_incarnation_is_not_the_owner_of_streams_its_predecessor_opened() -> None:
    c, sid = setup()
    c.write("open_stream", op_args(c, sid, 0, 1))
    c.clock_ms.advance(SESSION_TIMEOUT_MS + 1)  # type: ignore[attr-defined]
    c.last_heartbeat_ms[1] = c.clock_ms()
    c.write("register_broker", {"broker_id": 0, "incarnation_id": "restarted"})
    c.write("broker_heartbeat", {"broker_id": 0, "broker_epoch": epoch_of(c.image, 0), "metadata_offset": c.image.offset})
    # the new incarnation cannot write with its predecessor's epoch ...
    expect_error(c.image, "commit_object", commit_args(c, sid, 0, 1, 0, 5), ErrorCode.STREAM_FENCED)
    expect_error(c.image, "close_stream", op_args(c, sid, 0, 1), ErrorCode.STREAM_FENCED)
    # ... and another broker may take the stream over although broker 0 is alive again
    now = c.clock_ms()
    out = run(c.image, "open_stream", op_args(c, sid, 1, 2), now_ms=now, heartbeats={0: now, 1: now})
    assert out.image.streams.streams[sid].owner == 1


def test_open_while_another_live_broker_holds_it_is_not_closed() -> None:
    c, sid = setup()
    c.write("open_stream", op_args(c, sid, 0, 1))
    now = c.clock_ms()
    expect_error(c.image, "open_stream", op_args(c, sid, 1, 2), ErrorCode.STREAM_NOT_CLOSED,
                 now_ms=now, heartbeats={0: now, 1: now})


def test_open_takes_over_from_a_dead_owner() -> None:
    c, sid = setup()
    c.write("open_stream", op_args(c, sid, 0, 1))
    now = c.clock_ms() + SESSION_TIMEOUT_MS + 1
    out = run(c.image, "open_stream", op_args(c, sid, 1, 2), now_ms=now, heartbeats={0: c.clock_ms(), 1: now})
    assert out.image.streams.streams[sid].owner == 1
    # the old owner is fenced by the higher epoch
    expect_error(out.image, "commit_object", commit_args(c, sid, 0, 1, 0, 5), ErrorCode.STREAM_FENCED)


def test_takeovers_name_every_wal_not_yet_recovered_until_the_owner_says_it_recovered_them() -> None:
    c = controller(3)
    sid = c.write("create_stream")["stream_id"]
    c.write("open_stream", op_args(c, sid, 0, 1))
    t1 = c.clock_ms() + SESSION_TIMEOUT_MS + 1
    out = run(c.image, "open_stream", op_args(c, sid, 1, 2), now_ms=t1, heartbeats={0: c.clock_ms(), 1: t1, 2: t1})
    assert out.reply["wal_owners"] == [[0, 1]]
    # broker 1 dies before recovering broker 0's tail: the next owner is told about both WALs
    t2 = t1 + SESSION_TIMEOUT_MS + 1
    out = run(out.image, "open_stream", op_args(c, sid, 2, 3), now_ms=t2, heartbeats={0: t1, 1: t1, 2: t2})
    assert out.reply["wal_owners"] == [[0, 1], [1, 2]]
    assert out.image.streams.streams[sid].wal_owners == ((0, 1), (1, 2))
    # a retried open gets the same list; only the owner at the current epoch clears it
    again = run(out.image, "open_stream", op_args(c, sid, 2, 3), now_ms=t2, heartbeats={2: t2})
    assert again.records == () and again.reply["wal_owners"] == [[0, 1], [1, 2]]
    expect_error(out.image, "stream_recovered", op_args(c, sid, 2, 2), ErrorCode.STREAM_FENCED)
    expect_error(out.image, "stream_recovered", op_args(c, sid, 1, 3), ErrorCode.STREAM_FENCED)
    done = run(out.image, "stream_recovered", op_args(c, sid, 2, 3))
    assert done.image.streams.streams[sid].wal_owners == ()
    assert run(done.image, "stream_recovered", op_args(c, sid, 2, 3)).records == ()  # a retry
    # a clean close and reopen names nobody; a close does not clear a list nobody recovered
    closed = run(done.image, "close_stream", op_args(c, sid, 2, 3))
    assert run(closed.image, "open_stream", op_args(c, sid, 0, 4)).reply["wal_owners"] == []
    half = run(out.image, "close_stream", op_args(c, sid, 2, 3))
    assert run(half.image, "open_stream", op_args(c, sid, 0, 4)).reply["wal_owners"] == [[0, 1], [1, 2]]


def test_same_owner_may_reopen_with_a_higher_epoch() -> None:
    c, sid = setup()
    c.write("open_stream", op_args(c, sid, 0, 1))
    out = run(c.image, "open_stream", op_args(c, sid, 0, 2))
    assert out.image.streams.streams[sid].epoch == 2


def test_open_unknown_stream() -> None:
    c, _sid = setup()
    expect_error(c.image, "open_stream", op_args(c, 99, 0, 1), ErrorCode.STREAM_NOT_EXIST)


def test_fenced_broker_cannot_open() -> None:
    c, sid = setup()
    epoch = c.write("register_broker", {"broker_id": 5, "incarnation_id": "x"})["broker_epoch"]
    expect_error(c.image, "open_stream", {"stream_id": sid, "epoch": 1, "broker_id": 5, "broker_epoch": epoch},
                 ErrorCode.STREAM_FENCED)


def test_stale_broker_epoch_is_refused_on_every_stream_call() -> None:
    c, sid = setup()
    c.write("open_stream", op_args(c, sid, 0, 1))
    stale = epoch_of(c.image, 0) - 1
    for op, args in [
        ("open_stream", {"stream_id": sid, "epoch": 2}),
        ("close_stream", {"stream_id": sid, "epoch": 1}),
        ("trim_stream", {"stream_id": sid, "epoch": 1, "new_start_offset": 0}),
        ("commit_object", {"object_key": "k", "size": 1,
                           "ranges": [{"stream_id": sid, "epoch": 1, "start_offset": 0, "end_offset": 1}]}),
    ]:
        expect_error(c.image, op, {**args, "broker_id": 0, "broker_epoch": stale}, ErrorCode.STALE_BROKER_EPOCH)


def test_close_needs_owner_and_current_epoch() -> None:
    c, sid = setup()
    c.write("open_stream", op_args(c, sid, 0, 1))
    expect_error(c.image, "close_stream", op_args(c, sid, 1, 1), ErrorCode.STREAM_FENCED)
    expect_error(c.image, "close_stream", op_args(c, sid, 0, 0), ErrorCode.STREAM_FENCED)
    out = run(c.image, "close_stream", op_args(c, sid, 0, 1))
    stream = out.image.streams.streams[sid]
    assert (stream.state, stream.epoch, stream.owner) == (STREAM_CLOSED, 1, 0)
    retry = run(out.image, "close_stream", op_args(c, sid, 0, 1))
    assert retry.records == ()


def test_commit_appends_at_the_end_offset() -> None:
    c, sid = setup()
    c.write("open_stream", op_args(c, sid, 0, 1))
    out = run(c.image, "commit_object", commit_args(c, sid, 0, 1, 0, 10, "a"))
    stream = out.image.streams.streams[sid]
    assert stream.end_offset == 10 and [o.object_key for o in stream.objects] == ["a"]
    assert stream.objects[0].size == 100 and stream.objects[0].epoch == 1


def test_commit_must_start_at_the_end_offset() -> None:
    c, sid = setup()
    c.write("open_stream", op_args(c, sid, 0, 1))
    c.write("commit_object", commit_args(c, sid, 0, 1, 0, 10, "a"))
    for start in (9, 11, 0):
        err = expect_error(c.image, "commit_object", commit_args(c, sid, 0, 1, start, start + 5, "b"),
                           ErrorCode.OFFSET_NOT_MATCHED)
        assert err.details == {"stream_id": sid, "end_offset": 10}


def test_commit_by_a_non_owner_or_old_epoch_is_fenced() -> None:
    c, sid = setup()
    c.write("open_stream", op_args(c, sid, 0, 2))
    expect_error(c.image, "commit_object", commit_args(c, sid, 1, 2, 0, 5), ErrorCode.STREAM_FENCED)
    expect_error(c.image, "commit_object", commit_args(c, sid, 0, 1, 0, 5), ErrorCode.STREAM_FENCED)


def test_commit_to_a_closed_stream_is_refused() -> None:
    c, sid = setup()
    c.write("open_stream", op_args(c, sid, 0, 1))
    c.write("close_stream", op_args(c, sid, 0, 1))
    expect_error(c.image, "commit_object", commit_args(c, sid, 0, 1, 0, 5), ErrorCode.STREAM_NOT_OPENED)


def test_commit_is_atomic_over_all_ranges() -> None:
    c = controller(1)
    a = c.write("create_stream")["stream_id"]
    b = c.write("create_stream")["stream_id"]
    c.write("open_stream", op_args(c, a, 0, 1))
    c.write("open_stream", op_args(c, b, 0, 1))
    bad: dict[str, Any] = {"object_key": "multi", "size": 50, "broker_id": 0, "broker_epoch": epoch_of(c.image, 0),
           "ranges": [{"stream_id": a, "epoch": 1, "start_offset": 0, "end_offset": 5},
                      {"stream_id": b, "epoch": 1, "start_offset": 3, "end_offset": 8}]}
    expect_error(c.image, "commit_object", bad, ErrorCode.OFFSET_NOT_MATCHED)
    good = {**bad, "ranges": [bad["ranges"][0], {"stream_id": b, "epoch": 1, "start_offset": 0, "end_offset": 8}]}
    out = run(c.image, "commit_object", good)
    assert out.image.streams.streams[a].end_offset == 5 and out.image.streams.streams[b].end_offset == 8
    assert out.image.streams.object_refs["multi"] == (a, b)


def test_committing_the_same_object_again_is_idempotent() -> None:
    c, sid = setup()
    c.write("open_stream", op_args(c, sid, 0, 1))
    c.write("commit_object", commit_args(c, sid, 0, 1, 0, 10, "a"))
    again = run(c.image, "commit_object", commit_args(c, sid, 0, 1, 0, 10, "a"))
    assert again.records == () and again.reply == {}


def test_bad_commit_input() -> None:
    c, sid = setup()
    c.write("open_stream", op_args(c, sid, 0, 1))
    expect_error(c.image, "commit_object", commit_args(c, sid, 0, 1, 5, 5), ErrorCode.INVALID_REQUEST)
    expect_error(c.image, "commit_object", {**commit_args(c, sid, 0, 1, 0, 5), "ranges": []}, ErrorCode.INVALID_REQUEST)
    twice = commit_args(c, sid, 0, 1, 0, 5)
    twice["ranges"] = twice["ranges"] * 2
    expect_error(c.image, "commit_object", twice, ErrorCode.INVALID_REQUEST)
    expect_error(c.image, "commit_object", commit_args(c, 77, 0, 1, 0, 5), ErrorCode.STREAM_NOT_EXIST)


def test_trim_removes_objects_wholly_below_the_new_start() -> None:
    c, sid = setup()
    c.write("open_stream", op_args(c, sid, 0, 1))
    for i, key in enumerate("abc"):
        c.write("commit_object", commit_args(c, sid, 0, 1, i * 10, i * 10 + 10, key))
    out = run(c.image, "trim_stream", op_args(c, sid, 0, 1, new_start_offset=15))
    stream = out.image.streams.streams[sid]
    assert out.reply == {"removed_objects": ["a"]}
    assert stream.start_offset == 15 and [o.object_key for o in stream.objects] == ["b", "c"]
    back = run(out.image, "trim_stream", op_args(c, sid, 0, 1, new_start_offset=5))
    assert back.records == () and back.reply == {"removed_objects": []}


def test_trim_keeps_objects_other_streams_still_use() -> None:
    c = controller(1)
    a = c.write("create_stream")["stream_id"]
    b = c.write("create_stream")["stream_id"]
    c.write("open_stream", op_args(c, a, 0, 1))
    c.write("open_stream", op_args(c, b, 0, 1))
    c.write("commit_object", {"object_key": "shared", "size": 1, "broker_id": 0, "broker_epoch": epoch_of(c.image, 0),
                              "ranges": [{"stream_id": a, "epoch": 1, "start_offset": 0, "end_offset": 5},
                                         {"stream_id": b, "epoch": 1, "start_offset": 0, "end_offset": 5}]})
    first = run(c.image, "trim_stream", op_args(c, a, 0, 1, new_start_offset=5))
    assert first.reply == {"removed_objects": []}
    second = run(first.image, "trim_stream", op_args(c, b, 0, 1, new_start_offset=5))
    assert second.reply == {"removed_objects": ["shared"]}


def test_trim_beyond_the_end() -> None:
    c, sid = setup()
    c.write("open_stream", op_args(c, sid, 0, 1))
    expect_error(c.image, "trim_stream", op_args(c, sid, 0, 1, new_start_offset=1), ErrorCode.OFFSET_OUT_OF_RANGE)


def test_trim_needs_owner_and_epoch() -> None:
    c, sid = setup()
    c.write("open_stream", op_args(c, sid, 0, 1))
    expect_error(c.image, "trim_stream", op_args(c, sid, 1, 1, new_start_offset=0), ErrorCode.STREAM_FENCED)


def test_describe_stream() -> None:
    c, sid = setup()
    c.write("open_stream", op_args(c, sid, 0, 1))
    c.write("commit_object", commit_args(c, sid, 0, 1, 0, 4, "k"))
    info = READ_OPERATIONS["describe_stream"](c.image, {"stream_id": sid})
    assert (info["state"], info["epoch"], info["owner"], info["end_offset"]) == (STREAM_OPENED, 1, 0, 4)
    assert info["objects"][0]["object_key"] == "k"
    expect = READ_OPERATIONS["describe_stream"]
    try:
        expect(c.image, {"stream_id": 1234})
    except Exception as e:  # noqa: BLE001
        assert getattr(e, "error", None) == ErrorCode.STREAM_NOT_EXIST
    else:
        raise AssertionError("describe of an unknown stream must fail")


def test_an_object_committed_for_only_some_of_its_ranges_is_refused() -> None:
    c = controller(1)
    a = c.write("create_stream")["stream_id"]
    b = c.write("create_stream")["stream_id"]
    c.write("open_stream", op_args(c, a, 0, 1))
    c.write("open_stream", op_args(c, b, 0, 1))
    c.write("commit_object", commit_args(c, a, 0, 1, 0, 5, "k"))
    both = {"object_key": "k", "size": 1, "broker_id": 0, "broker_epoch": epoch_of(c.image, 0),
            "ranges": [{"stream_id": a, "epoch": 1, "start_offset": 0, "end_offset": 5},
                       {"stream_id": b, "epoch": 1, "start_offset": 0, "end_offset": 5}]}
    expect_error(c.image, "commit_object", both, ErrorCode.INVALID_REQUEST)


def test_bad_stream_arguments() -> None:
    c, sid = setup()
    expect_error(c.image, "open_stream", op_args(c, sid, 0, -1), ErrorCode.INVALID_REQUEST)
    expect_error(c.image, "open_stream", {**op_args(c, sid, 0, 1), "stream_id": "x"}, ErrorCode.INVALID_REQUEST)
    expect_error(c.image, "close_stream", {"stream_id": sid, "epoch": 1}, ErrorCode.INVALID_REQUEST)
    expect_error(c.image, "open_stream", op_args(c, sid, 0, 1) | {"broker_id": 42}, ErrorCode.BROKER_ID_NOT_REGISTERED)


def test_a_closing_owners_last_commit_closes_the_stream_in_the_same_records() -> None:
    c, sid = setup()
    c.write("open_stream", op_args(c, sid, 0, 1))
    c.write("commit_object", commit_args(c, sid, 0, 1, 0, 5, key="first"))
    expect_error(c.image, "commit_object", dict(commit_args(c, sid, 0, 1, 5, 9, key="last"), close_stream_ids=[sid + 7]),
                 ErrorCode.INVALID_REQUEST)
    args = dict(commit_args(c, sid, 0, 1, 5, 9, key="last"), close_stream_ids=[sid])
    out = run(c.image, "commit_object", args)
    stream = out.image.streams.streams[sid]
    assert (stream.state, stream.end_offset, stream.owner, stream.epoch) == (STREAM_CLOSED, 9, 0, 1)
    assert [o.object_key for o in stream.objects] == ["first", "last"]
    assert run(out.image, "commit_object", args).records == ()  # a retry after the answer was lost
    assert run(out.image, "close_stream", op_args(c, sid, 0, 1)).records == ()  # the close after it: done
    expect_error(out.image, "commit_object", commit_args(c, sid, 0, 1, 9, 12, key="later"), ErrorCode.STREAM_NOT_OPENED)
