"""The reassignment, election and assignment errors carry KRaft's error codes and KRaft's wording
(ReplicationControlManager), each checked on an image the failed item left unchanged."""
from __future__ import annotations

from typing import Any

import pytest

from metadata_quorum.kernel.errors import ErrorCode
from tests.quorum.quorum_helpers import controller, epoch_of, run


def cluster():  # type: ignore[no-untyped-def]
    c = controller(3)
    c.write("create_topics", {"topics": [{"name": "t", "assignments": {"0": [0]}},
                                         {"name": "l", "storage": "local", "assignments": {"0": [1, 2]}}]})
    return c


@pytest.mark.parametrize("item,error,message", [
    ({"topic": "nope", "partition": 0, "replicas": [1]}, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
     "Unable to find a topic named nope."),
    ({"topic": "t", "partition": 3, "replicas": [1]}, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
     "Unable to find partition t:3."),
    ({"topic": "l", "partition": 0, "replicas": []}, ErrorCode.INVALID_REPLICA_ASSIGNMENT,
     "The manual partition assignment includes an empty replica list."),
    ({"topic": "l", "partition": 0, "replicas": [9, 2, 2]}, ErrorCode.INVALID_REPLICA_ASSIGNMENT,
     "The manual partition assignment includes the broker 2 more than once."),
    ({"topic": "l", "partition": 0, "replicas": [9, 7, 0]}, ErrorCode.INVALID_REPLICA_ASSIGNMENT,
     "The manual partition assignment includes broker 7, but no such broker is registered."),
    ({"topic": "t", "partition": 0, "replicas": None}, ErrorCode.NO_REASSIGNMENT_IN_PROGRESS,
     "No partition reassignment is in progress."),
])
def test_reassignment_errors_use_kraft_wording(item: dict[str, Any], error: ErrorCode, message: str) -> None:
    c = cluster()
    out = run(c.image, "alter_partition_reassignments", {"reassignments": [item]})
    resp = out.reply["responses"][0]
    assert (resp["error"], resp["code"], resp["message"]) == (error.name, error.code, message)
    assert out.records == () and out.image.same_content(c.image)


@pytest.mark.parametrize("election_type,target,error,message", [
    ("preferred", {"topic": "nope", "partition": 0}, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "No such topic as nope"),
    ("unclean", {"topic": "t", "partition": 4}, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "No such partition as t-4"),
    ("preferred", {"topic": "l", "partition": 0}, ErrorCode.ELECTION_NOT_NEEDED,
     "Leader election not needed for topic partition."),
    ("unclean", {"topic": "t", "partition": 0}, ErrorCode.ELECTION_NOT_NEEDED,
     "Leader election not needed for topic partition."),
])
def test_election_errors_use_kraft_wording(election_type: str, target: dict[str, Any], error: ErrorCode,
                                           message: str) -> None:
    c = cluster()
    out = run(c.image, "elect_leaders", {"election_type": election_type, "partitions": [target]})
    result = out.reply["results"][0]
    assert (result["error"], result["code"], result["message"]) == (error.name, error.code, message)
    assert out.records == ()


def test_not_available_errors_start_with_kraft_wording_and_say_why() -> None:
    c = cluster()
    c.write("broker_heartbeat", {"broker_id": 1, "broker_epoch": epoch_of(c.image, 1),
                                 "metadata_offset": c.image.offset, "want_shutdown": True})
    assert c.image.topics.get("l").partitions[0].leader == 2  # type: ignore[union-attr]
    preferred = run(c.image, "elect_leaders", {"election_type": "preferred",
                                               "partitions": [{"topic": "l", "partition": 0}]})
    result = preferred.reply["results"][0]
    assert result["error"] == "PREFERRED_LEADER_NOT_AVAILABLE" and result["code"] == 80
    assert result["message"] == "The preferred leader was not available. Preferred replica 1 is not both active " \
                                "and in the ISR [2]."
    c.write("broker_heartbeat", {"broker_id": 0, "broker_epoch": epoch_of(c.image, 0),
                                 "metadata_offset": c.image.offset, "want_shutdown": True})
    c.write("broker_heartbeat", {"broker_id": 2, "broker_epoch": epoch_of(c.image, 2),
                                 "metadata_offset": c.image.offset, "want_shutdown": True})
    unclean = run(c.image, "elect_leaders", {"election_type": "unclean", "partitions": [{"topic": "t", "partition": 0}]})
    result = unclean.reply["results"][0]
    assert result["error"] == "ELIGIBLE_LEADERS_NOT_AVAILABLE" and result["code"] == 83
    assert result["message"].startswith("Eligible topic partition leaders are not available. ")
    assert unclean.records == ()


@pytest.mark.parametrize("assignments,message", [
    ({"0": []}, "The manual partition assignment includes an empty replica list."),
    ({"0": [1, 1]}, "The manual partition assignment includes the broker 1 more than once."),
    ({"0": [0, 1], "1": [2]}, "The manual partition assignment includes a partition with 1 replica(s), but this is "
                              "not consistent with previous partitions, which have 2 replica(s)."),
])
def test_create_topic_assignment_errors_use_kraft_wording(assignments: dict[str, Any], message: str) -> None:
    c = controller(3)
    out = run(c.image, "create_topics", {"topics": [{"name": "x", "storage": "local", "assignments": assignments}]})
    item = out.reply["topics"][0]
    assert (item["error"], item["message"]) == ("INVALID_REPLICA_ASSIGNMENT", message) and out.records == ()
