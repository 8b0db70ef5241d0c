"""The broker's Prometheus metrics (one registry per broker, so tests can run several in a process)."""
from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

MOVE_STEP_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class BrokerMetrics:
    def __init__(self, broker_id: int) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.produce_requests = Counter("ferry_broker_produce_requests", "Produce requests answered",
                                        ["topic", "partition"], registry=r)
        self.produce_bytes = Counter("ferry_broker_produce_bytes", "Bytes of record batches acknowledged",
                                     ["topic", "partition"], registry=r)
        self.produce_records = Counter("ferry_broker_produce_records", "Records acknowledged",
                                       ["topic", "partition"], registry=r)
        self.produce_errors = Counter("ferry_broker_produce_errors", "Produce requests refused", ["error"], registry=r)
        self.produce_forwarded = Counter(
            "ferry_broker_produce_forwarded_batches", "Partitions' record batches of produce requests this broker "
            "had just handed over, forwarded to the owner (produce_forward.py), by outcome: answered by the owner, "
            "or failed (the client got NOT_LEADER_OR_FOLLOWER naming the owner)", ["outcome"], registry=r)
        self.fetch_requests = Counter("ferry_broker_fetch_requests", "Fetch requests answered",
                                      ["topic", "partition"], registry=r)
        self.fetch_bytes = Counter("ferry_broker_fetch_bytes", "Bytes returned by fetch", ["topic", "partition"],
                                   registry=r)
        self.fetch_errors = Counter("ferry_broker_fetch_errors", "Fetch requests refused", ["error"], registry=r)
        self.produce_latency = Histogram("ferry_broker_produce_latency_seconds", "Produce request to acknowledgement",
                                         registry=r)
        self.kafka_request_seconds = Histogram("ferry_broker_kafka_request_seconds",
                                               "Kafka request decoded to its response encoded, by API", ["api"],
                                               registry=r)
        self.kafka_queued_seconds = Histogram("ferry_broker_kafka_response_queued_seconds",
                                              "Kafka response encoded to written (waiting for earlier responses "
                                              "of its connection)", registry=r)
        self.move_steps = Histogram("ferry_broker_move_step_seconds", "Duration of each step of a partition move",
                                    ["step", "role"], buckets=MOVE_STEP_BUCKETS_S, registry=r)
        self.partitions = Gauge("ferry_broker_partitions", "Partitions by state", ["state"], registry=r)
        self.metadata_offset = Gauge("ferry_broker_metadata_offset", "Last metadata log offset applied", registry=r)
        self.heartbeat_failures = Counter("ferry_broker_heartbeat_failures", "Heartbeats that failed", registry=r)
        self.stream_fenced = Counter("ferry_broker_stream_fenced", "Partitions stepped down on STREAM_FENCED",
                                     registry=r)
        self.close_failures = Counter("ferry_broker_close_failures",
                                      "Partition closes given up after every attempt (the next owner recovers)",
                                      registry=r)
        self.wal_recoveries = Counter("ferry_broker_wal_recoveries", "Partitions recovered from a WAL tail", registry=r)
        self.object_tails = Counter("ferry_broker_object_tails", "Closing objects' tails handed over by a moving "
                                    "partition's old owner (tail_handoff.py), by outcome on the receiver: kept, or "
                                    "refused (the new owner then GETs the object)", ["result"], registry=r)
        self.storage = Gauge("ferry_broker_storage", "Stream storage state (WAL, uploads, caches) by name",
                             ["name"], registry=r)
        self.s3_requests = Counter("ferry_broker_s3_requests", "S3 requests sent (each attempt, each listing "
                                   "page), by billing kind: PUT, GET, LIST, DELETE, HEAD, OTHER", ["kind"], registry=r)
        self.s3_bytes = Counter("ferry_broker_s3_bytes", "Bytes of S3 request and response bodies, by kind and "
                                "direction (sent, received)", ["kind", "direction"], registry=r)
        self._s3_children: dict[tuple[str, str], Any] = {}
        self.broker_info = Gauge("ferry_broker_info", "Broker id", ["broker_id"], registry=r)
        self.broker_info.labels(str(broker_id)).set(1)
        self._produce_children: dict[tuple[str, int], tuple[Any, Any, Any]] = {}
        self._kafka_children: dict[str, Any] = {}

    def observe_s3(self, kind: str, requests: int, bytes_sent: int, bytes_received: int) -> None:
        """The object store's observer (called from its I/O threads; prometheus counters are thread-safe)."""
        if requests:
            self._s3_child("requests", kind).inc(requests)
        if bytes_sent:
            self._s3_child("sent", kind).inc(bytes_sent)
        if bytes_received:
            self._s3_child("received", kind).inc(bytes_received)

    def _s3_child(self, what: str, kind: str) -> Any:
        child = self._s3_children.get((what, kind))
        if child is None:
            child = self.s3_requests.labels(kind) if what == "requests" else self.s3_bytes.labels(kind, what)
            self._s3_children[(what, kind)] = child
        return child

    def observe_kafka(self, api: str, handling_s: float, queued_s: float) -> None:
        """Called for every Kafka answer: the labelled child is cached, as for produce."""
        child = self._kafka_children.get(api)
        if child is None:
            child = self._kafka_children[api] = self.kafka_request_seconds.labels(api)
        child.observe(handling_s)
        self.kafka_queued_seconds.observe(queued_s)

    def observe_produce(self, topic: str, partition: int, size_bytes: int, records: int, latency_s: float) -> None:
        """One acknowledged produce (the labelled children are cached: looking them up is most of a
        metric's cost, and this runs for every request)."""
        children = self._produce_children.get((topic, partition))
        if children is None:
            labels = (topic, str(partition))
            children = (self.produce_requests.labels(*labels), self.produce_bytes.labels(*labels),
                        self.produce_records.labels(*labels))
            self._produce_children[(topic, partition)] = children
        children[0].inc()
        children[1].inc(size_bytes)
        children[2].inc(records)
        self.produce_latency.observe(latency_s)

    def observe_move(self, role: str, steps_ms: dict[str, int | None], total_ms: int | None) -> None:
        for step, ms in steps_ms.items():
            if ms is not None:
                self.move_steps.labels(step, role).observe(max(0, ms) / 1000.0)
        if total_ms is not None:
            self.move_steps.labels("total", role).observe(max(0, total_ms) / 1000.0)

    def set_storage_stats(self, stats: dict[str, float]) -> None:
        for name, value in stats.items():
            self.storage.labels(name).set(value)

    def render(self) -> bytes:
        return generate_latest(self.registry)
