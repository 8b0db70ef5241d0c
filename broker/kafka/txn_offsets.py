"""TxnOffsetCommit: a transaction's consumed offsets, held by the group coordinator until the
transaction ends (Kafka's pending transactional offset commits).

The offsets are checked against the group when they arrive (member and generation, as an
OffsetCommit) and kept pending under the producer id on the group's ``__consumer_offsets``
partition. The transaction coordinator's commit marker on that partition
(``txn_marker_apis.OnTxnMarker``) stores them as committed offsets; an abort marker drops them.
While any are pending for a group, an OffsetFetch with ``require_stable`` (read_committed
consumers) answers UNSTABLE_OFFSET_COMMIT, so a consumer taking over a partition waits for the
transaction's outcome instead of reading an offset it is about to replace.

The pending offsets live in this broker's memory, bound to the leader epoch at which it
coordinates the partition: if that partition changes owner (or its owner is killed) between a
TxnOffsetCommit and the transaction's commit marker, the marker finds none and the transaction
commits its records without its offsets, which are then read again (at least once for that one
window, not exactly once).
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
from broker.kafka.group_apis import GroupApis, NotCoordinator
from broker.kafka.wire import Request
from metadata_quorum.acls import AclOperation
from metadata_quorum.kernel.errors import ErrorCode

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
