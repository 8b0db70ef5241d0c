"""The coordinator's side of WriteTxnMarkers: the markers of one transaction, sent to each
partition's leader over the Kafka protocol, until every partition has its own.

Partitions are grouped by the leader this broker's metadata image names; each leader gets one
request (kafka-python's generated ``WriteTxnMarkersRequest``, v1). What a partition answers decides
what happens to it (:func:`marker_outcome`, pure): written, retried after a back-off (no leader,
a leader that moved, a timeout: as Kafka's TransactionMarkerChannelManager), or dropped (the topic
is gone, or a newer coordinator or producer epoch fenced this one; Kafka stops there too). A send
returns once no partition is left to retry.
"""
from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import Callable, Iterable
from enum import Enum

from kafka.protocol.producer.transaction import WriteTxnMarkersRequest, WriteTxnMarkersResponse

from broker.kafka.data_apis import kafka_endpoints
from broker.txn.state import MarkerJob, TopicPartition
from metadata_quorum.image import MetadataImage
from metadata_quorum.kernel.backoff import STEP_BACKOFF
from metadata_quorum.kernel.errors import ErrorCode

log = logging.getLogger("ferry.broker.kafka.txn_markers")

MARKERS_VERSION = 1
SEND_TIMEOUT_S = 10.0
_LENGTH = struct.Struct(">i")


class Outcome(Enum):
    WRITTEN = "WRITTEN"
    RETRY = "RETRY"
    DROPPED = "DROPPED"


def marker_outcome(error: ErrorCode) -> Outcome:
    """What one partition's answer to a marker means for the coordinator."""
    if error is ErrorCode.NONE:
        return Outcome.WRITTEN
    if error in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.INVALID_PRODUCER_EPOCH,
                 ErrorCode.TRANSACTION_COORDINATOR_FENCED, ErrorCode.CLUSTER_AUTHORIZATION_FAILED):
        return Outcome.DROPPED
    return Outcome.RETRY


def leaders_of(image: MetadataImage | None, partitions: Iterable[TopicPartition]
               ) -> tuple[dict[int, list[TopicPartition]], list[TopicPartition], list[TopicPartition]]:
    """(partitions by leader node, partitions without a live leader now, partitions that no longer exist)."""
    by_leader: dict[int, list[TopicPartition]] = {}
    leaderless: list[TopicPartition] = []
    gone: list[TopicPartition] = []
    live = kafka_endpoints(image) if image is not None else {}
    for topic, partition in sorted(partitions):
        topic_id = image.topics.by_name.get(topic) if image is not None else None
        reg = image.topics.partition(topic_id, partition) if image is not None and topic_id is not None else None
        if reg is None:
            (gone if image is not None and topic_id is None else leaderless).append((topic, partition))
        elif reg.leader in live:
            by_leader.setdefault(reg.leader, []).append((topic, partition))
        else:
            leaderless.append((topic, partition))
    return by_leader, leaderless, gone


class MarkerSender:
    def __init__(self, image: Callable[[], MetadataImage | None], client_id: str) -> None:
        self._image = image
        self._client_id = client_id
        self._correlation_id = 0

    async def send(self, job: MarkerJob, coordinator_epoch: int) -> None:
        """Every partition of ``job`` has its marker (or was dropped) when this returns."""
        remaining = set(job.partitions)
        attempt = 0
        while remaining:
            by_leader, leaderless, gone = leaders_of(self._image(), remaining)
            remaining -= set(gone)
            answers = await asyncio.gather(*(self._send_to(node, job, parts, coordinator_epoch)
                                             for node, parts in by_leader.items()))
            retry = set(leaderless)
            for answer in answers:
                for tp, error in answer.items():
                    outcome = marker_outcome(error)
                    if outcome is Outcome.RETRY:
                        retry.add(tp)
                    elif outcome is Outcome.DROPPED:
                        log.warning("marker for producer %d on %s-%d dropped: %s", job.producer_id, tp[0], tp[1],
                                    error.name)
            remaining &= retry
            if remaining:
                await asyncio.sleep(STEP_BACKOFF.delay_s(attempt))
                attempt += 1

    async def _send_to(self, node: int, job: MarkerJob, partitions: list[TopicPartition],
                       coordinator_epoch: int) -> dict[TopicPartition, ErrorCode]:
        endpoint = kafka_endpoints(self._image()).get(node) if self._image() is not None else None
        failed = {tp: ErrorCode.NOT_LEADER_OR_FOLLOWER for tp in partitions}
        if endpoint is None:
            return failed
        by_topic: dict[str, list[int]] = {}
        for topic, partition in partitions:
            by_topic.setdefault(topic, []).append(partition)
        M = WriteTxnMarkersRequest.WritableTxnMarker
        request = WriteTxnMarkersRequest[MARKERS_VERSION](markers=[M(
            producer_id=job.producer_id, producer_epoch=job.producer_epoch, transaction_result=job.commit,
            topics=[M.WritableTxnMarkerTopic(name=t, partition_indexes=ps) for t, ps in by_topic.items()],
            coordinator_epoch=coordinator_epoch)])
        self._correlation_id = (self._correlation_id + 1) & 0x7FFF_FFFF
        request.with_header(correlation_id=self._correlation_id, client_id=self._client_id)
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(endpoint.host, endpoint.port),
                                                    SEND_TIMEOUT_S)
            try:
                writer.write(bytes(request.encode(header=True, framed=True)))
                (size,) = _LENGTH.unpack(await asyncio.wait_for(reader.readexactly(4), SEND_TIMEOUT_S))
                frame = await asyncio.wait_for(reader.readexactly(size), SEND_TIMEOUT_S)
            finally:
                writer.close()
        except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError) as exc:
            log.info("markers to broker %d: %r", node, exc)
            return failed
        answer = WriteTxnMarkersResponse.decode(frame, version=MARKERS_VERSION, header=True)
        out: dict[TopicPartition, ErrorCode] = {}
        for marker in answer.markers:
            for topic in marker.topics:
                for p in topic.partitions:
                    out[(topic.name, p.partition_index)] = ErrorCode.from_code(p.error_code)
        return {tp: out.get(tp, ErrorCode.UNKNOWN_SERVER_ERROR) for tp in partitions}


__all__ = ["MarkerSender", "Outcome", "leaders_of", "marker_outcome"]
