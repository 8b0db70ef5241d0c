"""TxnOffsetCommit: a transaction's consumed offsets, held by the group coordinator until the
transaction ends (Kafka's pending transactional offset commits).

The offsets are checked against the group when they arrive (member and generation, as an
OffsetCommit), written to the group's ``__consumer_offsets`` partition as Kafka writes them (offset
commit records in a transactional batch under the producer's id and epoch, acks=all) and kept
pending under the producer id. The transaction coordinator's marker on that partition decides
them: a commit makes them the group's committed offsets, an abort drops them
(``txn_marker_apis.OnTxnMarker`` here; ``groups.txn_log.replay`` when the partition is loaded
again, after a move or a crash, so the offsets of a transaction still open are pending again at
the new owner and a marker written meanwhile is not missed). While any are pending for a group,
an OffsetFetch with ``require_stable`` (read_committed consumers) answers UNSTABLE_OFFSET_COMMIT,
so a consumer taking over a partition waits for the transaction's outcome instead of reading an
offset it is about to replace.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from kafka.protocol.api_message import ApiMessage
from kafka.protocol.producer.transaction import TxnOffsetCommitRequest, TxnOffsetCommitResponse

from broker.groups import messages as g
from broker.groups.partition_coordinator import PartitionCoordinator
from broker.kafka.authorization import GROUP, TOPIC
from broker.groups.offsets import offset_record
from broker.groups.records import OffsetCommitRecord, encode_group_record
from broker.kafka.group_apis import OFFSETS_TOPIC, GroupApis, NotCoordinator
from broker.kafka.wire import Request
from metadata_quorum.acls import AclOperation
from metadata_quorum.kernel.errors import ErrorCode, FerryError
from stream_storage import batches

log = logging.getLogger("ferry.broker.kafka.txn_offsets")


@dataclass
class _Pending:
    leader_epoch: int
    # producer id -> (group id, topic, partition) -> the offset to commit with the transaction
    by_producer: dict[int, dict[tuple[str, str, int], g.OffsetCommitPartition]] = field(default_factory=dict)

    def groups_pending(self) -> set[str]:
        return {group for offsets in self.by_producer.values() for group, _t, _p in offsets}


class TxnOffsets:
    def __init__(self, groups: GroupApis) -> None:
        self.groups = groups
        self._pending: dict[int, _Pending] = {}  # __consumer_offsets partition -> its pending offsets
        groups.pending_loaded = self.restore

    def restore(self, partition: int, leader_epoch: int, pending: dict[int, list[Any]]) -> None:
        """The partition was loaded at ``leader_epoch``: its pending offsets are those its log holds
        in transactional batches no marker decided yet (nothing carried over from another term)."""
        held = self._pending[partition] = _Pending(leader_epoch)
        for producer_id, records in pending.items():
            for r in records:
                if isinstance(r, OffsetCommitRecord) and r.value is not None:
                    held.by_producer.setdefault(producer_id, {})[(r.group_id, r.topic, r.partition)] = \
                        g.OffsetCommitPartition(r.topic, r.partition, r.value.offset, r.value.leader_epoch,
                                                r.value.metadata)

    def _at(self, partition: int, leader_epoch: int) -> _Pending:
        pending = self._pending.get(partition)
        if pending is None or pending.leader_epoch != leader_epoch:  # a new term: nothing carried over
            pending = self._pending[partition] = _Pending(leader_epoch)
        return pending

    async def txn_offset_commit(self, req: Request) -> ApiMessage:
        body: TxnOffsetCommitRequest = req.body
        v = req.api_version
        wanted = [(t.name, p) for t in body.topics for p in t.partitions]
        errors: dict[tuple[str, int], ErrorCode] = {}
        auth = self.groups.auth
        if not auth.allows(req, AclOperation.READ, GROUP, body.group_id):
            errors = {(t, p.partition_index): ErrorCode.GROUP_AUTHORIZATION_FAILED for t, p in wanted}
        else:
            denied = auth.denied(req, AclOperation.READ, TOPIC, {t for t, _ in wanted})
            errors = {(t, p.partition_index): ErrorCode.TOPIC_AUTHORIZATION_FAILED for t, p in wanted if t in denied}
            allowed = [(t, p) for t, p in wanted if t not in denied]
            if allowed:
                error = await self._hold(body, v, allowed)
                errors.update({(t, p.partition_index): error for t, p in allowed})
        T = TxnOffsetCommitResponse.TxnOffsetCommitResponseTopic
        by_topic: dict[str, list[Any]] = {}
        for (topic, partition), error in errors.items():
            by_topic.setdefault(topic, []).append(T.TxnOffsetCommitResponsePartition(partition_index=partition,
                                                                                     error_code=error.code))
        return TxnOffsetCommitResponse(throttle_time_ms=0, topics=[T(name=n, partitions=ps)
                                                                   for n, ps in by_topic.items()])

    async def _hold(self, body: Any, v: int, offsets: Iterable[tuple[str, Any]]) -> ErrorCode:
        parts = [g.OffsetCommitPartition(t, p.partition_index, p.committed_offset,
                                         p.committed_leader_epoch if v >= 2 else g.NO_LEADER_EPOCH,
                                         p.committed_metadata) for t, p in offsets]
        request = g.OffsetCommitRequest(body.group_id, tuple(parts), body.member_id if v >= 3 else "",
                                        body.generation_id if v >= 3 else -1,
                                        body.group_instance_id if v >= 3 else None)
        try:
            partition, hosted = await self.groups._coordinator(body.group_id)
        except NotCoordinator as exc:
            return exc.error
        async with hosted.lock:
            error = hosted.coordinator.check_txn_offset_commit(request)
            if error is not ErrorCode.NONE:
                return error
            now_ms = self.groups.clock_ms()
            records = [offset_record(body.group_id, p.topic, p.partition, p.offset, p.leader_epoch, p.metadata, now_ms)
                       for p in parts]
            # sequence -1: the coordinator's own write, not one of the producer's sequenced batches
            batch = bytearray(batches.build_batch([encode_group_record(r) for r in records], timestamp_ms=now_ms,
                                                  producer_id=body.producer_id, producer_epoch=body.producer_epoch,
                                                  base_sequence=-1, transactional=True))
            try:
                await self.groups.core.append_records(OFFSETS_TOPIC, partition, batch, -1, coordinator=True)
            except FerryError as exc:
                log.warning("writing transactional offsets to %s-%d failed (%s); reloading", OFFSETS_TOPIC,
                            partition, exc)
                self.groups._drop(partition)  # what is durable decides: the next request reloads it
                return ErrorCode.NOT_COORDINATOR
            held = self._at(partition, hosted.leader_epoch).by_producer.setdefault(body.producer_id, {})
            for p in parts:
                held[(body.group_id, p.topic, p.partition)] = p
        return ErrorCode.NONE

    async def on_txn_marker(self, partition: int, producer_id: int, commit: bool) -> None:
        """A marker for ``producer_id`` is durable on ``__consumer_offsets-<partition>``."""
        try:
            hosted = await self.groups._hosted_for(partition)
        except NotCoordinator:
            return
        pending = self._at(partition, hosted.leader_epoch)
        held = pending.by_producer.get(producer_id)
        if not held:
            return
        if commit:
            by_group: dict[str, list[g.OffsetCommitPartition]] = {}
            for (group, _t, _p), offset in held.items():
                by_group.setdefault(group, []).append(offset)
            for group, offsets in by_group.items():
                await self.groups._run(partition, hosted, _committer(group, offsets))
        pending.by_producer.pop(producer_id, None)
        log.debug("%s %d pending offset(s) of producer %d", "committed" if commit else "dropped", len(held),
                  producer_id)

    def unstable(self, partition: int, leader_epoch: int, group_id: str) -> bool:
        """Offsets of ``group_id`` wait on a transaction's outcome (OffsetFetch ``require_stable``)."""
        pending = self._pending.get(partition)
        return pending is not None and pending.leader_epoch == leader_epoch and group_id in pending.groups_pending()


def _committer(group: str, offsets: list[g.OffsetCommitPartition]
               ) -> Callable[[PartitionCoordinator, int], g.Effects[g.OffsetCommitResult]]:
    def call(coordinator: PartitionCoordinator, now_ms: int) -> g.Effects[g.OffsetCommitResult]:
        return coordinator.commit_txn_offsets(group, offsets, now_ms)
    return call


__all__ = ["TxnOffsets"]
