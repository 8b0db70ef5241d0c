"""Consumer groups over Kafka's protocol: FindCoordinator and the classic group APIs.

The decisions are :class:`broker.groups.GroupCoordinator`'s; this module is its shell. Group
state and committed offsets live in the internal topic ``__consumer_offsets`` (created on first
use); the coordinator of a group is the leader of the group's partition of it, so a coordinator
moves and fails over like any partition. A broker that leads such a partition loads a
coordinator from the partition's records on the first group request (and again whenever the
partition was reopened at a new leader epoch, i.e. it moved away and back), appends each call's
records through the same path as any produce (acks=all) and only then answers — so an answer a
client saw survives a move or a kill -9. A failed append drops the coordinator; the next request
reloads it from what is durable.
"""
from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Mapping, Protocol, TypeVar

from kafka.protocol.admin.groups import (DeleteGroupsRequest, DeleteGroupsResponse, DescribeGroupsRequest,
                                         DescribeGroupsResponse, ListGroupsRequest, ListGroupsResponse)
from kafka.protocol.api_message import ApiMessage
from kafka.protocol.consumer.group import (HeartbeatRequest, HeartbeatResponse, JoinGroupRequest, JoinGroupResponse,
                                           LeaveGroupRequest, LeaveGroupResponse, OffsetCommitRequest,
                                           OffsetCommitResponse, OffsetDeleteRequest, OffsetDeleteResponse,
                                           OffsetFetchRequest, OffsetFetchResponse,
                                           SyncGroupRequest, SyncGroupResponse)
from kafka.protocol.metadata.find_coordinator import FindCoordinatorRequest, FindCoordinatorResponse

from metadata_quorum.kernel.clock import SteadyWallClock
from broker import groups as g
from broker.groups.consumer_coordinator import ConsumerGroupConfig
from broker.groups.consumer_records import decode_any_group_record, encode_consumer_record
from broker.groups.partition_coordinator import PartitionCoordinator
from broker.groups.txn_log import LoggedBatch, replay
from broker.kafka.authorization import GROUP, OPEN, TOPIC, TRANSACTIONAL_ID, Authorization
from broker.kafka.data_apis import (NO_TRANSACTIONS, NO_TRANSACTIONS_MESSAGE, AppendOutcome, BrokerCore, kafka_endpoints,
                                    kafka_error)
from broker.kafka.wire import Request
from metadata_quorum.acls import AclOperation
from metadata_quorum.kernel.errors import ErrorCode, FerryError
from stream_storage import batches

log = logging.getLogger("ferry.kafka.groups")

OFFSETS_TOPIC = "__consumer_offsets"
DEFAULT_OFFSETS_PARTITIONS = 16  # Kafka's offsets.topic.num.partitions is 50; 16 suits small clusters
LOAD_FETCH_BYTES = 4 * 1024 * 1024
COORDINATOR_KEY_GROUP = 0
COORDINATOR_KEY_TRANSACTION = 1
R = TypeVar("R")


Found = tuple[ErrorCode, str | None, int, str, int]  # FindCoordinator's answer for one key


class GroupsCore(BrokerCore, Protocol):
    """What the group shell needs beyond the data path."""

    def serving_epoch(self, topic: str, partition: int) -> int:
        """The leader epoch this broker serves ``topic-partition`` at, or a FerryError."""
        ...

    def create_internal_topic(self, name: str, partitions: int, configs: dict[str, str]) -> Awaitable[None]: ...

    def append_records(self, topic: str, partition: int, body: bytearray, acks: int,
                       client_leader_epoch: int | None = None, coordinator: bool = False) -> Awaitable[AppendOutcome]:
        """As BrokerCore's, and ``coordinator``: a coordinator's own transactional batch, without a
        sequence (TxnOffsetCommit's offsets)."""
        ...


@dataclass
class _Hosted:
    """A loaded coordinator of one partition, at the leader epoch it was loaded for."""

    leader_epoch: int
    coordinator: PartitionCoordinator
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    parked: dict[Any, asyncio.Future[Any]] = field(default_factory=dict)
    ticker: asyncio.TimerHandle | None = None


class NotCoordinator(Exception):
    def __init__(self, error: ErrorCode) -> None:
        super().__init__(error.name)
        self.error = error


class GroupApis:
    def __init__(self, core: GroupsCore, config: g.GroupCoordinatorConfig | None = None,
                 offsets_partitions: int = DEFAULT_OFFSETS_PARTITIONS,
                 clock_ms: Callable[[], int] | None = None, auth: Authorization = OPEN) -> None:
        self.core = core
        self.auth = auth
        self.config = config or g.GroupCoordinatorConfig(group_initial_rebalance_delay_ms=300)
        self.offsets_partitions = offsets_partitions
        # sessions and transaction timeouts run on it, and the same times are persisted
        self.clock_ms: Callable[[], int] = clock_ms or SteadyWallClock()
        self.consumer_config = ConsumerGroupConfig()
        self._hosted: dict[int, _Hosted] = {}
        self._loading: dict[int, asyncio.Future[_Hosted]] = {}
        self._creating: asyncio.Future[None] | None = None
        # (partition, leader epoch, group id) -> offsets of a transaction wait on its outcome
        # (TxnOffsetCommit, broker/kafka/txn_offsets.py); none without transactions
        self.unstable: Callable[[int, int, str], bool] = lambda _p, _e, _g: False
        # (partition, leader epoch, producer id -> its offset records awaiting a marker) when a
        # partition is loaded: the pending transactional offsets found in its log (txn_offsets.py)
        self.pending_loaded: Callable[[int, int, dict[int, list[Any]]], None] = lambda _p, _e, _r: None
        # FindCoordinator for transactional ids (broker/kafka/txn_apis.py); None: refused
        self.find_transaction_coordinator: Callable[[str], Awaitable[Found]] | None = None

    def group_configs(self, group_id: str) -> Mapping[str, str]:
        """The group's own configs in this broker's metadata image (KIP-848 group configs)."""
        image = self.core.image
        return image.configs.get("group", group_id) if image is not None else {}

    # ------------------------------------------------------------------ where groups live
    def _num_partitions(self) -> int | None:
        image = self.core.image
        topic_id = image.topics.by_name.get(OFFSETS_TOPIC) if image is not None else None
        topic = image.topics.by_id.get(topic_id) if image is not None and topic_id is not None else None
        return len(topic.partitions) if topic is not None else None

    async def offsets_partition_count(self, wait_s: float = 3.0) -> int | None:
        """__consumer_offsets' partition count, the topic created first if it does not exist yet
        (AddOffsetsToTxn may be a cluster's first group request), waiting up to ``wait_s`` for it
        to reach this broker's image."""
        await self._ensure_topic()
        for _ in range(int(wait_s / 0.05)):  # the image is polled: it has no change notification
            n = self._num_partitions()
            if n is not None:
                return n
            await asyncio.sleep(0.05)
        return self._num_partitions()

    def partition_of(self, group_id: str) -> int | None:
        n = self._num_partitions()
        return g.partition_for_group(group_id, n) if n else None

    async def _ensure_topic(self) -> None:
        if self._num_partitions() is not None:
            return
        if self._creating is None or self._creating.done():
            self._creating = asyncio.ensure_future(self.core.create_internal_topic(
                OFFSETS_TOPIC, self.offsets_partitions, {"cleanup.policy": "compact"}))
        try:
            await asyncio.shield(self._creating)
        except FerryError as exc:
            if exc.error is not ErrorCode.TOPIC_ALREADY_EXISTS:
                log.warning("creating %s failed: %s", OFFSETS_TOPIC, exc)

    def _may(self, req: Request, operation: AclOperation, group_id: str) -> bool:
        return self.auth.allows(req, operation, GROUP, group_id)

    async def _coordinator(self, group_id: str, allowed: bool = True) -> tuple[int, _Hosted]:
        """The loaded coordinator of ``group_id``'s partition here, or NotCoordinator (also
        GROUP_AUTHORIZATION_FAILED when the authorizer did not allow the call: ``allowed``)."""
        if not allowed:
            raise NotCoordinator(ErrorCode.GROUP_AUTHORIZATION_FAILED)
        if not group_id:
            raise NotCoordinator(ErrorCode.INVALID_GROUP_ID)
        partition = self.partition_of(group_id)
        if partition is None:
            raise NotCoordinator(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        return partition, await self._hosted_for(partition)

    async def _hosted_for(self, partition: int) -> _Hosted:
        """The coordinator of ``partition``, loaded for the leader epoch this broker serves it at."""
        try:
            epoch = self.core.serving_epoch(OFFSETS_TOPIC, partition)
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
        except Exception as exc:  # noqa: BLE001 - a failed load is retried by the client
            log.warning("loading groups of %s-%d failed: %s", OFFSETS_TOPIC, partition, exc)
            raise NotCoordinator(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS) from None

    async def _load(self, partition: int, epoch: int) -> _Hosted:
        """Replay the partition: plain batches' records where they stand, a transaction's
        (TxnOffsetCommit) at its commit marker (txn_log.replay); those still awaiting a marker are
        handed to ``pending_loaded``."""
        logged: list[LoggedBatch[Any]] = []
        offset = 0
        while True:
            read = await self.core.read_records(OFFSETS_TOPIC, partition, offset, LOAD_FETCH_BYTES, 0)
            if offset == 0 and read.log_start_offset > 0:
                offset = read.log_start_offset
                continue
            if not read.data:
                break
            for info in batches.iter_batches(read.data):
                if info.next_offset <= offset:
                    continue
                if info.is_control:
                    marker = batches.control_marker(read.data, info)
                    if marker is not None:
                        logged.append(LoggedBatch(info.producer_id, True, (), marker.commit))
                    continue
                piece = read.data[info.position: info.position + info.size_bytes]
                logged.append(LoggedBatch(info.producer_id, info.is_transactional, [
                    decode_any_group_record(rec.key, rec.value) for rec in batches.read_records(piece)
                    if rec.offset >= offset and rec.key is not None]))
            offset = max(offset, _next_offset(read.data))
            if offset >= read.high_watermark:
                break
        replayed = replay(logged)
        hosted = _Hosted(epoch, PartitionCoordinator.load_partition(replayed.applied, self.config, self.clock_ms(),
                                                                     self.consumer_config, self.group_configs))
        self._hosted[partition] = hosted
        self.pending_loaded(partition, epoch, replayed.pending)
        self._schedule(partition, hosted, hosted.coordinator.next_deadline_ms())
        log.info("loaded %d group record(s) of %s-%d at leader epoch %d (%d producer(s) with offsets awaiting "
                 "their transaction's marker)", len(replayed.applied), OFFSETS_TOPIC, partition, epoch,
                 len(replayed.pending))
        return hosted

    def _drop(self, partition: int) -> None:
        hosted = self._hosted.pop(partition, None)
        if hosted is None:
            return
        if hosted.ticker is not None:
            hosted.ticker.cancel()
        for fut in hosted.parked.values():
            if not fut.done():
                fut.set_exception(NotCoordinator(ErrorCode.NOT_COORDINATOR))
        hosted.parked.clear()

    def _schedule(self, partition: int, hosted: _Hosted, deadline_ms: int | None) -> None:
        if deadline_ms is None:
            return
        if hosted.ticker is not None:
            hosted.ticker.cancel()
        delay_s = max(0.0, (deadline_ms - self.clock_ms()) / 1000)
        hosted.ticker = asyncio.get_running_loop().call_later(
            delay_s, lambda: asyncio.ensure_future(self._tick(partition, hosted)))

    async def _tick(self, partition: int, hosted: _Hosted) -> None:
        if self._hosted.get(partition) is not hosted:
            return
        try:
            await self._run(partition, hosted, lambda c, now: c.tick(now))
        except NotCoordinator:
            pass

    async def _run(self, partition: int, hosted: _Hosted, call: Callable[[PartitionCoordinator, int], g.Effects[R]]) -> R:
        """One coordinator call: decide, append its records (acks=all), then release the answers."""
        async with hosted.lock:
            if self._hosted.get(partition) is not hosted:
                raise NotCoordinator(ErrorCode.NOT_COORDINATOR)
            effects = call(hosted.coordinator, self.clock_ms())
            if effects.records:
                body = bytearray(batches.build_batch([_encode(r) for r in effects.records],
                                                     timestamp_ms=self.clock_ms()))
                try:
                    await self.core.append_records(OFFSETS_TOPIC, partition, body, -1)
                except Exception as exc:  # noqa: BLE001 - what is not durable is forgotten: reload
                    log.warning("appending group records to %s-%d failed (%s); reloading", OFFSETS_TOPIC,
                                partition, exc)
                    self._drop(partition)
                    raise NotCoordinator(ErrorCode.NOT_COORDINATOR) from None
            for token, result in effects.completed.items():
                fut = hosted.parked.pop(token, None)
                if fut is not None and not fut.done():
                    fut.set_result(result)
            self._schedule(partition, hosted, effects.next_deadline_ms)
            return effects.reply

    async def _parked(self, group_id: str, call: Callable[[PartitionCoordinator, Any, int], g.Effects[None]],
                      allowed: bool = True) -> Any:
        """A JoinGroup or SyncGroup: parked until a later call (or this one) completes it."""
        partition, hosted = await self._coordinator(group_id, allowed)
        token = object()
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        hosted.parked[token] = fut
        try:
            await self._run(partition, hosted, lambda c, now: call(c, token, now))
        except NotCoordinator:
            hosted.parked.pop(token, None)
            raise
        try:
            return await fut
        finally:
            hosted.parked.pop(token, None)

    # ------------------------------------------------------------------ FindCoordinator
    async def find_coordinator(self, req: Request) -> ApiMessage:
        body: FindCoordinatorRequest = req.body
        keys = list(body.coordinator_keys) if req.api_version >= 4 else [body.key]
        key_type = body.key_type if req.api_version >= 1 else COORDINATOR_KEY_GROUP
        # DESCRIBE on the key's resource, as Kafka's KafkaApis.handleFindCoordinatorRequest
        resource, refused = ((TRANSACTIONAL_ID, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
                             if key_type == COORDINATOR_KEY_TRANSACTION else
                             (GROUP, ErrorCode.GROUP_AUTHORIZATION_FAILED))
        found = [await self._find_one(k, key_type) if key_type not in (COORDINATOR_KEY_GROUP, COORDINATOR_KEY_TRANSACTION)
                 or self.auth.allows(req, AclOperation.DESCRIBE, resource, k) else
                 (refused, None, -1, "", -1) for k in keys]
        if req.api_version >= 4:
            C = FindCoordinatorResponse.Coordinator
            return FindCoordinatorResponse(throttle_time_ms=0, coordinators=[
                C(key=k, node_id=n, host=h, port=p, error_code=e.code, error_message=m)
                for k, (e, m, n, h, p) in zip(keys, found, strict=True)])
        e, m, n, h, p = found[0]
        return FindCoordinatorResponse(throttle_time_ms=0, error_code=e.code, error_message=m, node_id=n, host=h,
                                       port=p)

    async def _find_one(self, key: str, key_type: int) -> Found:
        if key_type == COORDINATOR_KEY_TRANSACTION:
            if self.find_transaction_coordinator is not None:
                return await self.find_transaction_coordinator(key)
            return NO_TRANSACTIONS, NO_TRANSACTIONS_MESSAGE, -1, "", -1
        if key_type != COORDINATOR_KEY_GROUP:
            return ErrorCode.INVALID_REQUEST, f"unknown coordinator key type {key_type}", -1, "", -1
        if not key:
            return ErrorCode.INVALID_GROUP_ID, "the group id is empty", -1, "", -1
        await self._ensure_topic()
        partition = self.partition_of(key)
        image = self.core.image
        if partition is None or image is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{OFFSETS_TOPIC} is being created", -1, "", -1
        topic_id = image.topics.by_name[OFFSETS_TOPIC]
        reg = image.topics.partition(topic_id, partition)
        live = kafka_endpoints(image)
        if reg is None or reg.leader not in live:
            return (ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{OFFSETS_TOPIC}-{partition} has no leader right now",
                    -1, "", -1)
        e = live[reg.leader]
        return ErrorCode.NONE, None, e.node_id, e.host, e.port

    # ------------------------------------------------------------------ JoinGroup / SyncGroup
    async def join_group(self, req: Request) -> ApiMessage:
        body: JoinGroupRequest = req.body
        v = req.api_version
        request = g.JoinRequest(
            group_id=body.group_id, member_id=body.member_id, protocol_type=body.protocol_type,
            protocols=tuple(g.JoinProtocol(p.name, bytes(p.metadata)) for p in body.protocols),
            session_timeout_ms=body.session_timeout_ms,
            rebalance_timeout_ms=body.rebalance_timeout_ms if v >= 1 else body.session_timeout_ms,
            group_instance_id=body.group_instance_id if v >= 5 else None, client_id=req.client_id or "",
            client_host=req.client_host, require_known_member_id=v >= 4, supports_skip_assignment=v >= 9,
            reason=body.reason if v >= 8 else None)
        new_id = g.kafka_member_id(req.client_id or "", request.group_instance_id, str(uuid.uuid4()))
        try:
            result: g.JoinResult = await self._parked(
                body.group_id, lambda c, token, now: c.join(request, token, new_id, now),
                self._may(req, AclOperation.READ, body.group_id))
        except NotCoordinator as exc:
            result = g.JoinResult(error=exc.error, member_id=body.member_id)
        M = JoinGroupResponse.JoinGroupResponseMember
        return JoinGroupResponse(
            throttle_time_ms=0, error_code=result.error.code, generation_id=result.generation_id,
            protocol_type=result.protocol_type, protocol_name=result.protocol_name or ("" if v < 7 else None),
            leader=result.leader, skip_assignment=result.skip_assignment, member_id=result.member_id,
            members=[M(member_id=m.member_id, group_instance_id=m.group_instance_id, metadata=m.metadata)
                     for m in result.members])

    async def sync_group(self, req: Request) -> ApiMessage:
        body: SyncGroupRequest = req.body
        v = req.api_version
        request = g.SyncRequest(
            group_id=body.group_id, member_id=body.member_id, generation_id=body.generation_id,
            group_instance_id=body.group_instance_id if v >= 3 else None,
            protocol_type=body.protocol_type if v >= 5 else None, protocol_name=body.protocol_name if v >= 5 else None,
            assignments={a.member_id: bytes(a.assignment) for a in body.assignments})
        try:
            result: g.SyncResult = await self._parked(body.group_id, lambda c, token, now: c.sync(request, token, now),
                                                      self._may(req, AclOperation.READ, body.group_id))
        except NotCoordinator as exc:
            result = g.SyncResult(error=exc.error)
        return SyncGroupResponse(throttle_time_ms=0, error_code=result.error.code, protocol_type=result.protocol_type,
                                 protocol_name=result.protocol_name, assignment=result.assignment)

    # ------------------------------------------------------------------ Heartbeat / LeaveGroup
    async def heartbeat(self, req: Request) -> ApiMessage:
        body: HeartbeatRequest = req.body
        request = g.HeartbeatRequest(body.group_id, body.member_id, body.generation_id,
                                     body.group_instance_id if req.api_version >= 3 else None)
        try:
            partition, hosted = await self._coordinator(body.group_id, self._may(req, AclOperation.READ, body.group_id))
            result = await self._run(partition, hosted, lambda c, now: c.heartbeat(request, now))
            error = result.error
        except NotCoordinator as exc:
            error = exc.error
        return HeartbeatResponse(throttle_time_ms=0, error_code=error.code)

    async def leave_group(self, req: Request) -> ApiMessage:
        body: LeaveGroupRequest = req.body
        v = req.api_version
        members = (tuple(g.LeaveMember(m.member_id, m.group_instance_id, m.reason if v >= 5 else None)
                         for m in body.members) if v >= 3 else (g.LeaveMember(body.member_id),))
        request = g.LeaveRequest(body.group_id, members)
        try:
            partition, hosted = await self._coordinator(body.group_id, self._may(req, AclOperation.READ, body.group_id))
            result = await self._run(partition, hosted, lambda c, now: c.leave(request, now))
        except NotCoordinator as exc:
            result = g.LeaveResult(exc.error)
        error = result.error
        if v < 3 and error is ErrorCode.NONE and result.members:
            error = result.members[0].error  # v0-v2 carry one member and one error
        MR = LeaveGroupResponse.MemberResponse
        return LeaveGroupResponse(throttle_time_ms=0, error_code=error.code, members=[
            MR(member_id=m.member_id, group_instance_id=m.group_instance_id, error_code=m.error.code)
            for m in result.members] if v >= 3 else [])

    # ------------------------------------------------------------------ offsets
    async def offset_commit(self, req: Request) -> ApiMessage:
        body: OffsetCommitRequest = req.body
        v = req.api_version
        image = self.core.image
        known: list[g.OffsetCommitPartition] = []
        unknown: list[tuple[str, int]] = []
        refused: list[tuple[str, int, ErrorCode]] = []  # the authorizer's: the group, else a topic
        group_allowed = self._may(req, AclOperation.READ, body.group_id)
        denied = self.auth.denied(req, AclOperation.READ, TOPIC, (t.name for t in body.topics))
        for t in body.topics:
            topic_id = image.topics.by_name.get(t.name) if image is not None else None
            for p in t.partitions:
                if not group_allowed or t.name in denied:
                    refused.append((t.name, p.partition_index, ErrorCode.TOPIC_AUTHORIZATION_FAILED if group_allowed
                                    else ErrorCode.GROUP_AUTHORIZATION_FAILED))
                    continue
                if topic_id is None or image is None or image.topics.partition(topic_id, p.partition_index) is None:
                    unknown.append((t.name, p.partition_index))
                    continue
                known.append(g.OffsetCommitPartition(
                    t.name, p.partition_index, p.committed_offset,
                    p.committed_leader_epoch if v >= 6 else g.messages.NO_LEADER_EPOCH, p.committed_metadata))
        request = g.OffsetCommitRequest(body.group_id, tuple(known), body.member_id, body.generation_id_or_member_epoch,
                                        body.group_instance_id if v >= 7 else None)
        results: list[tuple[str, int, ErrorCode]] = refused + [(t, p, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                                                                for t, p in unknown]
        if known:
            try:
                partition, hosted = await self._coordinator(body.group_id)
                outcome = await self._run(partition, hosted, lambda c, now: c.commit_offsets(request, now))
                results += [(r.topic, r.partition, r.error) for r in outcome.partitions]
            except NotCoordinator as exc:
                results += [(k.topic, k.partition, exc.error) for k in known]
        T = OffsetCommitResponse.OffsetCommitResponseTopic
        by_topic: dict[str, list[Any]] = {}
        for topic, part, error in results:
            by_topic.setdefault(topic, []).append(T.OffsetCommitResponsePartition(partition_index=part,
                                                                                  error_code=error.code))
        return OffsetCommitResponse(throttle_time_ms=0, topics=[T(name=n, partitions=ps) for n, ps in by_topic.items()])

    async def offset_fetch(self, req: Request) -> ApiMessage:
        body: OffsetFetchRequest = req.body
        v = req.api_version
        if v >= 8:
            G = OffsetFetchResponse.OffsetFetchResponseGroup
            out = []
            for grp in body.groups:
                wanted = None if grp.topics is None else [(t.name, list(t.partition_indexes)) for t in grp.topics]
                error, parts = await self._fetch_offsets(req, grp.group_id, wanted)
                T = G.OffsetFetchResponseTopics
                out.append(G(group_id=grp.group_id, error_code=error.code, topics=[
                    T(name=name, partitions=[T.OffsetFetchResponsePartitions(
                        partition_index=f.partition, committed_offset=f.offset, committed_leader_epoch=f.leader_epoch,
                        metadata=f.metadata, error_code=f.error.code) for f in fs]) for name, fs in parts.items()]))
            return OffsetFetchResponse(throttle_time_ms=0, groups=out)
        wanted = None if body.topics is None else [(t.name, list(t.partition_indexes)) for t in body.topics]
        error, parts = await self._fetch_offsets(req, body.group_id, wanted)
        T = OffsetFetchResponse.OffsetFetchResponseTopic
        return OffsetFetchResponse(throttle_time_ms=0, error_code=error.code, topics=[
            T(name=name, partitions=[T.OffsetFetchResponsePartition(
                partition_index=f.partition, committed_offset=f.offset, committed_leader_epoch=f.leader_epoch,
                metadata=f.metadata, error_code=f.error.code) for f in fs]) for name, fs in parts.items()])

    async def offset_delete(self, req: Request) -> ApiMessage:
        """OffsetDelete (KIP-496): the group's committed offsets of the named partitions go, unless
        a member of the group subscribes to their topic. A partition of a topic that does not
        exist answers UNKNOWN_TOPIC_OR_PARTITION; a group-wide error answers alone, as Kafka does."""
        body: OffsetDeleteRequest = req.body
        image = self.core.image
        known: list[g.TopicPartition] = []
        results: list[tuple[str, int, ErrorCode]] = []
        denied = self.auth.denied(req, AclOperation.READ, TOPIC, (t.name for t in body.topics))
        for t in body.topics:
            topic_id = image.topics.by_name.get(t.name) if image is not None else None
            for p in t.partitions:
                if t.name in denied:
                    results.append((t.name, p.partition_index, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
                elif topic_id is None or image is None or image.topics.partition(topic_id, p.partition_index) is None:
                    results.append((t.name, p.partition_index, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
                else:
                    known.append(g.TopicPartition(t.name, p.partition_index))
        try:
            partition, hosted = await self._coordinator(body.group_id,
                                                        self._may(req, AclOperation.DELETE, body.group_id))
            outcome = await self._run(partition, hosted, lambda c, now: c.delete_offsets(body.group_id, known, now))
        except NotCoordinator as exc:
            outcome = g.OffsetDeleteResult(exc.error)
        if outcome.error is not ErrorCode.NONE:
            return OffsetDeleteResponse(error_code=outcome.error.code, throttle_time_ms=0, topics=[])
        results += [(r.topic, r.partition, r.error) for r in outcome.partitions]
        T = OffsetDeleteResponse.OffsetDeleteResponseTopic
        by_topic: dict[str, list[Any]] = {}
        for topic, part, error in results:
            by_topic.setdefault(topic, []).append(T.OffsetDeleteResponsePartition(partition_index=part,
                                                                                  error_code=error.code))
        return OffsetDeleteResponse(error_code=0, throttle_time_ms=0,
                                    topics=[T(name=n, partitions=ps) for n, ps in by_topic.items()])

    async def _fetch_offsets(self, req: Request, group_id: str, wanted: list[tuple[str, list[int]]] | None
                             ) -> tuple[ErrorCode, dict[str, list[g.FetchedOffset]]]:
        """A group's committed offsets (DESCRIBE on the group); a topic the principal may not
        DESCRIBE is TOPIC_AUTHORIZATION_FAILED when named and left out when all are asked, as Kafka."""
        try:
            partition, hosted = await self._coordinator(group_id, self._may(req, AclOperation.DESCRIBE, group_id))
        except NotCoordinator as exc:
            return exc.error, {}
        body = req.body
        if req.api_version >= 7 and body.require_stable and self.unstable(partition, hosted.leader_epoch, group_id):
            # a transaction's offsets for this group wait on its outcome (read_committed consumers retry)
            return ErrorCode.UNSTABLE_OFFSET_COMMIT, {}
        tps = None if wanted is None else [g.TopicPartition(t, p) for t, ps in wanted for p in ps]
        result = hosted.coordinator.fetch_offsets(group_id, tps)
        denied = self.auth.denied(req, AclOperation.DESCRIBE, TOPIC, (f.topic for f in result.partitions))
        parts: dict[str, list[g.FetchedOffset]] = {}
        for f in result.partitions:
            if f.topic in denied:
                if wanted is None:
                    continue
                f = g.FetchedOffset(f.topic, f.partition, -1, -1, "", ErrorCode.TOPIC_AUTHORIZATION_FAILED)
            parts.setdefault(f.topic, []).append(f)
        return result.error, parts

    # ------------------------------------------------------------------ admin
    async def describe_groups(self, req: Request) -> ApiMessage:
        body: DescribeGroupsRequest = req.body
        D = DescribeGroupsResponse.DescribedGroup
        # the authorizer's answers (authorization.py), for the groups described
        with_ops = req.api_version >= 3 and body.include_authorized_operations
        out = []
        for group_id in body.groups:
            ops = self.auth.operations(req, GROUP, group_id) if with_ops else None
            try:
                _p, hosted = await self._coordinator(group_id, self._may(req, AclOperation.DESCRIBE, group_id))
                (d,) = hosted.coordinator.describe([group_id])
                out.append(D(error_code=d.error.code, group_id=d.group_id, group_state=d.state.value,
                             protocol_type=d.protocol_type, protocol_data=d.protocol_data, members=[
                                 D.DescribedGroupMember(member_id=m.member_id, group_instance_id=m.group_instance_id,
                                                        client_id=m.client_id, client_host=m.client_host,
                                                        member_metadata=m.metadata, member_assignment=m.assignment)
                                 for m in d.members],
                             authorized_operations=ops if d.error is ErrorCode.NONE else None))
            except NotCoordinator as exc:
                out.append(D(error_code=exc.error.code, group_id=group_id, group_state="", protocol_type="",
                             protocol_data="", members=[]))
        return DescribeGroupsResponse(throttle_time_ms=0, groups=out)

    async def list_groups(self, req: Request) -> ApiMessage:
        body: ListGroupsRequest = req.body
        v = req.api_version
        states = frozenset(body.states_filter) if v >= 4 and body.states_filter else None
        types = frozenset(body.types_filter) if v >= 5 and body.types_filter else None
        n = self._num_partitions() or 0
        listed: list[Any] = []
        for partition in range(n):
            try:
                hosted = await self._hosted_for(partition)
            except NotCoordinator:
                continue  # another broker leads it: ListGroups goes to every broker
            listed += hosted.coordinator.list_all_groups(states, types)
        if not self.auth.allows_cluster(req, AclOperation.DESCRIBE):  # else only the groups it may DESCRIBE
            listed = [x for x in listed if self._may(req, AclOperation.DESCRIBE, x.group_id)]
        L = ListGroupsResponse.ListedGroup
        return ListGroupsResponse(throttle_time_ms=0, error_code=0, groups=[
            L(group_id=x.group_id, protocol_type=x.protocol_type, group_state=x.state, group_type=x.group_type)
            for x in listed])

    async def delete_groups(self, req: Request) -> ApiMessage:
        body: DeleteGroupsRequest = req.body
        R_ = DeleteGroupsResponse.DeletableGroupResult
        out = []
        for group_id in body.groups_names:
            try:
                partition, hosted = await self._coordinator(group_id, self._may(req, AclOperation.DELETE, group_id))
                (d,) = await self._run(partition, hosted, _delete_group_call(group_id))
                out.append(R_(group_id=group_id, error_code=d.error.code))
            except NotCoordinator as exc:
                out.append(R_(group_id=group_id, error_code=exc.error.code))
        return DeleteGroupsResponse(throttle_time_ms=0, results=out)


def _next_offset(data: bytes) -> int:
    last = 0
    for info in batches.iter_batches(data):
        last = info.next_offset
    return last


__all__ = ["GroupApis", "OFFSETS_TOPIC", "kafka_error"]


def _encode(record: Any) -> tuple[bytes, bytes | None]:
    if isinstance(record, g.GroupRecord.__args__):  # type: ignore[attr-defined]
        return g.encode_group_record(record)
    return encode_consumer_record(record)


def _delete_group_call(group_id: str) -> Callable[[PartitionCoordinator, int], g.Effects[tuple[g.DeletedGroup, ...]]]:
    """The coordinator call deleting one group (a closure per group: the loop variable is not shared)."""
    def call(coordinator: PartitionCoordinator, now_ms: int) -> g.Effects[tuple[g.DeletedGroup, ...]]:
        return coordinator.delete_groups([group_id], now_ms)
    return call
