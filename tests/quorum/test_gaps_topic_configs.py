"""Topic configs are Kafka's: an unknown name or a value that does not parse is INVALID_CONFIG
with Kafka's message, and nothing changes."""
from __future__ import annotations

from typing import Any

import pytest

from metadata_quorum.delta import replay_records
from metadata_quorum.kernel.errors import ErrorCode
from metadata_quorum.local_controller import LocalController
from metadata_quorum.ops.configs import TOPIC_CONFIGS
from metadata_quorum.records import ConfigRecord
from tests.quorum.quorum_helpers import Outcome, controller, expect_error, run

BAD_VALUES = [
    ("retention.ms", "soon", "Invalid value soon for configuration retention.ms: Not a number of type LONG"),
    ("retention.ms", "-2", "Invalid value -2 for configuration retention.ms: Value must be at least -1"),
    ("retention.ms", "99999999999999999999", "Not a number of type LONG"),
    ("cleanup.policy", "forever", "Invalid value forever for configuration cleanup.policy: "
                                  "String must be one of: compact, delete"),
    ("cleanup.policy", "compact,", "String must be one of: compact, delete"),
    ("min.insync.replicas", "0", "Invalid value 0 for configuration min.insync.replicas: Value must be at least 1"),
    ("min.insync.replicas", "1.5", "Not a number of type INT"),
    ("min.insync.replicas", "3000000000", "Not a number of type INT"),
    ("unclean.leader.election.enable", "yes", "Expected value to be either true or false"),
    ("min.cleanable.dirty.ratio", "1.5", "Value must be no more than 1"),
    ("message.timestamp.type", "createtime", "String must be one of: CreateTime, LogAppendTime"),
    ("leader.replication.throttled.replicas", "0-1", "must be the literal '*' or a list of replicas"),
]

GOOD_VALUES = [("retention.ms", "-1"), ("retention.ms", " 60000 "), ("cleanup.policy", "compact, delete"),
               ("min.insync.replicas", "+2"), ("unclean.leader.election.enable", "TRUE"),
               ("min.cleanable.dirty.ratio", "0.5"), ("leader.replication.throttled.replicas", "0:1,1:2"),
               ("follower.replication.throttled.replicas", "*"), ("retention.bytes", "-1")]


def create_one(c: LocalController, **topic: Any) -> tuple[Outcome, dict[str, Any]]:
    out = run(c.image, "create_topics", {"topics": [topic]})
    return out, out.reply["topics"][0]


def _with_topic() -> LocalController:
    c = controller(1)
    c.write("create_topics", {"topics": [{"name": "t", "configs": {"retention.ms": "1000"}}]})
    return c


def test_create_topic_refuses_an_unknown_config_name_and_creates_nothing() -> None:
    c = controller(1)
    out, item = create_one(c, name="t", configs={"retention.ms": "1000", "retention.hours": "5"})
    assert (item["error"], item["code"]) == ("INVALID_CONFIG", ErrorCode.INVALID_CONFIG.code)
    assert item["message"] == "Unknown topic config name: retention.hours"
    assert out.records == () and out.image.topics.get("t") is None


@pytest.mark.parametrize(("key", "value", "message"), BAD_VALUES)
def test_create_topic_refuses_a_value_that_does_not_parse(key: str, value: str, message: str) -> None:
    out, item = create_one(controller(1), name="t", configs={key: value})
    assert item["error"] == "INVALID_CONFIG" and message in item["message"]
    assert out.records == ()


def test_one_bad_topic_does_not_stop_the_others() -> None:
    out = run(controller(1).image, "create_topics", {"topics": [
        {"name": "bad", "configs": {"no.such": "1"}}, {"name": "good", "configs": {"cleanup.policy": "compact"}}]})
    assert [t.get("error") for t in out.reply["topics"]] == ["INVALID_CONFIG", None]
    assert set(out.image.topics.by_name) == {"good"}
    assert dict(out.image.configs.get("topic", "good")) == {"cleanup.policy": "compact"}


@pytest.mark.parametrize(("key", "value"), GOOD_VALUES)
def test_values_kafka_accepts_are_stored_as_given(key: str, value: str) -> None:
    out, item = create_one(controller(1), name="t", configs={key: value})
    assert "error" not in item
    assert dict(out.image.configs.get("topic", "t")) == {key: value}


def test_alter_configs_refuses_an_unknown_topic_config_name_and_changes_nothing() -> None:
    c = _with_topic()
    error = expect_error(c.image, "alter_configs", {"resources": [
        {"type": "topic", "name": "t", "configs": {"retention.ms": "5", "retention.hours": "5"}}]},
        ErrorCode.INVALID_CONFIG)
    assert error.message == "Unknown topic config name: retention.hours"
    assert dict(c.image.configs.get("topic", "t")) == {"retention.ms": "1000"}


@pytest.mark.parametrize(("key", "value", "message"), BAD_VALUES)
def test_alter_configs_refuses_a_value_that_does_not_parse(key: str, value: str, message: str) -> None:
    c = _with_topic()
    error = expect_error(c.image, "alter_configs", {"resources": [
        {"type": "broker", "name": "0", "configs": {"throttle": "1"}},
        {"type": "topic", "name": "t", "configs": {key: value}}]}, ErrorCode.INVALID_CONFIG)
    assert message in error.message
    assert dict(c.image.configs.get("topic", "t")) == {"retention.ms": "1000"}
    assert not c.image.configs.get("broker", "0")


def test_alter_configs_checks_numbers_and_booleans_given_as_json() -> None:
    c = _with_topic()
    out = run(c.image, "alter_configs", {"resources": [{"type": "topic", "name": "t", "configs": {
        "min.insync.replicas": 2, "preallocate": True}}]})
    assert dict(out.image.configs.get("topic", "t")) == {"retention.ms": "1000", "min.insync.replicas": "2",
                                                         "preallocate": "true"}
    expect_error(c.image, "alter_configs", {"resources": [{"type": "topic", "name": "t", "configs": {
        "min.insync.replicas": 0}}]}, ErrorCode.INVALID_CONFIG)
    expect_error(c.image, "alter_configs", {"resources": [{"type": "topic", "name": "t", "configs": {
        "retention.ms": 1.5}}]}, ErrorCode.INVALID_CONFIG)


def test_deleting_an_unknown_name_is_refused_unless_it_is_stored() -> None:
    c = _with_topic()
    error = expect_error(c.image, "alter_configs", {"resources": [
        {"type": "topic", "name": "t", "configs": {"no.such": None}}]}, ErrorCode.INVALID_CONFIG)
    assert error.message == "Unknown topic config name: no.such"
    # A key stored before names were checked (an older log) can still be removed.
    image = replay_records(c.image, (ConfigRecord(resource_type="topic", resource_name="t", key="old", value="1"),))
    out = run(image, "alter_configs", {"resources": [{"type": "topic", "name": "t", "configs": {"old": None}}]})
    assert dict(out.image.configs.get("topic", "t")) == {"retention.ms": "1000"}


def test_broker_and_cluster_configs_are_not_checked_against_topic_names() -> None:
    c = _with_topic()
    out = run(c.image, "alter_configs", {"resources": [
        {"type": "broker", "name": "0", "configs": {"throttle": "1"}},
        {"type": "cluster", "name": "", "configs": {"flag": True}}]})
    assert dict(out.image.configs.get("broker", "0")) == {"throttle": "1"}


def test_every_known_name_accepts_some_value() -> None:
    samples = {"cleanup.policy": "delete", "compression.type": "zstd", "message.timestamp.type": "CreateTime",
               "min.cleanable.dirty.ratio": "0.5", "leader.replication.throttled.replicas": "*",
               "follower.replication.throttled.replicas": "*", "segment.bytes": "1048576"}
    booleans = {"preallocate", "remote.log.copy.disable", "remote.log.delete.on.disable", "remote.storage.enable",
                "unclean.leader.election.enable"}
    configs = {k: samples.get(k, "false" if k in booleans else "5") for k in TOPIC_CONFIGS}
    out, item = create_one(controller(1), name="t", configs=configs)
    assert "error" not in item, item
    assert dict(out.image.configs.get("topic", "t")) == configs
