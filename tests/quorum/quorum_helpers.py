"""Helpers for the pure-core quorum tests: build images through the operations, run one op,
replay its records, and look at the result."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from metadata_quorum.controller_result import OpContext
from metadata_quorum.delta import replay_records
from metadata_quorum.kernel.errors import ErrorCode, FerryError
from metadata_quorum.image import MetadataImage, PartitionRegistration
from metadata_quorum.local_controller import LocalController
from metadata_quorum.operations import WRITE_OPERATIONS
from metadata_quorum.records import Record

SESSION_TIMEOUT_MS = 9000
REELECTION_TIMEOUT_MS = 2000


class ManualClock:
    def __init__(self, now_ms: int = 1_000_000) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, ms: int) -> None:
        self.now_ms += ms


@dataclass
class Outcome:
    image: MetadataImage
    reply: dict[str, Any]
    records: tuple[Record, ...]


def make_ctx(image: MetadataImage, now_ms: int, heartbeats: dict[int, int] | None = None) -> OpContext:
    return OpContext(now_ms=now_ms, next_offset=image.offset + 1, last_heartbeat_ms=dict(heartbeats or {}),
                     session_timeout_ms=SESSION_TIMEOUT_MS, reelection_timeout_ms=REELECTION_TIMEOUT_MS)


def run(image: MetadataImage, op: str, args: dict[str, Any], now_ms: int = 1_000_000,
        heartbeats: dict[int, int] | None = None) -> Outcome:
    """Run one operation, replay its records onto the image, return the new image and the reply."""
    result = WRITE_OPERATIONS[op](image, args, make_ctx(image, now_ms, heartbeats))
    return Outcome(replay_records(image, result.records), result.reply, result.records)


def expect_error(image: MetadataImage, op: str, args: dict[str, Any], code: ErrorCode, now_ms: int = 1_000_000,
                 heartbeats: dict[int, int] | None = None) -> FerryError:
    with pytest.raises(FerryError) as info:
        WRITE_OPERATIONS[op](image, args, make_ctx(image, now_ms, heartbeats))
    assert info.value.error == code, info.value
    assert info.value.message
    return info.value


def log_dirs(broker_id: int, count: int = 2) -> list[dict[str, str]]:
    return [{"dir_id": f"b{broker_id}-d{i}", "path": f"/data/b{broker_id}/d{i}"} for i in range(count)]


def controller(brokers: int = 3, clock: ManualClock | None = None) -> LocalController:
    """A LocalController with ``brokers`` registered, caught-up, unfenced brokers 0..n-1."""
    clock = clock or ManualClock()
    c = LocalController(clock, session_timeout_ms=SESSION_TIMEOUT_MS, reelection_timeout_ms=REELECTION_TIMEOUT_MS)
    for b in range(brokers):
        add_broker(c, b)
    return c


def add_broker(c: LocalController, broker_id: int, incarnation: str | None = None) -> int:
    epoch = c.write("register_broker", {
        "broker_id": broker_id, "incarnation_id": incarnation or f"inc-{broker_id}",
        "endpoints": [f"http://127.0.0.1:{9000 + broker_id}"], "log_dirs": log_dirs(broker_id),
    })["broker_epoch"]
    reply = c.write("broker_heartbeat", {"broker_id": broker_id, "broker_epoch": epoch,
                                         "metadata_offset": c.image.offset})
    assert reply["is_fenced"] is False
    return int(epoch)


def heartbeat_all(c: LocalController) -> None:
    for b, reg in c.image.cluster.brokers.items():
        if not reg.fenced:
            c.write("broker_heartbeat", {"broker_id": b, "broker_epoch": reg.broker_epoch,
                                         "metadata_offset": c.image.offset})


def partition(image: MetadataImage, topic: str, index: int) -> PartitionRegistration:
    t = image.topics.get(topic)
    assert t is not None, topic
    return t.partitions[index]


def epoch_of(image: MetadataImage, broker_id: int) -> int:
    return image.cluster.brokers[broker_id].broker_epoch
