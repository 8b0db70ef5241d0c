"""AllocateProducerIds: a broker takes the next block of producer ids (KRaft's
ProducerIdControlManager).

Producer ids must be unique across the cluster and never reused, or a new idempotent or
transactional producer would inherit another's sequence numbers and epoch on some partition and
have its batches refused (or, worse, taken as duplicates). Kafka's brokers take them in blocks of
1,000 from the controller, which records the next unallocated id in the metadata log; a block is
never handed out twice, even when the broker that took it dies before using it (the ids are
skipped, as in Kafka). One write per thousand producers keeps the controller off the path of
InitProducerId.
"""
from __future__ import annotations

from typing import Any

from metadata_quorum.controller_result import ControllerResult, OpContext
from metadata_quorum.image import MetadataImage
from metadata_quorum.kernel.errors import ErrorCode, FerryError
from metadata_quorum.kernel.validation import req_int
from metadata_quorum.ops.cluster import check_broker_epoch
from metadata_quorum.records import ProducerIdsRecord

#: Kafka's ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE
BLOCK_SIZE = 1000
#: producer ids are Kafka int64s; the last block must end at or below Long.MAX_VALUE
MAX_PRODUCER_ID = 2 ** 63 - 1


def allocate_producer_ids(image: MetadataImage, args: dict[str, Any], ctx: OpContext) -> ControllerResult:
    """``{"broker_id", "broker_epoch"}`` -> ``{"producer_id_start", "producer_id_len"}``.

    The broker must be registered at that epoch (``STALE_BROKER_EPOCH`` otherwise): a fenced
    incarnation's request is refused rather than given a block it cannot use."""
    broker_id = req_int(args, "broker_id", 0)
    broker_epoch = req_int(args, "broker_epoch")
    check_broker_epoch(image, broker_id, broker_epoch)
    start = image.next_producer_id
    if start > MAX_PRODUCER_ID - BLOCK_SIZE + 1:
        raise FerryError(ErrorCode.UNKNOWN_SERVER_ERROR, "Exhausted all producerIds as the next block's end "
                                                         f"producerId would exceed {MAX_PRODUCER_ID}")
    record = ProducerIdsRecord(broker_id=broker_id, broker_epoch=broker_epoch, next_producer_id=start + BLOCK_SIZE)
    return ControllerResult((record,), {"producer_id_start": start, "producer_id_len": BLOCK_SIZE})


__all__ = ["BLOCK_SIZE", "MAX_PRODUCER_ID", "allocate_producer_ids"]
