"""Dynamic configs and the key/value store."""
from __future__ import annotations

import pytest

from metadata_quorum.kernel.errors import ErrorCode, FerryError
from metadata_quorum.operations import READ_OPERATIONS, run_read, run_write
from tests.quorum.quorum_helpers import controller, expect_error, make_ctx, run


def test_alter_configs_sets_and_deletes_keys() -> None:
    c = controller(1)
    c.write("create_topics", {"topics": [{"name": "t"}]})
    out = run(c.image, "alter_configs", {"resources": [
        {"type": "topic", "name": "t", "configs": {"retention.ms": "1000", "min.insync.replicas": 2}},
        {"type": "broker", "name": "0", "configs": {"throttle": "1"}},
        {"type": "cluster", "name": "", "configs": {"flag": True}}]})
    assert dict(out.image.configs.get("topic", "t")) == {"retention.ms": "1000", "min.insync.replicas": "2"}
    assert dict(out.image.configs.get("cluster", "")) == {"flag": "true"}
    deleted = run(out.image, "alter_configs", {"resources": [{"type": "topic", "name": "t", "configs": {"min.insync.replicas": None}}]})
    assert dict(deleted.image.configs.get("topic", "t")) == {"retention.ms": "1000"}
    described = READ_OPERATIONS["describe_configs"](deleted.image, {"resources": [{"type": "broker", "name": "0"}]})
    assert described == {"resources": [{"type": "broker", "name": "0", "configs": {"throttle": "1"}}]}


def test_unknown_resource_type_is_invalid_config() -> None:
    expect_error(controller(1).image, "alter_configs",
                 {"resources": [{"type": "client_metrics", "name": "g", "configs": {}}]}, ErrorCode.INVALID_CONFIG)


def test_group_configs_are_checked_as_kafka_checks_them_and_need_no_group() -> None:
    """KIP-848 group configs: set on a group nobody has created, within Kafka's
    group.consumer.min/max.* bounds, unknown (share.*) names refused, the whole config after the
    change checked, and a refused change leaves the image as it was."""
    image = controller(1).image
    out = run(image, "alter_configs", {"resources": [
        {"type": "group", "name": "g", "ops": [{"op": "set", "key": "consumer.session.timeout.ms", "value": "50000"},
                                              {"op": "set", "key": "consumer.heartbeat.interval.ms", "value": "6000"}]}]})
    assert dict(out.image.configs.get("group", "g")) == {"consumer.session.timeout.ms": "50000",
                                                         "consumer.heartbeat.interval.ms": "6000"}
    described = READ_OPERATIONS["describe_configs"](out.image, {"resources": [{"type": "group", "name": "none"}]})
    assert described == {"resources": [{"type": "group", "name": "none", "configs": {}}]}
    for key, value, message in (
            ("consumer.session.timeout.ms", "44999", "must be greater than or equal to group.consumer.min.session"),
            ("consumer.session.timeout.ms", "60001", "must be less than or equal to group.consumer.max.session"),
            ("consumer.heartbeat.interval.ms", "4999", "greater than or equal to group.consumer.min.heartbeat"),
            ("consumer.heartbeat.interval.ms", "15001", "less than or equal to group.consumer.max.heartbeat"),
            ("consumer.session.timeout.ms", "abc", "Not a number of type INT"),
            ("consumer.session.timeout.ms", "0", "Value must be at least 1"),
            ("share.session.timeout.ms", "50000", "Unknown group config name: share.session.timeout.ms")):
        with pytest.raises(FerryError) as info:
            run(out.image, "alter_configs", {"resources": [
                {"type": "group", "name": "g", "ops": [{"op": "set", "key": key, "value": value}]}]})
        assert info.value.error is ErrorCode.INVALID_CONFIG and message in str(info.value), (key, value, info.value)
    # APPEND on a group config, the empty (default) group name
    expect_error(out.image, "alter_configs", {"resources": [{"type": "group", "name": "g", "ops": [
        {"op": "append", "key": "consumer.session.timeout.ms", "value": "1"}]}]}, ErrorCode.INVALID_CONFIG)
    expect_error(out.image, "alter_configs", {"resources": [{"type": "group", "name": "", "configs": {
        "consumer.session.timeout.ms": "50000"}}]}, ErrorCode.INVALID_REQUEST)
    deleted = run(out.image, "alter_configs", {"resources": [{"type": "group", "name": "g", "ops": [
        {"op": "delete", "key": "consumer.session.timeout.ms"}]}]})
    assert dict(deleted.image.configs.get("group", "g")) == {"consumer.heartbeat.interval.ms": "6000"}


def test_alter_configs_is_all_or_nothing() -> None:
    c = controller(1)
    expect_error(c.image, "alter_configs", {"resources": [
        {"type": "broker", "name": "0", "configs": {"a": "1"}},
        {"type": "topic", "name": "missing", "configs": {"a": "1"}}]}, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    expect_error(c.image, "alter_configs", {"resources": [{"type": "broker", "name": "x", "configs": {}}]},
                 ErrorCode.INVALID_CONFIG)
    expect_error(c.image, "alter_configs", {"resources": [{"type": "broker", "name": "0", "configs": {"a": [1]}}]},
                 ErrorCode.INVALID_CONFIG)


def test_put_and_get_kv() -> None:
    c = controller(0)
    out = run(c.image, "put_kv", {"key": "a", "value": "1"})
    assert READ_OPERATIONS["get_kv"](out.image, {"key": "a"}) == {"key": "a", "value": "1"}
    gone = run(out.image, "put_kv", {"key": "a", "value": None})
    assert READ_OPERATIONS["get_kv"](gone.image, {"key": "a"}) == {"key": "a", "value": None}
    expect_error(c.image, "put_kv", {"key": "", "value": "1"}, ErrorCode.INVALID_REQUEST)
    expect_error(c.image, "put_kv", {"key": "a", "value": 3}, ErrorCode.INVALID_REQUEST)


def test_unknown_operations_and_non_object_args() -> None:
    c = controller(0)
    with pytest.raises(FerryError) as e:
        run_write(c.image, "drop_everything", {}, make_ctx(c.image, 0))
    assert e.value.error == ErrorCode.INVALID_REQUEST
    with pytest.raises(FerryError):
        run_write(c.image, "put_kv", ["k"], make_ctx(c.image, 0))
    with pytest.raises(FerryError):
        run_read(c.image, "nope", {})


def test_describe_cluster_lists_brokers() -> None:
    c = controller(2)
    reply = c.read("describe_cluster")
    assert [b["broker_id"] for b in reply["brokers"]] == [0, 1]
    assert reply["brokers"][0]["fenced"] is False and reply["metadata_offset"] == c.image.offset
