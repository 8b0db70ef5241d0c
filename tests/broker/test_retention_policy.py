"""The retention policy (pure) and the delete-records offset file parser."""
from __future__ import annotations

import json

import pytest

from broker.retention import RetentionConfig, apply_retention, expired_below, retention_start
from metadata_quorum.kernel.errors import ErrorCode, FerryError
from stream_storage.control import ObjectRef
from tools.client import TopicPartition
from tools.delete_records_cmd import parse_offset_json
from tools.reassign_cmd import CommandError

# five objects of 100 bytes each for the stream: [0,10) [10,20) ... [40,50)
OBJECTS = [ObjectRef(f"k{i}", 10 * i, 10 * i + 10, 1000, 0, 100) for i in range(5)]
NO_TIME = RetentionConfig(retention_ms=-1)


def test_bytes_keep_at_least_the_limit_and_trim_whole_objects() -> None:
    assert retention_start(OBJECTS, 0, [], 0, RetentionConfig(-1, 250)) == 20  # 300 left ≥ 250
    assert retention_start(OBJECTS, 0, [], 0, RetentionConfig(-1, 300)) == 20
    assert retention_start(OBJECTS, 0, [], 0, RetentionConfig(-1, 301)) == 10
    assert retention_start(OBJECTS, 0, [], 0, RetentionConfig(-1, 0)) == 50
    assert retention_start(OBJECTS, 0, [], 0, RetentionConfig(-1, 500)) == 0
    assert retention_start(OBJECTS, 0, [], 0, NO_TIME) == 0
    # a start already inside an object: that object still counts, nothing goes backwards
    assert retention_start(OBJECTS, 25, [], 0, RetentionConfig(-1, 250)) == 25
    assert retention_start(OBJECTS, 25, [], 0, RetentionConfig(-1, 200)) == 30


def test_time_uses_the_running_maximum_of_the_time_index() -> None:
    # (running max timestamp, batch base offset): batches at 0..44, times 1000..1450
    index = [(1000 + 10 * off, off) for off in range(0, 50, 2)]
    cfg = RetentionConfig(retention_ms=100)
    # cutoff 1200: the first entry reaching it is base 20, so [0, 20) is older: two objects
    assert retention_start(OBJECTS, 0, index, 1300, cfg) == 20
    assert retention_start(OBJECTS, 0, index, 1299, cfg) == 20  # cutoff 1199: base 20 reaches it first
    assert retention_start(OBJECTS, 0, index, 1210, cfg) == 10  # cutoff 1110: base 12; [10, 20) not all older
    assert retention_start(OBJECTS, 0, index, 1000, cfg) == 0
    assert retention_start(OBJECTS, 0, index, 10_000, cfg) == 50  # everything expired
    assert retention_start(OBJECTS, 0, [], 10_000, cfg) == 0  # nothing known: nothing goes
    assert expired_below([(5, 0), (7, 3)], 6) == 3 and expired_below([(5, 0)], 5) is None


def test_compact_policy_and_bad_configs() -> None:
    assert RetentionConfig.from_topic_configs({"cleanup.policy": "compact", "retention.bytes": "0"}).delete_policy \
        is False
    assert retention_start(OBJECTS, 0, [], 0, RetentionConfig.from_topic_configs(
        {"cleanup.policy": "compact", "retention.bytes": "0"})) == 0
    assert RetentionConfig.from_topic_configs({"cleanup.policy": "compact,delete"}).delete_policy
    assert RetentionConfig.from_topic_configs({}) == RetentionConfig(604_800_000, -1, True)
    for bad in ({"retention.ms": "x"}, {"retention.bytes": "-2"}):
        with pytest.raises(FerryError) as info:
            RetentionConfig.from_topic_configs(bad)
        assert info.value.error is ErrorCode.INVALID_CONFIG


class FakePartition:
    def __init__(self, topic: str, start: int) -> None:
        self.topic, self.log_start_offset, self.closed, self.fenced = topic, start, False, False
        self.trims: list[int] = []

    async def committed_objects(self) -> list[ObjectRef]:
        return OBJECTS

    def time_index_entries(self) -> list[tuple[int, int]]:
        return []

    async def delete_records_before(self, offset: int) -> int:
        if self.topic == "moving":
            raise FerryError(ErrorCode.NOT_LEADER_OR_FOLLOWER, "moved")
        self.trims.append(offset)
        self.log_start_offset = offset
        return offset


async def test_a_pass_trims_what_configs_ask_and_survives_errors() -> None:
    parts = [FakePartition("a", 0), FakePartition("moving", 0), FakePartition("bad", 0), FakePartition("none", 0)]
    configs = {"a": {"retention.bytes": "200"}, "moving": {"retention.bytes": "0"}, "bad": {"retention.ms": "?"},
               "none": {}}
    assert await apply_retention(parts, lambda t: configs[t], 0) == 1
    assert parts[0].trims == [30] and parts[2].trims == [] and parts[3].trims == []
    assert await apply_retention(parts, lambda t: configs[t], 0) == 0  # nothing more to do


def test_offset_json_file_is_kafkas_and_strict() -> None:
    ok = json.dumps({"partitions": [{"topic": "t", "partition": 1, "offset": -1}], "version": 1})
    assert parse_offset_json(ok) == [(TopicPartition("t", 1), -1)]
    for bad in ("{", "[]", json.dumps({"partitions": []}), json.dumps({"partitions": [{"topic": "t"}]}),
                json.dumps({"partitions": [{"topic": "t", "partition": 0, "offset": -2}]}),
                json.dumps({"partitions": [{"topic": "t", "partition": 0, "offset": "5"}]}),
                json.dumps({"partitions": [{"topic": "t", "partition": 0, "offset": 5}], "version": 2}),
                json.dumps({"partitions": [{"topic": "t", "partition": 0, "offset": 5}] * 2})):
        with pytest.raises(CommandError):
            parse_offset_json(bad)
