"""Operation arguments are taken as written: no coercion of types, bounded counts (issue: validate at the door)."""
from __future__ import annotations

import pytest

from metadata_quorum.ops.topics import create_topics
from metadata_quorum.kernel.validation import MAX_PARTITIONS_PER_REQUEST
from tests.quorum.quorum_helpers import controller, make_ctx, partition, run


@pytest.mark.parametrize("value", [1.5, 1.0, "1", True, " 1", [1], {"p": 1}, -1, 2**31])
def test_a_reassignment_names_its_partition_with_an_integer(value: object) -> None:
    c = controller(3)
    c.write("create_topics", {"topics": [{"name": "t", "num_partitions": 2}]})
    before = {p: partition(c.image, "t", p).replicas for p in (0, 1)}
    target = [b for b in range(3) if b not in before[1]][:1]
    out = run(c.image, "alter_partition_reassignments",
              {"reassignments": [{"topic": "t", "partition": value, "replicas": target}]})
    (resp,) = out.reply["responses"]
    assert resp["error"] in ("INVALID_REQUEST", "UNKNOWN_TOPIC_OR_PARTITION")
    assert out.records == ()


@pytest.mark.parametrize("field", ["num_partitions", "replication_factor"])
@pytest.mark.parametrize("value", ["3", "1", 1.0, 2.5, True, [1]])
def test_counts_are_integers_not_strings_or_floats(field: str, value: object) -> None:
    out = run(controller(3).image, "create_topics", {"topics": [{"name": "t", field: value}]})
    (item,) = out.reply["topics"]
    assert item["error"] == "INVALID_REQUEST" and out.records == ()


def test_num_partitions_has_a_maximum_per_request() -> None:
    image = controller(3).image
    for args in ({"topics": [{"name": "t", "num_partitions": 200_000}], "validate_only": True},
                 {"topics": [{"name": "a", "num_partitions": MAX_PARTITIONS_PER_REQUEST},
                             {"name": "b", "num_partitions": 1}]}):
        out = run(image, "create_topics", args)
        assert out.reply["topics"][-1]["error"] == "INVALID_PARTITIONS"
        assert "max_partitions_per_request" in out.reply["topics"][-1]["message"]
    small = create_topics(image, {"topics": [{"name": "t", "num_partitions": 5}]}, make_ctx(image, 1),
                          max_partitions_per_request=4)
    assert small.reply["topics"][0]["error"] == "INVALID_PARTITIONS" and small.records == ()


@pytest.mark.parametrize("key", [" 0", "+0", "00", "-0", "٠", "0.0"])
def test_assignment_keys_are_plain_decimal(key: str) -> None:
    out = run(controller(3).image, "create_topics", {"topics": [{"name": "t", "assignments": {key: [0]}}]})
    assert out.reply["topics"][0]["error"] == "INVALID_REPLICA_ASSIGNMENT" and out.records == ()


def test_unhashable_topic_names_are_an_item_error() -> None:
    out = run(controller(3).image, "create_topics", {"topics": [{"name": ["t"]}, {"name": {"a": 1}}]})
    assert [t["error"] for t in out.reply["topics"]] == ["INVALID_TOPIC_EXCEPTION"] * 2
