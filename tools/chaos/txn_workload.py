"""A transactional workload for chaos runs: librdkafka's transactional producer and a live
read_committed reader, and what each saw, for :mod:`tools.chaos.txn_checker`.

The producer runs transactions of a few records over the topic's partitions, commits most and
aborts about one in four (seeded), and records each transaction's outcome as its client learned
it: committed, aborted, or unknown (``commit_transaction`` was called and neither it nor the abort
after it returned). A live reader with ``isolation.level=read_committed`` reads the topic from the
start while faults happen; after each record it compares the record's offset with the last stable
offset its client holds for the partition (librdkafka keeps the fetch's LSO as the partition's
high watermark under read_committed), which only ever grows, so an offset at or past it means the
broker returned a record past its LSO. At the end a transaction is left open while a fresh reader
reads every partition up to its LSO, then it is aborted.

What to do after an error is :func:`after_error`, pure; the threads only call the client.
"""
from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from tools.chaos.txn_checker import LsoSample, Outcome, Txn, TxnRecord

ATTEMPT_DEADLINE_S = 60.0  # how long one commit or abort is retried before the producer is replaced


class Step(Enum):
    RETRY = "retry"  # the same call again (a timeout, a coordinator moving)
    ABORT = "abort"  # the transaction cannot commit: abort it and go on
    RESTART = "restart"  # the producer is unusable: a new one, whose init_transactions fences the old


def after_error(retriable: bool, requires_abort: bool, fatal: bool, deadline_passed: bool) -> Step:
    """librdkafka's classification of a transactional call's error, as its documentation
    prescribes: fatal errors need a new producer, abortable ones an abort, retriable ones the same
    call again (until the deadline)."""
    if fatal:
        return Step.RESTART
    if requires_abort:
        return Step.ABORT
    if retriable and not deadline_passed:
        return Step.RETRY
    return Step.RESTART


def outcome_of(commit_called: bool, committed: bool, aborted: bool) -> Outcome:
    """What the client knows of a transaction that ended: only an EndTxn with commit can commit
    it, so one whose commit was never asked for is aborted whatever happened to the producer."""
    if committed:
        return Outcome.COMMITTED
    if aborted or not commit_called:
        return Outcome.ABORTED
    return Outcome.UNKNOWN


def _where(m: Message) -> tuple[int, int]:
    p, o = m.partition(), m.offset()
    if p is None or o is None:
        raise ValueError("a consumed record without a partition or an offset")
    return p, o


@dataclass
class TxnLoad:
    bootstrap: str
    topic: str
    partitions: int
    seed: int
    transactional_id: str = "chaos-txn"
    per_s: float = 5.0  # transactions per second
    client_config: dict[str, Any] = field(default_factory=dict)
    txns: list[Txn] = field(default_factory=list)
    live_read: dict[str, list[tuple[int, bytes | None]]] = field(default_factory=dict)
    live_lso: list[LsoSample] = field(default_factory=list)
    lso_checks: int = 0
    restarts: int = 0
    errors: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _stop_reading: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _threads: list[threading.Thread] = field(default_factory=list)
    _producer: Producer | None = None
    _seq: int = 0

    def start(self) -> "TxnLoad":
        self._threads = [threading.Thread(target=self._produce, name="txn-producer", daemon=True),
                         threading.Thread(target=self._read_live, name="txn-reader", daemon=True)]
        for t in self._threads:
            t.start()
        return self

    def stop(self, timeout_s: float = 120.0) -> None:
        """Finish the transaction in flight and stop producing; the live reader reads on until
        :meth:`final_read` is done."""
        self._stop.set()
        self._threads[0].join(timeout_s)

    def committed(self) -> int:
        with self._lock:
            return sum(len(t.records) for t in self.txns if t.outcome is Outcome.COMMITTED)

    # ------------------------------------------------------------------ the producer
    def _new_producer(self) -> Producer:
        producer = Producer({"bootstrap.servers": self.bootstrap, "transactional.id": self.transactional_id,
                             "transaction.timeout.ms": 30_000, "linger.ms": 5, **self.client_config})
        deadline = time.monotonic() + ATTEMPT_DEADLINE_S
        while True:
            try:
                producer.init_transactions(30)
                return producer
            except KafkaException as exc:
                err: KafkaError = exc.args[0]
                if after_error(err.retriable(), False, err.fatal(), time.monotonic() > deadline) is not Step.RETRY:
                    raise
                time.sleep(0.2)

    def _end(self, producer: Producer, commit: bool) -> Step | None:
        """Commit or abort until it returns (None), or the step to take instead."""
        deadline = time.monotonic() + ATTEMPT_DEADLINE_S
        while True:
            try:
                (producer.commit_transaction if commit else producer.abort_transaction)(30)
                return None
            except KafkaException as exc:
                err = exc.args[0]
                self._note(f"{'commit' if commit else 'abort'}: {err}")
                step = after_error(err.retriable(), err.txn_requires_abort(), err.fatal(), time.monotonic() > deadline)
                if step is not Step.RETRY:
                    return step if commit or step is Step.RESTART else Step.RESTART
                time.sleep(0.1)

    def _note(self, error: str) -> None:
        with self._lock:
            if len(self.errors) < 200:
                self.errors.append(error[:300])

    def _one(self, producer: Producer, n: int, rng: random.Random, records: int, abort: bool) -> tuple[Txn, bool]:
        """One transaction; returns what the client learned and whether the producer must go."""
        sent: list[TxnRecord] = []
        commit_called = committed = aborted = False
        restart = False
        try:
            producer.begin_transaction()
            for i in range(records):
                p = rng.randrange(self.partitions)
                value = b"t%06d-%02d" % (n, i)
                while True:
                    try:
                        producer.produce(self.topic, value, partition=p)
                        break
                    except BufferError:
                        producer.poll(0.1)
                sent.append(TxnRecord(f"{self.topic}-{p}", self._seq, value))
                self._seq += 1
            producer.poll(0)
            if abort:
                step = self._end(producer, commit=False)
                aborted = step is None
                restart = step is not None
            else:
                commit_called = True
                step = self._end(producer, commit=True)
                committed = step is None
                if step is Step.ABORT:
                    step = self._end(producer, commit=False)
                    aborted = step is None
                restart = step is not None
        except KafkaException as exc:  # begin or produce: nothing was asked to commit
            self._note(f"transaction {n}: {exc.args[0]}")
            restart = True
        return Txn(f"{self.transactional_id}/{n}", outcome_of(commit_called, committed, aborted), tuple(sent)), restart

    def _produce(self) -> None:
        rng = random.Random(self.seed)
        n = 0
        started = time.monotonic()
        producer: Producer | None = None
        while not self._stop.is_set():
            if producer is None:  # the first, or one replacing a producer that had to go
                try:
                    producer = self._new_producer()
                except KafkaException as exc:
                    self._note(f"init_transactions: {exc.args[0]}")
                    self._stop.wait(1.0)
                    continue
            txn, restart = self._one(producer, n, rng, rng.randint(2, 12), abort=rng.random() < 0.25)
            with self._lock:
                self.txns.append(txn)
            n += 1
            if restart:
                self.restarts += 1
                _quietly_flush(producer, 5)  # a fenced producer may refuse even this
                producer = None
            delay = started + n / self.per_s - time.monotonic()
            if delay > 0:
                self._stop.wait(delay)
        self._producer = producer

    # ------------------------------------------------------------------ the readers
    def _read_live(self) -> None:
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": f"{self.transactional_id}-live",
                             "isolation.level": "read_committed", "enable.auto.commit": False,
                             "auto.offset.reset": "earliest", **self.client_config})
        tps = [TopicPartition(self.topic, p, 0) for p in range(self.partitions)]
        consumer.assign(tps)
        try:
            while not self._stop_reading.is_set():
                m = consumer.poll(0.2)
                if m is None or m.error() is not None:
                    continue
                p, o = _where(m)
                lso = consumer.get_watermark_offsets(TopicPartition(self.topic, p), cached=True)[1]
                with self._lock:
                    self.live_read.setdefault(f"{self.topic}-{p}", []).append((o, m.value()))
                    self.lso_checks += 1
                    if lso >= 0 and o >= lso:
                        self.live_lso.append(LsoSample(f"{self.topic}-{p}", o, lso))
        finally:
            consumer.close()

    def final_read(self, timeout_s: float = 60.0) -> tuple[dict[str, list[tuple[int, bytes | None]]], list[LsoSample], Txn | None]:
        """Every partition read from its start by a fresh read_committed reader while a
        transaction is left open (so the LSO sits below the high watermark), with the LSO sampled
        after the read; then that transaction is aborted and returned (None if the producer was
        gone). Stops the live reader."""
        self._stop_reading.set()
        self._threads[1].join(30)
        producer, tail = self._producer, None
        if producer is not None:
            try:
                producer.begin_transaction()
                records = []
                for p in range(self.partitions):
                    value = b"open-%d" % p
                    producer.produce(self.topic, value, partition=p)
                    records.append(TxnRecord(f"{self.topic}-{p}", self._seq, value))
                    self._seq += 1
                producer.flush(30)
                tail = Txn(f"{self.transactional_id}/open", Outcome.ABORTED, tuple(records))
            except KafkaException as exc:
                self._note(f"open transaction: {exc.args[0]}")
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": f"{self.transactional_id}-check",
                             "isolation.level": "read_committed", "enable.auto.commit": False,
                             "auto.offset.reset": "earliest", **self.client_config})
        read: dict[str, list[tuple[int, bytes | None]]] = {f"{self.topic}-{p}": [] for p in range(self.partitions)}
        samples: list[LsoSample] = []
        try:
            tps = [TopicPartition(self.topic, p, 0) for p in range(self.partitions)]
            lso = {tp.partition: consumer.get_watermark_offsets(tp, timeout=10)[1] for tp in tps}
            consumer.assign(tps)
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline:
                positions = {tp.partition: tp.offset for tp in consumer.position(tps)}
                at_end = all(positions[p] >= lso[p] for p in lso)
                m = consumer.poll(1.0 if at_end else 0.5)  # at the end: anything more is past the LSO
                if m is not None and m.error() is None:
                    p, o = _where(m)
                    read[f"{self.topic}-{p}"].append((o, m.value()))
                if at_end:
                    break
            for tp in tps:
                log = read[f"{self.topic}-{tp.partition}"]
                if log:
                    samples.append(LsoSample(f"{self.topic}-{tp.partition}", log[-1][0],
                                             consumer.get_watermark_offsets(tp, timeout=10)[1]))
        finally:
            consumer.close()
        if producer is not None and tail is not None:
            if self._end(producer, commit=False) is not None:
                tail = Txn(tail.txn_id, Outcome.ABORTED, tail.records)  # never asked to commit: aborted anyway
        if producer is not None:
            _quietly_flush(producer, 10)
        return read, samples, tail


def _quietly_flush(producer: Producer, timeout_s: float) -> None:
    """Flush a producer that may be fenced or failed: its error is the transaction's outcome,
    already recorded, not the run's."""
    try:
        producer.flush(timeout_s)
    except KafkaException:
        pass
