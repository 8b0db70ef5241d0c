"""Transactions on an s3 partition through the real Replica, PartitionManager and StreamStorage
(in process): transactional batches, markers, the last stable offset, read_committed reads and
the aborted index, and all of it after a clean move and after the owner died."""
from __future__ import annotations

import asyncio
from typing import Any

import pytest

from metadata_quorum.kernel.errors import ErrorCode, FerryError
from stream_storage import batches
from tests.broker.test_move_inprocess import InProcessCluster, cluster  # noqa: F401 - the fixture


def txn(value: bytes, pid: int, seq: int, epoch: int = 0, transactional: bool = True) -> tuple[bytes, Any]:
    body = batches.build_batch([(None, value)], timestamp_ms=1, producer_id=pid, producer_epoch=epoch,
                               base_sequence=seq, transactional=transactional)
    return body, batches.validate_batches(body)


async def put(slot: Any, value: bytes, pid: int, seq: int, epoch: int = 0, transactional: bool = True) -> int:
    body, infos = txn(value, pid, seq, epoch, transactional)
    base, _ = await slot.replica.append(body, infos)
    return int(base)


async def committed_values(slot: Any) -> list[bytes]:
    """What a read_committed consumer gets: below the LSO, control batches and aborted
    transactions' records skipped (by the aborted list each fetch answers, as clients do)."""
    r = slot.replica
    out: list[bytes] = []
    offset = r.log_start_offset
    while offset < r.last_stable_offset:
        data = await r.fetch(offset, 1 << 20, 0, read_committed=True)
        infos = list(batches.iter_batches(data))
        assert infos and infos[-1].next_offset <= r.last_stable_offset
        aborted = r.aborted_transactions(offset, infos[-1].next_offset)
        for info in infos:
            skip = info.is_control or any(a.producer_id == info.producer_id and a.first_offset <= info.base_offset
                                          <= a.last_offset for a in aborted)
            if not skip:
                one = data[info.position: info.position + info.size_bytes]
                out += [rec.value for rec in batches.read_records(one) if rec.value is not None]
        offset = infos[-1].next_offset
    return out


def state(slot: Any) -> tuple[int, int, list[tuple[int, int, int]], dict[int, int]]:
    r = slot.replica
    return (r.last_stable_offset, r.high_watermark,
            [(a.producer_id, a.first_offset, a.last_offset) for a in r.aborted_transactions(0, r.high_watermark)],
            dict(r.txns.open))


async def write_history(slot: Any) -> None:
    """pid 1 aborted, pid 2 committed, pid 3 left open, with plain records between."""
    r = slot.replica
    assert await put(slot, b"a0", 1, 0) == 0
    assert await put(slot, b"b0", 2, 0) == 1
    assert await put(slot, b"a1", 1, 1) == 2
    assert await put(slot, b"plain0", -1, -1, -1, False) == 3
    assert r.last_stable_offset == 0  # pid 1's transaction holds it back
    assert await r.fetch(0, 1 << 20, 0, read_committed=True) == b""
    assert await r.append_marker(1, 0, False, 5) == 4
    assert r.last_stable_offset == 1  # pid 2's is still open
    assert await r.append_marker(2, 0, True, 5) == 5
    assert await put(slot, b"c0", 3, 0) == 6
    assert await put(slot, b"plain1", -1, -1, -1, False) == 7
    assert r.last_stable_offset == 6


EXPECTED = (6, 8, [(1, 0, 4)], {3: 6})


async def test_transactions_on_one_partition(cluster: InProcessCluster) -> None:  # noqa: F811
    c = cluster
    c.controller.write("create_topics", {"topics": [{"name": "x", "num_partitions": 1, "replication_factor": 1,
                                                     "assignments": {"0": [1]}}]})
    slot = await c.serving(1, "x", 0)
    r = slot.replica
    await write_history(slot)
    assert state(slot) == EXPECTED
    assert await committed_values(slot) == [b"b0", b"plain0"]
    # read_uncommitted still reads to the high watermark
    assert [rec.value for rec in batches.read_records(await r.fetch(0, 1 << 20, 0))][-1] == b"plain1"
    # a long poll at the LSO wakes when a marker moves it
    waiting = asyncio.ensure_future(r.fetch(6, 1 << 20, 5000, read_committed=True))
    await asyncio.sleep(0.05)
    assert not waiting.done()
    # fencing: an older producer epoch, an older coordinator epoch, a plain batch inside a transaction
    # (pid 1's last marker came from coordinator epoch 5)
    for call, code in [(lambda: r.append_marker(1, 0, True, 4), ErrorCode.TRANSACTION_COORDINATOR_FENCED),
                       (lambda: put(slot, b"no", 3, 1, transactional=False), ErrorCode.INVALID_TXN_STATE)]:
        with pytest.raises(FerryError) as e:
            await call()
        assert e.value.error is code
    assert await r.append_marker(3, 0, True, 6) == 8
    assert (await waiting) != b"" and r.last_stable_offset == 9
    assert await put(slot, b"c1", 3, 0, epoch=1) == 9  # the producer's next epoch (its new transaction)
    for zombie in (lambda: r.append_marker(3, 0, False, 6), lambda: put(slot, b"zombie", 3, 1, epoch=0)):
        with pytest.raises(FerryError) as e:
            await zombie()
        assert e.value.error is ErrorCode.INVALID_PRODUCER_EPOCH
    assert r.high_watermark == 10  # nothing refused was written


async def test_transaction_state_survives_the_owners_death_and_a_clean_move(tmp_path) -> None:  # type: ignore[no-untyped-def]
    c = await InProcessCluster(str(tmp_path), brokers=3).start()
    try:
        await survive(c)
    finally:
        await c.stop()


async def survive(c: InProcessCluster) -> None:
    c.controller.write("create_topics", {"topics": [{"name": "m", "num_partitions": 1, "replication_factor": 1,
                                                     "assignments": {"0": [1]}}]})
    slot = await c.serving(1, "m", 0)
    await write_history(slot)
    # the owner dies (no close): the next one rebuilds the state from the data stream's tail,
    # recognising the markers there
    c.controller.listeners.remove(c.listeners[1])
    c.skew_ms += 5000
    for bid in (2, 3):
        epoch = c.controller.image.cluster.brokers[bid].broker_epoch
        c.controller.write("broker_heartbeat", {"broker_id": bid, "broker_epoch": epoch, "metadata_offset": 10**9})
    c.controller.tick()
    owner = c.controller.image.topics.by_id[c.controller.image.topics.by_name["m"]].partitions[0].leader
    assert owner in (2, 3)
    rebuilt = await c.serving(owner, "m", 0)
    assert c.managers[owner].moves("m", 0)[0].clean is False
    assert state(rebuilt) == EXPECTED
    retry, retry_infos = txn(b"c0", 3, 0)
    assert await rebuilt.replica.append(retry, retry_infos) == (6, 6)  # a duplicate: the original offsets
    assert rebuilt.replica.high_watermark == 8
    assert await committed_values(rebuilt) == [b"b0", b"plain0"]
    assert await put(rebuilt, b"c1", 3, 1) == 8
    # a clean move: the state travels in the meta snapshot
    target = 5 - owner
    c.controller.write("alter_partition_reassignments",
                       {"reassignments": [{"topic": "m", "partition": 0, "replicas": [target]}]})
    moved = await c.serving(target, "m", 0)
    assert state(moved) == (6, 9, [(1, 0, 4)], {3: 6})
    again, again_infos = txn(b"c1", 3, 1)
    assert await moved.replica.append(again, again_infos) == (8, 8)
    assert moved.replica.high_watermark == 9  # nothing written twice
    with pytest.raises(FerryError) as e:  # the coordinator epoch of pid 2's marker is known here
        await moved.replica.append_marker(2, 0, True, 4)
    assert e.value.error is ErrorCode.TRANSACTION_COORDINATOR_FENCED
    assert await moved.replica.append_marker(3, 0, False, 5) == 9
    assert state(moved) == (10, 10, [(1, 0, 4), (3, 6, 9)], {})
    assert await committed_values(moved) == [b"b0", b"plain0", b"plain1"]
