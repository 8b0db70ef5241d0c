"""The broker's HTTP API (docs/broker-api.md): aiohttp handlers over the broker core.

The broker has two front ends, this one and Kafka's protocol (broker/kafka/), and both call the
same core (request_core.py's ``RequestCore``: ``append_records``, ``read_records``, ``offset_at``,
``delete_records``, the log dirs). Keeping the HTTP side here, behind :class:`HttpBrokerCore`,
leaves request_core.py with the decisions, and this module with only the translation: strict
parsing of paths, query strings and JSON bodies (a bad one is refused with Kafka's error name
before anything changes), and the JSON or binary replies.
"""
from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Mapping, Protocol

from aiohttp import web

from broker import replica_fetch_http, tail_handoff_http
from broker.config import BrokerConfig
from broker.fetch_guard import sound_batches
from broker.kafka.data_apis import BrokerCore
from broker.local_partitions import LocalSlot
from broker.log_dirs_report import LogDirReport, TopicFilter
from broker.metrics import BrokerMetrics
from broker.move_timeline import MoveTimeline
from broker.partition_manager import Slot
from broker.pre_upload import PRE_UPLOAD_MAX_PARTITIONS
from metadata_quorum.kernel.auth_middleware import broker_auth_middleware
from metadata_quorum.kernel.errors import ErrorCode, FerryError
from metadata_quorum.kernel.http_parsing import check_query_names, errors_middleware, path_int, query_int, query_str, \
    read_json_object
from metadata_quorum.kernel.validation import INT32_MAX, as_int, as_list, as_mapping, as_str

FETCH_DEFAULT_MAX_BYTES = 1024 * 1024
FETCH_DEFAULT_MAX_WAIT_MS = 500
ALTER_LOG_DIRS_MAX_ENTRIES = 100_000
TOPIC_NAME_MAX_CHARS = 249  # Kafka's limit
LOG_DIR_MAX_CHARS = 4096  # PATH_MAX
MOVES_MAX_LIMIT = 10_000
ACKS_BY_NAME = {"all": -1, "-1": -1, "0": 0, "1": 1}  # Kafka's producer acks


class HttpBrokerCore(BrokerCore, Protocol):
    """What the HTTP API needs of a broker: the core the Kafka front end uses, and the log dirs,
    move timelines, health and storage figures only HTTP serves (``broker.request_core.RequestCore``)."""

    @property
    def config(self) -> BrokerConfig: ...

    @property
    def metrics(self) -> BrokerMetrics: ...

    def partition_slot(self, topic: str, partition: int, for_write: bool,
                       client_leader_epoch: int | None = None) -> Slot | LocalSlot: ...

    def await_handoff(self, topic: str, partition: int) -> Awaitable[None]: ...

    def log_dirs_report(self, wanted: TopicFilter) -> list[LogDirReport]: ...

    def alter_replica_log_dirs(self, moves: list[tuple[str, int, str]]) -> Awaitable[list[FerryError | None]]: ...

    def serve_replica_fetch(self, topic: str, partition: int, replica_id: int, offset: int,
                            last_fetched_epoch: int, leader_epoch: int, max_bytes: int,
                            max_wait_ms: int) -> Awaitable[replica_fetch_http.ReplicaFetchResult]: ...

    def move_timelines(self, topic: str | None, partition: int | None, limit: int) -> list[MoveTimeline]: ...

    def pre_upload(self, partitions: list[tuple[str, int]]) -> Awaitable[list[FerryError | None]]: ...

    def accept_object_tail(self, object_key: str, size: int, tail_start: int, tail: bytes) -> bool: ...

    def health_report(self) -> dict[str, Any]: ...

    def storage_stats(self) -> dict[str, float]: ...


def _partition_param(request: web.Request) -> int:
    return path_int(request.match_info, "partition", maximum=INT32_MAX)


def _epoch_param(request: web.Request) -> int | None:
    """The client's leader epoch, or None when it has none (-1, as Kafka's fetch sends)."""
    epoch = query_int(request.query, "leader_epoch", -1, minimum=-INT32_MAX - 1, maximum=INT32_MAX, allow_negative=True)
    return None if epoch == -1 else epoch


def _int_param(request: web.Request, name: str, default: int | None = None, minimum: int = 0,
               maximum: int | None = None) -> int:
    return query_int(request.query, name, default, minimum=minimum, maximum=maximum, allow_negative=minimum < 0)


def partition_entries(body: Mapping[str, Any], max_entries: int) -> list[tuple[str, int, Mapping[str, Any]]]:
    """``body["partitions"]``: each entry's topic and partition, checked, and the entry itself for
    the fields an endpoint adds (a log dir, an offset)."""
    out = []
    for raw in as_list(body.get("partitions"), "partitions", max_entries):
        entry = as_mapping(raw, "partitions[]")
        out.append((as_str(entry.get("topic"), "partitions[].topic", TOPIC_NAME_MAX_CHARS),
                    as_int(entry.get("partition"), "partitions[].partition", 0, INT32_MAX), entry))
    return out


class BrokerHttpApi:
    """The route table and its handlers; each handler parses, calls the core once, and answers."""

    def __init__(self, core: HttpBrokerCore) -> None:
        self.core = core

    def app(self) -> web.Application:
        config = self.core.config
        middlewares = [errors_middleware("docs/broker-api.md")]
        if config.security is not None:  # bearer tokens (metadata_quorum/kernel/auth.py)
            middlewares.append(broker_auth_middleware(config.security))
        app = web.Application(middlewares=middlewares, client_max_size=config.max_batch_bytes + 1)
        app.router.add_post("/v1/produce/{topic}/{partition}", self.produce)
        app.router.add_get("/v1/fetch/{topic}/{partition}", self.fetch)
        app.router.add_get("/v1/offsets/{topic}/{partition}", self.list_offsets)
        app.router.add_get("/v1/metadata", self.metadata)
        app.router.add_get("/v1/log-dirs", self.describe_log_dirs)
        app.router.add_post("/v1/log-dirs/alter", self.alter_log_dirs)
        app.router.add_post("/v1/delete-records", self.delete_records)
        app.router.add_get("/v1/moves", self.moves)
        app.router.add_post("/v1/pre-upload", self.pre_upload)
        app.router.add_get(replica_fetch_http.PATH, replica_fetch_http.handler(self.core.serve_replica_fetch))
        app.router.add_post(tail_handoff_http.PATH, tail_handoff_http.handler(self.core.accept_object_tail))
        app.router.add_get("/v1/health", self.health)
        app.router.add_get("/metrics", self.prometheus)
        return app

    # ------------------------------------------------------------------ produce, fetch, offsets
    async def produce(self, request: web.Request) -> web.Response:
        core = self.core
        check_query_names(request.query, ("acks", "leader_epoch"))
        topic, partition = request.match_info["topic"], _partition_param(request)
        acks_raw = query_str(request.query, "acks", "-1")
        try:
            acks = ACKS_BY_NAME[acks_raw or ""]
        except KeyError:
            core.metrics.produce_errors.labels("INVALID_REQUIRED_ACKS").inc()
            raise FerryError(ErrorCode.INVALID_REQUIRED_ACKS, f"acks={acks_raw!r}; use -1, 1 or 0") from None
        # the partition is checked before the body is read, so a refused produce costs no upload
        # (append_records checks it again: it may have moved while the body came in)
        await core.await_handoff(topic, partition)
        try:
            core.partition_slot(topic, partition, True, _epoch_param(request))
            try:
                body = bytearray(await request.read())
            except web.HTTPRequestEntityTooLarge:
                raise FerryError(ErrorCode.MESSAGE_TOO_LARGE, f"the record batch exceeds max_batch_bytes "
                                 f"{core.config.max_batch_bytes}") from None
        except FerryError as exc:
            core.metrics.produce_errors.labels(exc.error.name).inc()
            raise
        result = await core.append_records(topic, partition, body, acks, _epoch_param(request))
        return web.json_response({"base_offset": result.base_offset, "last_offset": result.last_offset,
                                  "leader_epoch": result.leader_epoch, "log_append_time_ms": result.log_append_time_ms,
                                  "log_start_offset": result.log_start_offset})

    async def fetch(self, request: web.Request) -> web.StreamResponse:
        check_query_names(request.query, ("offset", "max_bytes", "max_wait_ms", "leader_epoch"))
        topic, partition = request.match_info["topic"], _partition_param(request)
        offset = _int_param(request, "offset")
        result = await self.core.read_records(topic, partition, offset,
                                              _int_param(request, "max_bytes", FETCH_DEFAULT_MAX_BYTES, minimum=1,
                                                         maximum=INT32_MAX),
                                              _int_param(request, "max_wait_ms", FETCH_DEFAULT_MAX_WAIT_MS,
                                                         maximum=INT32_MAX),
                                              _epoch_param(request))
        data = sound_batches(result.data, offset)
        return web.Response(body=data, content_type="application/octet-stream", headers={
            "X-Ferry-High-Watermark": str(result.high_watermark),
            "X-Ferry-Log-Start-Offset": str(result.log_start_offset),
            "X-Ferry-Leader-Epoch": str(result.leader_epoch)})

    async def list_offsets(self, request: web.Request) -> web.Response:
        check_query_names(request.query, ("spec", "timestamp_ms", "leader_epoch"))
        topic, partition = request.match_info["topic"], _partition_param(request)
        spec = query_str(request.query, "spec", "latest") or "latest"
        if spec not in ("earliest", "latest", "timestamp", "max_timestamp", "earliest_local", "latest_tiered"):
            raise FerryError(ErrorCode.INVALID_REQUEST, f"spec={spec[:80]!r}; use earliest, latest, timestamp, "
                                                        "max_timestamp, earliest_local or latest_tiered")
        ts = _int_param(request, "timestamp_ms") if spec == "timestamp" else -1
        offset, found_ts, epoch = await self.core.offset_at(topic, partition, spec, ts, _epoch_param(request))
        return web.json_response({"offset": offset, "timestamp_ms": found_ts, "leader_epoch": epoch})

    # ------------------------------------------------------------------ metadata
    async def metadata(self, request: web.Request) -> web.Response:
        check_query_names(request.query, ("topics",))
        core = self.core
        image = core.image
        if image is None:
            return web.json_response({"metadata_offset": -1, "broker_id": core.broker_id, "brokers": [], "topics": [],
                                      "controllers": list(core.config.controllers)})
        names_raw = query_str(request.query, "topics")
        names = [n for n in names_raw.split(",") if n] if names_raw else sorted(image.topics.by_name)
        brokers = []
        urls: dict[int, str | None] = {}
        for bid, reg in sorted(image.cluster.brokers.items()):
            urls[bid] = reg.endpoints[0] if reg.endpoints else None
            brokers.append({"broker_id": bid, "url": urls[bid], "rack": reg.rack, "fenced": reg.fenced,
                            "in_controlled_shutdown": reg.in_controlled_shutdown})
        topics: list[dict[str, Any]] = []
        for name in names:
            topic_id = image.topics.by_name.get(name)
            topic = image.topics.by_id.get(topic_id) if topic_id else None
            if topic is None:
                topics.append({"name": name, "topic_id": None, "error": "UNKNOWN_TOPIC_OR_PARTITION", "partitions": []})
                continue
            parts = [{"partition": p.partition, "leader": p.leader, "leader_url": urls.get(p.leader),
                      "leader_epoch": p.leader_epoch, "partition_epoch": p.partition_epoch,
                      "replicas": list(p.replicas), "isr": list(p.isr), "adding_replicas": list(p.adding_replicas),
                      "removing_replicas": list(p.removing_replicas), "directories": list(p.directories)}
                     for _, p in sorted(topic.partitions.items())]
            topics.append({"name": name, "topic_id": topic_id, "storage": topic.storage, "error": None,
                           "partitions": parts})
        s3 = core.config.s3  # where the objects are, for readers that go to S3 directly (no credentials)
        return web.json_response({"metadata_offset": image.offset, "broker_id": core.broker_id, "brokers": brokers,
                                  "topics": topics, "controllers": list(core.config.controllers),
                                  "object_store": {"endpoint_url": s3.endpoint_url, "bucket": s3.bucket,
                                                   "region": s3.region}})

    # ------------------------------------------------------------------ log dirs, delete records
    async def describe_log_dirs(self, request: web.Request) -> web.Response:
        check_query_names(request.query, ("topics",))
        names_raw = query_str(request.query, "topics")
        wanted = {n for n in names_raw.split(",") if n} if names_raw else None
        dirs = []
        for report in self.core.log_dirs_report(lambda topic, _p: wanted is None or topic in wanted):
            dirs.append({"logDir": report.path, "error": report.error.name if report.error else None,
                         "state": report.state, "totalBytes": report.total_bytes, "usableBytes": report.usable_bytes,
                         "partitions": [{"partition": f"{r.topic}-{r.partition}", "size": r.size_bytes,
                                         "offsetLag": r.offset_lag, "isFuture": r.is_future}
                                        for r in sorted(report.replicas, key=lambda r: f"{r.topic}-{r.partition}")]})
        return web.json_response({"version": 1, "brokers": [{"broker": self.core.broker_id, "logDirs": dirs}]})

    async def alter_log_dirs(self, request: web.Request) -> web.Response:
        check_query_names(request.query, ())
        body = await read_json_object(request)
        parsed = [(topic, partition, as_str(entry.get("log_dir"), "partitions[].log_dir", LOG_DIR_MAX_CHARS))
                  for topic, partition, entry in partition_entries(body, ALTER_LOG_DIRS_MAX_ENTRIES)]
        results = []
        for (topic, partition, path), exc in zip(parsed, await self.core.alter_replica_log_dirs(parsed), strict=True):
            entry: dict[str, Any] = {"topic": topic, "partition": partition, "log_dir": path,
                                     "error": exc.error.name if exc is not None else None}
            if exc is not None:
                entry["message"] = exc.message
            results.append(entry)
        return web.json_response({"results": results})

    async def delete_records(self, request: web.Request) -> web.Response:
        """``{"partitions": [{"topic", "partition", "offset"}]}`` → one result per partition, each
        with ``low_watermark`` or its own error (Kafka's DeleteRecords answer)."""
        check_query_names(request.query, ())
        body = await read_json_object(request)
        parsed = [(topic, partition, as_int(entry.get("offset"), "partitions[].offset", -1))
                  for topic, partition, entry in partition_entries(body, ALTER_LOG_DIRS_MAX_ENTRIES)]
        outcomes = await asyncio.gather(*(self.core.delete_records(t, p, o) for t, p, o in parsed),
                                        return_exceptions=True)
        results = []
        for (topic, partition, _offset), outcome in zip(parsed, outcomes, strict=True):
            result: dict[str, Any] = {"topic": topic, "partition": partition}
            if isinstance(outcome, FerryError):
                result.update(low_watermark=-1, error=outcome.error.name, message=outcome.message)
            elif isinstance(outcome, BaseException):
                raise outcome
            else:
                result.update(low_watermark=outcome, error=None)
            results.append(result)
        return web.json_response({"partitions": results})

    async def pre_upload(self, request: web.Request) -> web.Response:
        """``{"partitions": [{"topic", "partition"}]}`` → one result per partition: its buffered
        bytes uploaded while it serves, ahead of a move (broker/pre_upload.py), or its error."""
        check_query_names(request.query, ())
        body = await read_json_object(request)
        parsed = [(topic, partition) for topic, partition, _entry in partition_entries(body, PRE_UPLOAD_MAX_PARTITIONS)]
        results = []
        for (topic, partition), exc in zip(parsed, await self.core.pre_upload(parsed), strict=True):
            result: dict[str, Any] = {"topic": topic, "partition": partition,
                                      "error": exc.error.name if exc is not None else None}
            if exc is not None:
                result["message"] = exc.message
            results.append(result)
        return web.json_response({"partitions": results})

    # ------------------------------------------------------------------ moves, health, metrics
    async def moves(self, request: web.Request) -> web.Response:
        check_query_names(request.query, ("topic", "partition", "limit"))
        topic = query_str(request.query, "topic", max_chars=TOPIC_NAME_MAX_CHARS) or None
        partition = _int_param(request, "partition", -1, minimum=-1, maximum=INT32_MAX)
        limit = _int_param(request, "limit", 100, minimum=1, maximum=MOVES_MAX_LIMIT)
        out = self.core.move_timelines(topic, None if partition < 0 else partition, limit)
        return web.json_response({"moves": [m.to_json() for m in out]})

    async def health(self, request: web.Request) -> web.Response:
        return web.json_response(self.core.health_report())

    async def prometheus(self, request: web.Request) -> web.Response:
        metrics = self.core.metrics
        metrics.set_storage_stats(self.core.storage_stats())
        return web.Response(body=metrics.render(), content_type="text/plain")
