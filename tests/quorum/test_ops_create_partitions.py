"""CreatePartitions, DeleteTopics by id, and the IncrementalAlterConfigs / AlterConfigs forms of
alter_configs: Kafka's rules and error codes, one per test."""
from __future__ import annotations

import pytest

from metadata_quorum.kernel.errors import ErrorCode
from metadata_quorum.records import partition_stream_key
from tests.quorum.quorum_helpers import controller, expect_error, partition, run


def grow(c, **topic):  # type: ignore[no-untyped-def]
    out = run(c.image, "create_partitions", {"topics": [topic]})
    return out, out.reply["topics"][0]


def with_topic(partitions: int = 2, brokers: int = 3, **extra):  # type: ignore[no-untyped-def]
    c = controller(brokers)
    c.write("create_topics", {"topics": [{"name": "t", "num_partitions": partitions, **extra}]})
    return c


def test_growing_adds_partitions_with_their_streams() -> None:
    c = with_topic(2)
    out, item = grow(c, name="t", count=4)
    assert "error" not in item and item["num_partitions"] == 4
    tid = item["topic_id"]
    assert sorted(out.image.topics.get("t").partitions) == [0, 1, 2, 3]  # type: ignore[union-attr]
    for p in (2, 3):
        reg = partition(out.image, "t", p)
        assert len(reg.replicas) == 1 and reg.leader == reg.replicas[0]
        assert partition_stream_key(tid, p, "data") in out.image.kv
        assert partition_stream_key(tid, p, "meta") in out.image.kv
    assert partition(out.image, "t", 0) == partition(c.image, "t", 0)  # existing partitions untouched


@pytest.mark.parametrize("count,fragment", [(2, "Topic already has 2 partition(s)."),
                                            (1, "currently has 2 partition(s); 1 would not be an increase")])
def test_a_count_that_does_not_grow_is_invalid_partitions(count: int, fragment: str) -> None:
    out, item = grow(with_topic(2), name="t", count=count)
    assert item["error"] == "INVALID_PARTITIONS" and fragment in item["message"]
    assert out.records == ()


def test_unknown_topic() -> None:
    out, item = grow(controller(1), name="nope", count=3)
    assert item["error"] == "UNKNOWN_TOPIC_OR_PARTITION" and out.records == ()


def test_explicit_assignments_are_used_in_order() -> None:
    out, item = grow(with_topic(1), name="t", count=3, assignments=[[2], [0]])
    assert "error" not in item
    assert [partition(out.image, "t", p).replicas for p in (1, 2)] == [(2,), (0,)]


@pytest.mark.parametrize("assignments,fragment", [
    ([[1]], "Attempted to add 2 additional partition(s), but only 1 assignment(s) were specified."),
    ([[1], [7]], "includes broker 7, but no such broker is registered"),
    ([[1], [1, 2]], "but this is not consistent with previous partitions, which have 1 replica(s)"),
    ([[1], []], "empty replica list"),
])
def test_invalid_replica_assignment(assignments: list[list[int]], fragment: str) -> None:
    out, item = grow(with_topic(1), name="t", count=3, assignments=assignments)
    assert item["error"] == "INVALID_REPLICA_ASSIGNMENT" and fragment in item["message"], item
    assert out.records == ()


def test_local_topics_keep_their_replication_factor() -> None:
    c = with_topic(1, storage="local", replication_factor=2)
    out, item = grow(c, name="t", count=2)
    assert "error" not in item and len(partition(out.image, "t", 1).replicas) == 2


def test_validate_only_changes_nothing() -> None:
    c = with_topic(1)
    out = run(c.image, "create_partitions", {"topics": [{"name": "t", "count": 5}], "validate_only": True})
    assert out.reply["topics"][0]["num_partitions"] == 5 and out.records == ()


def test_topics_fail_alone_and_duplicates_are_refused() -> None:
    c = with_topic(1)
    out = run(c.image, "create_partitions", {"topics": [{"name": "t", "count": 2}, {"name": "nope", "count": 2}]})
    assert [t.get("error") for t in out.reply["topics"]] == [None, "UNKNOWN_TOPIC_OR_PARTITION"]
    out = run(c.image, "create_partitions", {"topics": [{"name": "t", "count": 2}, {"name": "t", "count": 3}]})
    assert [t.get("error") for t in out.reply["topics"]] == ["INVALID_REQUEST", "INVALID_REQUEST"]
    assert out.records == ()


def test_malformed_request_is_refused_whole() -> None:
    expect_error(controller(1).image, "create_partitions", {"topics": "t"}, ErrorCode.INVALID_REQUEST)


def test_delete_topics_by_id() -> None:
    c = with_topic(1)
    topic_id = c.image.topics.by_name["t"]
    out = run(c.image, "delete_topics", {"topic_ids": [topic_id, "AAAAAAAAAAAAAAAAAAAAAA"]})
    assert out.reply["topics"][0] == {"name": "t", "topic_id": topic_id}
    assert out.reply["topics"][1]["error"] == "UNKNOWN_TOPIC_ID"
    assert "t" not in out.image.topics.by_name


def configs_after(c, resource: dict) -> dict:  # type: ignore[type-arg]
    out = run(c.image, "alter_configs", {"resources": [{"type": "topic", "name": "t", **resource}]})
    return dict(out.image.configs.get("topic", "t"))


def test_append_and_subtract_start_from_the_default() -> None:
    c = with_topic(1)
    ops = [{"op": "append", "key": "cleanup.policy", "value": "compact"}]
    assert configs_after(c, {"ops": ops}) == {"cleanup.policy": "delete,compact"}
    ops = [{"op": "subtract", "key": "cleanup.policy", "value": "delete"},
           {"op": "append", "key": "cleanup.policy", "value": "compact"}]
    assert configs_after(c, {"ops": ops}) == {"cleanup.policy": "compact"}


def test_append_to_a_non_list_config_is_invalid_config() -> None:
    c = with_topic(1)
    err = expect_error(c.image, "alter_configs", {"resources": [{"type": "topic", "name": "t", "ops": [
        {"op": "append", "key": "retention.ms", "value": "1"}]}]}, ErrorCode.INVALID_CONFIG)
    assert "Config value append is not allowed for config key: retention.ms" in err.message


def test_set_with_a_null_value_is_invalid_request() -> None:
    expect_error(with_topic(1).image, "alter_configs", {"resources": [{"type": "topic", "name": "t", "ops": [
        {"op": "set", "key": "retention.ms", "value": None}]}]}, ErrorCode.INVALID_REQUEST)


def test_replace_deletes_the_keys_not_named() -> None:
    c = with_topic(1, configs={"retention.ms": "1000", "segment.ms": "2000"})
    assert configs_after(c, {"configs": {"segment.ms": "3000"}, "replace": True}) == {"segment.ms": "3000"}


def test_validate_only_alter_configs_checks_but_writes_nothing() -> None:
    c = with_topic(1)
    out = run(c.image, "alter_configs", {"resources": [{"type": "topic", "name": "t", "configs": {
        "retention.ms": "5"}}], "validate_only": True})
    assert out.records == ()
    expect_error(c.image, "alter_configs", {"resources": [{"type": "topic", "name": "t", "configs": {
        "retention.ms": "x"}}], "validate_only": True}, ErrorCode.INVALID_CONFIG)
