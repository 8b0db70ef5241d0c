"""CreateTopics / DeleteTopics / describe: Kafka's rules and error codes, one per test."""
from __future__ import annotations

import pytest

from metadata_quorum.kernel.errors import ErrorCode
from metadata_quorum.image import STREAM_ID_COUNTER_KEY
from metadata_quorum.records import NO_LEADER, STREAM_CLOSED, partition_stream_key
from metadata_quorum.operations import READ_OPERATIONS
from metadata_quorum.s3_replicas import reported_isr, reported_replicas
from tests.quorum.quorum_helpers import controller, epoch_of, expect_error, partition, run


def create_one(c, **topic):  # type: ignore[no-untyped-def]
    out = run(c.image, "create_topics", {"topics": [topic]})
    return out, out.reply["topics"][0]


@pytest.mark.parametrize("name", ["", ".", "..", "a" * 250, "bad/name", "spa ce", "ü"])
def test_illegal_topic_names(name: str) -> None:
    c = controller(1)
    out, item = create_one(c, name=name)
    assert item["error"] == "INVALID_TOPIC_EXCEPTION" and item["message"]
    assert out.records == ()


def test_legal_topic_name_limits() -> None:
    c = controller(1)
    out = run(c.image, "create_topics", {"topics": [{"name": "a" * 249}, {"name": "a.b_c-D9"}, {"name": "..."}]})
    assert all("error" not in t for t in out.reply["topics"])
    assert set(out.image.topics.by_name) == {"a" * 249, "a.b_c-D9", "..."}


def test_topic_already_exists() -> None:
    c = controller(1)
    c.write("create_topics", {"topics": [{"name": "t"}]})
    out, item = create_one(c, name="t")
    assert item["error"] == "TOPIC_ALREADY_EXISTS" and out.records == ()


def test_duplicate_names_in_one_request_are_refused() -> None:
    c = controller(1)
    out = run(c.image, "create_topics", {"topics": [{"name": "t"}, {"name": "t"}, {"name": "u"}]})
    errors = [t.get("error") for t in out.reply["topics"]]
    assert errors == ["INVALID_REQUEST", "INVALID_REQUEST", None]
    assert set(out.image.topics.by_name) == {"u"}


@pytest.mark.parametrize("n", [0, -2])
def test_invalid_partitions(n: int) -> None:
    _out, item = create_one(controller(1), name="t", num_partitions=n)
    assert item["error"] == "INVALID_PARTITIONS"


def test_replication_factor_above_live_brokers() -> None:
    _out, item = create_one(controller(2), name="t", replication_factor=3, storage="local")
    assert item["error"] == "INVALID_REPLICATION_FACTOR" and "only 2 broker(s)" in item["message"]


def test_replication_factor_below_one() -> None:
    _out, item = create_one(controller(2), name="t", replication_factor=0, storage="local")
    assert item["error"] == "INVALID_REPLICATION_FACTOR"


def test_no_live_brokers_means_invalid_replication_factor() -> None:
    _out, item = create_one(controller(0), name="t")
    assert item["error"] == "INVALID_REPLICATION_FACTOR"


def test_s3_topics_take_a_replication_factor_with_one_owner() -> None:
    c = controller(3)
    out, item = create_one(c, name="t", replication_factor=3, num_partitions=3)
    assert "error" not in item and item["replication_factor"] == 3
    owners = set()
    for p in range(3):
        part = partition(out.image, "t", p)
        reported = reported_replicas(out.image.kv, part)
        assert len(part.replicas) == 1 and part.leader == part.replicas[0] == reported[0]  # one owner
        assert sorted(reported) == [0, 1, 2]
        assert reported_isr(out.image.kv, part, out.image.cluster.is_active) == reported
        owners.add(part.leader)
    assert owners == {0, 1, 2}  # owners spread as RF-1 topics' are


def test_s3_replication_factor_above_live_brokers_and_the_default() -> None:
    _out, item = create_one(controller(3), name="t", replication_factor=4)
    assert item["error"] == "INVALID_REPLICATION_FACTOR" and "only 3 broker(s)" in item["message"]
    out, item = create_one(controller(3), name="t", replication_factor=-1, num_partitions=-1,
                           default_replication_factor=2, default_num_partitions=4)
    assert (item["replication_factor"], item["num_partitions"]) == (2, 4)
    assert {len(reported_replicas(out.image.kv, partition(out.image, "t", p))) for p in range(4)} == {2}


def test_s3_explicit_assignment_is_reported_and_its_first_active_broker_owns() -> None:
    c = controller(3)
    out, item = create_one(c, name="t", assignments={"0": [1, 2, 0], "1": [2, 0, 1]})
    assert "error" not in item and item["replication_factor"] == 3
    for p, wanted in ((0, (1, 2, 0)), (1, (2, 0, 1))):
        part = partition(out.image, "t", p)
        assert part.replicas == (wanted[0],) and part.leader == wanted[0]
        assert reported_replicas(out.image.kv, part) == wanted


def test_an_inactive_assigned_broker_leaves_the_reported_isr() -> None:
    c = controller(3)
    out, _item = create_one(c, name="t", assignments={"0": [0, 1, 2]})
    part = partition(out.image, "t", 0)
    assert reported_isr(out.image.kv, part, lambda b: b != 2) == (0, 1)
    assert reported_isr(out.image.kv, part, lambda b: False) == (0,)  # the owner at least


def test_deleting_an_s3_topic_removes_its_assigned_replicas() -> None:
    c = controller(3)
    c.write("create_topics", {"topics": [{"name": "t", "replication_factor": 2, "num_partitions": 2}]})
    assert any(k.startswith("replicas/") for k in c.image.kv)
    c.write("delete_topics", {"names": ["t"]})
    assert not any(k.startswith("replicas/") for k in c.image.kv)


def test_new_partitions_of_an_s3_topic_keep_its_replication_factor() -> None:
    c = controller(3)
    c.write("create_topics", {"topics": [{"name": "t", "replication_factor": 2}]})
    out = run(c.image, "create_partitions", {"topics": [{"name": "t", "count": 3}]})
    assert all("error" not in t for t in out.reply["topics"])
    assert [len(reported_replicas(out.image.kv, partition(out.image, "t", p))) for p in range(3)] == [2, 2, 2]
    refused = run(c.image, "create_partitions", {"topics": [{"name": "t", "count": 2, "assignments": [[1]]}]})
    assert refused.reply["topics"][0]["error"] == "INVALID_REPLICA_ASSIGNMENT"


@pytest.mark.parametrize("assignments,fragment", [
    ({"0": []}, "empty replica list"),
    ({"0": [1, 1]}, "includes the broker 1 more than once"),
    ({"0": [9]}, "broker 9"),
    ({"0": [0], "2": [1]}, "consecutive"),
    ({"0": [0, 1], "1": [1]}, "a partition with 1 replica(s), but this is not consistent with previous partitions, "
                              "which have 2 replica(s)"),
])
def test_invalid_explicit_assignments(assignments: dict, fragment: str) -> None:  # type: ignore[type-arg]
    _out, item = create_one(controller(3), name="t", storage="local", assignments=assignments)
    assert item["error"] == "INVALID_REPLICA_ASSIGNMENT" and fragment in item["message"]


def test_explicit_assignment_is_used_with_first_replica_leading() -> None:
    out, item = create_one(controller(3), name="t", storage="local", assignments={"0": [2, 0], "1": [1, 2]})
    assert "error" not in item
    p0, p1 = partition(out.image, "t", 0), partition(out.image, "t", 1)
    assert (p0.replicas, p0.isr, p0.leader) == ((2, 0), (2, 0), 2)
    assert (p1.replicas, p1.leader, p1.leader_epoch, p1.partition_epoch) == ((1, 2), 1, 0, 0)


def test_default_placement_is_round_robin_over_unfenced_brokers() -> None:
    c = controller(3)
    out, _ = create_one(c, name="t", num_partitions=6, replication_factor=2, storage="local")
    replicas = [partition(out.image, "t", p).replicas for p in range(6)]
    leaders = [r[0] for r in replicas]
    assert all(leaders.count(b) == 2 for b in range(3))
    assert all(r[1] == (r[0] + 1) % 3 for r in replicas)
    again, _ = create_one(c, name="t", num_partitions=6, replication_factor=2, storage="local")
    assert [partition(again.image, "t", p).replicas for p in range(6)] == replicas  # deterministic


def test_s3_partitions_get_closed_data_and_meta_streams() -> None:
    c = controller(2)
    out, item = create_one(c, name="t", num_partitions=2)
    tid = item["topic_id"]
    ids = [int(out.image.kv[partition_stream_key(tid, p, kind)]) for p in range(2) for kind in ("data", "meta")]
    assert ids == [0, 1, 2, 3]
    for sid in ids:
        stream = out.image.streams.streams[sid]
        assert (stream.state, stream.epoch, stream.owner, stream.end_offset) == (STREAM_CLOSED, -1, -1, 0)
    assert out.image.kv[STREAM_ID_COUNTER_KEY] == "4"


def test_local_partitions_have_no_streams() -> None:
    out, item = create_one(controller(2), name="t", storage="local")
    assert not out.image.streams.streams
    assert partition_stream_key(item["topic_id"], 0, "data") not in out.image.kv


def test_stream_ids_are_never_reused_after_delete() -> None:
    c = controller(1)
    c.write("create_topics", {"topics": [{"name": "a", "num_partitions": 2}]})
    c.write("delete_topics", {"names": ["a"]})
    assert not c.image.streams.streams
    out, item = create_one(c, name="b")
    assert int(out.image.kv[partition_stream_key(item["topic_id"], 0, "data")]) == 4


def test_topic_id_is_derived_from_name_and_offset() -> None:
    c = controller(1)
    _o1, a = create_one(c, name="t")
    _o2, b = create_one(c, name="t")
    assert a["topic_id"] == b["topic_id"] and len(a["topic_id"]) == 22
    c.write("put_kv", {"key": "k", "value": "v"})
    _o3, d = create_one(c, name="t")
    assert d["topic_id"] != a["topic_id"]


def test_validate_only_changes_nothing() -> None:
    out = run(controller(1).image, "create_topics", {"topics": [{"name": "t", "num_partitions": 3}], "validate_only": True})
    assert out.records == () and out.reply["topics"][0]["num_partitions"] == 3


def test_unknown_storage_mode_is_invalid() -> None:
    _out, item = create_one(controller(1), name="t", storage="tape")
    assert item["error"] == "INVALID_REQUEST"


def test_topic_configs_are_recorded() -> None:
    out, _ = create_one(controller(1), name="t", configs={"retention.ms": "60000"})
    assert dict(out.image.configs.get("topic", "t")) == {"retention.ms": "60000"}


def test_malformed_request_is_refused_whole() -> None:
    expect_error(controller(1).image, "create_topics", {"topics": "t"}, ErrorCode.INVALID_REQUEST)


def test_delete_topics_removes_topic_streams_keys_and_configs() -> None:
    c = controller(1)
    tid = c.write("create_topics", {"topics": [{"name": "t", "num_partitions": 2, "configs": {"cleanup.policy": "compact"}}]})["topics"][0]["topic_id"]
    c.write("create_topics", {"topics": [{"name": "keep"}]})
    sid = int(c.image.kv[partition_stream_key(tid, 0, "data")])
    ep = epoch_of(c.image, 0)
    c.write("open_stream", {"stream_id": sid, "epoch": 0, "broker_id": 0, "broker_epoch": ep})
    c.write("commit_object", {"object_key": "o1", "size": 5, "broker_id": 0, "broker_epoch": ep,
                              "ranges": [{"stream_id": sid, "epoch": 0, "start_offset": 0, "end_offset": 3}]})
    out = run(c.image, "delete_topics", {"names": ["t", "missing"]})
    assert out.reply["topics"][0] == {"name": "t", "topic_id": tid}
    assert out.reply["topics"][1]["error"] == "UNKNOWN_TOPIC_OR_PARTITION"
    assert out.reply["removed_objects"] == ["o1"]
    assert set(out.image.topics.by_name) == {"keep"}
    assert not any(k.startswith(f"partition/{tid}/") for k in out.image.kv)
    assert len(out.image.streams.streams) == 2  # keep's streams only
    assert not out.image.configs.get("topic", "t")


def test_describe_topics() -> None:
    c = controller(2)
    c.write("create_topics", {"topics": [{"name": "t", "num_partitions": 2}]})
    reply = READ_OPERATIONS["describe_topics"](c.image, {"names": ["t", "nope"]})
    t, nope = reply["topics"]
    assert t["name"] == "t" and t["storage"] == "s3" and len(t["partitions"]) == 2
    assert t["partitions"][0]["streams"] == {"data": 0, "meta": 1}
    assert t["partitions"][0]["leader"] != NO_LEADER
    assert nope["error"] == "UNKNOWN_TOPIC_OR_PARTITION"


@pytest.mark.parametrize("limit", [1, 2, 3, 4, 5, 7, 100])
def test_paged_describe_gives_every_partition_once_in_order(limit: int) -> None:
    c = controller(2)
    c.write("create_topics", {"topics": [{"name": "a", "num_partitions": 3}, {"name": "b", "num_partitions": 4},
                                         {"name": "e", "num_partitions": 1}]})
    names = ["b", "gone", "a", "e"]
    whole = READ_OPERATIONS["describe_topics"](c.image, {"names": names})
    assert "next_cursor" not in whole
    seen: list[tuple[str, int]] = []
    errors: list[str] = []
    args: dict = {"names": names, "partition_limit": limit}
    pages = 0
    while True:
        reply = READ_OPERATIONS["describe_topics"](c.image, args)
        pages += 1
        assert sum(len(t.get("partitions", [])) for t in reply["topics"]) <= limit
        for t in reply["topics"]:
            if "error" in t:
                errors.append(t["name"])
            seen.extend((t["name"], p["partition"]) for p in t.get("partitions", []))
        if "next_cursor" not in reply:
            break
        args = {**args, "cursor": reply["next_cursor"]}
        assert pages < 20
    expected = [(t["name"], p["partition"]) for t in whole["topics"] if "partitions" in t for p in t["partitions"]]
    assert seen == expected and len(expected) == 8
    assert errors == ["gone"]
    assert pages == -(-8 // limit)


@pytest.mark.parametrize("args, message", [
    ({"names": ["t"], "partition_limit": 0}, "partition_limit"),
    ({"names": ["t"], "partition_limit": "2"}, "partition_limit"),
    ({"names": ["t"], "cursor": {"name": "other", "partition": 0}}, "cursor.name"),
    ({"names": ["t"], "cursor": {"name": "t", "partition": -1}}, "cursor.partition"),
    ({"names": ["t"], "cursor": {"name": "t", "partition": 0, "x": 1}}, "unknown fields"),
    ({"names": ["t"], "cursor": ["t", 0]}, "cursor"),
])
def test_paged_describe_refuses_a_bad_page_request(args: dict, message: str) -> None:
    c = controller(1)
    c.write("create_topics", {"topics": [{"name": "t", "num_partitions": 2}]})
    with pytest.raises(Exception) as e:
        READ_OPERATIONS["describe_topics"](c.image, args)
    assert getattr(e.value, "error", None) is ErrorCode.INVALID_REQUEST and message in str(e.value)


def test_explicit_assignments_decide_partitions_and_replication_factor() -> None:
    out, item = create_one(controller(3), name="t", num_partitions=3, replication_factor=1, storage="local",
                           assignments={"0": [0, 1]})
    assert (item["num_partitions"], item["replication_factor"]) == (1, 2)
    assert partition(out.image, "t", 0).replicas == (0, 1)


def test_creating_a_topic_gives_its_first_leader_the_partition_as_gained() -> None:
    from metadata_quorum.delta import MetadataDelta

    c = controller(2)
    out, item = create_one(c, name="t", num_partitions=2)
    delta = MetadataDelta(c.image).replay_all(out.records)
    gained = {tp.partition for b in (0, 1) for tp in delta.local_changes(b).gained}
    assert gained == {0, 1}


def test_names_differing_only_by_dot_and_underscore_collide() -> None:
    c = controller(1)
    c.write("create_topics", {"topics": [{"name": "a.b"}]})
    _out, item = create_one(c, name="a_b")
    assert item["error"] == "INVALID_TOPIC_EXCEPTION" and "collides with existing topic: a.b" in item["message"]
    out = run(c.image, "create_topics", {"topics": [{"name": "x_y"}, {"name": "x.y"}]})
    assert [t.get("error") for t in out.reply["topics"]] == [None, "INVALID_TOPIC_EXCEPTION"]


def test_topic_config_values_must_be_strings() -> None:
    _out, item = create_one(controller(1), name="t", configs={"retention.ms": None})
    assert item["error"] == "INVALID_CONFIG"
