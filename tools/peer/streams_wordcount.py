"""Kafka Streams' own word count (``WordCountDemo``, unmodified, from Maven Central) run with
``processing.guarantee=exactly_once_v2`` against a cluster, and its output checked exactly.

The demo reads ``streams-plaintext-input``, splits each line on ``\\W+`` after lower-casing it,
counts per word and writes each new count to ``streams-wordcount-output`` (String key, Long
value). Exactly-once means: read with ``isolation.level=read_committed``, the last count of each
word equals its count in the input, however the run was interrupted (``between_steps`` may move
partitions or kill -9 a broker between the produced steps). The jars come from
``make streams-jars``; nothing is downloaded here.
"""
from __future__ import annotations

import re
import struct
import subprocess
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from confluent_kafka import Message

from tools.peer.apache_kafka import java_command
from tools.peer.kafka_tools import KafkaTools

INPUT_TOPIC = "streams-plaintext-input"
OUTPUT_TOPIC = "streams-wordcount-output"
APPLICATION_ID = "streams-wordcount"
DEMO_CLASS = "org.apache.kafka.streams.examples.wordcount.WordCountDemo"
STREAMS_JARS = Path(__file__).resolve().parents[2] / ".cache" / "kafka-streams-4.3.1"

_NON_WORD = re.compile(r"[^a-z0-9_]+")


def expected_counts(lines: Sequence[str]) -> Counter[str]:
    """The demo's counts for ``lines``: Java's ``\\W`` is ``[^a-zA-Z0-9_]``; lines here start and
    end with a word, so Java's split yields no empty words either."""
    out: Counter[str] = Counter()
    for line in lines:
        out.update(w for w in _NON_WORD.split(line.lower()) if w)
    return out


def sample_text(lines: int, seed: int = 7) -> list[str]:
    """A known text: ``lines`` lines of 3-8 words from a small vocabulary (so counts grow large)."""
    import random

    rng = random.Random(seed)
    vocab = [f"w{i:02d}" for i in range(40)] + ["kafka", "ferry", "stream", "exactly", "once"]
    return [" ".join(rng.choice(vocab) for _ in range(rng.randint(3, 8))) for _ in range(lines)]


def last_counts(records: Sequence[tuple[bytes | None, bytes | None]]) -> Counter[str]:
    """The last count per word among output records (key, 8-byte big-endian Long) in log order."""
    out: Counter[str] = Counter()
    for key, value in records:
        if key is None or value is None or len(value) != 8:
            raise ValueError(f"unexpected output record key={key!r} value={value!r}")
        out[key.decode()] = struct.unpack(">q", value)[0]
    return out


def where(m: Message) -> tuple[int, int]:
    """A consumed record's (partition, offset): both always set on a record (not on an error)."""
    p, o = m.partition(), m.offset()
    if p is None or o is None:
        raise ValueError("a consumed record without a partition or an offset")
    return p, o


def parse_transactions_list(output: str) -> dict[str, int]:
    """``kafka-transactions list``'s table (TransactionalId, Coordinator, ProducerId,
    TransactionState): each transactional id's coordinator broker."""
    out: dict[str, int] = {}
    lines = [line.split() for line in output.splitlines() if line.strip()]
    header = next((i for i, cols in enumerate(lines) if cols[:2] == ["TransactionalId", "Coordinator"]), None)
    if header is None:
        raise ValueError(f"not a kafka-transactions list table: {output[:300]!r}")
    for cols in lines[header + 1:]:
        if len(cols) >= 2 and cols[1].isdigit():
            out[cols[0]] = int(cols[1])
    return out


def streams_coordinator(tools: KafkaTools, bootstrap: str) -> int | None:
    """The broker coordinating the word count's transactions (its transactional ids start with
    the application id), from Kafka's own ``kafka-transactions list``; None if none is listed."""
    run = tools.run("kafka-transactions", "--bootstrap-server", bootstrap, "list", timeout_s=60)
    if not run.ok:
        raise RuntimeError(run.describe())
    owners = [c for tid, c in sorted(parse_transactions_list(run.stdout).items()) if tid.startswith(APPLICATION_ID)]
    return owners[0] if owners else None


@dataclass
class WordCountResult:
    expected: Counter[str]
    got: Counter[str]
    elapsed_s: float
    app_log: Path
    steps_done: list[str] = field(default_factory=list)

    @property
    def mismatches(self) -> dict[str, tuple[int, int]]:
        words = set(self.expected) | set(self.got)
        return {w: (self.expected[w], self.got[w]) for w in sorted(words) if self.expected[w] != self.got[w]}

    @property
    def ok(self) -> bool:
        return not self.mismatches


def app_properties(bootstrap: str, state_dir: Path, commit_interval_ms: int) -> str:
    props = {"bootstrap.servers": bootstrap, "processing.guarantee": "exactly_once_v2",
             "state.dir": str(state_dir), "commit.interval.ms": str(commit_interval_ms),
             "application.id": APPLICATION_ID, "replication.factor": "-1"}
    return "".join(f"{k}={v}\n" for k, v in sorted(props.items()))


def _create_topics(bootstrap: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(t, partitions) for t in (INPUT_TOPIC, OUTPUT_TOPIC)], request_timeout=30)
    for f in futures.values():
        f.result(60)


def _read_output(bootstrap: str, timeout_s: float) -> list[tuple[bytes | None, bytes | None]]:
    """Everything committed in the output topic, read_committed, up to its end."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"wc-check-{time.monotonic_ns()}",
                  "isolation.level": "read_committed", "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        md = c.list_topics(OUTPUT_TOPIC, timeout=10).topics[OUTPUT_TOPIC]
        tps = [TopicPartition(OUTPUT_TOPIC, p, 0) for p in sorted(md.partitions)]
        ends = {tp.partition: c.get_watermark_offsets(tp, timeout=10)[1] for tp in tps}  # LSO under read_committed
        c.assign(tps)
        out: list[tuple[bytes | None, bytes | None]] = []
        done = {p for p, e in ends.items() if e == 0}
        deadline = time.monotonic() + timeout_s
        while len(done) < len(tps) and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None or m.error():
                continue
            out.append((m.key(), m.value()))
            p, o = where(m)
            if o + 1 >= ends[p]:
                done.add(p)
        return out
    finally:
        c.close()


def run_word_count(bootstrap: str, work_dir: Path, lines: Sequence[str], steps: int = 3,
                   between_steps: Callable[[int], str | None] | None = None, partitions: int = 2,
                   commit_interval_ms: int = 200, timeout_s: float = 120.0,
                   jars_dir: Path = STREAMS_JARS) -> WordCountResult:
    """Produce ``lines`` in ``steps`` batches while the demo runs, calling ``between_steps(i)``
    after batch i (a partition move, a kill -9; what it returns is noted), then wait until the
    read_committed output's last counts equal the input's (or the timeout) and stop the demo."""
    from confluent_kafka import Producer

    work_dir.mkdir(parents=True, exist_ok=True)
    props_file = work_dir / "wordcount.properties"
    props_file.write_text(app_properties(bootstrap, work_dir / "state", commit_interval_ms))
    _create_topics(bootstrap, partitions)
    app_log = work_dir / "wordcount.log"
    expected = expected_counts(lines)
    started = time.monotonic()
    with open(app_log, "ab") as log:
        app = subprocess.Popen(java_command(jars_dir, DEMO_CLASS, [str(props_file)], 384),
                               stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    result = WordCountResult(expected, Counter(), 0.0, app_log)
    try:
        producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all"})
        size = -(-len(lines) // steps)
        for i in range(steps):
            for line in lines[i * size:(i + 1) * size]:
                producer.produce(INPUT_TOPIC, line.encode())
            if producer.flush(60) != 0:
                raise RuntimeError("input not acknowledged within 60 s")
            if between_steps is not None and i < steps - 1:
                note = between_steps(i)
                if note:
                    result.steps_done.append(note)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if app.poll() is not None:
                raise RuntimeError(f"the word count exited ({app.returncode}); see {app_log}")
            result.got = last_counts(_read_output(bootstrap, 30))
            if result.ok:
                break
            time.sleep(1.0)
    finally:
        result.elapsed_s = time.monotonic() - started
        app.terminate()
        try:
            app.wait(30)
        except subprocess.TimeoutExpired:
            app.kill()
            app.wait(10)
    return result
