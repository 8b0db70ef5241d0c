"""Kafka's Java client through partition moves and a kill -9 of a broker.

An idempotent ``kafka-verifiable-producer`` (acks=all) writes increasing integers while a group
of ``kafka-verifiable-consumer`` members reads them; meanwhile partitions move between brokers
(reassignments through the controllers, as ``ferry reassign-partitions`` makes them) and the
group's coordinator is killed with SIGKILL and restarted. Both tools print a JSON event per
acknowledged and per consumed record; :func:`tools.peer.verifiable.check_read_back` then says
whether every acknowledged record was read back exactly once, in order per partition.
"""
from __future__ import annotations

import asyncio
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Generic, TypeVar

from tools.admin import Admin
from tools.client import TopicPartition
from tools.cluster import LocalCluster
from tools.peer.kafka_tools import KafkaTools, properties_file
from tools.peer.verifiable import (ConsumerEvents, ProducerEvents, ReadBack, check_read_back, max_ack_gap_ms,
                                   merged_reads, parse_line)

E = TypeVar("E", ProducerEvents, ConsumerEvents)

PRODUCER_CONFIG = {
    "acks": "all",
    "enable.idempotence": "true",
    "retries": "2147483647",  # the tool sets retries=0, which idempotence refuses
    "max.in.flight.requests.per.connection": "5",
    "delivery.timeout.ms": "120000",
    "linger.ms": "5",
}


@dataclass(frozen=True)
class JavaClientPlan:
    records: int = 5000
    rate_per_s: int = 250
    partitions: int = 4
    moves: int = 6
    kill: bool = True
    consumers: int = 2
    keys: int = 64  # keys 0..63 in turn: every partition gets records all the time (gaps are measurable)
    topic: str = "java-client"
    group: str = "java-client-group"
    drain_timeout_s: float = 60.0


@dataclass(frozen=True)
class MoveDone:
    partition: int
    source: int
    target: int
    started_ms: int  # wall clock, as the tools' event timestamps
    took_s: float  # until the target led
    partition_gap_ms: int  # longest pause in the partition's acknowledgements around the move


@dataclass(frozen=True)
class JavaClientReport:
    read_back: ReadBack
    sent: int | None
    producer_errors: tuple[str, ...]
    moves: tuple[MoveDone, ...]
    killed_broker: int | None
    killed_led: tuple[int, ...]  # the topic's partitions the killed broker led when it was killed
    kill_gap_ms: int  # longest pause in acknowledgements of any partition after the kill
    max_ack_gap_ms: int
    failed_commits: tuple[str, ...]
    assignments: int
    elapsed_s: float

    @property
    def ok(self) -> bool:
        return (self.read_back.exactly_once and not self.producer_errors and self.read_back.acked > 0
                and self.sent == self.read_back.acked)

    def summary(self) -> str:
        moves = ", ".join(f"p{m.partition} {m.source}->{m.target} {m.took_s * 1000:.0f} ms "
                          f"(gap {m.partition_gap_ms} ms)" for m in self.moves)
        return (f"{self.read_back.summary()}; sent {self.sent}, send errors {len(self.producer_errors)}; "
                f"{len(self.moves)} moves [{moves}]; kill -9 of the group coordinator, broker {self.killed_broker}, "
                f"leading partitions {list(self.killed_led)} (longest ack pause after it {self.kill_gap_ms} ms); "
                f"max ack gap {self.max_ack_gap_ms} ms; {self.assignments} assignments, "
                f"{len(self.failed_commits)} failed commits; {self.elapsed_s:.1f} s")


class EventPipe(Generic[E]):
    """A tool's stdout read by a thread into its events as they are printed."""

    def __init__(self, proc: subprocess.Popen[str], events: E, log_path: Path) -> None:
        self.proc = proc
        self.events: E = events
        self.lock = threading.Lock()
        self.log_path = log_path
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        with open(self.log_path, "w", encoding="utf-8") as log:
            for line in self.proc.stdout:
                log.write(line)
                event = parse_line(line)
                if event is not None:
                    with self.lock:
                        self.events.add(event)

    def read(self, fn: Callable[[E], int]) -> int:
        with self.lock:
            return fn(self.events)

    def stop(self, timeout_s: float = 20.0) -> None:
        """SIGTERM (the tools then close their client cleanly), SIGKILL after ``timeout_s``."""
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.thread.join(timeout_s)


async def run(cluster: LocalCluster, tools: KafkaTools, workdir: Path, plan: JavaClientPlan) -> JavaClientReport:
    """Run ``plan`` against ``cluster`` (restarting the broker it kills) and check the read-back."""
    workdir.mkdir(parents=True, exist_ok=True)  # noqa: ASYNC240 - the run's work dir, made once at its start
    bootstrap = cluster.kafka_bootstrap
    started = time.monotonic()
    moves: list[MoveDone] = []
    victim: int | None = None
    killed_at_ms = 0
    killed_led: list[int] = []
    consumers: list[EventPipe[ConsumerEvents]] = []
    producer: EventPipe[ProducerEvents] | None = None
    async with Admin(bootstrap_controllers=cluster.controller_bootstrap) as admin:
        await admin.create_topic(plan.topic, plan.partitions)
        for p in range(plan.partitions):
            await admin.wait_for_leader(TopicPartition(plan.topic, p), timeout_s=30)
        try:
            for i in range(plan.consumers):
                proc = tools.start("kafka-verifiable-consumer", "--bootstrap-server", bootstrap, "--topic", plan.topic,
                                   "--group-id", plan.group, "--verbose", "--reset-policy", "earliest",
                                   "--session-timeout", "10000",
                                   # opened once per process, before it starts
                                   stderr=open(workdir / f"consumer-{i}.err", "w", encoding="utf-8"))  # noqa: ASYNC230
                member: EventPipe[ConsumerEvents] = EventPipe(proc, ConsumerEvents(), workdir / f"consumer-{i}.out")
                consumers.append(member)
            await _until(lambda: all(c.read(lambda e: e.assignments) > 0 for c in consumers), 60,
                         "the consumers were assigned partitions")
            config = properties_file(workdir / "producer.properties", PRODUCER_CONFIG)
            proc = tools.start("kafka-verifiable-producer", "--bootstrap-server", bootstrap, "--topic", plan.topic,
                               "--max-messages", str(plan.records), "--throughput", str(plan.rate_per_s),
                               "--repeating-keys", str(plan.keys), "--command-config", str(config),
                               # opened once per process, before it starts
                               stderr=open(workdir / "producer.err", "w", encoding="utf-8"))  # noqa: ASYNC230
            pipe: EventPipe[ProducerEvents] = EventPipe(proc, ProducerEvents(), workdir / "producer.out")
            producer = pipe
            step = plan.records // (plan.moves + 3)

            def acked() -> int:
                return pipe.read(lambda e: len(e.acks))

            for i in range(plan.moves):
                def enough(at_least: int = step * (i + 1)) -> bool:
                    return acked() >= at_least or proc.poll() is not None

                await _until(enough, 120, "acks before a move")
                tp = TopicPartition(plan.topic, i % plan.partitions)
                source = (await admin.wait_for_leader(tp, timeout_s=30)).leader
                target = source % cluster.num_brokers + 1
                t0, t0_ms = time.monotonic(), int(time.time() * 1000)
                await admin.move_partition(tp, [target])
                await admin.wait_for_leader(tp, leader=target, timeout_s=30)
                moves.append(MoveDone(tp.partition, source, target, t0_ms, time.monotonic() - t0, 0))
            if plan.kill:
                await _until(lambda: acked() >= step * (plan.moves + 1) or proc.poll() is not None, 120,
                             "acks before the kill")
                victim = _coordinator(bootstrap, plan.group)
                for p in range(plan.partitions):
                    if (await admin.wait_for_leader(TopicPartition(plan.topic, p), timeout_s=30)).leader == victim:
                        killed_led.append(p)
                killed_at_ms = int(time.time() * 1000)
                cluster.kill_broker(victim)
                await asyncio.sleep(1.0)
                cluster.start_broker(victim, wait=True)
            await asyncio.to_thread(proc.wait, 240)
            pipe.thread.join(30)
            acks = list(pipe.events.acks)
            wanted = {(a.partition, a.offset) for a in acks}

            def unread() -> int:
                got: set[tuple[int, int]] = set()
                for c in consumers:
                    with c.lock:
                        got.update((r.partition, r.offset) for r in c.events.records)
                return len(wanted - got)

            try:
                await _until(lambda: unread() == 0, plan.drain_timeout_s, "the consumers read every acked record")
            except TimeoutError:
                pass  # the check below counts what is missing
        finally:
            if producer is not None:
                producer.stop()
            for c in consumers:
                c.stop()
    pevents = producer.events if producer is not None else ProducerEvents()
    cevents = [c.events for c in consumers]
    report_moves = tuple(
        MoveDone(m.partition, m.source, m.target, m.started_ms, m.took_s, _gap_around(pevents, m)) for m in moves)
    after_kill = [a for a in pevents.acks if a.timestamp_ms >= killed_at_ms - 1000] if victim is not None else []
    return JavaClientReport(
        read_back=check_read_back(pevents.acks, merged_reads(cevents)), sent=pevents.sent,
        producer_errors=tuple(pevents.errors), moves=report_moves, killed_broker=victim, killed_led=tuple(killed_led),
        kill_gap_ms=max((max_ack_gap_ms(after_kill, p) for p in range(plan.partitions)), default=0),
        max_ack_gap_ms=max_ack_gap_ms(pevents.acks),
        failed_commits=tuple(f for c in cevents for f in c.failed_commits),
        assignments=sum(c.assignments for c in cevents), elapsed_s=time.monotonic() - started)


def _gap_around(events: ProducerEvents, move: MoveDone) -> int:
    """The longest pause in the moved partition's acknowledgements from 1 s before the move to 3 s after it."""
    lo = move.started_ms - 1000
    hi = move.started_ms + int(move.took_s * 1000) + 3000
    return max_ack_gap_ms([a for a in events.acks if lo <= a.timestamp_ms <= hi], move.partition)


def _coordinator(bootstrap: str, group: str) -> int:
    """The broker coordinating ``group``, as Kafka's admin client finds it (FindCoordinator)."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    description = admin.describe_consumer_groups([group], request_timeout=15)[group].result()
    return int(description.coordinator.id)


async def _until(cond: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout_s:.0f} s waiting until {what}")
        await asyncio.sleep(0.05)
