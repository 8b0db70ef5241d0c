"""Checks of Kafka's command-line tools against a running cluster, and how an outcome is judged.

A check runs one tool (or a few) the way an operator would and asserts what Kafka's own broker
would make it print or do; the state it needs (topics, records, committed offsets) is set up
with librdkafka, which is quicker than a JVM. A check that fails where it needs an API the
brokers do not advertise is reported as such (``NEEDS_API``, with the tool's error), so the table
tells a missing API from a wrong answer; it passes as soon as the API is there.

The checks themselves are in :mod:`tools.peer.tool_checks`.
"""
from __future__ import annotations

import re
import time
import uuid
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Callable

from tools.peer.kafka_tools import KafkaTools, ToolRun

API_LINE = re.compile(r"^\s*(\w+)\((\d+)\): (.+?),?$")


class CheckFailed(Exception):
    """What a check saw that Kafka's broker would not have made the tool do."""


class Outcome(Enum):
    WORKS = "works"
    FAILS = "fails"
    NEEDS_API = "fails: API not advertised"


@dataclass(frozen=True)
class Check:
    tool: str
    name: str
    run: Callable[["Peer"], str]  # returns what it saw; raises CheckFailed
    needs: tuple[str, ...] = ()  # Kafka APIs it needs, as kafka-broker-api-versions names them


@dataclass(frozen=True)
class Row:
    tool: str
    check: str
    outcome: Outcome
    detail: str
    elapsed_s: float


#: the brokers' authorizer as librdkafka's test clusters run Kafka (trivup: StandardAuthorizer,
#: super.users=User:admin, allow.everyone.if.no.acl.found=true): ACLs decide where there are any
AUTHORIZER_ON: dict[str, object] = {"authorizer_enabled": True, "super_users": ["User:admin"],
                                    "allow_everyone_if_no_acl_found": True}


@dataclass
class Peer:
    """Kafka's tools pointed at one cluster, with a scratch directory and unique names."""

    tools: KafkaTools
    bootstrap: str
    workdir: Path
    broker_ids: tuple[int, ...]
    thorough: bool = True  # False: each check only its main steps (fewer JVM starts, for make test)
    prefix: str = field(default_factory=lambda: "p" + uuid.uuid4().hex[:6])
    _advertised: dict[str, str] | None = None

    def name(self, what: str) -> str:
        return f"{self.prefix}-{what}"

    def tool(self, tool: str, *args: str, input_text: str | None = None, timeout_s: float = 60.0,
             short_lived: bool = True) -> ToolRun:
        """Run a tool against the cluster (``--bootstrap-server`` first)."""
        return self.tools.run(tool, "--bootstrap-server", self.bootstrap, *args, input_text=input_text,
                              timeout_s=timeout_s, short_lived=short_lived)

    def ok(self, tool: str, *args: str, input_text: str | None = None, timeout_s: float = 60.0,
           short_lived: bool = True) -> ToolRun:
        """Run a tool that must exit 0 and print no error."""
        run = self.tool(tool, *args, input_text=input_text, timeout_s=timeout_s, short_lived=short_lived)
        expect(run.ok, "failed", run)
        expect(not re.search(r"^Error|Exception", run.stdout, re.M), "printed an error", run)
        return run

    def advertised(self) -> dict[str, str]:
        """What the first broker advertises per API (``3 to 11 [usable: 11]`` or ``UNSUPPORTED``),
        read with kafka-broker-api-versions once."""
        if self._advertised is None:
            run = self.tool("kafka-broker-api-versions")
            self._advertised = parse_api_versions(run.stdout) if run.ok else {}
        return self._advertised

    # -- set-up through librdkafka
    def create_topic(self, name: str, partitions: int, configs: dict[str, str] | None = None) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        admin.create_topics([NewTopic(name, partitions, 1, config=configs or {})],
                            operation_timeout=30)[name].result(30)
        wait_until(lambda: _has_leaders(admin, name, partitions), 30, f"{name} has leaders")

    def produce(self, topic: str, values: list[bytes], partition: int | None = None,
                keys: list[bytes] | None = None) -> None:
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": self.bootstrap, "acks": "all", "linger.ms": 5})
        errors: list[str] = []
        for i, value in enumerate(values):
            producer.produce(topic, value=value, key=keys[i] if keys else None,
                             partition=-1 if partition is None else partition,  # -1: the partitioner's choice
                             on_delivery=lambda err, _m: errors.append(str(err)) if err else None)
        left = producer.flush(30)
        if left or errors:
            raise CheckFailed(f"set-up produce to {topic}: {left} unsent, errors {errors[:3]}")

    def log_end_offset(self, topic: str, partition: int = 0) -> int:
        """The partition's log end offset (its high watermark), read through librdkafka."""
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": self.name("end")})
        try:
            return int(consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=15)[1])
        finally:
            consumer.close()

    def commit(self, group: str, topic: str, offsets: dict[int, int]) -> None:
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": group, "enable.auto.commit": False})
        try:
            consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()], asynchronous=False)
        finally:
            consumer.close()

    def committed(self, group: str, topic: str, partitions: int) -> dict[int, int]:
        """The group's committed offsets (-1001: none), read through librdkafka."""
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": group, "enable.auto.commit": False})
        try:
            got = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=15)
            return {tp.partition: tp.offset for tp in got}
        finally:
            consumer.close()


def run_check(peer: Peer, check: Check) -> Row:
    """Run one check and judge its outcome."""
    started = time.monotonic()
    try:
        detail = check.run(peer)
        outcome = Outcome.WORKS
    except (CheckFailed, TimeoutError) as exc:
        detail = str(exc)
        missing = [api for api in check.needs if peer.advertised().get(api, "UNSUPPORTED") == "UNSUPPORTED"]
        if missing:
            outcome = Outcome.NEEDS_API
            detail = f"needs {', '.join(missing)}, which the brokers do not advertise: {detail}"
        else:
            outcome = Outcome.FAILS
    return Row(check.tool, check.name, outcome, detail, time.monotonic() - started)


def expect(condition: bool, what: str, run: ToolRun | None = None) -> None:
    """Raise :class:`CheckFailed` saying ``what`` (and the tool's command and output) unless ``condition``."""
    if not condition:
        raise CheckFailed(what if run is None else f"{what}: {run.describe()}")


def wait_until(cond: Callable[[], bool], timeout_s: float, what: str, interval_s: float = 0.2) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout_s:.0f} s waiting until {what}")
        time.sleep(interval_s)


def _has_leaders(admin: object, topic: str, partitions: int) -> bool:
    meta = admin.list_topics(topic, timeout=10)  # type: ignore[attr-defined]
    t = meta.topics.get(topic)
    return t is not None and t.error is None and len(t.partitions) == partitions and all(
        p.leader >= 0 for p in t.partitions.values())


# -- parsers of what the tools print

def parse_api_versions(text: str) -> dict[str, str]:
    """kafka-broker-api-versions' lines ``Produce(0): 3 to 11 [usable: 11],`` of the first broker."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        if out and line.startswith(")"):
            break
        m = API_LINE.match(line)
        if m:
            out[m.group(1)] = m.group(3).rstrip(",")
    return out


def parse_table(text: str, first_column: str) -> list[dict[str, str]]:
    """The rows of every table whose header starts with ``first_column`` (kafka-consumer-groups,
    kafka-groups): values are cut at the header's column starts, as the tools pad each column to
    its widest value, so an empty cell stays empty."""
    rows: list[dict[str, str]] = []
    starts: list[tuple[str, int]] = []
    for line in text.splitlines():
        if line.startswith(first_column + " "):
            starts = [(m.group(0), m.start()) for m in re.finditer(r"\S+", line)]
            continue
        if not starts or not line.strip():
            if not line.strip():
                starts = []
            continue
        row = {}
        for i, (name, start) in enumerate(starts):
            end = starts[i + 1][1] if i + 1 < len(starts) else len(line)
            row[name] = line[start:end].strip()
        rows.append(row)
    return rows


@dataclass(frozen=True)
class DescribedTopic:
    partition_count: int
    configs: str
    leaders: dict[int, int]
    replicas: dict[int, tuple[int, ...]]


def parse_topic_describe(text: str, topic: str) -> DescribedTopic:
    """kafka-topics --describe of one topic."""
    count, configs = -1, ""
    leaders: dict[int, int] = {}
    replicas: dict[int, tuple[int, ...]] = {}
    for line in text.splitlines():
        head = re.match(rf"^Topic: {re.escape(topic)}\t.*PartitionCount: (\d+)\t.*Configs: ?(.*)$", line)
        if head:
            count, configs = int(head.group(1)), head.group(2).strip()
            continue
        part = re.match(rf"^\s+Topic: {re.escape(topic)}\tPartition: (\d+)\tLeader: (-?\d+|none)\tReplicas: ([\d,]*)",
                        line)
        if part:
            p = int(part.group(1))
            leaders[p] = -1 if part.group(2) == "none" else int(part.group(2))
            replicas[p] = tuple(int(r) for r in part.group(3).split(",") if r)
    return DescribedTopic(count, configs, leaders, replicas)
