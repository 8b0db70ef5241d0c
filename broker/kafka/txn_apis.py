"""The transaction coordinator over Kafka's protocol: FindCoordinator for transactional ids,
InitProducerId with a transactional id, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn,
DescribeTransactions and ListTransactions.

A transactional id belongs to one ``__transaction_state`` partition (Kafka's hash of the id); the
broker leading that partition is its coordinator and hosts the partition's state machine
(``broker/txn/state.py``), loaded by replaying the partition when it starts serving it, as the
group coordinator does with ``__consumer_offsets``. So the coordinator moves with the partition:
a move or a kill -9 of its owner hands the transactions to the next owner, which replays them and
sends again the markers of any transaction left prepared. Each decision is persisted (one
TransactionLog record, acks=all) before it takes effect or is answered.

EndTxn is answered once every marker is written and the transaction is complete (Kafka answers
once it is prepared and writes the markers after): the producer's next transaction then never
waits on CONCURRENT_TRANSACTIONS, and a read_committed consumer sees a committed transaction as
soon as its producer does.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from kafka.protocol.admin.transactions import (DescribeTransactionsRequest, DescribeTransactionsResponse,
                                               ListTransactionsRequest, ListTransactionsResponse)
from kafka.protocol.api_message import ApiMessage
from kafka.protocol.producer.transaction import (AddOffsetsToTxnRequest, AddOffsetsToTxnResponse,
                                                 AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, EndTxnRequest,
                                                 EndTxnResponse, InitProducerIdRequest, InitProducerIdResponse)

from metadata_quorum.kernel.clock import SteadyWallClock
from broker.groups import partition_for_group
from broker.kafka.authorization import OPEN, Authorization
from broker.kafka.data_apis import kafka_endpoints
from broker.kafka.group_apis import GroupsCore
from broker.kafka.txn_marker_sender import MarkerSender
from broker.kafka.wire import Request
from broker.producer_ids import ProducerIdSource
from broker.txn import state as txn
from broker.txn.log_format import decode_key, decode_value, encode_key, encode_value
from metadata_quorum.acls import AclOperation, ResourceType
from metadata_quorum.kernel.errors import ErrorCode, FerryError
from stream_storage import batches

log = logging.getLogger("ferry.broker.kafka.txn")

TXN_TOPIC = "__transaction_state"
#: Kafka's transaction.state.log.num.partitions is 50; 16 as for __consumer_offsets here (small clusters)
DEFAULT_TXN_PARTITIONS = 16
LOAD_FETCH_BYTES = 4 * 1024 * 1024
EXPIRY_CHECK_S = 1.0
Found = tuple[ErrorCode, str | None, int, str, int]


@dataclass
class _Hosted:
    leader_epoch: int
    coordinator: txn.Coordinator
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    tasks: set[asyncio.Task[None]] = field(default_factory=set)


class NotCoordinator(Exception):
    def __init__(self, error: ErrorCode) -> None:
        super().__init__(error.name)
        self.error = error


class TxnApis:
    def __init__(self, core: GroupsCore, producer_ids: ProducerIdSource, sender: MarkerSender,
                 offsets_partitions: Callable[[], Awaitable[int | None]], auth: Authorization = OPEN,
                 partitions: int = DEFAULT_TXN_PARTITIONS,
                 clock_ms: Callable[[], int] | None = None) -> None:
        self.core = core
        self.producer_ids = producer_ids
        self.sender = sender
        self.offsets_partitions = offsets_partitions  # __consumer_offsets' partition count, for AddOffsetsToTxn
        self.auth = auth
        self.partitions = partitions
        # sessions and transaction timeouts run on it, and the same times are persisted
        self.clock_ms: Callable[[], int] = clock_ms or SteadyWallClock()
        self._hosted: dict[int, _Hosted] = {}
        self._loading: dict[int, asyncio.Future[_Hosted]] = {}
        self._creating: asyncio.Future[None] | None = None

    # ------------------------------------------------------------------ where transactional ids live
    def _num_partitions(self) -> int | None:
        image = self.core.image
        topic_id = image.topics.by_name.get(TXN_TOPIC) if image is not None else None
        topic = image.topics.by_id.get(topic_id) if image is not None and topic_id is not None else None
        return len(topic.partitions) if topic is not None else None

    def partition_of(self, transactional_id: str) -> int | None:
        n = self._num_partitions()
        return partition_for_group(transactional_id, n) if n else None

    async def _ensure_topic(self) -> None:
        if self._num_partitions() is not None:
            return
        if self._creating is None or self._creating.done():
            self._creating = asyncio.ensure_future(self.core.create_internal_topic(
                TXN_TOPIC, self.partitions, {"cleanup.policy": "compact", "min.insync.replicas": "1"}))
        try:
            await asyncio.shield(self._creating)
        except FerryError as exc:
            if exc.error is not ErrorCode.TOPIC_ALREADY_EXISTS:
                log.warning("creating %s failed: %s", TXN_TOPIC, exc)

    async def find(self, transactional_id: str) -> Found:
        """FindCoordinator with key type 1 (TRANSACTION)."""
        if not transactional_id:
            return ErrorCode.INVALID_REQUEST, "the transactional id is empty", -1, "", -1
        await self._ensure_topic()
        partition = self.partition_of(transactional_id)
        image = self.core.image
        if partition is None or image is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{TXN_TOPIC} is being created", -1, "", -1
        reg = image.topics.partition(image.topics.by_name[TXN_TOPIC], partition)
        live = kafka_endpoints(image)
        if reg is None or reg.leader not in live:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{TXN_TOPIC}-{partition} has no leader right now", -1, "", -1
        e = live[reg.leader]
        return ErrorCode.NONE, None, e.node_id, e.host, e.port

    async def _coordinator(self, transactional_id: str) -> tuple[int, _Hosted]:
        partition = self.partition_of(transactional_id) if transactional_id else None
        if partition is None:
            raise NotCoordinator(ErrorCode.NOT_COORDINATOR if transactional_id else ErrorCode.INVALID_REQUEST)
        return partition, await self._hosted_for(partition)

    async def _hosted_for(self, partition: int) -> _Hosted:
        """The state machine of ``partition``, loaded for the leader epoch this broker serves it at."""
        try:
            epoch = self.core.serving_epoch(TXN_TOPIC, partition)
        except FerryError:
            self._drop(partition)
            raise NotCoordinator(ErrorCode.NOT_COORDINATOR) from None
        hosted = self._hosted.get(partition)
        if hosted is not None and hosted.leader_epoch == epoch:
            return hosted
        self._drop(partition)
        loading = self._loading.get(partition)
        if loading is None or loading.done():
            loading = self._loading[partition] = asyncio.ensure_future(self._load(partition, epoch))
        try:
            return await asyncio.shield(loading)
        except Exception as exc:  # noqa: BLE001 - the client retries a coordinator still loading
            log.warning("loading transactions of %s-%d failed: %s", TXN_TOPIC, partition, exc)
            raise NotCoordinator(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS) from None

    async def _load(self, partition: int, epoch: int) -> _Hosted:
        records: list[tuple[str, txn.TxnMetadata | None]] = []
        offset = 0
        while True:
            read = await self.core.read_records(TXN_TOPIC, partition, offset, LOAD_FETCH_BYTES, 0)
            if offset == 0 and read.log_start_offset > 0:
                offset = read.log_start_offset
                continue
            if not read.data:
                break
            for rec in batches.read_records(read.data):
                if rec.offset >= offset and rec.key is not None:
                    txn_id = decode_key(rec.key)
                    records.append((txn_id, decode_value(txn_id, rec.value) if rec.value is not None else None))
            offset = max(offset, max(i.next_offset for i in batches.iter_batches(read.data)))
            if offset >= read.high_watermark:
                break
        hosted = _Hosted(epoch, txn.Coordinator.load(records))
        self._hosted[partition] = hosted
        for job in hosted.coordinator.pending_markers():  # prepared by the previous owner: finish them
            self._spawn(hosted, self._finish(partition, hosted, job))
        self._spawn(hosted, self._expire_loop(partition, hosted))
        log.info("loaded %d transaction record(s) of %s-%d at leader epoch %d", len(records), TXN_TOPIC, partition,
                 epoch)
        return hosted

    def _spawn(self, hosted: _Hosted, coro: Any) -> None:
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        hosted.tasks.add(task)
        task.add_done_callback(hosted.tasks.discard)

    def _drop(self, partition: int) -> None:
        hosted = self._hosted.pop(partition, None)
        if hosted is not None:
            for task in list(hosted.tasks):
                task.cancel()

    async def _persist(self, partition: int, hosted: _Hosted, meta: txn.TxnMetadata) -> None:
        """Append ``meta`` (acks=all); only then is it current."""
        if self._hosted.get(partition) is not hosted:
            raise NotCoordinator(ErrorCode.NOT_COORDINATOR)
        body = bytearray(batches.build_batch([(encode_key(meta.transactional_id), encode_value(meta))],
                                             timestamp_ms=self.clock_ms()))
        try:
            await self.core.append_records(TXN_TOPIC, partition, body, -1)
        except Exception as exc:  # noqa: BLE001 - not durable: forgotten; the next call reloads
            log.warning("appending to %s-%d failed (%s); reloading", TXN_TOPIC, partition, exc)
            self._drop(partition)
            raise NotCoordinator(ErrorCode.NOT_COORDINATOR) from None
        hosted.coordinator.apply(meta)

    async def _decide(self, partition: int, hosted: _Hosted,
                      decide: Callable[[txn.TxnMetadata | None, int], txn.Decision],
                      transactional_id: str) -> txn.Decision:
        async with hosted.lock:
            decision = decide(hosted.coordinator.get(transactional_id), self.clock_ms())
            if decision.persist is not None:
                await self._persist(partition, hosted, decision.persist)
        return decision

    async def _finish(self, partition: int, hosted: _Hosted, job: txn.MarkerJob) -> None:
        """Markers on every partition of ``job``, then the transaction is complete."""
        await self.sender.send(job, hosted.leader_epoch)
        await self._decide(partition, hosted, lambda meta, now: txn.complete(meta, job, now) if meta is not None
                           else txn.Decision(), job.transactional_id)

    async def _expire_loop(self, partition: int, hosted: _Hosted) -> None:
        while self._hosted.get(partition) is hosted:
            await asyncio.sleep(EXPIRY_CHECK_S)
            for txn_id in hosted.coordinator.expired(self.clock_ms()):
                try:
                    decision = await self._decide(partition, hosted, lambda meta, now: txn.expired(meta, now)
                                                  if meta is not None else txn.Decision(), txn_id)
                except NotCoordinator:
                    return
                if decision.markers is not None:
                    log.info("transaction %r timed out: aborting", txn_id)
                    self._spawn(hosted, self._finish(partition, hosted, decision.markers))

    def _allowed(self, req: Request, operation: AclOperation, transactional_id: str) -> bool:
        return self.auth.allows(req, operation, ResourceType.TRANSACTIONAL_ID, transactional_id)

    # ------------------------------------------------------------------ InitProducerId
    async def init_producer_id(self, req: Request, idempotent: Callable[[Request], Awaitable[ApiMessage]]) -> ApiMessage:
        body: InitProducerIdRequest = req.body
        txn_id = body.transactional_id
        if txn_id is None:
            return await idempotent(req)

        def answer(error: ErrorCode, pid: int = -1, epoch: int = -1) -> ApiMessage:
            return InitProducerIdResponse(throttle_time_ms=0, error_code=error.code, producer_id=pid,
                                          producer_epoch=epoch)
        if not self._allowed(req, AclOperation.WRITE, txn_id):
            return answer(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        try:
            partition, hosted = await self._coordinator(txn_id)
            fresh = -1
            if txn.needs_new_producer_id(hosted.coordinator.get(txn_id)):
                fresh = await self.producer_ids.next_producer_id()
            pid = body.producer_id if req.api_version >= 3 else -1
            epoch = body.producer_epoch if req.api_version >= 3 else -1
            decision = await self._decide(partition, hosted, lambda meta, now: txn.init_producer_id(
                meta, txn_id, body.transaction_timeout_ms, pid, epoch, now, fresh), txn_id)
        except NotCoordinator as exc:
            return answer(exc.error)
        except FerryError as exc:
            return answer(exc.error)
        if decision.markers is not None:  # an open transaction is being aborted first: the client retries
            self._spawn(hosted, self._finish(partition, hosted, decision.markers))
        meta = hosted.coordinator.get(txn_id)
        if not decision.ok or meta is None:
            return answer(decision.error)
        return answer(ErrorCode.NONE, meta.producer_id, meta.producer_epoch)

    # ------------------------------------------------------------------ AddPartitionsToTxn / AddOffsetsToTxn
    async def add_partitions_to_txn(self, req: Request) -> ApiMessage:
        body: AddPartitionsToTxnRequest = req.body
        txn_id = body.v3_and_below_transactional_id
        wanted = [(t.name, p) for t in body.v3_and_below_topics for p in t.partitions]
        errors: dict[tuple[str, int], ErrorCode] = {}
        image = self.core.image
        denied = self.auth.denied(req, AclOperation.WRITE, ResourceType.TOPIC, {t for t, _ in wanted})
        for tp in wanted:
            topic_id = image.topics.by_name.get(tp[0]) if image is not None else None
            if tp[0] in denied:
                errors[tp] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif image is None or topic_id is None or image.topics.partition(topic_id, tp[1]) is None:
                errors[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        if not self._allowed(req, AclOperation.WRITE, txn_id):
            error = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
            errors = {tp: error for tp in wanted}
        elif errors:  # Kafka adds none when one fails: the others answer OPERATION_NOT_ATTEMPTED
            errors = {tp: errors.get(tp, ErrorCode.OPERATION_NOT_ATTEMPTED) for tp in wanted}
        else:
            error = await self._add(txn_id, body.v3_and_below_producer_id, body.v3_and_below_producer_epoch,
                                    frozenset(wanted))
            errors = {tp: error for tp in wanted}
        R = AddPartitionsToTxnResponse.AddPartitionsToTxnTopicResult
        by_topic: dict[str, list[Any]] = {}
        for (topic, partition), error in errors.items():
            by_topic.setdefault(topic, []).append(R.AddPartitionsToTxnPartitionResult(
                partition_index=partition, partition_error_code=error.code))
        return AddPartitionsToTxnResponse(throttle_time_ms=0, results_by_topic_v3_and_below=[
            R(name=t, results_by_partition=ps) for t, ps in by_topic.items()])

    async def _add(self, txn_id: str, producer_id: int, producer_epoch: int,
                   partitions: frozenset[tuple[str, int]]) -> ErrorCode:
        try:
            partition, hosted = await self._coordinator(txn_id)
            decision = await self._decide(partition, hosted, lambda meta, now: txn.add_partitions(
                meta, producer_id, producer_epoch, partitions, now), txn_id)
        except NotCoordinator as exc:
            return exc.error
        return decision.error

    async def add_offsets_to_txn(self, req: Request) -> ApiMessage:
        body: AddOffsetsToTxnRequest = req.body
        if not self._allowed(req, AclOperation.WRITE, body.transactional_id):
            error = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        elif not self.auth.allows(req, AclOperation.READ, ResourceType.GROUP, body.group_id):
            error = ErrorCode.GROUP_AUTHORIZATION_FAILED
        elif not (n := await self.offsets_partitions()):
            error = ErrorCode.COORDINATOR_NOT_AVAILABLE
        else:
            offsets_partition = ("__consumer_offsets", partition_for_group(body.group_id, n))
            error = await self._add(body.transactional_id, body.producer_id, body.producer_epoch,
                                    frozenset({offsets_partition}))
        return AddOffsetsToTxnResponse(throttle_time_ms=0, error_code=error.code)

    # ------------------------------------------------------------------ EndTxn
    async def end_txn(self, req: Request) -> ApiMessage:
        body: EndTxnRequest = req.body
        txn_id = body.transactional_id
        if not self._allowed(req, AclOperation.WRITE, txn_id):
            return EndTxnResponse(throttle_time_ms=0, error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED.code)
        try:
            partition, hosted = await self._coordinator(txn_id)
            decision = await self._decide(partition, hosted, lambda meta, now: txn.end_txn(
                meta, body.producer_id, body.producer_epoch, bool(body.committed), now), txn_id)
            if decision.markers is not None:
                await self._finish(partition, hosted, decision.markers)
        except NotCoordinator as exc:
            return EndTxnResponse(throttle_time_ms=0, error_code=exc.error.code)
        return EndTxnResponse(throttle_time_ms=0, error_code=decision.error.code)

    # ------------------------------------------------------------------ Describe / List
    async def describe_transactions(self, req: Request) -> ApiMessage:
        body: DescribeTransactionsRequest = req.body
        S = DescribeTransactionsResponse.TransactionState
        out = []
        for txn_id in body.transactional_ids:
            meta: txn.TxnMetadata | None = None
            error = ErrorCode.NONE
            if not self._allowed(req, AclOperation.DESCRIBE, txn_id):
                error = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
            else:
                try:
                    _partition, hosted = await self._coordinator(txn_id)
                    meta = hosted.coordinator.get(txn_id)
                    if meta is None:
                        error = ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
                except NotCoordinator as exc:
                    error = exc.error
            if meta is None:
                out.append(S(error_code=error.code, transactional_id=txn_id, transaction_state="",
                             transaction_timeout_ms=0, transaction_start_time_ms=-1, producer_id=-1,
                             producer_epoch=-1, topics=[]))
                continue
            by_topic: dict[str, list[int]] = {}
            for topic, p in sorted(meta.partitions):
                by_topic.setdefault(topic, []).append(p)
            out.append(S(error_code=0, transactional_id=txn_id, transaction_state=meta.state.kafka_name,
                         transaction_timeout_ms=meta.timeout_ms, transaction_start_time_ms=meta.start_ms,
                         producer_id=meta.producer_id, producer_epoch=meta.producer_epoch,
                         topics=[S.TopicData(topic=t, partitions=ps) for t, ps in by_topic.items()]))
        return DescribeTransactionsResponse(throttle_time_ms=0, transaction_states=out)

    async def list_transactions(self, req: Request) -> ApiMessage:
        body: ListTransactionsRequest = req.body
        known = {s.kafka_name: s for s in txn.TxnState}
        unknown = [s for s in body.state_filters if s not in known]
        states = {known[s] for s in body.state_filters if s in known}
        pids = set(body.producer_id_filters)
        min_duration_ms = body.duration_filter if req.api_version >= 1 else -1
        now = self.clock_ms()
        S = ListTransactionsResponse.TransactionState
        out = []
        for partition in range(self._num_partitions() or 0):
            try:
                hosted = await self._hosted_for(partition)
            except NotCoordinator:
                continue  # another broker leads it (or it is loading): its coordinator lists it
            for meta in hosted.coordinator.txns.values():
                if (states and meta.state not in states) or (pids and meta.producer_id not in pids):
                    continue
                if min_duration_ms >= 0 and (meta.start_ms < 0 or now - meta.start_ms < min_duration_ms):
                    continue
                if not self._allowed(req, AclOperation.DESCRIBE, meta.transactional_id):
                    continue
                out.append(S(transactional_id=meta.transactional_id, producer_id=meta.producer_id,
                             transaction_state=meta.state.kafka_name))
        return ListTransactionsResponse(throttle_time_ms=0, error_code=0, unknown_state_filters=unknown,
                                        transaction_states=out)


__all__ = ["DEFAULT_TXN_PARTITIONS", "TXN_TOPIC", "TxnApis"]
