"""WriteTxnMarkers (ApiKey 27): a transaction coordinator ends a transaction on the partitions it
touched, each sent to the partition's leader.

For each marker (producer id and epoch, commit or abort, coordinator epoch) and each of its
partitions, the leader appends the control batch and ends the producer's transaction there
(:meth:`broker.replica.Replica.append_marker`; the decisions are broker/txn_state.py's). Each
partition answers its own error: INVALID_PRODUCER_EPOCH for an older producer epoch,
TRANSACTION_COORDINATOR_FENCED for a coordinator epoch older than the last one that wrote a
marker for the producer there, NOT_LEADER_OR_FOLLOWER / UNKNOWN_TOPIC_OR_PARTITION as a produce
does. The API is inter-broker: with the authorizer on, a principal without ClusterAction on the
cluster gets CLUSTER_AUTHORIZATION_FAILED on every partition and nothing is written.

After a marker is durable on a partition of ``__consumer_offsets``, :class:`OnTxnMarker` is
called with that partition, so that the group coordinator materialises (commit) or drops (abort)
the producer's pending transactional offset commits. A marker written again (a coordinator's
retry) calls it again: the callee treats a repeat as nothing to do.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Awaitable, Protocol

from kafka.protocol.api_message import ApiMessage
from kafka.protocol.producer.transaction import WriteTxnMarkersRequest, WriteTxnMarkersResponse

from broker.kafka.authorization import OPEN, Authorization
from broker.kafka.wire import Request
from metadata_quorum.acls import AclOperation
from metadata_quorum.kernel.errors import ErrorCode, FerryError

log = logging.getLogger("ferry.broker.kafka.txn_markers")

OFFSETS_TOPIC = "__consumer_offsets"


class OnTxnMarker(Protocol):
    """Told of each marker written on a partition of ``__consumer_offsets``."""

    async def __call__(self, partition: int, producer_id: int, commit: bool) -> None: ...


async def no_txn_marker_hook(partition: int, producer_id: int, commit: bool) -> None:
    """The default :class:`OnTxnMarker`: no group coordinator listens."""
    return None


class TxnMarkerCore(Protocol):
    """What WriteTxnMarkers needs of a broker (``broker.request_core.RequestCore`` provides it)."""

    def write_txn_marker(self, topic: str, partition: int, producer_id: int, producer_epoch: int,
                         commit: bool, coordinator_epoch: int) -> Awaitable[int]: ...


def kafka_error_of(exc: BaseException) -> ErrorCode:
    if isinstance(exc, FerryError):
        code = exc.error
        return ErrorCode.NOT_LEADER_OR_FOLLOWER if code.code >= 500 else code
    if isinstance(exc, asyncio.TimeoutError):
        return ErrorCode.REQUEST_TIMED_OUT
    return ErrorCode.UNKNOWN_SERVER_ERROR


class TxnMarkerApis:
    def __init__(self, core: TxnMarkerCore, auth: Authorization = OPEN,
                 on_txn_marker: OnTxnMarker = no_txn_marker_hook) -> None:
        self.core = core
        self.auth = auth
        self.on_txn_marker = on_txn_marker

    async def write_txn_markers(self, req: Request) -> ApiMessage:
        body: WriteTxnMarkersRequest = req.body
        allowed = self.auth.allows_cluster(req, AclOperation.CLUSTER_ACTION)
        MR = WriteTxnMarkersResponse.WritableTxnMarkerResult
        TR = MR.WritableTxnMarkerTopicResult
        PR = TR.WritableTxnMarkerPartitionResult
        markers = []
        for marker in body.markers:  # in order: a coordinator's later marker follows its earlier one
            topics = []
            for topic in marker.topics:
                if allowed:
                    codes = await asyncio.gather(*(
                        self._one(topic.name, p, marker.producer_id, marker.producer_epoch,
                                  bool(marker.transaction_result), marker.coordinator_epoch)
                        for p in topic.partition_indexes))
                else:
                    codes = [ErrorCode.CLUSTER_AUTHORIZATION_FAILED] * len(topic.partition_indexes)
                topics.append(TR(name=topic.name, partitions=[
                    PR(partition_index=p, error_code=c.code) for p, c in zip(topic.partition_indexes, codes,
                                                                             strict=True)]))
            markers.append(MR(producer_id=marker.producer_id, topics=topics))
        return WriteTxnMarkersResponse(markers=markers)

    async def _one(self, topic: str, partition: int, producer_id: int, producer_epoch: int, commit: bool,
                   coordinator_epoch: int) -> ErrorCode:
        try:
            await self.core.write_txn_marker(topic, partition, producer_id, producer_epoch, commit,
                                             coordinator_epoch)
        except Exception as exc:  # noqa: BLE001 - reported per partition, as Kafka does
            return kafka_error_of(exc)
        if topic == OFFSETS_TOPIC:
            try:
                await self.on_txn_marker(partition, producer_id, commit)
            except Exception:  # the marker is written; the coordinator's retry writes it (and calls) again
                log.exception("on_txn_marker(%d, %d, %s) failed", partition, producer_id, commit)
                return ErrorCode.UNKNOWN_SERVER_ERROR
        return ErrorCode.NONE
