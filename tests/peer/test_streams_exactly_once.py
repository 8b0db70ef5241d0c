"""Kafka Streams' own word count (``WordCountDemo`` from Maven Central, unmodified) with
``processing.guarantee=exactly_once_v2`` on Ferry, while its partitions move and brokers die.

Between the batches of input lines: six moves (the input, output, repartition and changelog
partitions, and the ``__transaction_state`` partition coordinating the application's
transactions), a kill -9 of a broker that does not coordinate them, then a kill -9 of the broker
that does (named by Kafka's own ``kafka-transactions list``). Read back with read_committed, the
last count of each word equals its count in the input: no input counted twice, none lost.
"""
from __future__ import annotations

import asyncio
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from broker.groups import partition_for_group
from broker.kafka.txn_apis import DEFAULT_TXN_PARTITIONS, TXN_TOPIC
from tools.admin import Admin
from tools.client import TopicPartition
from tools.peer.kafka_tools import KafkaTools
from tools.peer.streams_wordcount import (APPLICATION_ID, STREAMS_JARS, parse_transactions_list, run_word_count,
                                          sample_text)

MOVES = 6


def _app_transactions(tools: KafkaTools, bootstrap: str, timeout_s: float = 90.0) -> dict[str, int]:
    """The word count's transactional ids and the broker coordinating each (Kafka's own tool),
    once the application has begun its first transaction."""
    deadline = time.monotonic() + timeout_s
    while True:
        run = tools.run("kafka-transactions", "--bootstrap-server", bootstrap, "list", timeout_s=60)
        assert run.ok, run.describe()
        txns = {tid: c for tid, c in parse_transactions_list(run.stdout).items() if tid.startswith(APPLICATION_ID)}
        if txns or time.monotonic() > deadline:
            return txns
        time.sleep(1.0)


async def _move_one(cluster: Any, tp: TopicPartition) -> str:
    """Move ``tp`` to the next broker and wait until it leads it."""
    brokers = sorted(cluster.kafka_ports)
    async with Admin(bootstrap_controllers=cluster.controller_bootstrap) as admin:
        state = await admin.wait_for_leader(tp, timeout_s=30)
        to = brokers[(brokers.index(int(state.leader)) + 1) % len(brokers)]
        await admin.move_partition(tp, [to])
        await admin.wait_for_leader(tp, leader=to, timeout_s=30)
        return f"{tp.topic}-{tp.partition} -> {to}"


async def _streams_topics(cluster: Any) -> list[str]:
    """The application's topics: input, output, and the repartition and changelog topics it made."""
    async with Admin(bootstrap_controllers=cluster.controller_bootstrap) as admin:
        return sorted(name for name in await admin.describe_topics() if name.startswith("streams-"))


@pytest.mark.integration
def test_streams_word_count_exactly_once_through_moves_and_kills(kafka_tools: KafkaTools, cluster: Any,
                                                                 tmp_path: Path) -> None:
    if not any(STREAMS_JARS.glob("kafka-streams-examples-*.jar")) or shutil.which("java") is None:
        print("\nskipped: Kafka Streams' example jars or java are not installed (make streams-jars)")
        pytest.skip("Kafka Streams' example jars or java are not installed (make streams-jars)")
    bootstrap = cluster.kafka_bootstrap
    killed: list[int] = []

    def between(step: int) -> str | None:
        txns = _app_transactions(kafka_tools, bootstrap)
        assert txns, "the word count has no transaction listed"
        coordinator = sorted(txns.values())[0]
        if step < MOVES:
            if step % 3 == 2:  # the partition of __transaction_state holding the app's transactions
                tp = TopicPartition(TXN_TOPIC, partition_for_group(sorted(txns)[0], DEFAULT_TXN_PARTITIONS))
            else:
                topics = asyncio.run(_streams_topics(cluster))
                j = step - step // 3  # each of the application's topics in turn, partitions alternating
                tp = TopicPartition(topics[j % len(topics)], j % 2)
            return "move " + asyncio.run(_move_one(cluster, tp))
        victim = coordinator if step == MOVES + 1 else next(b for b in sorted(cluster.kafka_ports)
                                                            if b not in txns.values())
        cluster.kill_broker(victim)
        cluster.restart_broker(victim)
        killed.append(victim)
        return f"kill -9 of broker {victim} ({'the transaction coordinator' if step == MOVES + 1 else 'not coordinating'})"

    result = run_word_count(bootstrap, tmp_path, sample_text(900), steps=MOVES + 3, between_steps=between,
                            timeout_s=150)
    print(f"\nword count on Ferry: {sum(result.expected.values())} words counted exactly after "
          f"{result.elapsed_s:.1f} s through: {'; '.join(result.steps_done)}")
    assert len(result.steps_done) == MOVES + 2, result.steps_done
    assert sum(1 for s in result.steps_done if s.startswith(f"move {TXN_TOPIC}")) == 2, result.steps_done
    assert result.ok, f"mismatched counts (word: expected, got): {dict(list(result.mismatches.items())[:10])}; " \
                      f"see {result.app_log}"
    assert sum(result.expected.values()) > 4000
