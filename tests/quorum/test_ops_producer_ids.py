"""AllocateProducerIds: blocks of 1,000 producer ids, never handed out twice, only to a live incarnation."""
from __future__ import annotations

from metadata_quorum.image import MetadataImage
from metadata_quorum.kernel.errors import ErrorCode
from metadata_quorum.ops.producer_ids import BLOCK_SIZE, MAX_PRODUCER_ID
from metadata_quorum.records import ProducerIdsRecord
from tests.quorum.quorum_helpers import controller, epoch_of, expect_error, run


def test_blocks_follow_each_other_and_survive_a_snapshot() -> None:
    image = controller(2).image
    first = run(image, "allocate_producer_ids", {"broker_id": 0, "broker_epoch": epoch_of(image, 0)})
    assert first.reply == {"producer_id_start": 0, "producer_id_len": BLOCK_SIZE}
    second = run(first.image, "allocate_producer_ids", {"broker_id": 1, "broker_epoch": epoch_of(image, 1)})
    assert second.reply == {"producer_id_start": BLOCK_SIZE, "producer_id_len": BLOCK_SIZE}
    assert second.image.next_producer_id == 2 * BLOCK_SIZE
    rebuilt = MetadataImage.from_records(second.image.to_records())
    assert rebuilt.same_content(second.image) and rebuilt.next_producer_id == 2 * BLOCK_SIZE
    third = run(rebuilt, "allocate_producer_ids", {"broker_id": 0, "broker_epoch": epoch_of(image, 0)})
    assert third.reply["producer_id_start"] == 2 * BLOCK_SIZE


def test_a_stale_or_unknown_broker_gets_nothing_and_changes_nothing() -> None:
    image = controller(1).image
    err = expect_error(image, "allocate_producer_ids", {"broker_id": 0, "broker_epoch": epoch_of(image, 0) - 1},
                       ErrorCode.STALE_BROKER_EPOCH)
    assert "current registration" in err.message
    expect_error(image, "allocate_producer_ids", {"broker_id": 7, "broker_epoch": 1}, ErrorCode.BROKER_ID_NOT_REGISTERED)
    expect_error(image, "allocate_producer_ids", {"broker_id": 0}, ErrorCode.INVALID_REQUEST)
    assert image.next_producer_id == 0


def test_the_last_block_ends_at_kafkas_largest_producer_id() -> None:
    image = controller(1).image
    last_start = MAX_PRODUCER_ID - BLOCK_SIZE + 1
    near_end = run(image, "allocate_producer_ids", {"broker_id": 0, "broker_epoch": epoch_of(image, 0)})
    from metadata_quorum.delta import MetadataDelta
    delta = MetadataDelta(near_end.image)
    delta.replay(ProducerIdsRecord(broker_id=0, broker_epoch=epoch_of(image, 0), next_producer_id=last_start))
    at_end = delta.apply()
    assert run(at_end, "allocate_producer_ids", {"broker_id": 0, "broker_epoch": epoch_of(image, 0)}).reply == \
        {"producer_id_start": last_start, "producer_id_len": BLOCK_SIZE}
    delta = MetadataDelta(at_end)
    delta.replay(ProducerIdsRecord(broker_id=0, broker_epoch=epoch_of(image, 0), next_producer_id=last_start + 1))
    err = expect_error(delta.apply(), "allocate_producer_ids", {"broker_id": 0, "broker_epoch": epoch_of(image, 0)},
                       ErrorCode.UNKNOWN_SERVER_ERROR)
    assert "Exhausted all producerIds" in err.message


def test_the_in_process_controller_allocates_through_its_log() -> None:
    c = controller(1)
    replies = [c.write("allocate_producer_ids", {"broker_id": 0, "broker_epoch": epoch_of(c.image, 0)})
               for _ in range(3)]
    assert [r["producer_id_start"] for r in replies] == [0, BLOCK_SIZE, 2 * BLOCK_SIZE]
