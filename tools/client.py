"""Python client for the broker HTTP API: a producer, a consumer and admin helpers.

The producer keeps one request in flight per partition so that retries cannot reorder records:
a batch that fails with a retriable error (`NOT_LEADER_OR_FOLLOWER`, `LEADER_NOT_AVAILABLE`, a
refused connection, ...) is re-sent unchanged to the leader named by fresh metadata, until the
delivery timeout of its oldest record passes. Each batch carries a producer id and a per-partition
sequence number, as Kafka's idempotent producer does, so that a broker can drop a re-sent batch it
already appended and refuse one that does not follow the last (OUT_OF_ORDER_SEQUENCE_NUMBER). A
batch given up on (delivery timeout, or an error that is not retriable) may or may not have been
appended, so the partition's next batch starts a new producer epoch at sequence 0, as Kafka's
producer bumps its epoch after an expired batch (KIP-360).
"""
from __future__ import annotations

import asyncio
import random
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Iterable

import aiohttp
from kafka.partitioner.default import murmur2
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from metadata_quorum.kernel.auth_middleware import auth_headers
from metadata_quorum.kernel.backoff import Backoff, retry_after_ms_of
from metadata_quorum.kernel.errors import ErrorCode, FerryError
from tools.credentials import resolve_token
from tools.leader_hint import LeaderHint, follow_at_once, parse_leader_hint

RETRIABLE_CONNECTION_ERRORS = (aiohttp.ClientConnectionError, asyncio.TimeoutError, ConnectionError)
MAX_INFLIGHT_PER_BROKER = 64  # a producer's requests in flight to one broker (``Producer._slots``)
PRODUCER_EPOCH_MAX = 2 ** 15 - 1  # an int16 in the batch header
PRODUCER_BACKOFF_MAX_MS = 250.0  # a move makes a partition unavailable for ~0.1 s: retry soon after it
CONSUMER_BACKOFF_MAX_MS = 1000.0


@dataclass(frozen=True, order=True)
class TopicPartition:
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


@dataclass(frozen=True)
class RecordMetadata:
    """What the producer learns when a record is acknowledged."""

    topic: str
    partition: int
    offset: int
    leader_epoch: int
    broker_id: int
    ack_time_s: float  # time.monotonic() when the acknowledgement arrived
    sent_s: float = 0.0  # time.monotonic() when the request it answers was sent


@dataclass(frozen=True)
class ConsumerRecord:
    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...] = ()


@dataclass(frozen=True)
class CorruptSkip:
    """A corrupt stored batch a consumer skipped: the offsets ``[base_offset, next_offset)`` it stood for."""

    tp: TopicPartition
    base_offset: int
    next_offset: int
    reason: str


@dataclass
class PartitionInfo:
    topic: str
    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


@dataclass
class ClusterMetadata:
    """The broker's view of the cluster, as `GET /v1/metadata` returns it."""

    brokers: dict[int, str] = field(default_factory=dict)  # broker id -> base URL
    partitions: dict[TopicPartition, PartitionInfo] = field(default_factory=dict)
    controllers: list[str] = field(default_factory=list)
    offset: int = -1

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> "ClusterMetadata":
        meta = cls(offset=int(body.get("offset", body.get("metadata_offset", -1))))
        brokers = body.get("brokers", [])
        if isinstance(brokers, dict):
            brokers = [dict(v, broker_id=int(k)) for k, v in brokers.items()]
        for b in brokers:
            bid = int(b.get("broker_id", b.get("id", -1)))
            url = b.get("url") or (b.get("endpoints") or [None])[0]
            if url:
                meta.brokers[bid] = normalize_url(str(url))
        for t in body.get("topics", []):
            parts = t.get("partitions", [])
            if isinstance(parts, dict):
                parts = [dict(v, partition=int(k)) for k, v in parts.items()]
            for p in parts:
                tp = TopicPartition(str(t["name"]), int(p["partition"]))
                meta.partitions[tp] = PartitionInfo(
                    tp.topic, tp.partition, int(p.get("leader", -1)), int(p.get("leader_epoch", 0)),
                    tuple(p.get("replicas", ())), tuple(p.get("isr", ())),
                )
        meta.controllers = [normalize_url(str(u)) for u in body.get("controllers", [])]
        return meta

    def topic_partitions(self, topic: str) -> list[TopicPartition]:
        return sorted(tp for tp in self.partitions if tp.topic == topic)


def normalize_url(address: str) -> str:
    """`host:port` or a URL -> `http://host:port` (no trailing slash)."""
    address = address.strip().rstrip("/")
    return address if "://" in address else f"http://{address}"


def parse_bootstrap(value: str | Iterable[str]) -> list[str]:
    items = value.split(",") if isinstance(value, str) else list(value)
    return [normalize_url(v) for v in items if v.strip()]


async def raise_for_error(resp: aiohttp.ClientResponse) -> None:
    """Turn an HTTP error answer (a `FerryError.to_json()` body) into a FerryError."""
    if resp.status < 400:
        return
    try:
        body = await resp.json(content_type=None)
        raise FerryError.from_json(body)
    except (ValueError, aiohttp.ContentTypeError) as e:
        text = await resp.text()
        raise FerryError(ErrorCode.UNKNOWN_SERVER_ERROR, f"HTTP {resp.status}: {text[:200]}") from e


# ---------------------------------------------------------------- record batches


def encode_batch(
    records: Iterable[tuple[bytes | None, bytes | None, list[tuple[str, bytes]] | None, int | None]],
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
) -> bytes:
    """One Kafka v2 RecordBatch (base offset 0) from (key, value, headers, timestamp_ms) tuples."""
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=False, producer_id=producer_id,
        producer_epoch=producer_epoch, base_sequence=base_sequence, batch_size=2**31 - 1,
    )
    now_ms = int(time.time() * 1000)
    for i, (key, value, headers, ts_ms) in enumerate(records):
        builder.append(i, timestamp=ts_ms if ts_ms is not None else now_ms, key=key, value=value,
                       headers=list(headers or []))
    return bytes(builder.build())


def decode_batches(topic: str, partition: int, data: bytes, start_offset: int = 0) -> list[ConsumerRecord]:
    """Records of a run of v2 RecordBatches at or after `start_offset` (a trailing partial batch is ignored)."""
    out: list[ConsumerRecord] = []
    records = MemoryRecords(data)
    while True:
        batch = records.next_batch()
        if batch is None:
            break
        if batch.is_control_batch:
            continue
        for rec in batch:
            if rec.offset < start_offset:
                continue
            out.append(ConsumerRecord(topic, partition, rec.offset, rec.timestamp, rec.key, rec.value,
                                      tuple((k, bytes(v)) for k, v in rec.headers)))
    return out


# ---------------------------------------------------------------- metadata


class MetadataCache:
    """Cached cluster metadata, refreshed from any reachable broker on demand."""

    def __init__(self, session: aiohttp.ClientSession, bootstrap: list[str], request_timeout_ms: int) -> None:
        self._session = session
        self._bootstrap = bootstrap
        self._timeout = aiohttp.ClientTimeout(total=request_timeout_ms / 1000)
        self.current = ClusterMetadata()
        self._refreshing: asyncio.Future[ClusterMetadata] | None = None

    async def refresh(self) -> ClusterMetadata:
        """Refresh once; concurrent callers share the same request."""
        if self._refreshing is not None and not self._refreshing.done():
            return await asyncio.shield(self._refreshing)
        self._refreshing = asyncio.get_running_loop().create_future()
        try:
            meta = await self._fetch()
            self.current = meta
            self._refreshing.set_result(meta)
            return meta
        except BaseException as exc:
            self._refreshing.set_exception(exc)
            self._refreshing.exception()  # mark retrieved
            raise

    async def _fetch(self) -> ClusterMetadata:
        urls = list(dict.fromkeys(list(self.current.brokers.values()) + self._bootstrap))
        random.shuffle(urls)
        last: Exception | None = None
        for url in urls:
            try:
                async with self._session.get(f"{url}/v1/metadata", timeout=self._timeout) as resp:
                    await raise_for_error(resp)
                    return ClusterMetadata.from_json(await resp.json())
            except (FerryError, *RETRIABLE_CONNECTION_ERRORS) as exc:
                last = exc
        raise FerryError(ErrorCode.LEADER_NOT_AVAILABLE, f"no broker reachable at {', '.join(urls)}: {last}")

    def follow(self, tp: TopicPartition, refused_by: int, details: Any) -> bool:
        """Apply the leader a refusal names when the producer should go there at once
        (``tools/leader_hint.py``: a newer leader epoch, another broker); returns whether it did."""
        info = self.current.partitions.get(tp)
        hint: LeaderHint | None = parse_leader_hint(details)
        if info is None or hint is None:
            return False
        known_url = self.current.brokers.get(hint.leader_id)
        if not follow_at_once(hint, refused_by, info.leader_epoch, known_url):
            return False
        info.leader, info.leader_epoch = hint.leader_id, hint.leader_epoch
        if hint.url is not None:
            self.current.brokers[hint.leader_id] = normalize_url(hint.url)
        return True

    def leader_url(self, tp: TopicPartition) -> tuple[int, str] | None:
        info = self.current.partitions.get(tp)
        if info is None or info.leader < 0 or info.leader not in self.current.brokers:
            return None
        return info.leader, self.current.brokers[info.leader]


# ---------------------------------------------------------------- producer


@dataclass
class _Pending:
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]] | None
    timestamp_ms: int | None
    size_bytes: int
    deadline_s: float
    future: asyncio.Future[RecordMetadata]


class _PartitionQueue:
    def __init__(self) -> None:
        self.records: deque[_Pending] = deque()
        self.bytes = 0
        self.wakeup = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        self.sequence = 0
        self.epoch = 0  # this partition's producer epoch: a new one after a batch was given up on
        self.inflight: list[asyncio.Future[RecordMetadata]] = []

    def give_up(self) -> None:
        """A batch failed: whatever became of it, the next one starts a new epoch at sequence 0."""
        self.epoch = (self.epoch + 1) % (PRODUCER_EPOCH_MAX + 1)
        self.sequence = 0


class Producer:
    """Batches records per partition and sends one batch at a time per partition.

    `send()` returns a future resolved with the record's `RecordMetadata` (its acknowledged offset)
    or failed with a `FerryError` once `delivery_timeout_ms` has passed without an acknowledgement.
    """

    def __init__(
        self,
        bootstrap_servers: str | list[str],
        acks: int = -1,
        linger_ms: int = 2,
        batch_size_bytes: int = 512 * 1024,
        delivery_timeout_ms: int = 30_000,
        request_timeout_ms: int = 10_000,
        retry_backoff_ms: int = 10,
        idempotent: bool = True,
        token: str | None = None,
    ) -> None:
        self.bootstrap = parse_bootstrap(bootstrap_servers)
        self._auth = auth_headers(resolve_token(token))  # a secure cluster's bearer token (tools/credentials.py)
        self.acks = acks
        self.linger_s = linger_ms / 1000
        self.batch_size_bytes = batch_size_bytes
        self.delivery_timeout_s = delivery_timeout_ms / 1000
        self.request_timeout_ms = request_timeout_ms
        self.retry_backoff_s = retry_backoff_ms / 1000
        # Kafka's retry.backoff.ms doubling up to retry.backoff.max.ms, with jitter: thousands of
        # partitions failing together (a bulk move) must not retry in lockstep
        self.backoff = Backoff(initial_ms=max(1.0, float(retry_backoff_ms)), max_ms=PRODUCER_BACKOFF_MAX_MS)
        self.producer_id = random.randrange(1, 2**62) if idempotent else -1
        self._queues: dict[TopicPartition, _PartitionQueue] = {}
        self._session: aiohttp.ClientSession | None = None
        self._broker_slots: dict[str, asyncio.Semaphore] = {}
        self.metadata: MetadataCache | None = None
        self._closed = False
        self.retries = 0
        self.leader_follows = 0  # retries sent straight to the leader a refusal named

    async def start(self) -> "Producer":
        self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), headers=self._auth)
        self.metadata = MetadataCache(self._session, self.bootstrap, self.request_timeout_ms)
        try:
            await self.metadata.refresh()
        except BaseException:  # no broker reachable: do not leave the session open
            await self._session.close()
            self._session = None
            raise
        return self

    async def __aenter__(self) -> "Producer":
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def partitions_for(self, topic: str) -> list[TopicPartition]:
        assert self.metadata is not None
        tps = self.metadata.current.topic_partitions(topic)
        if not tps:
            tps = (await self.metadata.refresh()).topic_partitions(topic)
        if not tps:
            raise FerryError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {topic!r} does not exist")
        return tps

    async def send(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        partition: int | None = None,
        headers: list[tuple[str, bytes]] | None = None,
        timestamp_ms: int | None = None,
    ) -> asyncio.Future[RecordMetadata]:
        """Queue one record; the returned future resolves when it is acknowledged."""
        if self._closed or self._session is None:
            raise FerryError(ErrorCode.INVALID_REQUEST, "producer is not started or already closed")
        if partition is None:
            tps = await self.partitions_for(topic)
            # Kafka's default partitioner for keyed records (murmur2), so keys land where Kafka puts them.
            partition = ((murmur2(key) & 0x7FFFFFFF) if key is not None else random.randrange(len(tps))) % len(tps)
        tp = TopicPartition(topic, partition)
        queue = self._queues.get(tp)
        if queue is None:
            queue = self._queues[tp] = _PartitionQueue()
            queue.task = asyncio.create_task(self._sender(tp, queue))
        fut: asyncio.Future[RecordMetadata] = asyncio.get_running_loop().create_future()
        size = len(value or b"") + len(key or b"") + 32
        queue.records.append(_Pending(key, value, headers, timestamp_ms, size,
                                      time.monotonic() + self.delivery_timeout_s, fut))
        queue.bytes += size
        queue.wakeup.set()
        return fut

    def _slots(self, url: str) -> asyncio.Semaphore:
        """Produce requests in flight to one broker, at most ``MAX_INFLIGHT_PER_BROKER``: with one
        request per partition, 30,000 partitions sent 30,000 requests at once, each timed from
        when it was issued, and none was answered within its timeout (all retried, again at once).
        A request waiting here has not started its timeout; the delivery timeout still bounds it."""
        slots = self._broker_slots.get(url)
        if slots is None:
            slots = self._broker_slots[url] = asyncio.Semaphore(MAX_INFLIGHT_PER_BROKER)
        return slots

    async def send_and_wait(self, topic: str, value: bytes | None, **kwargs: Any) -> RecordMetadata:
        return await (await self.send(topic, value, **kwargs))

    async def flush(self) -> None:
        """Wait until every record sent so far is acknowledged or failed."""
        futures = [p.future for q in self._queues.values() for p in q.records]
        futures += [f for q in self._queues.values() for f in q.inflight]
        if futures:
            await asyncio.gather(*futures, return_exceptions=True)

    async def close(self) -> None:
        if self._closed:
            return
        await self.flush()
        self._closed = True
        for q in self._queues.values():
            if q.task is not None:
                q.task.cancel()
        await asyncio.gather(*(q.task for q in self._queues.values() if q.task), return_exceptions=True)
        if self._session is not None:
            await self._session.close()

    async def _sender(self, tp: TopicPartition, queue: _PartitionQueue) -> None:
        while True:
            if not queue.records:
                queue.wakeup.clear()
                await queue.wakeup.wait()
            if self.linger_s > 0 and queue.bytes < self.batch_size_bytes:
                await asyncio.sleep(self.linger_s)
            batch: list[_Pending] = []
            size = 0
            while queue.records and (not batch or size + queue.records[0].size_bytes <= self.batch_size_bytes):
                p = queue.records.popleft()
                queue.bytes -= p.size_bytes
                size += p.size_bytes
                batch.append(p)
            queue.inflight = [p.future for p in batch]
            try:
                await self._deliver(tp, queue, batch)
            except Exception as exc:  # pragma: no cover  # noqa: BLE001 - defensive: never leave futures hanging
                for p in batch:
                    if not p.future.done():
                        p.future.set_exception(exc)
                queue.give_up()
            queue.inflight = []

    async def _deliver(self, tp: TopicPartition, queue: _PartitionQueue, batch: list[_Pending]) -> None:
        assert self._session is not None and self.metadata is not None
        seq = queue.sequence if self.producer_id >= 0 else -1
        queue.sequence = (queue.sequence + len(batch)) % 2**31
        body = encode_batch(((p.key, p.value, p.headers, p.timestamp_ms) for p in batch),
                            producer_id=self.producer_id, producer_epoch=queue.epoch if self.producer_id >= 0 else -1,
                            base_sequence=seq)
        deadline = min(p.deadline_s for p in batch)
        timeout = aiohttp.ClientTimeout(total=self.request_timeout_ms / 1000)
        last_error: BaseException | None = None
        refresh = False
        attempt = 0
        while True:
            now = time.monotonic()
            if now >= deadline:
                err = FerryError(ErrorCode.REQUEST_TIMED_OUT,
                                 f"{len(batch)} record(s) for {tp} not acknowledged within the delivery timeout"
                                 f" (last error: {last_error})")
                for p in batch:
                    p.future.set_exception(err)
                queue.give_up()
                return
            if refresh:
                try:
                    await self.metadata.refresh()
                except FerryError as exc:
                    last_error = exc
            leader = self.metadata.leader_url(tp)
            if leader is None:
                if tp not in self.metadata.current.partitions and refresh:
                    last_error = FerryError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{tp} is not in the metadata")
                else:
                    last_error = FerryError(ErrorCode.LEADER_NOT_AVAILABLE, f"{tp} has no leader")
                refresh = True
                self.retries += 1
                await asyncio.sleep(self.backoff.delay_s(attempt))
                attempt += 1
                continue
            broker_id, url = leader
            try:
                async with self._slots(url):
                    sent_s = time.monotonic()
                    async with self._session.post(
                        f"{url}/v1/produce/{tp.topic}/{tp.partition}", params={"acks": str(self.acks)},
                        data=body, timeout=timeout, headers={"Content-Type": "application/octet-stream"},
                    ) as resp:
                        await raise_for_error(resp)
                        answer = await resp.json()
            except FerryError as exc:
                last_error = exc
                if not exc.retriable:
                    for p in batch:
                        p.future.set_exception(exc)
                    queue.give_up()
                    return
                if exc.error is ErrorCode.NOT_LEADER_OR_FOLLOWER and \
                        self.metadata.follow(tp, broker_id, exc.details):
                    # the refusal names the new leader (KIP-951): go there now, which holds the
                    # request until it serves, instead of after a back-off and a metadata refresh
                    self.retries += 1
                    self.leader_follows += 1
                    refresh = False
                    continue
            except RETRIABLE_CONNECTION_ERRORS as exc:
                last_error = exc
            else:
                ack_s = time.monotonic()
                base = int(answer["base_offset"])
                epoch = int(answer.get("leader_epoch", -1))
                for i, p in enumerate(batch):
                    if not p.future.done():
                        p.future.set_result(RecordMetadata(tp.topic, tp.partition, base + i, epoch, broker_id, ack_s,
                                                             sent_s))
                return
            refresh = True
            self.retries += 1
            await asyncio.sleep(self.backoff.delay_s(attempt, retry_after_ms_of(getattr(last_error, "details", None))))
            attempt += 1


# ---------------------------------------------------------------- consumer


class Consumer:
    """Reads assigned partitions from their leaders; `poll` returns records in offset order per partition."""

    def __init__(
        self,
        bootstrap_servers: str | list[str],
        max_bytes: int = 4 * 1024 * 1024,
        max_wait_ms: int = 200,
        request_timeout_ms: int = 10_000,
        retry_backoff_ms: int = 20,
        api_timeout_ms: int = 60_000,
        skip_corrupt: bool = False,
        token: str | None = None,
    ) -> None:
        self.bootstrap = parse_bootstrap(bootstrap_servers)
        self._auth = auth_headers(resolve_token(token))  # a secure cluster's bearer token (tools/credentials.py)
        # A corrupt stored batch (CORRUPT_MESSAGE, see broker/fetch_guard.py) stops the consumer at
        # its offset, as Kafka's does, unless the user chose to skip such batches: then the
        # position moves past it and the batch is listed in ``skipped``.
        self.skip_corrupt = skip_corrupt
        self.skipped: list[CorruptSkip] = []
        self.max_bytes = max_bytes
        self.max_wait_ms = max_wait_ms
        self.request_timeout_ms = request_timeout_ms
        self.retry_backoff_s = retry_backoff_ms / 1000
        self.backoff = Backoff(initial_ms=max(1.0, float(retry_backoff_ms)), max_ms=CONSUMER_BACKOFF_MAX_MS)
        # Kafka's default.api.timeout.ms: how long offset look-ups retry retriable errors (a
        # partition that is moving answers NOT_LEADER_OR_FOLLOWER until its new owner serves)
        self.api_timeout_ms = api_timeout_ms
        self.positions: dict[TopicPartition, int] = {}
        self.high_watermarks: dict[TopicPartition, int] = {}
        self._session: aiohttp.ClientSession | None = None
        self.metadata: MetadataCache | None = None

    async def start(self) -> "Consumer":
        self._session = aiohttp.ClientSession(headers=self._auth)
        self.metadata = MetadataCache(self._session, self.bootstrap, self.request_timeout_ms)
        try:
            await self.metadata.refresh()
        except BaseException:  # no broker reachable: do not leave the session open
            await self._session.close()
            self._session = None
            raise
        return self

    async def __aenter__(self) -> "Consumer":
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        self.positions = {tp: self.positions.get(tp, 0) for tp in partitions}

    def assignment(self) -> list[TopicPartition]:
        return sorted(self.positions)

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self.positions[tp] = offset

    def position(self, tp: TopicPartition) -> int:
        return self.positions[tp]

    async def list_offset(self, tp: TopicPartition, spec: str = "latest", timestamp_ms: int | None = None) -> int:
        params = {"spec": spec}
        if timestamp_ms is not None:
            params["timestamp_ms"] = str(timestamp_ms)
        answer = await self._leader_request(tp, "GET", f"/v1/offsets/{tp.topic}/{tp.partition}", params)
        return int(answer["offset"])

    async def seek_to_beginning(self, tps: Iterable[TopicPartition] | None = None) -> None:
        for tp in list(tps or self.positions):
            self.positions[tp] = await self.list_offset(tp, "earliest")

    async def seek_to_end(self, tps: Iterable[TopicPartition] | None = None) -> None:
        for tp in list(tps or self.positions):
            self.positions[tp] = await self.list_offset(tp, "latest")

    async def fetch_raw(self, tp: TopicPartition, offset: int, max_wait_ms: int = 0) -> tuple[bytes, int | None]:
        """The stored batches from ``offset`` as the partition's leader returns them (whole
        batches, as written, the first possibly starting before ``offset``) and its high
        watermark; retriable errors (a partition moving) are retried until the API timeout."""
        params = {"offset": str(offset), "max_bytes": str(self.max_bytes), "max_wait_ms": str(max_wait_ms)}
        data, headers = await self._leader_request(tp, "GET", f"/v1/fetch/{tp.topic}/{tp.partition}", params,
                                                   raw=True)
        hw = headers.get("X-Ferry-High-Watermark")
        return data, None if hw is None else int(hw)

    async def poll(self, max_wait_ms: int | None = None) -> list[ConsumerRecord]:
        """Fetch once from every assigned partition (concurrently); advance the positions."""
        results = await asyncio.gather(*(self._fetch_one(tp, max_wait_ms) for tp in sorted(self.positions)))
        return [r for rs in results for r in rs]

    async def _fetch_one(self, tp: TopicPartition, max_wait_ms: int | None) -> list[ConsumerRecord]:
        wait_ms = self.max_wait_ms if max_wait_ms is None else max_wait_ms
        params = {"offset": str(self.positions[tp]), "max_bytes": str(self.max_bytes), "max_wait_ms": str(wait_ms)}
        try:
            data, headers = await self._leader_request(
                tp, "GET", f"/v1/fetch/{tp.topic}/{tp.partition}", params, raw=True,
                api_timeout_ms=0)  # a poll does not wait for one partition: the next poll retries it
        except FerryError as exc:
            if exc.error is ErrorCode.CORRUPT_MESSAGE:
                return self._corrupt(tp, exc)
            if not exc.retriable:
                raise
            return []
        hw = headers.get("X-Ferry-High-Watermark")
        if hw is not None:
            self.high_watermarks[tp] = int(hw)
        records = decode_batches(tp.topic, tp.partition, data, self.positions[tp])
        if records:
            self.positions[tp] = records[-1].offset + 1
        return records

    def _corrupt(self, tp: TopicPartition, exc: FerryError) -> list[ConsumerRecord]:
        details = exc.details or {}
        resume = details.get("next_offset")
        if not self.skip_corrupt or not isinstance(resume, int) or resume <= self.positions[tp]:
            raise FerryError(exc.error, f"{tp}: {exc.message}", exc.details)
        base = details.get("base_offset")
        self.skipped.append(CorruptSkip(tp, base if isinstance(base, int) else self.positions[tp], resume,
                                        exc.message))
        self.positions[tp] = resume
        return []

    async def _leader_request(self, tp: TopicPartition, method: str, path: str, params: dict[str, str],
                              raw: bool = False, api_timeout_ms: int | None = None) -> Any:
        """One request to the partition's leader. A retriable error (no leader, a leader that moved,
        a connection refused) refreshes the metadata and retries with backoff until the API timeout,
        as Kafka's consumer does; other errors are raised at once."""
        assert self._session is not None and self.metadata is not None
        timeout = aiohttp.ClientTimeout(total=self.request_timeout_ms / 1000 + int(params.get("max_wait_ms", 0)) / 1000)
        last: BaseException | None = None
        deadline = time.monotonic() + (self.api_timeout_ms if api_timeout_ms is None else api_timeout_ms) / 1000
        attempt = 0
        while attempt < 2 or time.monotonic() < deadline:  # at least one retry after a metadata refresh
            if attempt:
                delay_s = self.backoff.delay_s(attempt - 1, retry_after_ms_of(getattr(last, "details", None)))
                await asyncio.sleep(max(0.0, min(delay_s, deadline - time.monotonic())))
            attempt += 1
            if attempt > 1:
                try:
                    await self.metadata.refresh()
                except FerryError as exc:
                    last = exc
                    continue
            leader = self.metadata.leader_url(tp)
            if leader is None:
                last = FerryError(ErrorCode.LEADER_NOT_AVAILABLE, f"{tp} has no leader")
                continue
            try:
                async with self._session.request(method, f"{leader[1]}{path}", params=params, timeout=timeout) as resp:
                    await raise_for_error(resp)
                    if raw:
                        return await resp.read(), dict(resp.headers)
                    return await resp.json()
            except FerryError as exc:
                if not exc.retriable or exc.error is ErrorCode.CORRUPT_MESSAGE:  # stored damage: no retry mends it
                    raise
                last = exc
            except RETRIABLE_CONNECTION_ERRORS as exc:
                last = exc
        if isinstance(last, FerryError):
            raise last
        raise FerryError(ErrorCode.LEADER_NOT_AVAILABLE, f"{tp}: {last}")


async def read_all(bootstrap: str | list[str], tps: Iterable[TopicPartition], timeout_s: float = 30.0,
                   max_bytes: int = 8 * 1024 * 1024, token: str | None = None) -> dict[TopicPartition, list[ConsumerRecord]]:
    """Everything from the log start to the high watermark of each partition (bounded by `timeout_s`)."""
    out: dict[TopicPartition, list[ConsumerRecord]] = {}
    async with Consumer(bootstrap, max_bytes=max_bytes, max_wait_ms=0, token=token) as consumer:
        tps = list(tps)
        consumer.assign(tps)
        deadline = time.monotonic() + timeout_s
        ends: dict[TopicPartition, int] = {}
        # the offsets of many partitions asked a bounded number at a time: one after another, 30,000
        # partitions were 60,000 requests in a row and outlasted a 300 s read-back
        slots = asyncio.Semaphore(MAX_INFLIGHT_PER_BROKER)

        async def bounds(tp: TopicPartition) -> None:
            async with slots:
                while True:
                    try:
                        ends[tp] = await consumer.list_offset(tp, "latest")
                        consumer.seek(tp, await consumer.list_offset(tp, "earliest"))
                        return
                    except FerryError:
                        if time.monotonic() > deadline:
                            raise
                        await asyncio.sleep(0.1)

        asked = [asyncio.ensure_future(bounds(tp)) for tp in tps]
        try:
            await asyncio.gather(*asked)
        except BaseException:
            for task in asked:
                task.cancel()
            await asyncio.gather(*asked, return_exceptions=True)
            raise
        out.update((tp, []) for tp in tps)
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            if time.monotonic() > deadline:
                raise FerryError(ErrorCode.REQUEST_TIMED_OUT, "could not read every partition to its end in time")
            got = await consumer.poll(0)
            for rec in got:
                out[TopicPartition(rec.topic, rec.partition)].append(rec)
            if not got:
                await asyncio.sleep(0.05)
    return out
