"""An in-process controller: the production state machine over a log that commits at once.

It is ``ControllerCore`` — the same queue, view, sessions and activation the quorum's active
controller runs — driven synchronously: a write is submitted, run, its command applied to an
in-memory committed log (``raft.CommittedLog``, the same apply rule) and answered before
``write`` returns. Construction makes it leader of ``epoch``, which commits a NoOpRecord at
offset 0, as a newly elected quorum controller does. Fast tests and tools drive it with a manual
clock; ``listeners`` see every committed batch with its delta, as a broker's log follower would.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping, cast

from metadata_quorum.controller_core import (Answer, ControllerCore, CoreConfig, FixedSlice, Outcome,
                                             Refusal, Token, to_command)
from metadata_quorum.controller_result import ControllerResult, OpContext
from metadata_quorum.delta import MetadataDelta
from metadata_quorum.kernel.errors import ErrorCode, FerryError
from metadata_quorum.image import EMPTY_IMAGE, MetadataImage
from metadata_quorum.kernel.messages import TICK, Operation, ReplyT, RequestT
from metadata_quorum.operations import WRITE_OPERATIONS, run_read
from metadata_quorum.raft import AppliedCommand, CommittedLog
from metadata_quorum.records import Record, decode_record

BatchListener = Callable[[int, list[Record], MetadataDelta, MetadataImage], None]

KEEP_ALL_RECORDS = 1 << 62  # the in-process log never drops old batches


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
        self.check_encoding = check_encoding  # records always travel encoded now; kept for callers
        self.state = CommittedLog(KEEP_ALL_RECORDS)
        self.core = ControllerCore(CoreConfig(node_id=controller_id, session_timeout_ms=session_timeout_ms,
                                              reelection_timeout_ms=reelection_timeout_ms),
                                   self.state, WRITE_OPERATIONS)
        #: the committed image, replayed from the committed records (as a broker would)
        self.image: MetadataImage = EMPTY_IMAGE
        self.log: list[tuple[int, Record]] = []
        self.listeners: list[BatchListener] = []
        self._outcomes: dict[Token, Outcome] = {}
        self.core.became_leader(epoch, clock_ms())
        self._drive()

    def fail_over(self) -> None:
        """Act as a newly elected controller: heartbeat times are lost, activation is now (the new
        leader's NoOpRecord commits first)."""
        self.core.lost_leadership(f"controller {self.controller_id} failed over")
        self.epoch += 1
        self.core.became_leader(self.epoch, self.clock_ms())
        self._drive()

    @property
    def last_heartbeat_ms(self) -> dict[int, int]:
        """broker id -> last heartbeat (ms); volatile, like the active controller's."""
        return self.core.sessions.last_heartbeat_ms

    @property
    def active_since_ms(self) -> int | None:
        return self.core.active_since_ms

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
        token = self.core.submit(op, args if args is not None else {}, self.clock_ms())
        self._drive()
        outcome = self._outcomes.pop(token)
        if isinstance(outcome, Answer):
            return ControllerResult(outcome.records, outcome.reply)
        if isinstance(outcome, Refusal):
            raise outcome.error
        raise FerryError(ErrorCode.NOT_CONTROLLER, outcome.why, {"leader_id": -1, "leader_url": None})

    def write(self, op: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
        return dict(self.run(op, args).reply)

    def read(self, op: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
        return dict(run_read(self.image, op, args or {}))

    def call(self, op: Operation[RequestT, ReplyT], request: RequestT) -> ReplyT:
        """A typed call of one operation (a write or a read, as its kind says), synchronously; the
        asynchronous facade over this controller is ``ControllerApi(LocalTransport(controller))``."""
        args = dict(request)
        reply = self.write(op.name, args) if op.kind == "write" else self.read(op.name, args)
        return cast(ReplyT, reply)

    def tick(self) -> dict[str, Any]:
        return self.write(TICK.name, {})

    def _drive(self) -> None:
        """Run what is queued and commit every command at once, until the core has nothing left."""
        while True:
            now_ms = self.clock_ms()
            self.core.run(FixedSlice(now_ms))
            ready = self.core.take_ready()
            if not ready:
                return
            for planned in ready.commands:
                applied = self.state.apply_committed(to_command(planned))
                self._replay(applied)
                self.core.committed(applied, now_ms)
            for outcome in ready.outcomes:
                self._outcomes[outcome.token] = outcome

    def _replay(self, applied: AppliedCommand) -> None:
        """Replay the batches a command added, as a follower of the log does, and notify listeners."""
        if not applied.accepted or applied.next_offset == applied.first_offset:
            return
        piece = self.state.read(applied.first_offset, applied.next_offset - applied.first_offset)
        records = [decode_record(r) for offset, r in piece.records if offset < applied.next_offset]
        self._append(records, applied.epoch)

    def _append(self, records: list[Record], epoch: int) -> None:
        """Replay committed records onto the image and the log; notify listeners."""
        if not records:
            return
        base = self.next_offset
        delta = MetadataDelta(self.image)
        for i, record in enumerate(records):
            self.log.append((base + i, record))
            delta.replay(record, offset=base + i, epoch=epoch)
        self.image = delta.apply()
        for listener in list(self.listeners):
            listener(base, records, delta, self.image)

    def records_from(self, offset: int, max_records: int | None = None) -> list[tuple[int, Record]]:
        end = len(self.log) if max_records is None else min(len(self.log), offset + max_records)
        return self.log[max(offset, 0):end]


class LocalTransport:
    """A ``LocalController`` as the typed facade's transport (``kernel/controller_api.py``).
    ``timeout_ms`` does not apply: the in-process controller answers before the call returns."""

    def __init__(self, controller: LocalController) -> None:
        self.controller = controller

    async def write(self, op: str, args: Mapping[str, Any], timeout_ms: int | None = None) -> Mapping[str, Any]:
        return self.controller.write(op, dict(args))

    async def read(self, op: str, args: Mapping[str, Any], timeout_ms: int | None = None) -> Mapping[str, Any]:
        return self.controller.read(op, dict(args))
