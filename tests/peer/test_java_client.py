"""Kafka's Java client (its verifiable producer and consumer, unmodified) through six partition
moves and a kill -9 of the group's coordinator: every acknowledged record is read back by the
group exactly once, in order per partition. `make conformance` runs a longer version."""
from __future__ import annotations

import pytest

from tools.peer.java_client import JavaClientPlan, run
from tools.peer.kafka_tools import KafkaTools

pytestmark = pytest.mark.integration


async def test_idempotent_java_producer_and_a_group_through_moves_and_a_kill(cluster, kafka_tools: KafkaTools,
                                                                            tmp_path) -> None:
    plan = JavaClientPlan(records=4500, rate_per_s=250, partitions=4, moves=6, kill=True, consumers=2)
    report = await run(cluster, kafka_tools, tmp_path / "java-client", plan)
    print(report.summary())
    rb = report.read_back
    assert report.producer_errors == (), report.producer_errors[:3]
    assert report.sent == plan.records and rb.acked == plan.records, report.summary()
    assert rb.exactly_once, f"{rb.summary()}: {rb.examples}"
    assert rb.read_back == plan.records
    assert len(report.moves) == plan.moves and report.killed_broker is not None
    assert report.failed_commits == ()
