"""The broker's producer ids: served from controller blocks, prefetched at 90%, never twice."""
from __future__ import annotations

import asyncio
from functools import partial

import pytest

from broker.producer_ids import Allocate, ProducerIdBlocks, ProducerIdManager
from metadata_quorum.kernel.errors import ErrorCode, FerryError
from metadata_quorum.kernel.messages.cluster import AllocateProducerIdsReply, AllocateProducerIdsRequest
from metadata_quorum.local_controller import LocalController
from metadata_quorum.ops.producer_ids import BLOCK_SIZE
from tests.quorum.quorum_helpers import controller, epoch_of


def test_blocks_serve_in_order_and_ask_for_the_next_at_ninety_percent() -> None:
    blocks = ProducerIdBlocks()
    assert blocks.take() is None and blocks.wants_prefetch()
    blocks.add({"producer_id_start": 1000, "producer_id_len": 10})
    taken = [blocks.take() for _ in range(9)]
    assert taken == list(range(1000, 1009))
    assert blocks.wants_prefetch()
    blocks.add({"producer_id_start": 3000, "producer_id_len": 10})
    assert not blocks.wants_prefetch()
    assert [blocks.take(), blocks.take(), blocks.take()] == [1009, 3000, 3001]


def test_an_older_block_is_never_served_and_a_bad_reply_is_an_error() -> None:
    blocks = ProducerIdBlocks()
    blocks.add({"producer_id_start": 2000, "producer_id_len": 5})
    blocks.add({"producer_id_start": 1000, "producer_id_len": 5})  # a late answer to an earlier request
    assert [blocks.take() for _ in range(6)] == [2000, 2001, 2002, 2003, 2004, None]
    with pytest.raises(FerryError) as info:
        blocks.add({"producer_id_start": -1, "producer_id_len": 5})
    assert info.value.error is ErrorCode.UNKNOWN_SERVER_ERROR


def _allocator(c: LocalController, calls: list[AllocateProducerIdsRequest]) -> Allocate:
    async def allocate(request: AllocateProducerIdsRequest) -> AllocateProducerIdsReply:
        calls.append(request)
        await asyncio.sleep(0)
        reply = c.write("allocate_producer_ids", dict(request))
        return {"producer_id_start": reply["producer_id_start"], "producer_id_len": reply["producer_id_len"]}
    return allocate


async def test_two_brokers_never_hand_out_the_same_id() -> None:
    c = controller(2)
    calls: list[AllocateProducerIdsRequest] = []
    managers = [ProducerIdManager(_allocator(c, calls), b, partial(epoch_of, c.image, b)) for b in (0, 1)]
    ids = await asyncio.gather(*(managers[i % 2].next_producer_id() for i in range(2 * BLOCK_SIZE + 50)))
    assert len(set(ids)) == len(ids)
    assert all(0 <= pid < 4 * BLOCK_SIZE for pid in ids)
    # one request per block (plus prefetches), not one per producer
    assert len(calls) <= 6


async def test_a_controller_that_cannot_answer_gives_a_retriable_error() -> None:
    async def refuse(request: AllocateProducerIdsRequest) -> AllocateProducerIdsReply:
        raise FerryError(ErrorCode.NOT_CONTROLLER, "no active controller")
    manager = ProducerIdManager(refuse, 0, lambda: 1)
    with pytest.raises(FerryError) as info:
        await manager.next_producer_id()
    assert info.value.error is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
