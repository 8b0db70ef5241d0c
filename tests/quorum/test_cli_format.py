"""Kafka's output formats of `ferry metadata-quorum` and `ferry topics`, from fixed answers."""
from __future__ import annotations

import pytest

from metadata_quorum.kernel.errors import ErrorCode
from tools.metadata_quorum_cmd import format_replication, format_status
from tools.topics_cmd import TopicCommandError, format_describe, parse_configs, parse_replica_assignment

STATUS = {
    "cluster_id": "ferry-local", "leader_id": 2, "leader_epoch": 5, "high_watermark": 120,
    "max_follower_lag": 3, "max_follower_lag_time_ms": 40,
    "current_voters": [{"id": 1, "directory_id": "A", "endpoints": ["CONTROLLER://127.0.0.1:1"]},
                       {"id": 2, "directory_id": "B", "endpoints": ["CONTROLLER://127.0.0.1:2"]}],
    "current_observers": [{"id": 7, "directory_id": "d1"}],
}


def test_status_lines() -> None:
    assert format_status(STATUS).splitlines() == [
        "ClusterId:              ferry-local",
        "LeaderId:               2",
        "LeaderEpoch:            5",
        "HighWatermark:          120",
        "MaxFollowerLag:         3",
        "MaxFollowerLagTimeMs:   40",
        'CurrentVoters:          [{"id": 1, "directoryId": "A", "endpoints": ["CONTROLLER://127.0.0.1:1"]}, '
        '{"id": 2, "directoryId": "B", "endpoints": ["CONTROLLER://127.0.0.1:2"]}]',
        'CurrentObservers:       [{"id": 7, "directoryId": "d1"}]',
    ]


def test_replication_table_raw_and_human_readable() -> None:
    body = {"replicas": [
        {"node_id": 2, "directory_id": "B", "log_end_offset": 120, "lag": 0, "last_fetch_timestamp": 9_000,
         "last_caught_up_timestamp": 9_000, "status": "Leader"},
        {"node_id": 1, "directory_id": "A", "log_end_offset": 117, "lag": 3, "last_fetch_timestamp": 8_950,
         "last_caught_up_timestamp": -1, "status": "Follower"},
    ]}
    header, leader, follower = format_replication(body, human=False, now_ms=10_000).splitlines()
    assert header.split() == ["NodeId", "DirectoryId", "LogEndOffset", "Lag", "LastFetchTimestamp",
                              "LastCaughtUpTimestamp", "Status"]
    assert leader.split() == ["2", "B", "120", "0", "9000", "9000", "Leader"]
    assert follower.split() == ["1", "A", "117", "3", "8950", "-1", "Follower"]
    human = format_replication(body, human=True, now_ms=10_000).splitlines()
    assert "1000 ms ago" in human[1] and "1050 ms ago" in human[2] and "unknown" in human[2]


def test_describe_lines() -> None:
    topic = {"name": "t", "topic_id": "ID", "storage": "s3", "configs": {"retention.ms": "5"}, "partitions": [
        {"partition": 0, "leader": 1, "replicas": [1], "isr": [1]},
        {"partition": 1, "leader": -1, "replicas": [2], "isr": [2], "adding_replicas": [3], "removing_replicas": [2]},
    ]}
    assert format_describe(topic) == [
        "Topic: t\tTopicId: ID\tPartitionCount: 2\tReplicationFactor: 1\tConfigs: retention.ms=5\tStorage: s3",
        "\tTopic: t\tPartition: 0\tLeader: 1\tReplicas: 1\tIsr: 1",
        "\tTopic: t\tPartition: 1\tLeader: none\tReplicas: 2\tIsr: 2\tAdding Replicas: 3\tRemoving Replicas: 2",
    ]


def test_config_and_assignment_parsing() -> None:
    assert parse_configs(["a=1", "b = x=y"]) == {"a": "1", "b": "x=y"}
    assert parse_replica_assignment("1:2,2:3,3:1") == {"0": [1, 2], "1": [2, 3], "2": [3, 1]}
    with pytest.raises(TopicCommandError) as err:
        parse_configs(["=1"])
    assert err.value.error is ErrorCode.INVALID_CONFIG
    with pytest.raises(TopicCommandError) as err:
        parse_replica_assignment("1:x")
    assert err.value.error is ErrorCode.INVALID_REPLICA_ASSIGNMENT


def test_describe_lines_show_an_s3_partitions_assigned_brokers() -> None:
    topic = {"name": "t", "topic_id": "ID", "storage": "s3", "configs": {}, "partitions": [
        {"partition": 0, "leader": 2, "replicas": [2], "isr": [2], "reported_replicas": [2, 3, 1],
         "reported_isr": [2, 3]},
    ]}
    assert format_describe(topic) == [
        "Topic: t\tTopicId: ID\tPartitionCount: 1\tReplicationFactor: 3\tConfigs: \tStorage: s3",
        "\tTopic: t\tPartition: 0\tLeader: 2\tReplicas: 2,3,1\tIsr: 2,3",
    ]
