"""The data path over Kafka's protocol: ApiVersions, Metadata, Produce, Fetch, ListOffsets,
InitProducerId.

Each handler maps a decoded request onto the broker core the HTTP API also uses
(:class:`BrokerCore`: ``append_records``, ``read_records``, ``offset_at``, and the metadata
image), so a Kafka client and an HTTP client get the same partitions, moves and guarantees; the
only work here is translation between Kafka's message fields and the core's values, and
Kafka's per-partition error reporting.
"""
from __future__ import annotations

import asyncio
import base64
import time
import uuid
from dataclasses import dataclass
from typing import Any, Awaitable, Protocol, Sequence

from kafka.protocol.admin import DeleteRecordsRequest, DeleteRecordsResponse
from kafka.protocol.api_message import ApiMessage
from kafka.protocol.consumer.fetch import FetchRequest, FetchResponse
from kafka.protocol.consumer.offsets import (ListOffsetsRequest, ListOffsetsResponse, OffsetForLeaderEpochRequest,
                                             OffsetForLeaderEpochResponse)
from kafka.protocol.metadata.api_versions import ApiVersionsRequest
from kafka.protocol.metadata.metadata import MetadataRequest, MetadataResponse
from kafka.protocol.producer.produce import ProduceRequest, ProduceResponse
from kafka.protocol.producer.transaction import InitProducerIdRequest, InitProducerIdResponse

from broker.kafka.authorization import OPEN, TOPIC, TRANSACTIONAL_ID, Authorization
from broker.kafka.apis import SUPPORTED_VERSIONS
from broker.kafka.auto_create import AutoTopicCreator, Decision, TopicDefaults, metadata_error, unknown_topic_decision
from broker.kafka.eager import eager_start
from broker.kafka.fetch_budget import FetchBudget
from broker.kafka.fetch_sessions import FetchContext, FetchPartition, FetchSessionCache, PartitionOutcome
from broker.kafka.produce_answer import success_answer
from broker.kafka.produce_forwarding import Forwarded, ProduceForwarding
from broker.produce_forward import RouteKind
from broker.producer_ids import ProducerIdSource
from broker.kafka.wire import Request, api_versions_response
from metadata_quorum.acls import AclOperation
from metadata_quorum.kernel.errors import ErrorCode, FerryError
from metadata_quorum.image import MetadataImage
from metadata_quorum.records import NO_LEADER
from metadata_quorum.s3_replicas import reported_isr, reported_replicas

LATEST_TIMESTAMP = -1  # ListOffsets' special timestamps
EARLIEST_TIMESTAMP = -2
#: special timestamp -> (the offset spec it asks for, the first ListOffsets version that has it):
#: -3 max timestamp (KIP-734, v7), -4 earliest local (KIP-1005, v8), -5 latest tiered (KIP-1005, v9)
SPECIAL_TIMESTAMPS: dict[int, tuple[str, int]] = {
    LATEST_TIMESTAMP: ("latest", 0), EARLIEST_TIMESTAMP: ("earliest", 0), -3: ("max_timestamp", 7),
    -4: ("earliest_local", 8), -5: ("latest_tiered", 9)}
ZERO_UUID = uuid.UUID(int=0)
INTERNAL_TOPICS = frozenset({"__consumer_offsets"})
#: the refusal of every transactional id (FindCoordinator, InitProducerId): Kafka's error
#: for a transactional id the client may not use, which clients treat as fatal at once
#: (librdkafka, the Java client, kafka-python), rather than an error they retry until a timeout
NO_TRANSACTIONS = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
NO_TRANSACTIONS_MESSAGE = ("this cluster has no transaction coordinator: transactions are not supported; "
                           "unset transactional.id (an idempotent producer still writes each record once)")
#: the refusal of a topic the authorizer does not allow (broker/kafka/authorization.py)
TOPIC_DENIED = ErrorCode.TOPIC_AUTHORIZATION_FAILED
READ_COMMITTED = 1  # Fetch's and ListOffsets' isolation_level


@dataclass(frozen=True)
class KafkaEndpoint:
    node_id: int
    host: str
    port: int
    rack: str | None


class AppendOutcome(Protocol):
    """Read-only, so that a frozen dataclass satisfies it."""

    @property
    def base_offset(self) -> int: ...
    @property
    def last_offset(self) -> int: ...
    @property
    def leader_epoch(self) -> int: ...
    @property
    def log_start_offset(self) -> int: ...
    @property
    def log_append_time_ms(self) -> int: ...


class ReadOutcome(Protocol):
    @property
    def data(self) -> bytes: ...
    @property
    def high_watermark(self) -> int: ...
    @property
    def log_start_offset(self) -> int: ...
    @property
    def leader_epoch(self) -> int: ...
    @property
    def last_stable_offset(self) -> int: ...
    @property
    def aborted_transactions(self) -> tuple[tuple[int, int], ...]:
        """(producer id, first offset) of the aborted transactions the data overlaps (read_committed)."""
        ...


class BrokerCore(Protocol):
    """What the Kafka front end needs of a broker (``broker.request_core.RequestCore`` provides it)."""

    broker_id: int
    cluster_id: str

    @property
    def image(self) -> MetadataImage | None: ...

    def append_records(self, topic: str, partition: int, body: bytearray, acks: int,
                       client_leader_epoch: int | None = None) -> Awaitable[AppendOutcome]: ...

    def read_records(self, topic: str, partition: int, offset: int, max_bytes: int, max_wait_ms: int,
                     client_leader_epoch: int | None = None, read_committed: bool = False) -> Awaitable[ReadOutcome]: ...

    def offset_at(self, topic: str, partition: int, spec: str, timestamp_ms: int = -1,
                  client_leader_epoch: int | None = None) -> Awaitable[tuple[int, int, int]]: ...

    def delete_records(self, topic: str, partition: int, offset: int) -> Awaitable[int]: ...


def kafka_endpoint_of(endpoints: Sequence[str]) -> tuple[str, int] | None:
    """The ``kafka://host:port`` entry of a broker's registered endpoints."""
    for e in endpoints:
        if e.startswith("kafka://"):
            host, _, port = e[len("kafka://"):].rpartition(":")
            if host and port.isdigit():
                return host, int(port)
    return None


def kafka_endpoints(image: MetadataImage | None) -> dict[int, KafkaEndpoint]:
    """Every unfenced broker with a Kafka listener (Kafka's metadata lists live brokers only)."""
    out: dict[int, KafkaEndpoint] = {}
    if image is None:
        return out
    for bid, reg in sorted(image.cluster.brokers.items()):
        hp = kafka_endpoint_of(reg.endpoints)
        if hp is not None and not reg.fenced:
            out[bid] = KafkaEndpoint(bid, hp[0], hp[1], reg.rack)
    return out


def topic_uuid(topic_id: str) -> uuid.UUID:
    """Ferry's topic ids are Kafka's base64 form of a UUID."""
    return uuid.UUID(bytes=base64.urlsafe_b64decode(topic_id + "=" * (-len(topic_id) % 4)))


def topic_id_of(value: uuid.UUID) -> str:
    """Inverse of :func:`topic_uuid`: Ferry's topic id of a wire UUID."""
    return base64.urlsafe_b64encode(value.bytes).decode("ascii").rstrip("=")


def kafka_error(exc: BaseException) -> tuple[ErrorCode, str | None]:
    """The Kafka error a client gets for ``exc``: stream-layer errors (Ferry's 500 range) are
    not Kafka codes, and each means the partition is moving or its storage failed here."""
    if isinstance(exc, FerryError):
        code = exc.error
        if code.code >= 500:
            code = ErrorCode.KAFKA_STORAGE_ERROR if code is ErrorCode.STREAM_INNER_ERROR \
                else ErrorCode.NOT_LEADER_OR_FOLLOWER
        return code, exc.message
    if isinstance(exc, asyncio.TimeoutError):
        return ErrorCode.REQUEST_TIMED_OUT, "timed out"
    return ErrorCode.UNKNOWN_SERVER_ERROR, f"{type(exc).__name__}: {exc}"


def _leader_of(exc: BaseException) -> tuple[int, int]:
    details = exc.details if isinstance(exc, FerryError) and exc.details else {}
    leader = details.get("leader_id", NO_LEADER)
    epoch = details.get("leader_epoch", -1)
    return (leader if isinstance(leader, int) else NO_LEADER), (epoch if isinstance(epoch, int) else -1)


def _record_errors(exc: BaseException) -> list[object]:
    """Kafka's per-record errors (produce v8+; older versions drop the field): the records of a
    batch refused one by one (LogValidator's RecordValidationException), by batch index."""
    details = exc.details if isinstance(exc, FerryError) and exc.details else {}
    BE = ProduceResponse.TopicProduceResponse.PartitionProduceResponse.BatchIndexAndErrorMessage
    return [BE(batch_index=int(e["batch_index"]), batch_index_error_message=e.get("message"))
            for e in details.get("record_errors", ())]


class DataApis:
    """Handlers of the data-path APIs; each returns the response message, an answer already framed
    (a successful single-partition produce), or None (acks=0)."""

    def __init__(self, core: BrokerCore, producer_ids: ProducerIdSource,
                 fetch_sessions: FetchSessionCache | None = None,
                 auto_create: AutoTopicCreator | None = None, auth: Authorization = OPEN,
                 forwarding: ProduceForwarding | None = None) -> None:
        self.core = core
        self.auth = auth
        self.producer_ids = producer_ids
        self.fetch_sessions = fetch_sessions if fetch_sessions is not None else FetchSessionCache()
        self.auto_create = auto_create  # None: topics are never created by Metadata
        self.forwarding = forwarding  # None: a produce for a partition handed over is refused

    # ------------------------------------------------------------------ ApiVersions
    async def api_versions(self, req: Request) -> ApiMessage:
        if req.api_version > SUPPORTED_VERSIONS[ApiVersionsRequest.API_KEY][1]:
            return api_versions_response(ErrorCode.UNSUPPORTED_VERSION)
        return api_versions_response()

    # ------------------------------------------------------------------ Metadata
    async def metadata(self, req: Request) -> ApiMessage:
        body: MetadataRequest = req.body
        image = self.core.image
        live = kafka_endpoints(image)
        brokers = [MetadataResponse.MetadataResponseBroker(node_id=e.node_id, host=e.host, port=e.port, rack=e.rack)
                   for e in live.values()]
        topics_out = []
        auth = self.auth
        refused: frozenset[str] = frozenset()  # named topics the principal may not DESCRIBE (or create)
        if image is not None:
            if body.topics is None or (req.api_version == 0 and not body.topics):
                names = sorted(image.topics.by_name)
                hidden = auth.denied(req, AclOperation.DESCRIBE, TOPIC, names)
                names = [n for n in names if n not in hidden]  # all topics: the hidden ones are left out
            else:
                names = []
                for t in body.topics:
                    if t.name is None and req.api_version >= 10:  # asked by topic id (KIP-516)
                        by_id = image.topics.by_id.get(topic_id_of(t.topic_id))
                        if by_id is None:
                            topics_out.append(MetadataResponse.MetadataResponseTopic(
                                error_code=ErrorCode.UNKNOWN_TOPIC_ID.code, name=None, topic_id=t.topic_id,
                                is_internal=False, partitions=[]))
                            continue
                        if auth.denied(req, AclOperation.DESCRIBE, TOPIC, [by_id.name]):
                            topics_out.append(MetadataResponse.MetadataResponseTopic(
                                error_code=TOPIC_DENIED.code, name=None, topic_id=t.topic_id, is_internal=False,
                                partitions=[]))
                            continue
                        names.append(by_id.name)
                    else:
                        names.append(t.name)
                refused = auth.denied(req, AclOperation.DESCRIBE, TOPIC, names)
            unknown = self._unknown_topics(image, [n for n in names if n not in refused],
                                           req.api_version < 4 or bool(body.allow_auto_topic_creation))
            creating = [n for n, d in unknown.items() if d is Decision.CREATE and n is not None]
            if creating and not auth.allows_cluster(req, AclOperation.CREATE):  # else CREATE on each topic
                refused |= auth.denied(req, AclOperation.CREATE, TOPIC, creating)
            if any(n not in refused for n in creating) and self.auto_create is not None:
                await self.auto_create.create(n for n in creating if n not in refused)
                image = self.core.image or image
                live = kafka_endpoints(image)
                brokers = [MetadataResponse.MetadataResponseBroker(node_id=e.node_id, host=e.host, port=e.port,
                                                                   rack=e.rack) for e in live.values()]
            for name in names:
                if name in refused:
                    topics_out.append(MetadataResponse.MetadataResponseTopic(
                        error_code=TOPIC_DENIED.code, name=name, topic_id=ZERO_UUID, is_internal=False, partitions=[]))
                    continue
                topics_out.append(self._topic_metadata(image, name, live, unknown.get(name, Decision.UNKNOWN)))
        v = req.api_version
        if v >= 8 and body.include_topic_authorized_operations:  # the authorizer's answers (authorization.py)
            for t in topics_out:
                if t.error_code != TOPIC_DENIED.code and t.name is not None:
                    t.authorized_operations = auth.operations(req, TOPIC, t.name)
        cluster_ops = auth.cluster_operations(req) if 8 <= v <= 10 and body.include_cluster_authorized_operations \
            else None
        return MetadataResponse(throttle_time_ms=0, brokers=brokers, cluster_id=self.core.cluster_id,
                                controller_id=self.core.broker_id, topics=topics_out,
                                authorized_operations=cluster_ops)

    def _unknown_topics(self, image: MetadataImage, names: Sequence[str | None],
                        allowed: bool) -> dict[str | None, Decision]:
        """What each name the image does not hold gets (auto_create.py): created, or an error."""
        defaults = self.auto_create.defaults if self.auto_create is not None else TopicDefaults(auto_create=False)
        return {n: unknown_topic_decision(n, defaults, allowed) for n in names
                if n is None or n not in image.topics.by_name}

    def _topic_metadata(self, image: MetadataImage, name: str | None, live: dict[int, KafkaEndpoint],
                        unknown: Decision = Decision.UNKNOWN) -> object:
        T = MetadataResponse.MetadataResponseTopic
        P = T.MetadataResponsePartition
        topic_id = image.topics.by_name.get(name) if name is not None else None
        topic = image.topics.by_id.get(topic_id) if topic_id is not None else None
        if topic is None or topic_id is None:
            return T(error_code=metadata_error(unknown).code, name=name, topic_id=ZERO_UUID,
                     is_internal=name in INTERNAL_TOPICS, partitions=[])
        parts = []
        for _, p in sorted(topic.partitions.items()):
            # a partition changing hands names its owner-to-be (image.named_leader), as Kafka keeps
            # a leader named through a reassignment
            named, epoch = p.named_leader(image.cluster.is_active)
            leader = named if named in live else NO_LEADER
            error = ErrorCode.NONE if leader != NO_LEADER else ErrorCode.LEADER_NOT_AVAILABLE
            # an s3 partition is reported with the brokers it was assigned, its owner leading (s3_replicas.py)
            replicas = reported_replicas(image.kv, p)
            parts.append(P(error_code=error.code, partition_index=p.partition, leader_id=leader,
                           leader_epoch=epoch, replica_nodes=list(replicas),
                           isr_nodes=list(reported_isr(image.kv, p, image.cluster.is_active)),
                           offline_replicas=[r for r in replicas if r not in live]))
        return T(error_code=0, name=name, topic_id=topic_uuid(topic_id), is_internal=name in INTERNAL_TOPICS,
                 partitions=parts)

    # ------------------------------------------------------------------ Produce
    async def produce(self, req: Request) -> ApiMessage | bytes | None:
        body: ProduceRequest = req.body
        acks = body.acks
        targets = [(topic.name, part.index, part.records) for topic in body.topic_data for part in topic.partition_data]
        denied = self.auth.denied(req, AclOperation.WRITE, TOPIC, (t.name for t in body.topic_data))
        results: list[AppendOutcome | Forwarded | BaseException]
        if body.transactional_id is not None and \
                self.auth.denied(req, AclOperation.WRITE, TRANSACTIONAL_ID, [body.transactional_id]):
            # Kafka refuses the whole request: every partition answers the transactional id's error
            results = [FerryError(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                                  f"Not authorized to use transactional id {body.transactional_id}")] * len(targets)
        elif len(targets) == 1:  # what librdkafka sends: one partition per request
            # awaited in this request's own task, which the listener started in arrival order:
            # the append reaches the WAL before this task first yields (see append_records)
            name, index, records = targets[0]
            try:
                results = [await self._append(req, name, index, records, acks, body.transactional_id,
                                              name in denied)]
            except Exception as exc:  # noqa: BLE001 - reported per partition, as Kafka does
                results = [exc]
        else:
            # each append in its own task, started at once (broker/kafka/eager.py): its batch has its
            # place in the log before the next pipelined request's task runs, as with one partition
            appends = [eager_start(self._append(req, name, index, records, acks, body.transactional_id,
                                                name in denied))
                       for name, index, records in targets]
            results = list(await asyncio.gather(*appends, return_exceptions=True))
        if acks == 0:
            return None
        if len(targets) == 1 and not isinstance(results[0], (BaseException, Forwarded)):
            # the common answer, from its encoded template (see produce_answer)
            done = results[0]
            answer = success_answer(req, targets[0][0], targets[0][1], done.base_offset, done.log_append_time_ms,
                                    done.log_start_offset)
            if answer is not None:
                return answer
        PR = ProduceResponse.TopicProduceResponse
        PP = PR.PartitionProduceResponse
        by_topic: dict[str, list[object]] = {}
        leaders_named: set[int] = set()
        for (name, index, _), result in zip(targets, results, strict=True):
            if isinstance(result, BaseException):
                code, message = kafka_error(result)
                entry = PP(index=index, error_code=code.code, base_offset=-1, log_append_time_ms=-1,
                           log_start_offset=-1, record_errors=_record_errors(result), error_message=message)
                if code is ErrorCode.NOT_LEADER_OR_FOLLOWER and req.api_version >= 10:
                    leader, epoch = _leader_of(result)
                    if leader != NO_LEADER:  # KIP-951: name the new leader only when there is one
                        entry.current_leader = PP.LeaderIdAndEpoch(leader_id=leader, leader_epoch=epoch)
                        leaders_named.add(leader)
            elif isinstance(result, Forwarded):
                # the owner's own result, naming the owner: librdkafka applies CurrentLeader and
                # NodeEndpoints whatever the error code and moves over (produce_forward.py)
                entry = result.answer
                entry.index = index
                named = getattr(entry, "current_leader", None)
                if named is None or named.leader_id < 0:
                    entry.current_leader = PP.LeaderIdAndEpoch(leader_id=result.leader,
                                                               leader_epoch=result.leader_epoch)
                leaders_named.add(entry.current_leader.leader_id)
            else:
                entry = PP(index=index, error_code=0, base_offset=result.base_offset,
                           log_append_time_ms=result.log_append_time_ms,
                           log_start_offset=result.log_start_offset, record_errors=[], error_message=None)
            by_topic.setdefault(name, []).append(entry)
        endpoints = [ProduceResponse.NodeEndpoint(node_id=e.node_id, host=e.host, port=e.port, rack=e.rack)
                     for bid, e in kafka_endpoints(self.core.image).items() if bid in leaders_named] \
            if leaders_named else []
        if self.forwarding is not None:
            self.forwarding.named(req, leaders_named)
        return ProduceResponse(responses=[PR(name=n, partition_responses=ps) for n, ps in by_topic.items()],
                               throttle_time_ms=0, node_endpoints=endpoints)

    async def _append(self, req: Request, topic: str, partition: int, records: bytes | None, acks: int,
                      transactional_id: str | None, denied: bool = False) -> AppendOutcome | Forwarded:
        if denied:
            raise FerryError(TOPIC_DENIED, f"Not authorized to access topics: [{topic}]")
        if not records:
            raise FerryError(ErrorCode.INVALID_RECORD, "the partition's records are empty")
        forwarding = self.forwarding
        if forwarding is not None and forwarding.route(req, topic, partition).kind is not RouteKind.HERE:
            # a partition this broker has just handed over: forwarded to its owner
            forwarded = await forwarding.forward(req, topic, partition, records, acks,
                                                 req.body.timeout_ms)
            if forwarded is not None:
                return forwarded
        # a copy the append may change in place (offsets, LogAppendTime) and the WAL holds until synced
        return await self.core.append_records(topic, partition, bytearray(records), acks)

    # ------------------------------------------------------------------ Fetch
    async def fetch(self, req: Request) -> ApiMessage:
        body: FetchRequest = req.body
        max_bytes = body.max_bytes if req.api_version >= 3 else 2 ** 31 - 1
        asked = [FetchPartition(topic.topic, p.partition, p.fetch_offset, p.partition_max_bytes,
                                p.current_leader_epoch if req.api_version >= 9 else None)
                 for topic in body.topics for p in topic.partitions]
        context: FetchContext | None = None
        if req.api_version >= 7:  # KIP-227 fetch sessions (fetch_sessions.py)
            forgotten = [(t.topic, p) for t in body.forgotten_topics_data for p in t.partitions]
            opened = self.fetch_sessions.new_context(body.session_id, body.session_epoch, asked, forgotten,
                                                     int(time.monotonic() * 1000))
            if isinstance(opened, ErrorCode):
                return FetchResponse(throttle_time_ms=0, error_code=opened.code, session_id=0, responses=[],
                                     node_endpoints=[])
            context = opened
            asked = context.partitions
        # no partition's share exceeds the response's max_bytes (but its first batch, when it is
        # the first with data), so none is read past it
        wanted = [(p.topic, p.partition, p.fetch_offset, min(p.partition_max_bytes, max(1, max_bytes))
                   if p.partition_max_bytes > 0 else p.partition_max_bytes, p.current_leader_epoch) for p in asked]
        denied = self.auth.denied(req, AclOperation.READ, TOPIC, (p.topic for p in asked))
        read_committed = body.isolation_level == READ_COMMITTED
        results = await self._read_all(wanted, 0, denied, read_committed)
        total = sum(len(r.data) for r in results if not isinstance(r, BaseException))
        errors = any(isinstance(r, BaseException) for r in results)
        if total < max(1, body.min_bytes) and not errors and body.max_wait_ms > 0 and wanted:
            results = await self._long_poll(wanted, results, body.max_wait_ms, denied, read_committed)
        return self._fetch_response(req, wanted, results, max_bytes, context)

    async def _read_all(self, wanted: list[tuple[str, int, int, int, int | None]], wait_ms: int,
                        denied: frozenset[str] = frozenset(),
                        read_committed: bool = False) -> list[ReadOutcome | BaseException]:
        return list(await asyncio.gather(*(self._read(t, p, off, mb, wait_ms, ep, denied, read_committed)
                                           for t, p, off, mb, ep in wanted), return_exceptions=True))

    async def _read(self, topic: str, partition: int, offset: int, max_bytes: int, wait_ms: int,
                    epoch: int | None, denied: frozenset[str], read_committed: bool = False) -> ReadOutcome:
        if topic in denied:  # READ refused: the partition answers TOPIC_AUTHORIZATION_FAILED, nothing is read
            raise FerryError(TOPIC_DENIED, f"Not authorized to access topics: [{topic}]")
        if read_committed:
            return await self.core.read_records(topic, partition, offset, max_bytes, wait_ms, epoch,
                                                read_committed=True)
        return await self.core.read_records(topic, partition, offset, max_bytes, wait_ms, epoch)

    async def _long_poll(self, wanted: list[tuple[str, int, int, int, int | None]],
                         first: list[ReadOutcome | BaseException], max_wait_ms: int,
                         denied: frozenset[str] = frozenset(),
                         read_committed: bool = False) -> list[ReadOutcome | BaseException]:
        """Wait until any partition has data (or the wait ends), then answer with what is there."""
        tasks = [asyncio.ensure_future(self._read(t, p, off, mb, max_wait_ms, ep, denied, read_committed))
                 for t, p, off, mb, ep in wanted]
        try:
            done, _ = await asyncio.wait(tasks, timeout=max_wait_ms / 1000 + 0.05,
                                         return_when=asyncio.FIRST_COMPLETED)
        finally:
            for t in tasks:
                if not t.done():
                    t.cancel()
        out: list[ReadOutcome | BaseException] = []
        for task, before in zip(tasks, first, strict=True):
            if task.done() and not task.cancelled():
                exc = task.exception()
                out.append(exc if exc is not None else task.result())
            else:
                out.append(before)
        return out

    def _fetch_response(self, req: Request, wanted: list[tuple[str, int, int, int, int | None]],
                        results: list[ReadOutcome | BaseException], max_bytes: int,
                        context: FetchContext | None) -> ApiMessage:
        FT = FetchResponse.FetchableTopicResponse
        PD = FT.PartitionData
        entries: list[tuple[str, Any]] = []
        budget = FetchBudget(max_bytes)
        read_committed = getattr(req.body, "isolation_level", 0) == READ_COMMITTED
        for (topic, partition, _off, read_bytes, _ep), result in zip(wanted, results, strict=True):
            if isinstance(result, BaseException):
                code, _ = kafka_error(result)
                details = result.details if isinstance(result, FerryError) and result.details else {}
                entry = PD(partition_index=partition, error_code=code.code,
                           high_watermark=details.get("high_watermark", -1), last_stable_offset=-1,
                           log_start_offset=details.get("log_start_offset", -1), aborted_transactions=None,
                           preferred_read_replica=-1, records=b"")
                if code is ErrorCode.NOT_LEADER_OR_FOLLOWER or code is ErrorCode.FENCED_LEADER_EPOCH:
                    leader, epoch = _leader_of(result)
                    if req.api_version >= 12 and leader != NO_LEADER:
                        entry.current_leader = PD.LeaderIdAndEpoch(leader_id=leader, leader_epoch=epoch)
            else:
                data = budget.take(result.data, read_bytes)  # the client asks again for what is left out
                # read_committed: the aborted transactions the data overlaps (an empty list, not null,
                # as Kafka answers that isolation level), so that the client skips their records
                aborted = [PD.AbortedTransaction(producer_id=pid, first_offset=first)
                           for pid, first in result.aborted_transactions] if read_committed else None
                entry = PD(partition_index=partition, error_code=0, high_watermark=result.high_watermark,
                           last_stable_offset=result.last_stable_offset, log_start_offset=result.log_start_offset,
                           aborted_transactions=aborted, preferred_read_replica=-1, records=data)
            entries.append((topic, entry))
        session_id = 0
        if context is not None and (context.incremental or context.create):  # a session answers only news
            included = context.answer([PartitionOutcome(len(e.records or b""), e.high_watermark, e.log_start_offset,
                                                        e.error_code != 0) for _, e in entries])
            entries = [te for te, keep in zip(entries, included, strict=True) if keep]
            session_id = context.session_id
        by_topic: dict[str, list[object]] = {}
        for topic, entry in entries:
            by_topic.setdefault(topic, []).append(entry)
        return FetchResponse(throttle_time_ms=0, error_code=0, session_id=session_id,
                             responses=[FT(topic=t, partitions=ps) for t, ps in by_topic.items()], node_endpoints=[])

    # ------------------------------------------------------------------ ListOffsets
    async def list_offsets(self, req: Request) -> ApiMessage:
        body: ListOffsetsRequest = req.body
        LT = ListOffsetsResponse.ListOffsetsTopicResponse
        LP = LT.ListOffsetsPartitionResponse
        topics = []
        denied = self.auth.denied(req, AclOperation.DESCRIBE, TOPIC, (t.name for t in body.topics))
        for topic in body.topics:
            parts = []
            for p in topic.partitions:
                if topic.name in denied:
                    parts.append(LP(partition_index=p.partition_index, error_code=TOPIC_DENIED.code, timestamp=-1,
                                    offset=-1, leader_epoch=-1))
                    continue
                epoch = p.current_leader_epoch if req.api_version >= 4 else None
                spec, since = SPECIAL_TIMESTAMPS.get(p.timestamp, ("timestamp", 0))
                if spec == "latest" and req.api_version >= 2 and body.isolation_level == READ_COMMITTED:
                    spec = "latest_stable"  # a read_committed consumer's end is the last stable offset
                try:
                    if spec == "timestamp" and p.timestamp < 0:
                        raise FerryError(ErrorCode.INVALID_REQUEST, f"timestamp {p.timestamp} is not supported")
                    if req.api_version < since:
                        raise FerryError(ErrorCode.UNSUPPORTED_VERSION, f"timestamp {p.timestamp} needs ListOffsets "
                                                                        f"v{since}, the request is v{req.api_version}")
                    offset, ts, leader_epoch = await self.core.offset_at(topic.name, p.partition_index, spec,
                                                                         p.timestamp, epoch)
                    parts.append(LP(partition_index=p.partition_index, error_code=0, timestamp=ts, offset=offset,
                                    leader_epoch=leader_epoch))
                except Exception as exc:  # noqa: BLE001 - reported per partition, as Kafka does
                    code, _ = kafka_error(exc)
                    parts.append(LP(partition_index=p.partition_index, error_code=code.code, timestamp=-1,
                                    offset=-1, leader_epoch=-1))
            topics.append(LT(name=topic.name, partitions=parts))
        return ListOffsetsResponse(throttle_time_ms=0, topics=topics)

    # ------------------------------------------------------------------ DeleteRecords
    async def delete_records(self, req: Request) -> ApiMessage:
        """Kafka's DeleteRecords (sent to each partition's leader): the log start offset moves to
        the given offset (-1: the high watermark); each partition answers its low watermark or
        its own error. Partitions are trimmed concurrently, within the request's timeout."""
        body: DeleteRecordsRequest = req.body
        TR = DeleteRecordsResponse.DeleteRecordsTopicResult
        PR = TR.DeleteRecordsPartitionResult
        timeout_s = max(0.001, body.timeout_ms / 1000) if body.timeout_ms > 0 else 30.0

        denied = self.auth.denied(req, AclOperation.DELETE, TOPIC, (t.name for t in body.topics))

        async def one(topic: str, partition: int, offset: int) -> ApiMessage:
            try:
                if topic in denied:
                    raise FerryError(TOPIC_DENIED, f"Not authorized to access topics: [{topic}]")
                if offset < -1:
                    raise FerryError(ErrorCode.OFFSET_OUT_OF_RANGE, f"offset {offset} is below -1")
                low = await asyncio.wait_for(self.core.delete_records(topic, partition, offset), timeout_s)
                return PR(partition_index=partition, low_watermark=low, error_code=0)
            except Exception as exc:  # noqa: BLE001 - reported per partition, as Kafka does
                code, _ = kafka_error(exc)
                return PR(partition_index=partition, low_watermark=-1, error_code=code.code)

        topics = []
        for topic in body.topics:
            parts = await asyncio.gather(*(one(topic.name, p.partition_index, p.offset) for p in topic.partitions))
            topics.append(TR(name=topic.name, partitions=list(parts)))
        return DeleteRecordsResponse(throttle_time_ms=0, topics=topics)

    # ------------------------------------------------------------------ OffsetForLeaderEpoch
    async def offset_for_leader_epoch(self, req: Request) -> ApiMessage:
        """KIP-320's check that a consumer's position survived a leader change. A partition's log
        is one shared stream that no owner ever truncates (a write is acknowledged only once it
        is durable in it), so no epoch ever diverges: every epoch up to the current one ends at
        the log end, and a client's position is always valid."""
        body: OffsetForLeaderEpochRequest = req.body
        TR = OffsetForLeaderEpochResponse.OffsetForLeaderTopicResult
        EO = TR.EpochEndOffset
        topics = []
        denied = self.auth.denied(req, AclOperation.DESCRIBE, TOPIC, (t.topic for t in body.topics))
        for topic in body.topics:
            parts = []
            for p in topic.partitions:
                current = p.current_leader_epoch if req.api_version >= 2 else None
                try:
                    if topic.topic in denied:
                        raise FerryError(TOPIC_DENIED, f"Not authorized to access topics: [{topic.topic}]")
                    end, _ts, epoch = await self.core.offset_at(topic.topic, p.partition, "latest",
                                                                client_leader_epoch=current)
                    if p.leader_epoch > epoch:
                        parts.append(EO(error_code=0, partition=p.partition, leader_epoch=-1, end_offset=-1))
                    else:
                        parts.append(EO(error_code=0, partition=p.partition, leader_epoch=p.leader_epoch,
                                        end_offset=end))
                except Exception as exc:  # noqa: BLE001 - reported per partition, as Kafka does
                    code, _ = kafka_error(exc)
                    parts.append(EO(error_code=code.code, partition=p.partition, leader_epoch=-1, end_offset=-1))
            topics.append(TR(topic=topic.topic, partitions=parts))
        return OffsetForLeaderEpochResponse(throttle_time_ms=0, topics=topics)

    # ------------------------------------------------------------------ InitProducerId
    async def init_producer_id(self, req: Request) -> ApiMessage:
        body: InitProducerIdRequest = req.body
        if body.transactional_id is not None:
            return InitProducerIdResponse(throttle_time_ms=0, error_code=NO_TRANSACTIONS.code,
                                          producer_id=-1, producer_epoch=-1)
        if req.api_version >= 3 and body.producer_id >= 0 and body.producer_epoch + 1 <= 32767:
            # KIP-360: an idempotent producer bumps its epoch after an unknown sequence error
            return InitProducerIdResponse(throttle_time_ms=0, error_code=0, producer_id=body.producer_id,
                                          producer_epoch=body.producer_epoch + 1)
        try:  # a new producer, or one whose epoch is exhausted: a new id from this broker's block
            producer_id = await self.producer_ids.next_producer_id()
        except FerryError as exc:
            return InitProducerIdResponse(throttle_time_ms=0, error_code=exc.error.code, producer_id=-1,
                                          producer_epoch=-1)
        return InitProducerIdResponse(throttle_time_ms=0, error_code=0, producer_id=producer_id, producer_epoch=0)
