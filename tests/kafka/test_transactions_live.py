"""Transactions end to end with real clients, unmodified, against a local cluster: the
coordinator (FindCoordinator, InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit,
EndTxn, markers), read_committed consumers, timeouts, Describe/ListTransactions, and a
consume-transform-produce loop whose coordinator is moved and killed with SIGKILL."""
from __future__ import annotations

import asyncio
import time
from typing import Any, Callable

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition as CkTopicPartition
from kafka import KafkaConsumer, KafkaProducer
from kafka.protocol.admin.transactions import (DescribeTransactionsRequest, DescribeTransactionsResponse,
                                               ListTransactionsRequest, ListTransactionsResponse)

from broker.groups import partition_for_group
from broker.kafka.group_apis import DEFAULT_OFFSETS_PARTITIONS, OFFSETS_TOPIC
from broker.kafka.txn_apis import DEFAULT_TXN_PARTITIONS, TXN_TOPIC
from tests.kafka.test_kafka_semantics import kafka_call
from tools.admin import Admin
from tools.client import TopicPartition


def read_committed(bootstrap: str, topic: str, expected: int, timeout_s: float = 20.0) -> list[bytes]:
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, isolation_level="read_committed",
                             auto_offset_reset="earliest", consumer_timeout_ms=1500, enable_auto_commit=False)
    values: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            values += [m.value for m in consumer]
            if len(values) >= expected:
                values += [m.value for m in consumer]  # nothing more may come
                break
    finally:
        consumer.close()
    return values


async def describe(port: int, txn_id: str) -> Any:
    answer = await kafka_call(port, DescribeTransactionsRequest[0](transactional_ids=[txn_id]), 0,
                              DescribeTransactionsResponse)
    return answer.transaction_states[0]


def test_commits_are_read_aborts_and_timeouts_are_not(shared_cluster: Any) -> None:
    bootstrap = shared_cluster.kafka_bootstrap
    producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id="tx-basic")
    producer.init_transactions()
    committed: list[bytes] = []
    for i in range(6):
        producer.begin_transaction()
        values = [b"%d-%d" % (i, j) for j in range(5)]
        for v in values:
            producer.send("tx-basic", value=v)
        if i % 2 == 0:
            producer.commit_transaction()
            committed += values
        else:
            producer.abort_transaction()
    producer.close()
    assert sorted(read_committed(bootstrap, "tx-basic", len(committed))) == sorted(committed)

    # a transaction left open past its timeout is aborted by the coordinator, its producer fenced
    zombie = KafkaProducer(bootstrap_servers=bootstrap, transactional_id="tx-timeout", transaction_timeout_ms=1500)
    zombie.init_transactions()
    zombie.begin_transaction()
    zombie.send("tx-basic", value=b"never").get(timeout=10)
    ports = list(shared_cluster.kafka_ports.values())

    async def states() -> list[Any]:
        return [await describe(p, "tx-timeout") for p in ports]
    deadline = time.monotonic() + 15
    while True:
        state = next(s for s in asyncio.run(states()) if s.error_code == 0)
        if state.transaction_state == "CompleteAbort":
            break
        assert time.monotonic() < deadline, f"not aborted: {state.transaction_state}"
        time.sleep(0.3)
    assert state.producer_epoch == 1 and state.topics == []
    assert sorted(read_committed(bootstrap, "tx-basic", len(committed))) == sorted(committed)
    listed = [asyncio.run(kafka_call(p, ListTransactionsRequest[1](state_filters=["CompleteAbort", "Bogus"],
                                                                   producer_id_filters=[], duration_filter=-1),
                                     1, ListTransactionsResponse)) for p in ports]
    # each id is listed by its coordinator only (tx-basic too if its client sent its last abort)
    ids = [t.transactional_id for a in listed for t in a.transaction_states]
    assert "tx-timeout" in ids and len(ids) == len(set(ids)) and set(ids) <= {"tx-basic", "tx-timeout"}
    assert all(a.unknown_state_filters == ["Bogus"] for a in listed)
    # the coordinator of an unknown id says so
    unknown = [asyncio.run(describe(p, "tx-nobody")).error_code for p in ports]
    assert 105 in unknown  # TRANSACTIONAL_ID_NOT_FOUND from its coordinator, NOT_COORDINATOR elsewhere


def _ctp_batch(consumer: Consumer, producer: Producer, out_topic: str) -> int:
    """One consume-transform-produce transaction; the number of inputs it committed (0 if aborted)."""
    msgs = [m for m in consumer.consume(num_messages=25, timeout=1.0) if m.error() is None]
    if not msgs:
        return 0
    producer.begin_transaction()
    for m in msgs:
        producer.produce(out_topic, key=m.key(), value=b"out-" + m.value())
    try:
        producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                             consumer.consumer_group_metadata(), 60)
        for _ in range(20):
            try:
                producer.commit_transaction(60)
                return len(msgs)
            except KafkaException as exc:
                if not exc.args[0].retriable():
                    raise
    except KafkaException as exc:
        if not exc.args[0].txn_requires_abort():
            raise
    producer.abort_transaction(60)
    # read again from what the group committed: the aborted outputs are never read
    committed = consumer.committed(consumer.assignment(), 30)
    for tp in committed:
        consumer.seek(CkTopicPartition(tp.topic, tp.partition, tp.offset if tp.offset >= 0 else 0))
    return 0


async def _txn_partition_leader(cluster: Any, partition: int, not_on: int | None = None) -> int:
    async with Admin(bootstrap_controllers=cluster.controller_bootstrap) as admin:
        deadline = time.monotonic() + 30
        while True:
            state = await admin.wait_for_leader(TopicPartition(TXN_TOPIC, partition), timeout_s=30)
            if state.leader != not_on:
                return int(state.leader)
            assert time.monotonic() < deadline
            await asyncio.sleep(0.1)


async def _move(cluster: Any, partition: int, to: int) -> None:
    async with Admin(bootstrap_controllers=cluster.controller_bootstrap) as admin:
        await admin.move_partition(TopicPartition(TXN_TOPIC, partition), [to])
        await admin.wait_for_leader(TopicPartition(TXN_TOPIC, partition), leader=to, timeout_s=30)


def test_consume_transform_produce_exactly_once_through_a_coordinator_move_and_kill(cluster: Any) -> None:
    """confluent-kafka's transactional API: every input is in the output exactly once, read
    read_committed, while the coordinator's ``__transaction_state`` partition moves and its owner
    is killed with SIGKILL (the next owner replays the log and finishes what was prepared)."""
    bootstrap = cluster.kafka_bootstrap
    inputs = [b"%04d" % i for i in range(400)]
    plain = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for v in inputs:
        plain.produce("ctp-in", value=v)
    assert plain.flush(30) == 0
    txn_id = "ctp-app"
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id,
                         "transaction.timeout.ms": 20000})
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "ctp-group", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
    consumer.subscribe(["ctp-in"])
    producer.init_transactions(60)
    partition = partition_for_group(txn_id, DEFAULT_TXN_PARTITIONS)
    done = 0
    disturbed = {"moved": False, "killed": False}
    deadline = time.monotonic() + 120
    try:
        while done < len(inputs):
            assert time.monotonic() < deadline, f"only {done} of {len(inputs)} inputs processed"
            done += _ctp_batch(consumer, producer, "ctp-out")
            if done >= 100 and not disturbed["moved"]:
                owner = asyncio.run(_txn_partition_leader(cluster, partition))
                target = next(b for b in sorted(cluster.kafka_ports) if b != owner)
                asyncio.run(_move(cluster, partition, target))
                disturbed["moved"] = True
            elif done >= 250 and not disturbed["killed"]:
                owner = asyncio.run(_txn_partition_leader(cluster, partition))
                cluster.kill_broker(owner)
                asyncio.run(_txn_partition_leader(cluster, partition, not_on=owner))
                disturbed["killed"] = True
    finally:
        consumer.close()
    out = read_committed(bootstrap, "ctp-out", len(inputs), timeout_s=30)
    assert sorted(out) == sorted(b"out-" + v for v in inputs)  # each input exactly once
    assert disturbed == {"moved": True, "killed": True}


async def _move_offsets_partition(cluster: Any, partition: int) -> int:
    """Move the group's ``__consumer_offsets`` partition to the next broker; returns its new owner."""
    tp = TopicPartition(OFFSETS_TOPIC, partition)
    async with Admin(bootstrap_controllers=cluster.controller_bootstrap) as admin:
        owner = int((await admin.wait_for_leader(tp, timeout_s=30)).leader)
        brokers = sorted(cluster.kafka_ports)
        to = brokers[(brokers.index(owner) + 1) % len(brokers)]
        await admin.move_partition(tp, [to])
        await admin.wait_for_leader(tp, leader=to, timeout_s=30)
        return to


def _committed(bootstrap: str, group: str, topic: str, stable: bool = True, timeout_s: float = 30) -> int:
    """The group's committed offset of ``topic``-0, as a read_committed consumer asks it
    (require_stable: it waits while a transaction's offsets are pending), or a read_uncommitted one."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                  "isolation.level": "read_committed" if stable else "read_uncommitted"})
    try:
        (tp,) = c.committed([CkTopicPartition(topic, 0)], timeout=timeout_s)
        return int(tp.offset)
    finally:
        c.close()


def _end(producer: Producer, commit: bool) -> None:
    for _ in range(30):
        try:
            (producer.commit_transaction if commit else producer.abort_transaction)(60)
            return
        except KafkaException as exc:
            if not exc.args[0].retriable():
                raise
    raise AssertionError("the transaction did not end")


def test_transactional_offsets_pending_across_a_move_and_a_kill_of_the_groups_partition(cluster: Any) -> None:
    """TxnOffsetCommit's offsets are durable before the transaction ends: the group's
    ``__consumer_offsets`` partition moves (then its owner is killed with SIGKILL) between the
    offsets and the commit, and the commit still makes them the group's offsets; an abort after
    a move leaves the group's offsets as they were."""
    bootstrap, group, topic = cluster.kafka_bootstrap, "txo-group", "txo-in"
    plain = Producer({"bootstrap.servers": bootstrap})
    for i in range(20):
        plain.produce(topic, value=b"%d" % i, partition=0)
    assert plain.flush(30) == 0
    meta = Consumer({"bootstrap.servers": bootstrap, "group.id": group}).consumer_group_metadata()
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "txo-app",
                         "transaction.timeout.ms": 60000})
    producer.init_transactions(60)
    partition = partition_for_group(group, DEFAULT_OFFSETS_PARTITIONS)

    def offsets_then(offset: int, between: Callable[[], None], commit: bool) -> None:
        producer.begin_transaction()
        producer.produce("txo-out", value=b"for %d" % offset)
        producer.send_offsets_to_transaction([CkTopicPartition(topic, 0, offset)], meta, 60)
        between()
        _end(producer, commit)

    def move(before: int) -> Callable[[], None]:
        """Move the group's partition; its new owner, asked at once, has the offsets pending."""
        def call() -> None:
            asyncio.run(_move_offsets_partition(cluster, partition))
            assert _committed(bootstrap, group, topic, stable=False) == before
            with pytest.raises(KafkaException):  # UNSTABLE_OFFSET_COMMIT until the transaction ends
                _committed(bootstrap, group, topic, timeout_s=2)
        return call

    offsets_then(5, lambda: None, commit=True)
    assert _committed(bootstrap, group, topic) == 5
    offsets_then(9, move(5), commit=True)
    assert _committed(bootstrap, group, topic) == 9

    killed: list[int] = []

    def kill_owner() -> None:
        killed.append(asyncio.run(_move_offsets_partition(cluster, partition)))
        cluster.kill_broker(killed[0])
    offsets_then(14, kill_owner, commit=True)
    assert _committed(bootstrap, group, topic) == 14
    cluster.restart_broker(killed[0])
    offsets_then(17, move(14), commit=False)
    assert _committed(bootstrap, group, topic) == 14
    assert sorted(read_committed(bootstrap, "txo-out", 3)) == [b"for 14", b"for 5", b"for 9"]
