"""``ferry perf peer``: Apache Kafka (KRaft) and Ferry side by side, the same workloads through
the same clients, in one run.

Every workload speaks only the Kafka protocol (librdkafka through confluent-kafka for data,
Kafka's admin APIs through kafka-python and confluent-kafka), so what differs between the two
columns is the server. Apache Kafka runs from the jars ``make kafka-jars`` fetched (one KRaft
controller, three brokers, Kafka's production durability: topics RF 3, ``min.insync.replicas=2``);
Ferry is ``LocalCluster`` (three controllers, three brokers, the embedded S3 server).

1. **Reassignment of one partition** holding 1 MiB, 100 MiB (and 1 GiB without ``--quick``):
   Kafka's replica reassignment copies the log to the new replica (the partition is RF 2,
   ``[1, 2] -> [3, 2]``, so one full replica is copied and the leader changes, as it would in a
   scale-out of an RF 3 topic), unthrottled and at ``--throttle-mb-s``; Ferry moves ``[1] -> [2]``.
   Time = from the AlterPartitionReassignments request until no reassignment is listed and
   Metadata names the target leader. Gap = the longest silence between two acknowledgements
   of a paced idempotent producer on that partition around the move.
2. **Produce** MB/s at acks=all (8 partitions over the three brokers, 1 KiB records in 64 KiB
   batches) and the servers' CPU seconds per GiB produced; end-to-end p50/p99 produce -> group
   member at 200 records/s.
3. **kill -9 of a broker**: the longest acknowledgement gap of a producer on a partition the
   killed broker led (Kafka at its defaults; Ferry with the local WAL and, in a third cluster,
   with the S3 WAL).
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
import threading
import time
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any, Callable, Protocol

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic
from rich.console import Console
from rich.table import Table

from tools.move_workload import percentile
from tools.peer.apache_kafka import ApacheKafkaCluster
from tools.perf.kafka import end_to_end, librdkafka_produce_mb_s

MIB = 1 << 20
FILL_RECORD_BYTES = 16 * 1024
GAP_RECORDS_PER_S = 500.0
TARGETS = {"move_speedup_at_1gib": 100.0, "crash_failover_ratio": 1 / 3, "cpu_ratio": 2.0}


class System(Protocol):
    """A running cluster under test, Apache Kafka's or Ferry's."""

    name: str

    @property
    def bootstrap(self) -> str: ...

    def server_pids(self) -> dict[str, list[int]]: ...

    def kill_broker(self, broker_id: int) -> None: ...

    def terminate_broker(self, broker_id: int) -> None: ...

    def start_broker(self, broker_id: int) -> None: ...


@dataclass
class KafkaPeer:
    cluster: ApacheKafkaCluster
    name: str = "kafka"

    @property
    def bootstrap(self) -> str:
        return self.cluster.bootstrap

    def server_pids(self) -> dict[str, list[int]]:
        return {"servers": [p for n in self.cluster.nodes if (p := self.cluster.pid(n)) is not None]}

    def kill_broker(self, broker_id: int) -> None:
        self.cluster.kill_node(broker_id)

    def terminate_broker(self, broker_id: int) -> None:
        self.cluster.stop_node(broker_id, timeout_s=600)

    def start_broker(self, broker_id: int) -> None:
        self.cluster.start_node(broker_id, wait=True, timeout_s=600)


@dataclass
class FerrySystem:
    cluster: Any  # tools.cluster.LocalCluster (imported lazily: it starts nothing on import)
    name: str = "ferry"

    @property
    def bootstrap(self) -> str:
        return str(self.cluster.kafka_bootstrap)

    def server_pids(self) -> dict[str, list[int]]:
        c = self.cluster
        from tools.perf.kafka import descendants

        roots = [p.pid for p in c.broker_procs.values()] + \
            [c._controller_proc(n).pid for n in range(1, c.num_controllers + 1)]
        s3 = [c.s3.process.pid] if c.s3 is not None and c.s3.process is not None else []
        # a controller's Raft node runs in a child process: counted with it
        return {"servers": roots + [d for r in roots for d in descendants(r)], "s3": s3}

    def kill_broker(self, broker_id: int) -> None:
        self.cluster.kill_broker(broker_id)

    def terminate_broker(self, broker_id: int) -> None:
        self.cluster.terminate_broker(broker_id, timeout_s=600)

    def start_broker(self, broker_id: int) -> None:
        self.cluster.start_broker(broker_id, wait=True, timeout_s=600)


def cpu_s(pids: list[int]) -> float:
    """User + system CPU seconds of processes (and their threads) from /proc."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / tick
    return total


# ---------------------------------------------------------------------- helpers over the Kafka protocol
def create_topic(bootstrap: str, name: str, assignment: list[list[int]] | None = None, partitions: int = 1,
                 replication_factor: int = 1, configs: dict[str, str] | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = NewTopic(name, len(assignment), replica_assignment=assignment, config=configs or {}) if assignment is not None else \
        NewTopic(name, partitions, replication_factor, config=configs or {})
    admin.create_topics([topic])[name].result(60)
    wait_leaders(bootstrap, name, len(assignment) if assignment is not None else partitions)


def leaders(bootstrap: str, topic: str) -> dict[int, int]:
    meta = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    t = meta.topics.get(topic)
    return {} if t is None or t.error is not None else {p: pm.leader for p, pm in t.partitions.items()}


def wait_leaders(bootstrap: str, topic: str, partitions: int, timeout_s: float = 60.0,
                 want: Callable[[dict[int, int]], bool] | None = None) -> dict[int, int]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = leaders(bootstrap, topic)
        if len(got) == partitions and all(v >= 0 for v in got.values()) and (want is None or want(got)):
            return got
        time.sleep(0.02)
    raise TimeoutError(f"{topic}: no leaders as wanted within {timeout_s} s")


def fill(bootstrap: str, topic: str, partition: int, size_bytes: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                         "batch.size": 512 * 1024, "compression.type": "none",
                         "queue.buffering.max.kbytes": 256 * 1024})
    value = os.urandom(FILL_RECORD_BYTES)
    failed: list[str] = []
    for _ in range(max(1, size_bytes // FILL_RECORD_BYTES)):
        while True:
            try:
                producer.produce(topic, value=value, partition=partition,
                                 on_delivery=lambda err, _m: failed.append(str(err)) if err else None)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    if producer.flush(300) != 0 or failed:
        raise RuntimeError(f"filling {topic}: {len(failed)} records failed ({failed[:1]})")


@dataclass
class PacedProducer:
    """An idempotent acks=all producer at a fixed rate on one partition; keeps each ack's time."""

    bootstrap: str
    topic: str
    partition: int
    per_s: float = GAP_RECORDS_PER_S
    acks: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> "PacedProducer":
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        producer = Producer({"bootstrap.servers": self.bootstrap, "acks": "all", "enable.idempotence": True,
                             "linger.ms": 0, "socket.nagle.disable": True})

        def done(err: Any, _msg: Any) -> None:
            (self.errors.append(str(err)) if err is not None else self.acks.append(time.monotonic()))

        started, n = time.monotonic(), 0
        while not self._stop.is_set():
            producer.produce(self.topic, value=b"g" * 100, partition=self.partition, on_delivery=done)
            producer.poll(0)
            n += 1
            delay = started + n / self.per_s - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        producer.flush(60)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(90)

    def gap_ms(self, start: float, end: float) -> float | None:
        window = sorted(t for t in list(self.acks) if start <= t <= end)
        gaps = [b - a for a, b in pairwise(window)]
        return 1000 * max(gaps) if gaps else None


# ---------------------------------------------------------------------- 1. reassignment by size
def reassign_and_wait(bootstrap: str, topic: str, target: list[int], timeout_s: float) -> float:
    """Seconds from the request until no reassignment is listed and the target's first replica leads."""
    from kafka import TopicPartition as KTP
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)
    try:
        started = time.monotonic()
        result = admin.alter_partition_reassignments({KTP(topic, 0): target})
        errors = [e for e in result.values() if e is not None]
        if errors:
            raise RuntimeError(f"reassignment of {topic} refused: {errors}")
        deadline = started + timeout_s
        while time.monotonic() < deadline:
            if not admin.list_partition_reassignments([KTP(topic, 0)]) and leaders(bootstrap, topic).get(0) == target[0]:
                return time.monotonic() - started
            time.sleep(0.02)
        raise TimeoutError(f"reassignment of {topic} not done within {timeout_s} s")
    finally:
        admin.close()


def set_throttle(bootstrap: str, topic: str, brokers: list[int], rate_bytes_s: int | None) -> None:
    """What ``kafka-reassign-partitions --throttle`` sets: the brokers' replication rates and the
    topic's throttled replicas (``None``: remove them)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry

    op = AlterConfigOpType.SET if rate_bytes_s is not None else AlterConfigOpType.DELETE
    value = str(rate_bytes_s) if rate_bytes_s is not None else None
    resources = [ConfigResource("broker", str(b), incremental_configs=[
        ConfigEntry("leader.replication.throttled.rate", value, incremental_operation=op),
        ConfigEntry("follower.replication.throttled.rate", value, incremental_operation=op)]) for b in brokers]
    resources.append(ConfigResource("topic", topic, incremental_configs=[
        ConfigEntry("leader.replication.throttled.replicas", "*" if value else None, incremental_operation=op),
        ConfigEntry("follower.replication.throttled.replicas", "*" if value else None, incremental_operation=op)]))
    for resource in resources:  # one broker resource per call, as the admin client requires
        for future in admin.incremental_alter_configs([resource]).values():
            future.result(30)


def one_move(system: System, label: str, size_bytes: int, start: list[int], target: list[int],
             throttle_bytes_s: int | None, timeout_s: float) -> dict[str, Any]:
    topic = f"peer-move-{label}-{'t' if throttle_bytes_s else 'u'}-{int(time.time() * 1000) % 100000}"
    create_topic(system.bootstrap, topic, [start])
    fill(system.bootstrap, topic, 0, size_bytes)
    if throttle_bytes_s is not None:
        set_throttle(system.bootstrap, topic, [1, 2, 3], throttle_bytes_s)
    paced = PacedProducer(system.bootstrap, topic, 0).start()
    try:
        time.sleep(1.0)
        t0 = time.monotonic()
        move_s = reassign_and_wait(system.bootstrap, topic, target, timeout_s)
        time.sleep(1.0)
    finally:
        paced.stop()
        if throttle_bytes_s is not None:
            set_throttle(system.bootstrap, topic, [1, 2, 3], None)
    gap = paced.gap_ms(t0 - 0.05, t0 + move_s + 1.0)
    admin = AdminClient({"bootstrap.servers": system.bootstrap})
    admin.delete_topics([topic])[topic].result(60)
    return {"size_bytes": size_bytes, "move_s": round(move_s, 4), "gap_ms": round(gap, 1) if gap else None,
            "producer_errors": len(paced.errors)}


# ---------------------------------------------------------------------- 2. produce, CPU, end to end
def produce_and_cpu(system: System, total_bytes: int, replication_factor: int) -> dict[str, Any]:
    from tools.perf import kafka as perf_kafka

    topic = f"peer-produce-{int(time.time() * 1000) % 100000}"
    create_topic(system.bootstrap, topic, partitions=perf_kafka.PARTITIONS, replication_factor=replication_factor)
    # a quarter of the run first, not measured: a JVM's code is compiled as it runs (a cold Kafka
    # broker spent several times the CPU per GiB of a warm one), and both sides get the same start
    librdkafka_produce_mb_s(system.bootstrap, topic, total_bytes // 4)
    pids = system.server_pids()
    before = {role: cpu_s(p) for role, p in pids.items()}
    mb_s = librdkafka_produce_mb_s(system.bootstrap, topic, total_bytes)
    after = {role: cpu_s(p) for role, p in pids.items()}
    gib = total_bytes / (1 << 30)
    out: dict[str, Any] = {"produce_mb_s": round(mb_s, 1)}
    out["cpu_s_per_gib"] = round((after["servers"] - before["servers"]) / gib, 1)
    if "s3" in pids:
        out["s3_server_cpu_s_per_gib"] = round((after["s3"] - before["s3"]) / gib, 1)
    e2e_topic = f"peer-e2e-{int(time.time() * 1000) % 100000}"
    create_topic(system.bootstrap, e2e_topic, partitions=3, replication_factor=replication_factor)
    out.update(end_to_end(system.bootstrap, e2e_topic, 10.0, 200.0))
    return out


# ---------------------------------------------------------------------- 3. kill -9
def crash_failover(system: System, replication_factor: int, victim: int = 1, timeout_s: float = 120.0) -> dict[str, Any]:
    topic = f"peer-crash-{int(time.time() * 1000) % 100000}"
    create_topic(system.bootstrap, topic, partitions=3, replication_factor=replication_factor)
    led = wait_leaders(system.bootstrap, topic, 3)
    partition = next((p for p, b in sorted(led.items()) if b == victim), None)
    if partition is None:  # put one partition's leadership on the victim first
        raise RuntimeError(f"broker {victim} leads no partition of {topic}: {led}")
    paced = PacedProducer(system.bootstrap, topic, partition, per_s=200.0).start()
    try:
        time.sleep(2.0)
        killed = time.monotonic()
        system.kill_broker(victim)
        deadline = killed + timeout_s
        while time.monotonic() < deadline and not any(t > killed + 0.001 for t in list(paced.acks)[-5:]):
            time.sleep(0.02)
        recovered = next((t for t in list(paced.acks) if t > killed), None)
        time.sleep(1.0)
    finally:
        paced.stop()
    before = max((t for t in paced.acks if t <= killed), default=killed)
    return {"crash_failover_s": round(recovered - before, 3) if recovered is not None else None,
            "producer_errors": len(paced.errors)}


# ---------------------------------------------------------------------- 4. many partitions at once
def wait_all_leaders(bootstrap: str, topic: str, partitions: int, timeout_s: float,
                     want: Callable[[int, int], bool]) -> float:
    """Seconds until Metadata names, for every partition, a leader ``want(partition, leader)`` accepts."""
    started = time.monotonic()
    wait_leaders(bootstrap, topic, partitions, timeout_s, lambda got: all(want(p, b) for p, b in got.items()))
    return time.monotonic() - started


def led_by_first(target: dict[int, list[int]]) -> Callable[[int, int], bool]:
    """Whether a partition is led by the first replica of its target."""
    return lambda partition, leader: leader == target[partition][0]


MANY_PER_TOPIC = 1000  # Kafka refuses a single operation of more than 10,000 records (POLICY_VIOLATION)


def many_partitions(system: System, partitions: int, replication_factor: int, brokers: int = 3,
                    timeout_s: float = 1800.0) -> dict[str, Any]:
    """Create ``partitions`` partitions (topics of up to 1,000), then move every partition's
    leadership at once.

    Ferry: AlterPartitionReassignments naming, for each partition, the next broker (the six-step
    move of every partition), one request per topic, sent back to back. Kafka: with RF 3 on three
    brokers every broker already holds every partition, so the move that copies nothing is a
    leadership move: each replica list rotated by one (AlterPartitionReassignments, no data
    moves) and a preferred election of every partition. Time = from the first request until
    Metadata names every target leader."""
    from confluent_kafka import ElectionType
    from confluent_kafka import TopicPartition as CTP
    from kafka import TopicPartition as KTP
    from kafka.admin import KafkaAdminClient

    sizes = [min(MANY_PER_TOPIC, partitions - start) for start in range(0, partitions, MANY_PER_TOPIC)]
    topics = [f"peer-many-{partitions}-{i}" for i in range(len(sizes))]
    started = time.monotonic()
    for topic, count in zip(topics, sizes, strict=True):
        create_topic(system.bootstrap, topic, partitions=count, replication_factor=replication_factor)
    created_s = time.monotonic() - started
    confluent = AdminClient({"bootstrap.servers": system.bootstrap})
    targets: dict[str, dict[int, list[int]]] = {}
    for topic in topics:
        meta = confluent.list_topics(topic, timeout=60).topics[topic]
        replicas = {p: list(pm.replicas) for p, pm in meta.partitions.items()}
        targets[topic] = {p: [r[0] % brokers + 1] for p, r in replicas.items()} if replication_factor == 1 \
            else {p: r[1:] + r[:1] for p, r in replicas.items()}
    admin = KafkaAdminClient(bootstrap_servers=system.bootstrap, request_timeout_ms=int(timeout_s * 1000))
    try:
        started = time.monotonic()
        for topic, target in targets.items():
            errors = [e for e in admin.alter_partition_reassignments(
                {KTP(topic, p): t for p, t in target.items()}).values() if e is not None]
            if errors:
                raise RuntimeError(f"{len(errors)} reassignments of {topic} refused, e.g. {errors[0]}")
        if replication_factor > 1:
            elections = [confluent.elect_leaders(ElectionType.PREFERRED, [CTP(topic, p) for p in target])
                         for topic, target in targets.items()]
            for election in elections:
                election.result(timeout_s)
        for topic, target in targets.items():
            wait_all_leaders(system.bootstrap, topic, len(target), timeout_s, led_by_first(target))
        moved_s = time.monotonic() - started
    finally:
        admin.close()
    return {"partitions": partitions, "topics": len(topics), "create_s": round(created_s, 2),
            "move_all_s": round(moved_s, 2)}


# ---------------------------------------------------------------------- 5. controlled shutdown and restart
def controlled_restart(system: System, topic: str, partitions: int, victim: int = 1,
                       timeout_s: float = 1800.0) -> dict[str, Any]:
    """SIGTERM a broker (a controlled shutdown: its leaderships move first), then start it again.
    ``shutdown_s``: until the process exits; ``leaders_elsewhere_s``: until Metadata names a live
    leader for every partition; ``restart_s``: until the restarted broker is listed again and leads
    or hosts what it is given (Kafka: it is back in Metadata; leadership returns by preferred
    election, not measured)."""
    before = leaders(system.bootstrap, topic)
    led = sum(1 for b in before.values() if b == victim)
    started = time.monotonic()
    system.terminate_broker(victim)
    shutdown_s = time.monotonic() - started
    elsewhere_s = wait_all_leaders(system.bootstrap, topic, partitions, timeout_s, lambda _p, b: b != victim) + shutdown_s
    started = time.monotonic()
    system.start_broker(victim)
    deadline = started + timeout_s
    while time.monotonic() < deadline:
        brokers = AdminClient({"bootstrap.servers": system.bootstrap}).list_topics(timeout=10).brokers
        if victim in brokers:
            break
        time.sleep(0.1)
    restart_s = time.monotonic() - started
    return {"partitions": partitions, "led_by_victim": led, "shutdown_s": round(shutdown_s, 2),
            "leaders_elsewhere_s": round(elsewhere_s, 2), "restart_s": round(restart_s, 2)}


# ---------------------------------------------------------------------- the run
SIZES_QUICK = {"1MiB": MIB, "100MiB": 100 * MIB}
SIZES_FULL = {"1MiB": MIB, "100MiB": 100 * MIB, "1GiB": 1024 * MIB}


def run_system(system: System, sizes: dict[str, int], start: list[int], target: list[int],
               throttle_bytes_s: int | None, produce_bytes: int, replication_factor: int,
               console: Console, many: int = 0, restart_partitions: int = 0) -> dict[str, Any]:
    out: dict[str, Any] = {"moves": {}}
    for label, size in sizes.items():
        console.print(f"  ({system.name}) move of a partition holding {label} ...")
        out["moves"][label] = one_move(system, label, size, start, target, None, timeout_s=1800)
        if throttle_bytes_s is not None:
            console.print(f"  ({system.name}) the same at a throttle of {throttle_bytes_s / MIB:.0f} MiB/s ...")
            out["moves"][label + "@throttle"] = one_move(system, label, size, start, target, throttle_bytes_s,
                                                          timeout_s=3600)
    console.print(f"  ({system.name}) produce, CPU and end to end ...")
    out.update(produce_and_cpu(system, produce_bytes, replication_factor))
    if restart_partitions:
        console.print(f"  ({system.name}) controlled shutdown and restart of a broker, {restart_partitions} partitions ...")
        topic = f"peer-restart-{restart_partitions}"
        create_topic(system.bootstrap, topic, partitions=restart_partitions, replication_factor=replication_factor)
        out["controlled_restart"] = controlled_restart(system, topic, restart_partitions)
    if many:
        console.print(f"  ({system.name}) {many} partitions: created, then all moved at once ...")
        out["many"] = many_partitions(system, many, replication_factor)
    console.print(f"  ({system.name}) kill -9 of a broker ...")
    out.update(crash_failover(system, replication_factor))
    return out


def ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a is not None and b else None


def summarize(kafka: dict[str, Any], ferry: dict[str, Any], ferry_s3wal: dict[str, Any] | None,
              kafka_version: str) -> dict[str, Any]:
    def moves(r: dict[str, Any]) -> dict[str, float]:
        return {k: v["move_s"] for k, v in r["moves"].items()}

    def gaps(r: dict[str, Any]) -> list[float]:
        return [v["gap_ms"] for v in r["moves"].values() if v.get("gap_ms") is not None]

    big = "1GiB" if "1GiB" in kafka["moves"] else max(kafka["moves"], key=lambda k: kafka["moves"][k]["size_bytes"])
    result: dict[str, Any] = {
        "kafka_version": kafka_version,
        "kafka_move_s_by_size": moves(kafka), "ferry_move_s_by_size": moves(ferry),
        "move_speedup_at": big, "move_speedup_at_1gib": ratio(kafka["moves"][big]["move_s"], ferry["moves"][big]["move_s"]),
        "kafka_leader_change_gap_p99_ms": percentile(gaps(kafka), 99), "ferry_move_gap_p99_ms": percentile(gaps(ferry), 99),
        "kafka_produce_mb_s": kafka["produce_mb_s"], "ferry_produce_mb_s": ferry["produce_mb_s"],
        "kafka_cpu_s_per_gib": kafka["cpu_s_per_gib"], "ferry_cpu_s_per_gib": ferry["cpu_s_per_gib"],
        "ferry_s3_server_cpu_s_per_gib": ferry.get("s3_server_cpu_s_per_gib"),
        "cpu_ratio": ratio(ferry["cpu_s_per_gib"], kafka["cpu_s_per_gib"]),
        "kafka_e2e_p50_ms": kafka["e2e_p50_ms"], "kafka_e2e_p99_ms": kafka["e2e_p99_ms"],
        "ferry_e2e_p50_ms": ferry["e2e_p50_ms"], "ferry_e2e_p99_ms": ferry["e2e_p99_ms"],
        "kafka_crash_failover_s": kafka["crash_failover_s"], "ferry_crash_failover_s": ferry["crash_failover_s"],
        "crash_failover_ratio": ratio(ferry["crash_failover_s"], kafka["crash_failover_s"]),
        "kafka": kafka, "ferry": ferry,
    }
    if "many" in kafka and "many" in ferry:
        result.update({"many_partitions": kafka["many"]["partitions"],
                       "kafka_create_many_s": kafka["many"]["create_s"], "ferry_create_many_s": ferry["many"]["create_s"],
                       "kafka_move_10000_s": kafka["many"]["move_all_s"], "ferry_move_10000_s": ferry["many"]["move_all_s"]})
    if "controlled_restart" in kafka and "controlled_restart" in ferry:
        for key in ("shutdown_s", "leaders_elsewhere_s", "restart_s"):
            result[f"kafka_controlled_{key}"] = kafka["controlled_restart"][key]
            result[f"ferry_controlled_{key}"] = ferry["controlled_restart"][key]
    if ferry_s3wal is not None:
        result["ferry_s3wal_crash_failover_s"] = ferry_s3wal["crash_failover_s"]
        result["s3wal_crash_failover_ratio"] = ratio(ferry_s3wal["crash_failover_s"], kafka["crash_failover_s"])
    return result


def render(result: dict[str, Any], console: Console) -> None:
    table = Table(title=f"ferry perf peer (Apache Kafka {result['kafka_version']})")
    for col in ("measure", "Apache Kafka", "Ferry", "ratio", "target"):
        table.add_column(col)

    def fmt(v: Any, unit: str = "") -> str:
        return "-" if v is None else (f"{v:.3f}{unit}" if isinstance(v, float) else f"{v}{unit}")

    for label, k in result["kafka_move_s_by_size"].items():
        f = result["ferry_move_s_by_size"].get(label)
        table.add_row(f"move {label} (s)", fmt(k), fmt(f), fmt(ratio(k, f)),
                      "≥ 100" if label == result["move_speedup_at"] else "")
    for label, v in result["kafka"]["moves"].items():
        table.add_row(f"client gap, move {label} (ms)", fmt(v.get("gap_ms")),
                      fmt(result["ferry"]["moves"].get(label, {}).get("gap_ms")), "", "")
    rows = [("gap p99 over the moves (ms)", "kafka_leader_change_gap_p99_ms", "ferry_move_gap_p99_ms", "Ferry ≤ Kafka"),
            ("produce MB/s (acks=all)", "kafka_produce_mb_s", "ferry_produce_mb_s", ""),
            ("server CPU s per GiB", "kafka_cpu_s_per_gib", "ferry_cpu_s_per_gib", "≤ 2"),
            ("end-to-end p50 (ms)", "kafka_e2e_p50_ms", "ferry_e2e_p50_ms", ""),
            ("end-to-end p99 (ms)", "kafka_e2e_p99_ms", "ferry_e2e_p99_ms", "Ferry ≤ Kafka"),
            ("kill -9 failover (s)", "kafka_crash_failover_s", "ferry_crash_failover_s", "≤ 1/3")]
    for label, kk, fk, target in rows:
        table.add_row(label, fmt(result.get(kk)), fmt(result.get(fk)), fmt(ratio(result.get(fk), result.get(kk))), target)
    if "many_partitions" in result:
        n = result["many_partitions"]
        rows = [(f"create {n} partitions (s)", "kafka_create_many_s", "ferry_create_many_s", ""),
                (f"move all {n} at once (s)", "kafka_move_10000_s", "ferry_move_10000_s", "Ferry faster")]
        for label, kk, fk, target in rows:
            table.add_row(label, fmt(result[kk]), fmt(result[fk]), fmt(ratio(result[fk], result[kk])), target)
    for key, label in (("shutdown_s", "controlled shutdown (s)"), ("leaders_elsewhere_s", "  until led elsewhere (s)"),
                       ("restart_s", "restart until listed (s)")):
        if f"kafka_controlled_{key}" in result:
            table.add_row(label, fmt(result[f"kafka_controlled_{key}"]), fmt(result[f"ferry_controlled_{key}"]),
                          fmt(ratio(result[f"ferry_controlled_{key}"], result[f"kafka_controlled_{key}"])), "")
    if "ferry_s3wal_crash_failover_s" in result:
        table.add_row("kill -9 failover, Ferry S3 WAL (s)", fmt(result["kafka_crash_failover_s"]),
                      fmt(result["ferry_s3wal_crash_failover_s"]), fmt(result.get("s3wal_crash_failover_ratio")), "≤ 1/3")
    if result.get("ferry_s3_server_cpu_s_per_gib") is not None:
        table.add_row("S3 server CPU s per GiB (beside Ferry)", "", fmt(result["ferry_s3_server_cpu_s_per_gib"]), "", "")
    console.print(table)


def plot(result: dict[str, Any], path: str) -> None:
    """Each figure's two bars side by side."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [(f"move {k} (s)", result["kafka_move_s_by_size"][k], result["ferry_move_s_by_size"].get(k))
              for k in result["kafka_move_s_by_size"]]
    panels += [("gap p99 (ms)", result["kafka_leader_change_gap_p99_ms"], result["ferry_move_gap_p99_ms"]),
               ("produce MB/s", result["kafka_produce_mb_s"], result["ferry_produce_mb_s"]),
               ("CPU s / GiB", result["kafka_cpu_s_per_gib"], result["ferry_cpu_s_per_gib"]),
               ("e2e p99 (ms)", result["kafka_e2e_p99_ms"], result["ferry_e2e_p99_ms"]),
               ("kill -9 failover (s)", result["kafka_crash_failover_s"], result["ferry_crash_failover_s"])]
    if "many_partitions" in result:
        panels.append((f"move {result['many_partitions']} at once (s)", result["kafka_move_10000_s"],
                       result["ferry_move_10000_s"]))
    if "kafka_controlled_leaders_elsewhere_s" in result:
        panels.append(("controlled shutdown (s)", result["kafka_controlled_leaders_elsewhere_s"],
                       result["ferry_controlled_leaders_elsewhere_s"]))
    fig, axes = plt.subplots(1, len(panels), figsize=(2.3 * len(panels), 3.2))
    for ax, (title, k, f) in zip(axes, panels, strict=True):
        ax.bar(["Kafka", "Ferry"], [k or 0, f or 0], color=["#888888", "#1f77b4"])
        ax.set_title(title, fontsize=8)
        ax.tick_params(labelsize=7)
    fig.suptitle(f"Apache Kafka {result['kafka_version']} and Ferry, same clients, same machine", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str]) -> int:
    from tools.cluster import LocalCluster
    from tools.peer.jars import kafka_jars_dir

    parser = argparse.ArgumentParser(prog="ferry perf peer", description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--quick", action="store_true", help="1 MiB and 100 MiB moves only, less produce")
    parser.add_argument("--throttle-mb-s", type=float, default=10.0, help="Kafka's reassignment throttle (MiB/s)")
    parser.add_argument("--no-throttle-run", action="store_true", help="skip the throttled Kafka moves")
    parser.add_argument("--plot", default="perf-peer.png", help="where the PNG goes")
    parser.add_argument("--partitions", type=int, default=None,
                        help="partitions created then moved at once (default 10000, quick 500; 0 = skip)")
    parser.add_argument("--restart-partitions", type=int, default=None,
                        help="partitions of the controlled shutdown and restart (default 2000, quick 200; 0 = skip)")
    parser.add_argument("--state-dir")
    args = parser.parse_args(argv)
    console = Console(stderr=args.json)
    jars = kafka_jars_dir()
    if jars is None:
        console.print("Apache Kafka's jars are not installed: run `make kafka-jars`")
        return 2
    sizes = SIZES_QUICK if args.quick else SIZES_FULL
    produce_bytes = (256 if args.quick else 1024) * MIB
    throttle = None if args.no_throttle_run else int(args.throttle_mb_s * MIB)
    many = args.partitions if args.partitions is not None else (500 if args.quick else 10000)
    restart = args.restart_partitions if args.restart_partitions is not None else (200 if args.quick else 2000)
    state = Path(args.state_dir or tempfile.mkdtemp(prefix="ferry-perf-peer-"))
    console.print("Apache Kafka (KRaft: 1 controller, 3 brokers) ...")
    peer = ApacheKafkaCluster(state / "kafka", jars)
    peer.start()
    try:
        kafka = run_system(KafkaPeer(peer), sizes, [1, 2], [3, 2], throttle, produce_bytes, 3, console, many, restart)
    finally:
        peer.stop()
    console.print("Ferry (3 controllers, 3 brokers, local WAL) ...")
    cluster = LocalCluster(str(state / "ferry"))
    cluster.start()
    try:
        ferry = run_system(FerrySystem(cluster), sizes, [1], [2], None, produce_bytes, 1, console, many, restart)
    finally:
        cluster.stop(graceful=False)
    console.print("Ferry with the S3 WAL: kill -9 only ...")
    s3wal_cluster = LocalCluster(str(state / "ferry-s3wal"), wal_mode="s3")
    s3wal_cluster.start()
    try:
        ferry_s3wal = crash_failover(FerrySystem(s3wal_cluster), 1)
    finally:
        s3wal_cluster.stop(graceful=False)
    result = summarize(kafka, ferry, ferry_s3wal, peer.version)
    plot(result, args.plot)
    result["plot"] = os.path.abspath(args.plot)
    if args.json:
        print(json.dumps(result))
    else:
        render(result, console)
        console.print(f"plot: {result['plot']}")
    return 0
