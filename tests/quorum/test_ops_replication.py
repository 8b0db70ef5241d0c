"""Reassignments, elections and ISR changes with KRaft's epoch rules, one rule per test."""
from __future__ import annotations

import dataclasses

from metadata_quorum.kernel.errors import ErrorCode
from metadata_quorum.operations import READ_OPERATIONS
from metadata_quorum.records import NO_LEADER
from metadata_quorum.s3_replicas import reported_replicas
from tests.quorum.quorum_helpers import (
    REELECTION_TIMEOUT_MS,
    SESSION_TIMEOUT_MS,
    controller,
    epoch_of,
    expect_error,
    partition,
    run,
)

NOW = 5_000_000


def s3_topic(brokers: int = 3, owner: int = 0):  # type: ignore[no-untyped-def]
    c = controller(brokers)
    c.write("create_topics", {"topics": [{"name": "t", "assignments": {"0": [owner]}}]})
    return c


def local_topic(replicas: list[int], brokers: int = 4):  # type: ignore[no-untyped-def]
    c = controller(brokers)
    c.write("create_topics", {"topics": [{"name": "l", "storage": "local", "assignments": {"0": replicas}}]})
    return c


def reassign(image, topic: str, replicas, **extra):  # type: ignore[no-untyped-def]
    out = run(image, "alter_partition_reassignments",
              {"reassignments": [{"topic": topic, "partition": 0, "replicas": replicas, **extra}]}, now_ms=NOW)
    return out, out.reply["responses"][0]


def test_s3_reassignment_writes_the_target_with_no_leader_and_a_deadline() -> None:
    c = s3_topic()
    before = partition(c.image, "t", 0)
    out, resp = reassign(c.image, "t", [2])
    assert "error" not in resp
    part = partition(out.image, "t", 0)
    assert (part.replicas, part.isr, part.leader) == ((2,), (2,), NO_LEADER)
    assert (part.adding_replicas, part.removing_replicas) == ((2,), (0,))
    assert part.reelection_deadline_ms == NOW + REELECTION_TIMEOUT_MS and part.change_started_ms == NOW
    assert part.leader_epoch == before.leader_epoch + 1 and part.partition_epoch == before.partition_epoch + 1
    assert part.directories[0] in ("b2-d0", "b2-d1")


def test_reassignment_to_the_current_replicas_is_a_no_op() -> None:
    out, resp = reassign(s3_topic().image, "t", [0])
    assert "error" not in resp and out.records == ()


def test_empty_replica_list() -> None:
    _out, resp = reassign(s3_topic().image, "t", [])
    assert resp["error"] == "INVALID_REPLICA_ASSIGNMENT" and resp["message"] == \
        "The manual partition assignment includes an empty replica list."


def test_unknown_broker_in_target() -> None:
    _out, resp = reassign(s3_topic().image, "t", [7])
    assert resp["error"] == "INVALID_REPLICA_ASSIGNMENT" and "broker 7" in resp["message"]


def test_duplicate_brokers_in_target() -> None:
    _out, resp = reassign(local_topic([0, 1]).image, "l", [2, 2])
    assert resp["error"] == "INVALID_REPLICA_ASSIGNMENT" and resp["message"] == \
        "The manual partition assignment includes the broker 2 more than once."


def test_s3_target_of_several_brokers_keeps_an_owner_among_them() -> None:
    c = s3_topic()  # owned by 0, one replica
    out, resp = reassign(c.image, "t", [1, 0, 2])  # the owner is among them: it stays, nothing moves
    part = partition(out.image, "t", 0)
    assert "error" not in resp and part.replicas == (0,) and part.leader == 0 and not part.is_reassigning
    assert reported_replicas(out.image.kv, part) == (1, 0, 2)
    out, resp = reassign(c.image, "t", [2, 1])  # not among them: the first one takes the partition
    part = partition(out.image, "t", 0)
    assert "error" not in resp and part.replicas == (2,) and part.leader == NO_LEADER and part.is_reassigning
    out = run(out.image, "elect_leaders", {"election_type": "preferred", "partitions": [{"topic": "t", "partition": 0}]})
    part = partition(out.image, "t", 0)
    assert part.leader == 2 and reported_replicas(out.image.kv, part) == (2, 1)
    moved, resp = reassign(out.image, "t", [1])  # one broker: Ferry's move of the owner, RF kept
    part = partition(moved.image, "t", 0)
    assert "error" not in resp and part.replicas == (1,) and reported_replicas(moved.image.kv, part) == (2, 1)
    out, resp = reassign(out.image, "t", [2], replica_set=True)  # Kafka's replica set of one: RF 1
    assert "error" not in resp and reported_replicas(out.image.kv, partition(out.image, "t", 0)) == (2,)


def test_a_refused_s3_reassignment_changes_nothing() -> None:
    c = s3_topic()
    out, resp = reassign(c.image, "t", [1, 2], log_dirs=["/nowhere", "any"])
    assert resp["error"] == "LOG_DIR_NOT_FOUND" and out.records == ()


def test_s3_owner_moved_outside_its_assignment_is_reported_first() -> None:
    c = controller(4)
    c.write("create_topics", {"topics": [{"name": "t", "assignments": {"0": [0, 1, 2]}}]})
    c.write("alter_partition_reassignments", {"reassignments": [{"topic": "t", "partition": 0, "replicas": [3]}]})
    part = partition(c.image, "t", 0)
    assert part.replicas == (3,) and reported_replicas(c.image.kv, part) == (3, 0, 1)  # a move: RF 3 kept
    c = controller(4)
    c.write("create_topics", {"topics": [{"name": "t", "assignments": {"0": [0, 1, 2]}}]})
    part = partition(c.image, "t", 0)
    moved = dataclasses.replace(part, replicas=(3,), leader=3)  # as a dead owner's partition is moved
    assert reported_replicas(c.image.kv, moved) == (3, 0, 1)


def test_unknown_topic_or_partition() -> None:
    c = s3_topic()
    out = run(c.image, "alter_partition_reassignments", {"reassignments": [
        {"topic": "nope", "partition": 0, "replicas": [1]}, {"topic": "t", "partition": 5, "replicas": [1]}]})
    assert [r["error"] for r in out.reply["responses"]] == ["UNKNOWN_TOPIC_OR_PARTITION"] * 2
    assert out.records == ()


def test_log_dir_is_recorded_when_named() -> None:
    out, resp = reassign(s3_topic().image, "t", [1], log_dirs=["/data/b1/d1"])
    assert "error" not in resp and partition(out.image, "t", 0).directories == ("b1-d1",)


def test_unknown_log_dir() -> None:
    out, resp = reassign(s3_topic().image, "t", [1], log_dirs=["/data/b2/d0"])
    assert resp["error"] == "LOG_DIR_NOT_FOUND" and out.records == ()


def test_log_dir_any_picks_one() -> None:
    out, resp = reassign(s3_topic().image, "t", [1], log_dirs=["any"])
    assert "error" not in resp and partition(out.image, "t", 0).directories[0].startswith("b1-")


def test_log_dir_change_alone_keeps_the_leader() -> None:
    c = s3_topic()
    current = partition(c.image, "t", 0).directories[0]
    other = "/data/b0/d1" if current == "b0-d0" else "/data/b0/d0"
    out, resp = reassign(c.image, "t", [0], log_dirs=[other])
    part = partition(out.image, "t", 0)
    assert "error" not in resp and part.leader == 0 and part.directories != (current,)
    assert part.leader_epoch == partition(c.image, "t", 0).leader_epoch


def test_cancel_without_reassignment() -> None:
    _out, resp = reassign(s3_topic().image, "t", None)
    assert resp["error"] == "NO_REASSIGNMENT_IN_PROGRESS"


def test_cancel_s3_reassignment_restores_the_original_owner() -> None:
    c = s3_topic()
    c.write("alter_partition_reassignments", {"reassignments": [{"topic": "t", "partition": 0, "replicas": [2]}]})
    out, resp = reassign(c.image, "t", None)
    part = partition(out.image, "t", 0)
    assert "error" not in resp
    assert (part.replicas, part.adding_replicas, part.removing_replicas, part.leader) == ((0,), (), (), NO_LEADER)
    assert part.directories[0].startswith("b0-")
    elected = run(out.image, "elect_leaders", {"partitions": [{"topic": "t", "partition": 0}]})
    assert partition(elected.image, "t", 0).leader == 0


def test_list_partition_reassignments() -> None:
    c = s3_topic()
    assert READ_OPERATIONS["list_partition_reassignments"](c.image, {}) == {"reassignments": []}
    c.write("alter_partition_reassignments", {"reassignments": [{"topic": "t", "partition": 0, "replicas": [1]}]})
    listed = READ_OPERATIONS["list_partition_reassignments"](c.image, {"partitions": [{"topic": "t", "partition": 0}]})
    [item] = listed["reassignments"]
    assert (item["topic"], item["replicas"], item["adding_replicas"], item["removing_replicas"]) == ("t", [1], [1], [0])


def test_local_reassignment_adds_then_completes_when_the_new_replica_is_in_sync() -> None:
    c = local_topic([0, 1])
    out, resp = reassign(c.image, "l", [1, 2])
    part = partition(out.image, "l", 0)
    assert "error" not in resp
    assert (part.replicas, part.adding_replicas, part.removing_replicas, part.isr) == ((1, 2, 0), (2,), (0,), (0, 1))
    assert part.leader == 0  # nothing moves until the new replica has caught up
    leader_epoch = part.leader_epoch
    done = run(out.image, "alter_partition", {
        "broker_id": 0, "broker_epoch": epoch_of(out.image, 0), "topic": "l", "partition": 0,
        "leader_epoch": part.leader_epoch, "partition_epoch": part.partition_epoch, "isr": [0, 1, 2]})
    final = partition(done.image, "l", 0)
    assert (final.replicas, final.isr, final.adding_replicas, final.removing_replicas) == ((1, 2), (1, 2), (), ())
    assert final.leader == 1 and final.leader_epoch == leader_epoch + 1


def test_local_reassignment_to_a_subset_completes_at_once() -> None:
    out, _resp = reassign(local_topic([0, 1, 2]).image, "l", [1, 2])
    part = partition(out.image, "l", 0)
    assert (part.replicas, part.isr, part.leader, part.adding_replicas) == ((1, 2), (1, 2), 1, ())


def test_cancel_local_reassignment_reverts_to_the_original_replicas() -> None:
    c = local_topic([0, 1])
    c.write("alter_partition_reassignments", {"reassignments": [{"topic": "l", "partition": 0, "replicas": [2, 3]}]})
    out, resp = reassign(c.image, "l", None)
    part = partition(out.image, "l", 0)
    assert "error" not in resp and (part.replicas, part.adding_replicas, part.removing_replicas) == ((0, 1), (), ())


def test_alter_partition_checks_leader_and_epochs() -> None:
    c = local_topic([0, 1])
    part = partition(c.image, "l", 0)
    base = {"broker_id": 0, "broker_epoch": epoch_of(c.image, 0), "topic": "l", "partition": 0,
            "leader_epoch": part.leader_epoch, "partition_epoch": part.partition_epoch, "isr": [0]}
    expect_error(c.image, "alter_partition", {**base, "broker_id": 1, "broker_epoch": epoch_of(c.image, 1)},
                 ErrorCode.NOT_LEADER_OR_FOLLOWER)
    expect_error(c.image, "alter_partition", {**base, "partition_epoch": 9}, ErrorCode.FENCED_LEADER_EPOCH)
    expect_error(c.image, "alter_partition", {**base, "isr": [1]}, ErrorCode.INVALID_REQUEST)
    expect_error(c.image, "alter_partition", {**base, "broker_epoch": 999}, ErrorCode.STALE_BROKER_EPOCH)
    out = run(c.image, "alter_partition", base)
    assert partition(out.image, "l", 0).isr == (0,) and out.reply["isr"] == [0]


def test_preferred_election_after_an_s3_move_elects_the_target_and_clears_the_deadline() -> None:
    c = s3_topic()
    c.write("alter_partition_reassignments", {"reassignments": [{"topic": "t", "partition": 0, "replicas": [2]}]})
    before = partition(c.image, "t", 0)
    out = run(c.image, "elect_leaders", {"election_type": "preferred", "partitions": [{"topic": "t", "partition": 0}]})
    part = partition(out.image, "t", 0)
    assert out.reply["results"] == [{"topic": "t", "partition": 0, "leader": 2, "leader_epoch": before.leader_epoch + 1}]
    assert (part.leader, part.reelection_deadline_ms, part.adding_replicas, part.removing_replicas) == (2, 0, (), ())


def test_election_not_needed() -> None:
    c = s3_topic()
    out = run(c.image, "elect_leaders", {"election_type": "preferred", "partitions": [{"topic": "t", "partition": 0}]})
    assert out.reply["results"][0]["error"] == "ELECTION_NOT_NEEDED" and out.records == ()
    everything = run(c.image, "elect_leaders", {"election_type": "preferred", "partitions": None})
    assert everything.reply["results"] == []


def test_preferred_leader_not_available() -> None:
    c = s3_topic(brokers=2, owner=1)
    c.write("alter_partition_reassignments", {"reassignments": [{"topic": "t", "partition": 0, "replicas": [0]}]})
    c.write("broker_heartbeat", {"broker_id": 0, "broker_epoch": epoch_of(c.image, 0),
                                 "metadata_offset": c.image.offset, "want_shutdown": True})
    out = run(c.image, "elect_leaders", {"partitions": [{"topic": "t", "partition": 0}]})
    assert out.reply["results"][0]["error"] == "PREFERRED_LEADER_NOT_AVAILABLE"


def test_preferred_election_moves_local_leadership_back_to_the_first_replica() -> None:
    c = local_topic([0, 1])
    c.clock_ms.advance(SESSION_TIMEOUT_MS + 1)  # type: ignore[attr-defined]
    for b in (1, 2, 3):
        c.last_heartbeat_ms[b] = c.clock_ms()
    c.tick()
    assert partition(c.image, "l", 0).leader == 1
    epoch = c.write("register_broker", {"broker_id": 0, "incarnation_id": "back", "log_dirs": []})["broker_epoch"]
    c.write("broker_heartbeat", {"broker_id": 0, "broker_epoch": epoch, "metadata_offset": c.image.offset})
    part = partition(c.image, "l", 0)
    assert part.isr == (1,)
    out = run(c.image, "elect_leaders", {"partitions": [{"topic": "l", "partition": 0}]})
    assert out.reply["results"][0]["error"] == "PREFERRED_LEADER_NOT_AVAILABLE"  # 0 is not in the ISR yet
    synced = run(c.image, "alter_partition", {"broker_id": 1, "broker_epoch": epoch_of(c.image, 1), "topic": "l",
                                              "partition": 0, "leader_epoch": part.leader_epoch,
                                              "partition_epoch": part.partition_epoch, "isr": [1, 0]})
    back = run(synced.image, "elect_leaders", {"partitions": [{"topic": "l", "partition": 0}]})
    assert partition(back.image, "l", 0).leader == 0


def test_unclean_election_picks_a_live_replica_outside_the_isr() -> None:
    c = local_topic([0, 1], brokers=2)
    c.write("alter_partition", {"broker_id": 0, "broker_epoch": epoch_of(c.image, 0), "topic": "l", "partition": 0,
                                "leader_epoch": 0, "partition_epoch": 0, "isr": [0]})
    c.write("broker_heartbeat", {"broker_id": 0, "broker_epoch": epoch_of(c.image, 0),
                                 "metadata_offset": c.image.offset, "want_shutdown": True})
    assert partition(c.image, "l", 0).leader == NO_LEADER
    clean = run(c.image, "elect_leaders", {"election_type": "preferred", "partitions": [{"topic": "l", "partition": 0}]})
    assert clean.reply["results"][0]["error"] == "PREFERRED_LEADER_NOT_AVAILABLE"
    out = run(c.image, "elect_leaders", {"election_type": "unclean", "partitions": [{"topic": "l", "partition": 0}]})
    part = partition(out.image, "l", 0)
    assert (part.leader, part.isr) == (1, (1,))


def test_unclean_election_not_needed_when_the_leader_is_alive() -> None:
    out = run(local_topic([0, 1]).image, "elect_leaders",
              {"election_type": "unclean", "partitions": [{"topic": "l", "partition": 0}]})
    assert out.reply["results"][0]["error"] == "ELECTION_NOT_NEEDED"


def test_eligible_leaders_not_available() -> None:
    c = s3_topic(brokers=1)
    c.write("broker_heartbeat", {"broker_id": 0, "broker_epoch": epoch_of(c.image, 0),
                                 "metadata_offset": c.image.offset, "want_shutdown": True})
    out = run(c.image, "elect_leaders", {"election_type": "unclean", "partitions": [{"topic": "t", "partition": 0}]})
    assert out.reply["results"][0]["error"] == "ELIGIBLE_LEADERS_NOT_AVAILABLE"


def test_bad_election_type() -> None:
    expect_error(s3_topic().image, "elect_leaders", {"election_type": "random"}, ErrorCode.INVALID_REQUEST)


def test_elect_all_partitions_reports_only_elections_made() -> None:
    c = controller(2)
    c.write("create_topics", {"topics": [{"name": "t", "assignments": {"0": [0], "1": [1], "2": [0]}}]})
    c.write("alter_partition_reassignments", {"reassignments": [
        {"topic": "t", "partition": 0, "replicas": [1]}, {"topic": "t", "partition": 2, "replicas": [1]}]})
    out = run(c.image, "elect_leaders", {"election_type": "preferred", "partitions": None})
    assert [(r["partition"], r["leader"]) for r in out.reply["results"]] == [(0, 1), (2, 1)]
    assert not out.image.topics.leaderless


def test_a_new_reassignment_replaces_one_in_progress() -> None:
    c = local_topic([0, 1])
    c.write("alter_partition_reassignments", {"reassignments": [{"topic": "l", "partition": 0, "replicas": [2, 3]}]})
    out, resp = reassign(c.image, "l", [1, 3])
    part = partition(out.image, "l", 0)
    assert "error" not in resp
    assert part.replicas[:2] == (1, 3) and set(part.removing_replicas) == {0, 2} and part.leader == 0


def test_the_six_step_move_through_the_controller() -> None:
    """Reassign, the old owner loses the partition, closes its streams, asks for the election;
    the new owner gains it and opens the streams with the new leader epoch."""
    from metadata_quorum.delta import TopicIdPartition
    from metadata_quorum.ops.topics import partition_streams

    c = s3_topic(brokers=2, owner=0)
    seen: dict[int, list[str]] = {0: [], 1: []}

    def listener(_base, _records, delta, _image) -> None:  # type: ignore[no-untyped-def]
        for b in (0, 1):
            changes = delta.local_changes(b)
            seen[b] += [f"gained@{r.leader_epoch}" for r in changes.gained.values()]
            seen[b] += ["lost" for _ in changes.lost]

    tid = c.image.topics.get("t").topic_id  # type: ignore[union-attr]
    streams = partition_streams(c.image, tid, 0)
    epoch0 = partition(c.image, "t", 0).leader_epoch
    for sid in streams.values():
        c.write("open_stream", {"stream_id": sid, "epoch": epoch0, "broker_id": 0, "broker_epoch": epoch_of(c.image, 0)})
    c.listeners.append(listener)
    c.write("alter_partition_reassignments", {"reassignments": [{"topic": "t", "partition": 0, "replicas": [1]}]})
    assert seen == {0: ["lost"], 1: []}
    # no leader in the log, but the owner-to-be is named, at the epoch its election gives it
    named = partition(c.image, "t", 0).named_leader(c.image.cluster.is_active)
    # the new owner cannot open before the old one closed
    with_epoch = partition(c.image, "t", 0).leader_epoch + 1
    expect_error(c.image, "open_stream", {"stream_id": streams["data"], "epoch": with_epoch, "broker_id": 1,
                                          "broker_epoch": epoch_of(c.image, 1)}, ErrorCode.STREAM_NOT_CLOSED,
                 now_ms=c.clock_ms(), heartbeats={0: c.clock_ms(), 1: c.clock_ms()})
    for sid in streams.values():
        c.write("close_stream", {"stream_id": sid, "epoch": epoch0, "broker_id": 0, "broker_epoch": epoch_of(c.image, 0)})
    c.write("elect_leaders", {"partitions": [{"topic": "t", "partition": 0}]})
    part = partition(c.image, "t", 0)
    assert part.leader == 1 and seen[1] == [f"gained@{part.leader_epoch}"]
    assert named == (part.leader, part.leader_epoch) == part.named_leader(c.image.cluster.is_active)
    for sid in streams.values():
        reply = c.write("open_stream", {"stream_id": sid, "epoch": part.leader_epoch, "broker_id": 1,
                                        "broker_epoch": epoch_of(c.image, 1)})
        assert reply["epoch"] == part.leader_epoch
    assert TopicIdPartition(tid, 0) not in c.image.topics.leaderless


def test_cancel_back_to_an_unregistered_owner_is_settled_by_tick() -> None:
    c = s3_topic(brokers=3, owner=0)
    c.write("alter_partition_reassignments", {"reassignments": [{"topic": "t", "partition": 0, "replicas": [1]}]})
    c.write("unregister_broker", {"broker_id": 0})
    out, resp = reassign(c.image, "t", None)
    part = partition(out.image, "t", 0)
    assert "error" not in resp and (part.replicas, part.directories, part.leader) == ((0,), ("",), NO_LEADER)
    settled = run(out.image, "tick", {}, now_ms=part.reelection_deadline_ms,
                  heartbeats={1: part.reelection_deadline_ms, 2: part.reelection_deadline_ms})
    final = partition(settled.image, "t", 0)
    assert final.leader in (1, 2) and final.replicas == (final.leader,)


def test_an_election_sent_behind_the_closing_commit_elects_only_once_the_streams_are_closed() -> None:
    """``require_closed_streams``: the old owner sends its election right behind the commit that
    closes the partition's streams (one request, run in order); a stream still open (the commit
    was refused, or not sent yet) means no election, and nothing written."""
    from metadata_quorum.ops.topics import partition_streams

    c = s3_topic(brokers=2, owner=0)
    tid = c.image.topics.get("t").topic_id  # type: ignore[union-attr]
    streams = partition_streams(c.image, tid, 0)
    epoch0 = partition(c.image, "t", 0).leader_epoch
    for sid in streams.values():
        c.write("open_stream", {"stream_id": sid, "epoch": epoch0, "broker_id": 0, "broker_epoch": epoch_of(c.image, 0)})
    c.write("alter_partition_reassignments", {"reassignments": [{"topic": "t", "partition": 0, "replicas": [1]}]})
    args = {"election_type": "preferred", "require_closed_streams": True, "partitions": [{"topic": "t", "partition": 0}]}
    refused = run(c.image, "elect_leaders", args)
    assert refused.reply["results"][0]["error"] == "STREAM_NOT_CLOSED" and refused.records == ()
    c.write("close_stream", {"stream_id": streams["data"], "epoch": epoch0, "broker_id": 0,
                             "broker_epoch": epoch_of(c.image, 0)})
    assert run(c.image, "elect_leaders", args).reply["results"][0]["error"] == "STREAM_NOT_CLOSED"  # meta is open
    c.write("close_stream", {"stream_id": streams["meta"], "epoch": epoch0, "broker_id": 0,
                             "broker_epoch": epoch_of(c.image, 0)})
    before = partition(c.image, "t", 0)
    out = run(c.image, "elect_leaders", args)
    assert out.reply["results"] == [{"topic": "t", "partition": 0, "leader": 1, "leader_epoch": before.leader_epoch + 1}]
    expect_error(c.image, "elect_leaders", dict(args, require_closed_streams="yes"), ErrorCode.INVALID_REQUEST)


def test_the_owner_to_be_is_named_only_while_it_is_active() -> None:
    """A hand-over names the first active replica of the target; when it is fenced the next
    active one, which is what ``tick`` elects at the deadline; when none is, no leader."""
    c = s3_topic(brokers=3, owner=0)
    c.write("alter_partition_reassignments", {"reassignments": [{"topic": "t", "partition": 0, "replicas": [1]}]})
    part = partition(c.image, "t", 0)
    assert part.named_leader(lambda b: True) == (1, part.leader_epoch + 1)
    assert part.named_leader(lambda b: b != 1) == (NO_LEADER, part.leader_epoch)
    settled = partition(s3_topic(brokers=3, owner=0).image, "t", 0)
    assert settled.named_leader(lambda b: False) == (settled.leader, settled.leader_epoch)


def test_a_reassignment_of_more_partitions_than_a_slice_is_answered_whole_and_in_order() -> None:
    from metadata_quorum import op_slices

    c = controller(3)
    n = op_slices.SLICE_ITEMS + 7
    c.write("create_topics", {"topics": [{"name": "big", "num_partitions": n,
                                          "assignments": {str(p): [p % 3] for p in range(n)}}]})
    items = [{"topic": "big", "partition": p, "replicas": [(p + 1) % 3]} for p in range(n)]
    items.append({"topic": "nope", "partition": 0, "replicas": [1]})  # an item's error stays its own
    reply = c.write("alter_partition_reassignments", {"reassignments": items})
    assert [(r["topic"], r["partition"]) for r in reply["responses"]] == [(i["topic"], i["partition"]) for i in items]
    assert [r.get("error", "NONE") for r in reply["responses"]][:-1] == ["NONE"] * n
    assert reply["responses"][-1]["error"] == "UNKNOWN_TOPIC_OR_PARTITION"
    assert all(partition(c.image, "big", p).replicas == ((p + 1) % 3,) for p in range(n))
