"""Kafka's Java client in transactions, unmodified: the TransactionalMessageCopier of Kafka's own
transaction system tests copies a partition in transactions of 50 records, aborting some at
random, while the output partitions and the coordinator's ``__transaction_state`` partition move
between brokers; a read_committed reader then finds every input exactly once. kafka-transactions
lists and describes the transaction."""
from __future__ import annotations

import asyncio
import threading
from typing import Any

from kafka import KafkaConsumer, KafkaProducer

from broker.groups import partition_for_group
from broker.kafka.txn_apis import DEFAULT_TXN_PARTITIONS, TXN_TOPIC
from tools.admin import Admin
from tools.client import TopicPartition
from tools.peer.kafka_tools import KafkaTools

RECORDS = 3000


async def _moves(cluster: Any, stop: threading.Event, moved: list[str]) -> None:
    brokers = sorted(cluster.kafka_ports)
    targets = [TopicPartition("jtx-out", 0), TopicPartition("jtx-out", 1),
               TopicPartition(TXN_TOPIC, partition_for_group("java-copier", DEFAULT_TXN_PARTITIONS))]
    async with Admin(bootstrap_controllers=cluster.controller_bootstrap) as admin:
        i = 0
        while not stop.is_set() and i < 6:
            await asyncio.sleep(0.4)
            tp = targets[i % len(targets)]
            try:
                state = await admin.wait_for_leader(tp, timeout_s=10)
            except Exception:  # noqa: BLE001 - the coordinator's topic may not exist yet
                continue
            to = brokers[(brokers.index(int(state.leader)) + 1) % len(brokers)]
            await admin.move_partition(tp, [to])
            await admin.wait_for_leader(tp, leader=to, timeout_s=30)
            moved.append(f"{tp.topic}-{tp.partition}->{to}")
            i += 1


def test_java_copier_exactly_once_through_moves(kafka_tools: KafkaTools, cluster: Any) -> None:
    bootstrap = cluster.kafka_bootstrap
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    for i in range(RECORDS):
        producer.send("jtx-in", value=b"%d" % i, partition=0)
    producer.flush()
    producer.close()

    async def create_out() -> None:
        async with Admin(bootstrap_controllers=cluster.controller_bootstrap) as admin:
            await admin.create_topic("jtx-out", 2)
    asyncio.run(create_out())
    stop, moved = threading.Event(), []
    mover = threading.Thread(target=lambda: asyncio.run(_moves(cluster, stop, moved)))
    mover.start()
    try:
        run = kafka_tools.run("transactional-message-copier", "--broker-list", bootstrap, "--input-topic", "jtx-in",
                              "--input-partition", "0", "--output-topic", "jtx-out", "--transactional-id",
                              "java-copier", "--transaction-size", "50", "--max-messages", str(RECORDS),
                              "--consumer-group", "jtx-group", "--enable-random-aborts", "--use-group-metadata",
                              timeout_s=180)
    finally:
        stop.set()
        mover.join()
    assert run.ok, run.describe()
    assert '"remaining":0' in run.stdout and "ShutdownComplete" in run.stdout
    assert len(moved) >= 3, moved  # the copier ran through moves of its outputs and its coordinator
    consumer = KafkaConsumer("jtx-out", bootstrap_servers=bootstrap, isolation_level="read_committed",
                             auto_offset_reset="earliest", consumer_timeout_ms=4000)
    values = [m.value for m in consumer]
    consumer.close()
    assert sorted(values, key=int) == [b"%d" % i for i in range(RECORDS)]  # each exactly once, no aborted one
    listed = kafka_tools.run("kafka-transactions", "--bootstrap-server", bootstrap, "list")
    assert listed.ok and "java-copier" in listed.stdout and "CompleteCommit" in listed.stdout, listed.describe()
    described = kafka_tools.run("kafka-transactions", "--bootstrap-server", bootstrap, "describe",
                                "--transactional-id", "java-copier")
    assert described.ok and "CompleteCommit" in described.stdout, described.describe()
