"""An in-process controller: the pure operations, a replay loop and an in-memory log.

It behaves like the active controller of the quorum without Raft or HTTP: each write runs
against the current image, its records are appended to the log (offsets from 0) and replayed,
and the reply is returned. Fast tests and the deterministic simulation drive it with a manual
clock; ``listeners`` see every committed batch with its delta, as a broker's log follower would.
"""
from __future__ import annotations

from typing import Any, Callable

from metadata_quorum.controller_result import ControllerResult, OpContext
from metadata_quorum.delta import MetadataDelta
from metadata_quorum.image import EMPTY_IMAGE, MetadataImage
from metadata_quorum.operations import run_read, run_write
from metadata_quorum.records import Record, decode_record, encode_record

BatchListener = Callable[[int, list[Record], MetadataDelta, MetadataImage], None]


class LocalController:
    def __init__(
        self,
        clock_ms: Callable[[], int],
        session_timeout_ms: int = 9000,
        reelection_timeout_ms: int = 2000,
        controller_id: int = 0,
        epoch: int = 1,
        check_encoding: bool = True,
    ) -> None:
        self.clock_ms = clock_ms
        self.session_timeout_ms = session_timeout_ms
        self.reelection_timeout_ms = reelection_timeout_ms
        self.controller_id = controller_id
        self.epoch = epoch
        self.check_encoding = check_encoding
        self.image: MetadataImage = EMPTY_IMAGE
        self.log: list[tuple[int, Record]] = []
        #: broker id -> last heartbeat (ms); volatile, like the active controller's.
        self.last_heartbeat_ms: dict[int, int] = {}
        self.listeners: list[BatchListener] = []
        #: when this controller became active (brokers not heard from since count as heard then)
        self.active_since_ms: int = clock_ms()

    def fail_over(self) -> None:
        """Act as a newly elected controller: heartbeat times are lost, activation is now."""
        self.last_heartbeat_ms.clear()
        self.active_since_ms = self.clock_ms()

    @property
    def next_offset(self) -> int:
        return len(self.log)

    def context(self) -> OpContext:
        return OpContext(
            now_ms=self.clock_ms(),
            next_offset=self.next_offset,
            controller_id=self.controller_id,
            last_heartbeat_ms=dict(self.last_heartbeat_ms),
            session_timeout_ms=self.session_timeout_ms,
            reelection_timeout_ms=self.reelection_timeout_ms,
            active_since_ms=self.active_since_ms,
        )

    def run(self, op: str, args: dict[str, Any] | None = None) -> ControllerResult:
        """Run a write op and commit its records; returns the whole result (records and reply)."""
        ctx = self.context()
        result = run_write(self.image, op, args or {}, ctx)
        self.append(list(result.records))
        if op in ("register_broker", "broker_heartbeat"):
            self.last_heartbeat_ms[int((args or {})["broker_id"])] = ctx.now_ms
        return result

    def write(self, op: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
        return self.run(op, args).reply

    def read(self, op: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
        return run_read(self.image, op, args or {})

    def tick(self) -> dict[str, Any]:
        return self.write("tick", {})

    def append(self, records: list[Record]) -> None:
        """Commit records: assign offsets, replay them, notify listeners."""
        if not records:
            return
        if self.check_encoding:
            records = [decode_record(encode_record(r)) for r in records]
        base = self.next_offset
        delta = MetadataDelta(self.image)
        for i, record in enumerate(records):
            self.log.append((base + i, record))
            delta.replay(record, offset=base + i, epoch=self.epoch)
        self.image = delta.apply()
        for listener in list(self.listeners):
            listener(base, records, delta, self.image)

    def records_from(self, offset: int, max_records: int | None = None) -> list[tuple[int, Record]]:
        end = len(self.log) if max_records is None else min(len(self.log), offset + max_records)
        return self.log[max(offset, 0):end]
