"""The pure parts of tools/peer: the verifiable tools' events and read-back check, and the
parsers of what Kafka's tools print."""
from __future__ import annotations

import pytest

from tools.peer.checks import parse_api_versions, parse_table, parse_topic_describe
from tools.peer.kafka_tools import TOOL_CLASSES, KafkaTools, PeerMissing, jars_dir
from tools.peer.verifiable import (Ack, ConsumerEvents, Consumed, check_read_back, consumer_events, max_ack_gap_ms,
                                   merged_reads, producer_events)


def _ack(p: int, o: int, v: int, ts: int = 0) -> Ack:
    return Ack(p, o, str(v), ts)


def test_producer_and_consumer_events_are_parsed_from_the_tools_lines() -> None:
    lines = [
        '{"timestamp":1,"name":"startup_complete"}',
        '{"timestamp":2,"name":"producer_send_success","key":null,"value":"0","offset":0,"topic":"t","partition":2}',
        '{"timestamp":3,"name":"producer_send_error","exception":"class X","message":"boom","topic":"t","key":null,"value":"1"}',
        "Option --producer.config is deprecated",  # a notice, not an event
        '{"timestamp":4,"name":"shutdown_complete"}',
        '{"timestamp":5,"name":"tool_data","sent":2,"acked":1,"target_throughput":-1,"avg_throughput":1.0}',
    ]
    p = producer_events(lines)
    assert p.acks == [Ack(2, 0, "0", 2)] and p.errors == ["class X: boom (value 1)"]
    assert p.sent == 2 and p.finished
    c = consumer_events([
        '{"timestamp":7,"name":"partitions_assigned","partitions":[{"topic":"t","partition":0}]}',
        '{"timestamp":8,"name":"record_data","key":null,"value":"5","topic":"t","partition":0,"offset":3}',
        '{"timestamp":9,"name":"offsets_committed","offsets":[],"success":false,"error":"REBALANCE_IN_PROGRESS"}',
        '{"timestamp":9,"name":"partitions_revoked","partitions":[]}',
    ])
    assert c.records == [Consumed(0, 3, "5", 8)] and c.assignments == 1 and c.revocations == 1
    assert c.failed_commits == ["REBALANCE_IN_PROGRESS"]


def test_read_back_exactly_once() -> None:
    acks = [_ack(0, 0, 0), _ack(1, 0, 1), _ack(0, 1, 2)]
    reads = [Consumed(0, 0, "0"), Consumed(1, 0, "1"), Consumed(0, 1, "2")]
    r = check_read_back(acks, reads)
    assert r.exactly_once and (r.acked, r.read_back) == (3, 3)


def test_read_back_counts_what_was_lost_redelivered_reordered_or_written_twice() -> None:
    acks = [_ack(0, 0, 0), _ack(0, 1, 1), _ack(0, 2, 2), _ack(1, 0, 3)]
    reads = [Consumed(0, 0, "0"), Consumed(0, 2, "2"), Consumed(0, 1, "1"), Consumed(0, 2, "2"),
             Consumed(1, 1, "3")]  # partition 1: the value 3 again at offset 1, offset 0 never read
    r = check_read_back(acks, reads)
    assert (r.lost, r.redelivered, r.read_back) == (1, 1, 3)
    assert r.out_of_order == 1  # offset 1 read after offset 2
    assert r.written_twice == 0 and not r.exactly_once
    dup = check_read_back([_ack(0, 0, 7)], [Consumed(0, 0, "7"), Consumed(0, 1, "7")])
    assert dup.written_twice == 1 and dup.lost == 0
    wrong = check_read_back([_ack(0, 0, 7)], [Consumed(0, 0, "8")])
    assert wrong.mismatched == 1 and wrong.read_back == 0
    values_back = check_read_back([], [Consumed(0, 0, "9"), Consumed(0, 1, "4")])
    assert values_back.out_of_order == 1  # a smaller value at a higher offset


def test_reads_of_several_members_merge_in_time_order_and_gaps() -> None:
    a, b = ConsumerEvents(), ConsumerEvents()
    a.records = [Consumed(0, 0, "0", 10), Consumed(0, 2, "2", 30)]
    b.records = [Consumed(0, 1, "1", 20)]
    assert [r.offset for r in merged_reads([a, b])] == [0, 1, 2]
    acks = [_ack(0, 0, 0, 100), _ack(1, 0, 1, 150), _ack(0, 1, 2, 400)]
    assert max_ack_gap_ms(acks) == 250 and max_ack_gap_ms(acks, 0) == 300 and max_ack_gap_ms(acks, 5) == 0


def test_tool_output_parsers() -> None:
    apis = parse_api_versions("127.0.0.1:1 (id: 1 rack: null isFenced: false) -> (\n\tProduce(0): 3 to 11 [usable: 11],\n"
                              "\tOffsetDelete(47): UNSUPPORTED,\n\tSaslHandshake(17): 1 [usable: 1]\n)\n"
                              "127.0.0.1:2 (id: 2 rack: null isFenced: false) -> (\n\tProduce(0): UNSUPPORTED\n)\n")
    assert apis == {"Produce": "3 to 11 [usable: 11]", "OffsetDelete": "UNSUPPORTED", "SaslHandshake": "1 [usable: 1]"}
    text = ("\nGROUP           TOPIC  PARTITION  CURRENT-OFFSET  HOST            CLIENT-ID\n"
            "g               t      0          15              /127.0.0.1      c-1\n"
            "g               t      1          -                               -\n\n"
            "GROUP  STATE\ng2     Empty\n")
    rows = parse_table(text, "GROUP")
    assert rows[1] == {"GROUP": "g", "TOPIC": "t", "PARTITION": "1", "CURRENT-OFFSET": "-", "HOST": "", "CLIENT-ID": "-"}
    assert rows[0]["HOST"] == "/127.0.0.1" and rows[2] == {"GROUP": "g2", "STATE": "Empty"}
    d = parse_topic_describe("Topic: t\tTopicId: x\tPartitionCount: 2\tReplicationFactor: 1\tConfigs: retention.ms=5\n"
                             "\tTopic: t\tPartition: 0\tLeader: 3\tReplicas: 3\tIsr: 3\tElr: N/A\n"
                             "\tTopic: t\tPartition: 1\tLeader: none\tReplicas: 1,2\tIsr: \n", "t")
    assert (d.partition_count, d.configs, d.leaders, d.replicas) == (2, "retention.ms=5", {0: 3, 1: -1},
                                                                     {0: (3,), 1: (1, 2)})


def test_tool_commands_and_a_missing_install(tmp_path) -> None:
    with pytest.raises(PeerMissing, match="make kafka-jars"):
        jars_dir(tmp_path)
    tools = KafkaTools(jars=tmp_path, java="/usr/bin/java", heap_mb=128)
    cmd = tools.command("kafka-topics", ["--list"])
    assert cmd[:2] == ["/usr/bin/java", "-Xmx128m"]
    assert cmd[-4:] == ["-cp", f"{tmp_path}/*", "org.apache.kafka.tools.TopicCommand", "--list"]
    with pytest.raises(ValueError, match="unknown Kafka tool"):
        tools.command("kafka-nothing", [])
    assert all(cls.startswith("org.apache.kafka.tools.") for cls in TOOL_CLASSES.values())
