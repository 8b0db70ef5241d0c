"""Broker registration, heartbeats, controlled shutdown and session expiry: one rule per test."""
from __future__ import annotations

from typing import Any

import pytest

from metadata_quorum.kernel.errors import ErrorCode, FerryError
from metadata_quorum.records import NO_LEADER, partition_stream_key
from tests.quorum.quorum_helpers import (
    REELECTION_TIMEOUT_MS,
    SESSION_TIMEOUT_MS,
    ManualClock,
    add_broker,
    controller,
    epoch_of,
    expect_error,
    heartbeat_all,
    log_dirs,
    partition,
    run,
)


def register_args(broker_id: int, incarnation: str = "a") -> dict:  # type: ignore[type-arg]
    return {"broker_id": broker_id, "incarnation_id": incarnation, "endpoints": ["http://127.0.0.1:1"],
            "rack": "r1", "log_dirs": log_dirs(broker_id)}


def test_broker_epoch_is_the_offset_of_the_registration_record() -> None:
    c = controller(0)
    c.write("put_kv", {"key": "x", "value": "1"})
    out = run(c.image, "register_broker", register_args(4))
    assert out.reply == {"broker_epoch": c.image.offset + 1, "session_timeout_ms": 9000}
    reg = out.image.cluster.brokers[4]
    assert reg.broker_epoch == c.image.offset + 1 and reg.fenced and reg.rack == "r1"
    assert [d.path for d in reg.log_dirs] == ["/data/b4/d0", "/data/b4/d1"]


def test_registration_retry_with_same_incarnation_returns_same_epoch() -> None:
    c = controller(1)
    out = run(c.image, "register_broker", register_args(0, "inc-0"))
    assert out.records == () and out.reply == {"broker_epoch": epoch_of(c.image, 0), "session_timeout_ms": 9000}


def test_second_live_incarnation_is_refused() -> None:
    c = controller(1)
    now = c.clock_ms()
    expect_error(c.image, "register_broker", register_args(0, "other"), ErrorCode.DUPLICATE_BROKER_REGISTRATION,
                 now_ms=now, heartbeats={0: now})


def test_expired_incarnation_is_replaced_and_its_partitions_wait_for_a_leader() -> None:
    c = controller(2)
    c.write("create_topics", {"topics": [{"name": "t", "num_partitions": 2},
                                         {"name": "l", "num_partitions": 1, "replication_factor": 2,
                                          "storage": "local", "assignments": None}]})
    led = [p for p in range(2) if partition(c.image, "t", p).leader == 0]
    assert led
    now = c.clock_ms() + SESSION_TIMEOUT_MS + 1
    out = run(c.image, "register_broker", register_args(0, "new"), now_ms=now, heartbeats={0: c.clock_ms(), 1: now})
    assert out.reply["broker_epoch"] == c.image.offset + 1
    assert out.image.cluster.brokers[0].fenced
    for p in led:
        part = partition(out.image, "t", p)
        assert part.leader == NO_LEADER and part.reelection_deadline_ms == now + REELECTION_TIMEOUT_MS
        assert part.leader_epoch == partition(c.image, "t", p).leader_epoch + 1
    local = partition(out.image, "l", 0)
    assert 0 not in local.isr and local.leader == 1


def test_fenced_broker_may_register_a_new_incarnation() -> None:
    c = controller(1)
    c.clock_ms.advance(SESSION_TIMEOUT_MS + 1)  # type: ignore[attr-defined]
    c.tick()
    assert c.image.cluster.brokers[0].fenced
    out = run(c.image, "register_broker", register_args(0, "new"), now_ms=c.clock_ms(), heartbeats={0: c.clock_ms()})
    assert out.image.cluster.brokers[0].incarnation_id == "new"


def test_bad_registration_input_is_invalid_request() -> None:
    c = controller(0)
    cases: list[dict[str, Any]] = [
        {"incarnation_id": "a"},
        {"broker_id": -1, "incarnation_id": "a"},
        {"broker_id": 1, "incarnation_id": ""},
        {"broker_id": 1, "incarnation_id": "a", "log_dirs": [{"dir_id": "d", "path": "relative/dir"}]},
        {"broker_id": 1, "incarnation_id": "a", "log_dirs": [{"dir_id": "d", "path": "/a"}, {"dir_id": "d", "path": "/b"}]},
        {"broker_id": 1, "incarnation_id": "a", "endpoints": "http://x"},
    ]
    for args in cases:
        expect_error(c.image, "register_broker", args, ErrorCode.INVALID_REQUEST)


def test_heartbeat_from_unknown_broker() -> None:
    c = controller(1)
    expect_error(c.image, "broker_heartbeat", {"broker_id": 5, "broker_epoch": 0, "metadata_offset": 0},
                 ErrorCode.BROKER_ID_NOT_REGISTERED)


def test_heartbeat_with_stale_epoch() -> None:
    c = controller(1)
    err = expect_error(c.image, "broker_heartbeat",
                       {"broker_id": 0, "broker_epoch": epoch_of(c.image, 0) + 100, "metadata_offset": 0},
                       ErrorCode.STALE_BROKER_EPOCH)
    assert err.details == {"broker_epoch": epoch_of(c.image, 0)}


def test_fenced_broker_is_unfenced_once_caught_up_to_its_registration() -> None:
    c = controller(0)
    epoch = c.write("register_broker", register_args(0))["broker_epoch"]
    behind = run(c.image, "broker_heartbeat", {"broker_id": 0, "broker_epoch": epoch, "metadata_offset": epoch - 1})
    assert behind.records == () and behind.reply == {"is_fenced": True, "is_caught_up": False, "should_shut_down": False,
                                                     "metadata_high_watermark": c.image.offset + 1,
                                                     "session_timeout_ms": 9000}
    caught = run(c.image, "broker_heartbeat", {"broker_id": 0, "broker_epoch": epoch, "metadata_offset": epoch})
    assert caught.reply["is_fenced"] is False and caught.reply["is_caught_up"] is True
    assert not caught.image.cluster.brokers[0].fenced


def test_heartbeat_records_saturated_dirs_and_placement_avoids_them() -> None:
    c = controller(1)
    out = run(c.image, "broker_heartbeat", {"broker_id": 0, "broker_epoch": epoch_of(c.image, 0),
                                            "metadata_offset": c.image.offset, "saturated_log_dirs": ["b0-d0"]})
    assert out.image.cluster.brokers[0].saturated_log_dirs == ("b0-d0",)
    created = run(out.image, "create_topics", {"topics": [{"name": "t", "num_partitions": 4}]})
    assert {partition(created.image, "t", p).directories for p in range(4)} == {("b0-d1",)}
    again = run(out.image, "broker_heartbeat", {"broker_id": 0, "broker_epoch": epoch_of(c.image, 0),
                                                "metadata_offset": c.image.offset, "saturated_log_dirs": ["b0-d0"]})
    assert again.records == ()


def test_new_replicas_go_to_the_least_loaded_log_dir() -> None:
    c = controller(1)
    out = run(c.image, "create_topics", {"topics": [{"name": "t", "num_partitions": 4}]})
    dirs = [partition(out.image, "t", p).directories[0] for p in range(4)]
    assert sorted(dirs) == ["b0-d0", "b0-d0", "b0-d1", "b0-d1"]


def test_controlled_shutdown_moves_s3_leadership_away_without_a_leader() -> None:
    c = controller(2)
    c.write("create_topics", {"topics": [{"name": "t", "num_partitions": 4},
                                         {"name": "l", "num_partitions": 1, "replication_factor": 2, "storage": "local"}]})
    led = [p for p in range(4) if partition(c.image, "t", p).leader == 0]
    now = c.clock_ms()
    out = run(c.image, "broker_heartbeat", {"broker_id": 0, "broker_epoch": epoch_of(c.image, 0),
                                            "metadata_offset": c.image.offset, "want_shutdown": True}, now_ms=now)
    # it held no open stream, so the shutdown completes in the same heartbeat: fenced at once
    reg = out.image.cluster.brokers[0]
    assert reg.fenced and not reg.in_controlled_shutdown
    for p in led:
        part = partition(out.image, "t", p)
        assert part.replicas == (1,) and part.isr == (1,) and part.leader == NO_LEADER
        assert part.removing_replicas == (0,) and part.adding_replicas == (1,)
        assert part.reelection_deadline_ms == now + REELECTION_TIMEOUT_MS and part.change_started_ms == now
    assert partition(out.image, "l", 0).leader == 1
    assert out.reply["should_shut_down"] is True  # it leads nothing any more


def test_controlled_shutdown_of_the_only_broker_leaves_partitions_leaderless() -> None:
    c = controller(1)
    c.write("create_topics", {"topics": [{"name": "t", "num_partitions": 2}]})
    out = run(c.image, "broker_heartbeat", {"broker_id": 0, "broker_epoch": epoch_of(c.image, 0),
                                            "metadata_offset": c.image.offset, "want_shutdown": True})
    assert all(partition(out.image, "t", p).leader == NO_LEADER for p in range(2))
    assert all(partition(out.image, "t", p).replicas == (0,) for p in range(2))
    assert out.reply["should_shut_down"] is True


def test_broker_in_controlled_shutdown_is_not_unfenced_and_gets_no_new_partitions() -> None:
    c = controller(2)
    c.write("broker_heartbeat", {"broker_id": 0, "broker_epoch": epoch_of(c.image, 0),
                                 "metadata_offset": c.image.offset, "want_shutdown": True})
    out = run(c.image, "create_topics", {"topics": [{"name": "t", "num_partitions": 4}]})
    assert {partition(out.image, "t", p).leader for p in range(4)} == {1}


def test_tick_fences_silent_brokers_and_moves_their_s3_partitions_with_a_leader() -> None:
    clock = ManualClock()
    c = controller(3, clock)
    c.write("create_topics", {"topics": [{"name": "t", "num_partitions": 6},
                                         {"name": "l", "num_partitions": 3, "replication_factor": 3, "storage": "local"}]})
    before = c.image
    clock.advance(SESSION_TIMEOUT_MS // 2)
    for b in (1, 2):
        c.write("broker_heartbeat", {"broker_id": b, "broker_epoch": epoch_of(c.image, b),
                                     "metadata_offset": c.image.offset})
    clock.advance(SESSION_TIMEOUT_MS // 2 + 1)
    out = run(c.image, "tick", {}, now_ms=clock(), heartbeats=c.last_heartbeat_ms)
    assert out.reply["fenced_brokers"] == [0]
    assert out.image.cluster.brokers[0].fenced
    for p in range(6):
        old, new = partition(before, "t", p), partition(out.image, "t", p)
        if old.leader == 0:
            assert new.leader in (1, 2) and new.replicas == (new.leader,) and new.isr == (new.leader,)
            assert new.leader_epoch == old.leader_epoch + 1 and new.reelection_deadline_ms == 0
        else:
            assert new == old
    for p in range(3):
        new = partition(out.image, "l", p)
        assert 0 not in new.isr and new.leader in (1, 2) and new.replicas == partition(before, "l", p).replicas


def test_tick_spreads_a_dead_brokers_partitions_over_live_brokers() -> None:
    clock = ManualClock()
    c = controller(3, clock)
    c.write("create_topics", {"topics": [{"name": "t", "num_partitions": 12}]})
    clock.advance(SESSION_TIMEOUT_MS + 1)
    c.last_heartbeat_ms[1] = c.last_heartbeat_ms[2] = clock()
    c.tick()
    leaders = [partition(c.image, "t", p).leader for p in range(12)]
    assert leaders.count(1) == 6 and leaders.count(2) == 6


def test_tick_does_not_fence_brokers_it_has_not_heard_from() -> None:
    c = controller(2)
    c.last_heartbeat_ms.clear()
    out = run(c.image, "tick", {}, now_ms=c.clock_ms() + 10 * SESSION_TIMEOUT_MS, heartbeats={})
    assert out.records == () and out.reply["fenced_brokers"] == []


def test_tick_elects_when_the_reelection_deadline_passes() -> None:
    c = controller(2)
    c.write("create_topics", {"topics": [{"name": "t", "num_partitions": 1, "assignments": {"0": [0]}}]})
    c.write("alter_partition_reassignments", {"reassignments": [{"topic": "t", "partition": 0, "replicas": [1]}]})
    deadline = partition(c.image, "t", 0).reelection_deadline_ms
    early = run(c.image, "tick", {}, now_ms=deadline - 1, heartbeats={0: deadline - 1, 1: deadline - 1})
    assert early.records == ()
    late = run(c.image, "tick", {}, now_ms=deadline, heartbeats={0: deadline, 1: deadline})
    part = partition(late.image, "t", 0)
    assert part.leader == 1 and part.reelection_deadline_ms == 0 and not part.is_reassigning
    assert late.reply["elected"] == [{"topic_id": part.topic_id, "partition": 0, "leader": 1}]
    # a tick the controller runs between scans fences but does not look at leaderless partitions
    between = run(c.image, "tick", {"elect_leaderless": False}, now_ms=deadline, heartbeats={0: deadline, 1: deadline})
    assert between.records == () and between.reply["elected"] == []
    # unless it fences a broker: then the scan runs in the same batch
    gone_ms = deadline + SESSION_TIMEOUT_MS + 1
    fencing = run(c.image, "tick", {"elect_leaderless": False}, now_ms=gone_ms, heartbeats={0: deadline, 1: gone_ms})
    assert fencing.reply["fenced_brokers"] == [0] and partition(fencing.image, "t", 0).leader == 1


def test_tick_waits_for_a_live_owner_still_closing_the_partition_then_elects_once_it_is_gone() -> None:
    c = controller(2)
    c.write("create_topics", {"topics": [{"name": "t", "num_partitions": 1, "assignments": {"0": [0]}}]})
    part = partition(c.image, "t", 0)
    data_stream = int(c.image.kv[partition_stream_key(part.topic_id, 0, "data")])
    c.write("open_stream", {"broker_id": 0, "broker_epoch": epoch_of(c.image, 0), "stream_id": data_stream,
                            "epoch": part.leader_epoch})
    c.write("alter_partition_reassignments", {"reassignments": [{"topic": "t", "partition": 0, "replicas": [1]}]})
    deadline = partition(c.image, "t", 0).reelection_deadline_ms
    # broker 0 is alive and still holds the data stream: the new leader could not open it yet
    waiting = run(c.image, "tick", {}, now_ms=deadline + 60_000, heartbeats={0: deadline + 60_000, 1: deadline + 60_000})
    assert waiting.records == () and waiting.reply["elected"] == []
    # broker 0 went silent: it is fenced and broker 1 leads (it takes the stream over)
    gone_ms = deadline + 60_000 + SESSION_TIMEOUT_MS + 1
    late = run(c.image, "tick", {}, now_ms=gone_ms, heartbeats={0: deadline + 60_000, 1: gone_ms})
    assert late.reply["fenced_brokers"] == [0]
    assert partition(late.image, "t", 0).leader == 1


def test_tick_moves_a_leaderless_partition_whose_targets_are_gone() -> None:
    clock = ManualClock()
    c = controller(3, clock)
    c.write("create_topics", {"topics": [{"name": "t", "num_partitions": 1, "assignments": {"0": [0]}}]})
    c.write("alter_partition_reassignments", {"reassignments": [{"topic": "t", "partition": 0, "replicas": [1]}]})
    clock.advance(SESSION_TIMEOUT_MS + 1)
    c.last_heartbeat_ms[0] = c.last_heartbeat_ms[2] = clock()
    c.tick()
    part = partition(c.image, "t", 0)
    assert c.image.cluster.brokers[1].fenced
    assert part.leader in (0, 2) and part.replicas == (part.leader,)


def test_a_broker_fenced_for_silence_must_register_again_before_it_is_unfenced() -> None:
    """A heartbeat stamped before a pause arrives after the session expired: answered "not
    fenced", it would renew the lease from its send time, before the fence."""
    clock = ManualClock()
    c = controller(2, clock)
    c.write("create_topics", {"topics": [{"name": "t", "num_partitions": 4}]})
    expired_epoch = epoch_of(c.image, 0)
    clock.advance(SESSION_TIMEOUT_MS // 2)
    c.write("broker_heartbeat", {"broker_id": 1, "broker_epoch": epoch_of(c.image, 1), "metadata_offset": c.image.offset})
    clock.advance(SESSION_TIMEOUT_MS // 2 + 1)
    assert c.tick()["fenced_brokers"] == [0]
    assert c.image.kv["broker/0/expired_epoch"] == str(expired_epoch)
    assert all(partition(c.image, "t", p).leader == 1 for p in range(4))
    before = c.image
    expect_error(c.image, "broker_heartbeat", {"broker_id": 0, "broker_epoch": expired_epoch,
                                               "metadata_offset": c.image.offset}, ErrorCode.STALE_BROKER_EPOCH)
    assert c.image is before
    # the same incarnation registering again gets a new epoch, unfenced once it has read that far
    again = c.write("register_broker", register_args(0, "inc-0"))["broker_epoch"]
    assert again > expired_epoch and "broker/0/expired_epoch" not in c.image.kv
    reply = c.write("broker_heartbeat", {"broker_id": 0, "broker_epoch": again, "metadata_offset": again - 1})
    assert reply["is_fenced"]
    reply = c.write("broker_heartbeat", {"broker_id": 0, "broker_epoch": again, "metadata_offset": again})
    assert not reply["is_fenced"]


def test_partitions_left_without_brokers_are_led_again_when_one_returns() -> None:
    clock = ManualClock()
    c = controller(1, clock)
    c.write("create_topics", {"topics": [{"name": "t", "num_partitions": 2}]})
    clock.advance(SESSION_TIMEOUT_MS + 1)
    c.tick()
    assert all(partition(c.image, "t", p).leader == NO_LEADER for p in range(2))
    add_broker(c, 5)
    heartbeat_all(c)
    c.tick()
    assert all(partition(c.image, "t", p).leader == 5 for p in range(2))
    assert all(partition(c.image, "t", p).replicas == (5,) for p in range(2))


def test_heartbeat_records_offline_dirs() -> None:
    c = controller(1)
    out = run(c.image, "broker_heartbeat", {"broker_id": 0, "broker_epoch": epoch_of(c.image, 0),
                                            "metadata_offset": c.image.offset, "offline_log_dirs": ["/data/b0/d1"]})
    reg = out.image.cluster.brokers[0]
    assert reg.offline_log_dirs == ("b0-d1",) and [d.dir_id for d in reg.usable_log_dirs()] == ["b0-d0"]  # path -> id


def test_bad_heartbeat_input() -> None:
    c = controller(1)
    base = {"broker_id": 0, "broker_epoch": epoch_of(c.image, 0), "metadata_offset": 0}
    expect_error(c.image, "broker_heartbeat", {**base, "want_shutdown": "yes"}, ErrorCode.INVALID_REQUEST)
    expect_error(c.image, "broker_heartbeat", {**base, "saturated_log_dirs": "d"}, ErrorCode.INVALID_REQUEST)
    expect_error(c.image, "broker_heartbeat", {"broker_id": 0}, ErrorCode.INVALID_REQUEST)


def test_after_a_controller_failover_silent_brokers_are_fenced_one_session_later() -> None:
    clock = ManualClock()
    c = controller(2, clock)
    c.write("create_topics", {"topics": [{"name": "t", "assignments": {"0": [0]}}]})
    c.fail_over()
    clock.advance(SESSION_TIMEOUT_MS // 2)
    c.write("broker_heartbeat", {"broker_id": 1, "broker_epoch": epoch_of(c.image, 1), "metadata_offset": c.image.offset})
    assert c.tick()["fenced_brokers"] == []  # nobody is fenced for the failover itself
    clock.advance(SESSION_TIMEOUT_MS // 2 + 1)
    assert c.tick()["fenced_brokers"] == [0]  # broker 0 never came back
    assert partition(c.image, "t", 0).leader == 1


def test_controlled_shutdown_removes_the_broker_from_local_isrs_it_follows() -> None:
    c = controller(3)
    c.write("create_topics", {"topics": [{"name": "l", "storage": "local", "assignments": {"0": [1, 0, 2]}}]})
    out = run(c.image, "broker_heartbeat", {"broker_id": 0, "broker_epoch": epoch_of(c.image, 0),
                                            "metadata_offset": c.image.offset, "want_shutdown": True})
    part = partition(out.image, "l", 0)
    assert part.isr == (1, 2) and part.leader == 1 and part.leader_epoch == 0
    assert out.reply["should_shut_down"] is True


def _owner_with_open_stream() -> tuple[Any, int]:
    """Brokers 0-2; broker 0 leads s3 partition t-0 with its data stream open, and leads local
    partition l-0 (ISR 0, 1)."""
    c = controller(3)
    c.write("create_topics", {"topics": [{"name": "t", "assignments": {"0": [0], "1": [1]}},
                                         {"name": "l", "storage": "local", "assignments": {"0": [0, 1]}}]})
    sid = int(c.image.kv[f"partition/{c.image.topics.get('t').topic_id}/0/data"])  # type: ignore[union-attr]
    c.write("open_stream", {"stream_id": sid, "epoch": 0, "broker_id": 0, "broker_epoch": epoch_of(c.image, 0)})
    return c, sid


def test_unregister_of_a_live_broker_removes_it_at_once_but_keeps_its_streams_until_its_session_ends() -> None:
    """Kafka removes a live broker at once; its write lease may still hold (a paused owner that
    resumes within its session), so nobody may open its streams before that session ends."""
    c, sid = _owner_with_open_stream()
    now, beats = c.clock_ms(), dict(c.last_heartbeat_ms)
    session_end = beats[0] + SESSION_TIMEOUT_MS
    out = run(c.image, "unregister_broker", {"broker_id": 0}, now_ms=now, heartbeats=beats)
    assert 0 not in out.image.cluster.brokers
    assert partition(out.image, "l", 0).leader == 1 and partition(out.image, "l", 0).isr == (1,)
    waiting = partition(out.image, "t", 0)
    assert waiting.leader == NO_LEADER and waiting.replicas in ((1,), (2,)) and waiting.removing_replicas == (0,)
    assert out.image.streams.streams[sid].owner == 0  # still its own
    new_owner = waiting.replicas[0]
    # the deadline passes, but tick elects nobody while the old session may be live, even on a new
    # active controller that never heard from broker 0 (the session's end is in the log)
    for at, heartbeats in ((waiting.reelection_deadline_ms, beats), (session_end, {})):
        ticked = run(out.image, "tick", {}, now_ms=at, heartbeats=heartbeats)
        assert partition(ticked.image, "t", 0).leader == NO_LEADER
    # a leader elected by hand cannot open the stream; the broker id cannot register again
    elected = run(out.image, "elect_leaders", {"partitions": [{"topic": "t", "partition": 0}]}, now_ms=now)
    part = partition(elected.image, "t", 0)
    assert part.leader == new_owner
    open_args = {"stream_id": sid, "epoch": part.leader_epoch, "broker_id": new_owner,
                 "broker_epoch": epoch_of(out.image, new_owner)}
    expect_error(elected.image, "open_stream", open_args, ErrorCode.STREAM_NOT_CLOSED, now_ms=session_end,
                 heartbeats={})
    expect_error(out.image, "register_broker", register_args(0, "next"), ErrorCode.DUPLICATE_BROKER_REGISTRATION,
                 now_ms=session_end, heartbeats={})
    # once the session is over: tick elects, the new leader takes the stream, broker 0 may return
    after = session_end + 1
    ticked = run(out.image, "tick", {}, now_ms=after, heartbeats={new_owner: after})
    part = partition(ticked.image, "t", 0)
    assert part.leader == new_owner and part.removing_replicas == ()
    taken = run(ticked.image, "open_stream", dict(open_args, epoch=part.leader_epoch), now_ms=after,
                heartbeats={new_owner: after})
    assert taken.image.streams.streams[sid].owner == new_owner
    back = run(taken.image, "register_broker", register_args(0, "next"), now_ms=after, heartbeats={})
    assert back.image.cluster.brokers[0].incarnation_id == "next"
    assert partition(back.image, "t", 0).leader == new_owner  # nothing else changes
    assert "broker/0/unregistered_session_end_ms" not in back.image.kv
    expect_error(out.image, "unregister_broker", {"broker_id": 0}, ErrorCode.BROKER_ID_NOT_REGISTERED)


def test_unregister_of_a_broker_that_cannot_acknowledge_hands_its_streams_over_at_once() -> None:
    """Silent past its session: its lease is over, so its partitions are led elsewhere at once and
    the new leader takes its streams."""
    c, sid = _owner_with_open_stream()
    now = c.last_heartbeat_ms[0] + SESSION_TIMEOUT_MS + 1
    beats = {1: now, 2: now, 0: c.last_heartbeat_ms[0]}
    out = run(c.image, "unregister_broker", {"broker_id": 0}, now_ms=now, heartbeats=beats)
    moved = partition(out.image, "t", 0)
    assert 0 not in out.image.cluster.brokers and moved.leader in (1, 2) and moved.replicas == (moved.leader,)
    assert not any(k.startswith("broker/") for k in out.image.kv)
    taken = run(out.image, "open_stream", {"stream_id": sid, "epoch": moved.leader_epoch, "broker_id": moved.leader,
                                           "broker_epoch": epoch_of(out.image, moved.leader)},
                now_ms=now, heartbeats=beats)
    assert taken.image.streams.streams[sid].owner == moved.leader


def test_unregister_after_a_controlled_shutdown_needs_no_wait() -> None:
    """The autoscaling harness's path: the broker closed its streams and was fenced by its
    controlled shutdown, then it is unregistered; nothing waits for its session."""
    c, sid = _owner_with_open_stream()
    epoch = epoch_of(c.image, 0)
    shut = {"broker_id": 0, "broker_epoch": epoch, "metadata_offset": c.image.offset, "want_shutdown": True}
    c.write("broker_heartbeat", shut)
    c.write("close_stream", {"stream_id": sid, "epoch": 0, "broker_id": 0, "broker_epoch": epoch})
    assert c.write("broker_heartbeat", dict(shut, metadata_offset=c.image.offset))["should_shut_down"]
    c.write("unregister_broker", {"broker_id": 0})
    assert 0 not in c.image.cluster.brokers and not any(k.startswith("broker/") for k in c.image.kv)
    c.write("register_broker", register_args(0, "next"))  # the id is free at once


def test_a_broker_reported_dead_is_fenced_at_once_and_its_partitions_led_elsewhere() -> None:
    c = controller(3)
    c.write("create_topics", {"topics": [{"name": "t", "num_partitions": 6}]})
    before = c.image
    dead_epoch = epoch_of(c.image, 0)
    reporter = {"reporter_id": 1, "reporter_epoch": epoch_of(c.image, 1)}
    # well inside broker 0's session: silence alone would not fence it yet
    out = c.write("report_broker_dead", {"broker_id": 0, "broker_epoch": dead_epoch, **reporter})
    assert out == {"fenced": True, "why": "its process is gone"}
    assert c.image.cluster.brokers[0].fenced
    for p in range(6):
        if partition(before, "t", p).leader == 0:
            assert partition(c.image, "t", p).leader in (1, 2)
    # a heartbeat it sent before it died, arriving late, does not bring it back
    expect_error(c.image, "broker_heartbeat", {"broker_id": 0, "broker_epoch": dead_epoch,
                                               "metadata_offset": c.image.offset}, ErrorCode.STALE_BROKER_EPOCH)
    # a second report, or one about an older incarnation, changes nothing
    assert run(c.image, "report_broker_dead", {"broker_id": 0, "broker_epoch": dead_epoch, **reporter}).records == ()
    # the same incarnation registering again (it was not dead after all) gets a new epoch
    again = c.write("register_broker", {"broker_id": 0, "incarnation_id": "inc-0", "endpoints": ["http://127.0.0.1:9000"],
                                        "log_dirs": log_dirs(0)})
    assert again["broker_epoch"] > dead_epoch and "broker/0/dead_epoch" not in c.image.kv
    stale = run(c.image, "report_broker_dead", {"broker_id": 0, "broker_epoch": dead_epoch, **reporter})
    assert stale.records == () and stale.reply["fenced"] is False


def test_a_report_from_a_stale_reporter_is_refused() -> None:
    c = controller(2)
    expect_error(c.image, "report_broker_dead", {"broker_id": 0, "broker_epoch": epoch_of(c.image, 0),
                                                 "reporter_id": 1, "reporter_epoch": 999_999},
                 ErrorCode.STALE_BROKER_EPOCH)
    expect_error(c.image, "report_broker_dead", {"broker_id": 0, "broker_epoch": epoch_of(c.image, 0),
                                                 "reporter_id": 7, "reporter_epoch": 1},
                 ErrorCode.BROKER_ID_NOT_REGISTERED)


def test_a_tick_scans_a_bounded_number_of_leaderless_partitions_and_says_where_to_go_on() -> None:
    c = controller(2)
    c.write("create_topics", {"topics": [{"name": "t", "num_partitions": 5,
                                          "assignments": {str(p): [0] for p in range(5)}}]})
    c.write("alter_partition_reassignments", {"reassignments": [
        {"topic": "t", "partition": p, "replicas": [1]} for p in range(5)]})
    deadline = max(partition(c.image, "t", p).reelection_deadline_ms for p in range(5))
    beats = {0: deadline, 1: deadline}
    image = c.image
    elected: list[int] = []
    scans = 0
    after = None
    while True:
        args: dict[str, object] = {"leaderless_max": 2}
        if after is not None:
            args["leaderless_after"] = after
        out = run(image, "tick", args, now_ms=deadline, heartbeats=beats)
        scans += 1
        assert len(out.reply["elected"]) <= 2
        elected += [e["partition"] for e in out.reply["elected"]]
        image = out.image
        after = out.reply.get("leaderless_next")
        if after is None:
            break
    assert sorted(elected) == [0, 1, 2, 3, 4] and scans == 3
    assert all(partition(image, "t", p).leader == 1 for p in range(5))
    with pytest.raises(FerryError) as bad:
        run(image, "tick", {"leaderless_after": ["x"]}, now_ms=deadline, heartbeats=beats)
    assert bad.value.error is ErrorCode.INVALID_REQUEST
