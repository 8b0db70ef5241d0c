"""Which move timelines a broker publishes in the metadata log's KV (broker/move_log.py)."""
from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from broker.metrics import BrokerMetrics
from broker.move_log import KV_MAX_PER_MOVE, MoveLog
from broker.move_timeline import ROLE_SOURCE, MoveHalf
from metadata_quorum.kernel.controller_api import ControllerWrites, WriteFunction


def make_log() -> tuple[MoveLog, list[tuple[str, dict[str, Any]]]]:
    written: list[tuple[str, dict[str, Any]]] = []
    image = SimpleNamespace(topics=SimpleNamespace(by_name={"t": "topic-id"}), kv={})

    async def write(op: str, args: dict[str, Any]) -> dict[str, Any]:
        written.append((op, args))
        return {}

    async def write_many(ops: list[tuple[str, dict[str, Any]]]) -> None:
        written.extend(ops)

    return MoveLog(1, BrokerMetrics(1), lambda: image, ControllerWrites(WriteFunction(write)), write_many, asyncio.ensure_future), written  # type: ignore[arg-type, return-value]


def half(partition: int, move_id: int) -> MoveHalf:
    h = MoveHalf(ROLE_SOURCE, "t", partition, move_id, 1)
    h.mark("t1", move_id + 1)
    return h


async def test_a_bulk_reassignment_publishes_no_timeline_however_slowly_its_halves_finish() -> None:
    log, written = make_log()
    halves = [half(p, 1_000) for p in range(KV_MAX_PER_MOVE + 1)]
    for h in halves:
        log.begin(h)
    log.finish(halves[0])  # the first to finish, alone in its second: still a bulk move's
    await asyncio.sleep(0.1)
    assert written == [] and log.unpublished == 1


async def test_single_moves_are_published() -> None:
    log, written = make_log()
    for p in range(3):  # three moves, each its own reassignment
        h = half(p, 1_000 + p)
        log.begin(h)
        log.finish(h)
    await asyncio.sleep(0.1)
    assert sorted(args["key"] for _op, args in written) == [f"move/topic-id/{p}/source/1" for p in range(3)]
    assert log.unpublished == 0
