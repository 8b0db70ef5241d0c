"""A librdkafka workload for the demo and benchmarks: an idempotent producer (acks=all) at a
steady rate, a consumer group reading the same topic, and what each saw.

The producer records when each acknowledgement arrived, per partition, so a move's
client-observed unavailability is the longest silence between two acknowledgements of the moved
partition around the move (its last acknowledgement from the old owner → its first from the
new one). Runs in threads: librdkafka's own threads do the I/O, so the asyncio loop that drives
the moves is never blocked.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer


@dataclass
class KafkaLoad:
    bootstrap: str
    topic: str
    partitions: int
    per_s: float = 200.0
    group: str = "ferry-demo"
    members: int = 2
    client_config: dict[str, Any] = field(default_factory=dict)  # extra librdkafka settings (a logger, ...)
    acks_mono_s: dict[int, list[float]] = field(default_factory=dict)
    # (offset, value) per partition; offset None when librdkafka reported the delivery without one
    acked: dict[int, list[tuple[int | None, bytes]]] = field(default_factory=dict)
    consumed: set[bytes] = field(default_factory=set)
    errors: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _stop_producing: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _threads: list[threading.Thread] = field(default_factory=list)

    def start(self) -> "KafkaLoad":
        for i in range(self.members):
            self._threads.append(threading.Thread(target=self._member, name=f"kafka-member-{i}", daemon=True))
        self._threads.append(threading.Thread(target=self._produce, name="kafka-producer", daemon=True))
        for t in self._threads:
            t.start()
        return self

    def stop(self, timeout_s: float = 60.0) -> bool:
        """Stop producing, let the group read everything acknowledged, stop the group; returns
        whether the group read every acknowledged record."""
        self.stop_producing(timeout_s)
        complete = self.wait_consumed(timeout_s)
        self._stop.set()
        for t in self._threads:
            t.join(timeout_s)
        return complete

    def stop_producing(self, timeout_s: float = 60.0) -> None:
        """Stop producing and wait for the producer's flush, so every record sent is acknowledged
        or failed; the group, if any, reads on."""
        self._stop_producing.set()
        self._threads[-1].join(timeout_s)

    def acknowledged(self) -> int:
        with self._lock:
            return sum(len(v) for v in self.acked.values())

    def wait_consumed(self, timeout_s: float = 30.0) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self._lock:
                wanted = {v for recs in self.acked.values() for _, v in recs}
                if wanted <= self.consumed:
                    return True
            time.sleep(0.1)
        return False

    def gap_ms(self, partition: int, start_mono_s: float, window_s: float = 2.0) -> float | None:
        """The longest silence between two acknowledgements of ``partition`` in the window."""
        with self._lock:
            times = [t for t in self.acks_mono_s.get(partition, []) if start_mono_s - 0.05 <= t <= start_mono_s + window_s]
        gaps = [b - a for a, b in pairwise(times)]
        return max(gaps) * 1000 if gaps else None

    def _on_delivery(self, err: KafkaError | None, msg: Any) -> None:
        now = time.monotonic()
        with self._lock:
            if err is not None:
                self.errors.append(str(err))
                return
            self.acks_mono_s.setdefault(msg.partition(), []).append(now)
            self.acked.setdefault(msg.partition(), []).append((msg.offset(), msg.value()))

    def _produce(self) -> None:
        producer = Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True, "acks": "all",
                             "linger.ms": 0, **self.client_config})
        started, n = time.monotonic(), 0
        while not self._stop_producing.is_set():
            producer.produce(self.topic, value=b"k%09d" % n, partition=n % self.partitions,
                             on_delivery=self._on_delivery)
            producer.poll(0)
            n += 1
            delay = started + n / self.per_s - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        producer.flush(60)

    def _member(self) -> None:
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": self.group,
                             "auto.offset.reset": "earliest", "enable.auto.commit": True,
                             "session.timeout.ms": 6000, **self.client_config})
        consumer.subscribe([self.topic])
        try:
            while not self._stop.is_set():
                msg = consumer.poll(0.2)
                if msg is None or msg.error() is not None:
                    continue
                value = msg.value()
                with self._lock:
                    if value is None:  # every record this workload produces has a value
                        self.errors.append(f"consumer: a record without a value at offset {msg.offset()}")
                    else:
                        self.consumed.add(value)
        except KafkaException as exc:
            with self._lock:
                self.errors.append(f"consumer: {exc}")
        finally:
            consumer.close()
