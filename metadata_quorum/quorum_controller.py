"""The active controller's write path (Kafka's QuorumController, on asyncio).

The leader runs write operations one at a time against its *view*: the committed image plus the
records it has appended but not yet seen committed. Operations queued together are run back to
back and their record batches go to Raft as one command (group commit), each operation's
records staying one atomic batch. Up to ``max_inflight_commands`` commands are pipelined; an
operation is answered once its command is applied. An operation that returns no records is
answered once everything written before it has committed, so no answer reveals uncommitted state.

A new leader first commits a NoOpRecord carrying its term; only then does it serve writes.
When leadership is lost — or a command is rejected or times out — the view is dropped and
rebuilt from the committed image.
"""
from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import queue
import threading
import time
from collections import deque
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Callable

from metadata_quorum.backpressure import admit, retry_after_ms as queue_retry_after_ms, throttled
from metadata_quorum.config import ControllerConfig
from metadata_quorum.controller_result import ControllerResult, OpContext
from metadata_quorum.errors import ErrorCode, FerryError
from metadata_quorum.raft import (AppliedCommand, Command, CommandPlan, CommittedLog, RaftPeer, advance_image,
                                  encode_batch, split_commands)
from metadata_quorum.records import NoOpRecord, Record

log = logging.getLogger(__name__)

WriteOp = Callable[[Any, dict[str, Any], OpContext], ControllerResult]

# Served before anything else queued, and never refused for load: a broker whose heartbeat waits
# behind a large move is fenced, and fencing moves its partitions (more load, more fencing).
PRIORITY_OPERATIONS = frozenset({"broker_heartbeat", "register_broker"})
PRIORITY_EXTRA_INFLIGHT = 16  # commands priority operations may add beyond max_inflight_commands
# An event loop late this long for the tick held up the heartbeats waiting to be read: that time
# is credited to every broker's session (``extend_sessions``).
SESSION_CREDIT_MIN_MS = 100


@dataclass
class PendingOp:
    name: str
    args: dict[str, Any]
    future: asyncio.Future[tuple[dict[str, Any], int]]
    internal: bool = False


@dataclass
class _Inflight:
    answers: list[tuple[PendingOp, dict[str, Any], int]]
    submitted_s: float
    is_noop: bool = False


@dataclass
class ObserverState:
    """A broker as the leader sees it through heartbeats (KRaft observers)."""

    metadata_offset: int = -1
    last_fetch_ms: int = 0
    last_caught_up_ms: int = 0


def now_ms() -> int:
    return int(time.time() * 1000)


def not_controller(leader_id: int | None, leader_url: str | None, why: str) -> FerryError:
    return FerryError(ErrorCode.NOT_CONTROLLER, why, {"leader_id": leader_id if leader_id is not None else -1,
                                                      "leader_url": leader_url})


class QuorumController:
    """Owns the leader's uncommitted view and the queue of write operations."""

    def __init__(self, config: ControllerConfig, state: CommittedLog, operations: dict[str, WriteOp],
                 loop: asyncio.AbstractEventLoop,
                 on_commit_latency: Callable[[float], None] | None = None) -> None:
        self.config = config
        self.state = state
        self.operations = operations
        self.loop = loop
        self.node: RaftPeer | None = None
        self.on_commit_latency = on_commit_latency
        self.is_leader = False
        self.active = False
        self.epoch = -1
        self._active_event = asyncio.Event()
        self._view: Any = None
        self._view_last_id = ""
        self._queue: deque[PendingOp] = deque()
        self._priority: deque[PendingOp] = deque()
        self._op_cost_ms = 0.05  # moving average of one operation's run time on the leader
        self.shed_ops = 0  # operations refused with THROTTLING_QUOTA_EXCEEDED
        self._wakeup = asyncio.Event()
        self._inflight: dict[str, _Inflight] = {}
        self._needs_reset = False
        self._noop_pending = False
        self._ids = itertools.count()
        self._commit_waiters: list[tuple[int, int, asyncio.Future[None]]] = []
        self._waiter_ids = itertools.count()
        self.log_changed = asyncio.Event()
        self.log_waiters = 0  # long-polls waiting for the log to grow
        self._applied_pending: deque[AppliedCommand] = deque()
        self._drain_scheduled = False
        self.last_heartbeat_ms: dict[int, int] = {}
        self.observers: dict[int, ObserverState] = {}
        self.voter_caught_up_ms: dict[int, int] = {}
        self._writer: asyncio.Task[None] | None = None
        self._encoder = CommandEncoder(loop, self._submit_encoded)

    # -- wiring with the Raft node's reader -----------------------------------------------------------

    def on_applied_threadsafe(self, applied: AppliedCommand) -> None:
        """Called on the thread reading the Raft process after each applied command; wakes the
        event loop only when someone waits (the leader's writes, long-polls), and once for a run of
        commands (a follower's loop has nothing to do for a commit nobody waits for). A long-poll registers in ``log_waiters`` before it reads the high
        watermark, and this reads ``log_waiters`` after the state changed, so no wake-up is lost.
        """
        if not self.is_leader and not self.log_waiters:
            return
        self._applied_pending.append(applied)
        if not self._drain_scheduled:
            self._drain_scheduled = True
            self.loop.call_soon_threadsafe(self._drain_applied)

    def _drain_applied(self) -> None:
        self._drain_scheduled = False
        while self._applied_pending:
            self._on_applied(self._applied_pending.popleft())

    def on_state_changed_threadsafe(self, old_state: int, new_state: int) -> None:
        self.loop.call_soon_threadsafe(self._on_state_changed)

    def start(self, node: RaftPeer) -> None:
        self.node = node
        self._writer = self.loop.create_task(self._write_loop())

    async def stop(self) -> None:
        if self._writer is not None:
            self._writer.cancel()
            try:
                await self._writer
            except asyncio.CancelledError:
                pass
        self._resign("the controller is shutting down")
        self._encoder.stop()

    # -- public API --------------------------------------------------------------------------------

    def leader_hint(self) -> tuple[int | None, str | None]:
        leader_id = self.node.leader_id() if self.node is not None else None
        if leader_id is None or leader_id not in self.config.controllers:
            return None, None
        return leader_id, self.config.controllers[leader_id].url

    def submit(self, name: str, args: dict[str, Any],
               budget_ms: int | None = None) -> asyncio.Future[tuple[dict[str, Any], int]]:
        """Queue one write operation; the future gets its reply and its batch's last committed offset.

        ``budget_ms`` is how long the caller waits: an operation the queue ahead would keep longer
        is refused now with a retry-after (``backpressure.admit``)."""
        self._check_op(name, args)
        self._check_leader()
        if name not in PRIORITY_OPERATIONS:
            self._admit(name, budget_ms)
        return self._enqueue(name, args)

    def submit_many(self, items: list[tuple[str, dict[str, Any]]],
                    budget_ms: int) -> list[asyncio.Future[tuple[dict[str, Any], int]]]:
        """Queue several independent operations at once; each future holds its answer or refusal."""
        for name, args in items:
            self._check_op(name, args)
        self._check_leader()
        wanted = sum(1 for name, _ in items if name not in PRIORITY_OPERATIONS)
        decision = admit(len(self._queue), self._op_cost_ms, wanted, budget_ms, self.config.max_queued_ops)
        futures = []
        admitted = 0
        for name, args in items:
            if name not in PRIORITY_OPERATIONS:
                if admitted >= decision.admitted:
                    self.shed_ops += 1
                    refused: asyncio.Future[tuple[dict[str, Any], int]] = self.loop.create_future()
                    refused.set_exception(throttled(name, len(self._queue), decision.retry_after_ms))
                    futures.append(refused)
                    continue
                admitted += 1
            futures.append(self._enqueue(name, args))
        return futures

    def _check_op(self, name: str, args: Any) -> None:
        if name not in self.operations:
            raise FerryError(ErrorCode.INVALID_REQUEST, f"unknown write operation {name!r}; known: {sorted(self.operations)}")
        if not isinstance(args, dict):
            raise FerryError(ErrorCode.INVALID_REQUEST, f"the arguments of {name} must be a JSON object")

    def _enqueue(self, name: str, args: dict[str, Any]) -> asyncio.Future[tuple[dict[str, Any], int]]:
        if name == "broker_heartbeat":
            self._note_arrival(args)
        fut: asyncio.Future[tuple[dict[str, Any], int]] = self.loop.create_future()
        (self._priority if name in PRIORITY_OPERATIONS else self._queue).append(PendingOp(name, args, fut))
        self._wakeup.set()
        return fut

    def _admit(self, name: str, budget_ms: int | None) -> None:
        """Refuse work the queue ahead would keep past ``budget_ms``, with a hint of when it will have room."""
        budget = self.config.request_timeout_ms if budget_ms is None else budget_ms
        decision = admit(len(self._queue), self._op_cost_ms, 1, budget, self.config.max_queued_ops)
        if decision.admitted:
            return
        self.shed_ops += 1
        raise throttled(name, len(self._queue), decision.retry_after_ms)

    def retry_after_ms(self) -> int:
        """About the time the queue ahead takes to run (bounded)."""
        return queue_retry_after_ms(len(self._queue), self._op_cost_ms)

    async def write(self, name: str, args: dict[str, Any], timeout_s: float) -> tuple[dict[str, Any], int]:
        """Run one write operation; returns its reply and the last offset of its committed batch."""
        fut = self.submit(name, args, int(timeout_s * 1000))
        try:
            return await asyncio.wait_for(asyncio.shield(fut), timeout_s)
        except asyncio.TimeoutError:
            fut.cancel()
            raise self.timed_out(name, timeout_s) from None

    def timed_out(self, name: str, timeout_s: float) -> FerryError:
        if not self.is_leader:
            leader_id, url = self.leader_hint()
            return not_controller(leader_id, url, f"controller {self.config.node_id} lost leadership")
        return FerryError(ErrorCode.REQUEST_TIMED_OUT, f"{name} was not committed within {int(timeout_s * 1000)} ms")

    @property
    def queue_depth(self) -> int:
        """Operations waiting to run plus those run and waiting for their command to commit."""
        return len(self._queue) + len(self._priority) + sum(len(f.answers) for f in self._inflight.values())

    def _check_leader(self) -> None:
        if not self.is_leader:
            leader_id, url = self.leader_hint()
            if leader_id == self.config.node_id:
                leader_id, url = None, None
            raise not_controller(leader_id, url, f"controller {self.config.node_id} is not the active controller")

    def _note_arrival(self, args: dict[str, Any]) -> None:
        """A heartbeat of a registered broker incarnation renews its session when it *arrives*.

        Run, it may wait: behind commands in flight when Raft commits slowly, behind a long group.
        Counting it only then fenced live brokers of a busy controller, and fencing moves their
        partitions (more load, more fencing). The lease argument holds: the broker's lease runs
        from when it *sent* the heartbeat, before it arrived here.
        """
        broker_id, broker_epoch = args.get("broker_id"), args.get("broker_epoch")
        if type(broker_id) is not int or type(broker_epoch) is not int:
            return  # the operation itself reports the bad input
        reg = self.state.image.cluster.brokers.get(broker_id)
        if reg is not None and reg.broker_epoch == broker_epoch:
            self.last_heartbeat_ms[broker_id] = max(self.last_heartbeat_ms.get(broker_id, 0), now_ms())

    def _note_heartbeat(self, args: dict[str, Any]) -> None:
        try:
            broker_id = int(args["broker_id"])
            metadata_offset = int(args.get("metadata_offset", -1))
        except (KeyError, TypeError, ValueError):
            return  # the operation itself reports the bad input
        now = now_ms()
        self.last_heartbeat_ms[broker_id] = now
        obs = self.observers.setdefault(broker_id, ObserverState())
        obs.metadata_offset = metadata_offset
        obs.last_fetch_ms = now
        if metadata_offset + 1 >= self.state.high_watermark:
            obs.last_caught_up_ms = now

    def enqueue_internal(self, name: str) -> None:
        """Queue an operation run by the controller itself (``tick``) unless one is already queued."""
        if not self.active or name not in self.operations:
            return
        if any(p.internal and p.name == name for p in self._queue):
            return
        fut: asyncio.Future[tuple[dict[str, Any], int]] = self.loop.create_future()
        fut.add_done_callback(_log_internal_failure)
        self._queue.append(PendingOp(name, {}, fut, internal=True))
        self._wakeup.set()

    # -- leadership ----------------------------------------------------------------------------------

    def _on_state_changed(self) -> None:
        assert self.node is not None
        leader_now = self.node.is_leader
        if leader_now and self.is_leader and self.node.term != self.epoch:
            self._resign(f"controller {self.config.node_id} was re-elected in a new term")
        if leader_now and not self.is_leader:
            self.is_leader = True
            self.active = False
            self._active_event.clear()
            self.epoch = self.node.term
            self._inflight.clear()
            self._needs_reset = True
            self._noop_pending = True
            log.info("controller %d became leader in term %d", self.config.node_id, self.epoch)
            self._wakeup.set()
        elif not leader_now and self.is_leader:
            self._resign(f"controller {self.config.node_id} lost leadership")

    def _resign(self, why: str) -> None:
        was_leader = self.is_leader
        self.is_leader = False
        self.active = False
        self._active_event.clear()
        self._view = None
        self._noop_pending = False
        leader_id, url = self.leader_hint()
        if leader_id == self.config.node_id:
            leader_id, url = None, None
        err = not_controller(leader_id, url, why)
        for queue in (self._priority, self._queue):
            while queue:
                op = queue.popleft()
                if not op.future.done():
                    op.future.set_exception(err)
        for inflight in self._inflight.values():
            for op, _reply, _offset in inflight.answers:
                if not op.future.done():
                    op.future.set_exception(err)
        self._inflight.clear()
        self.state.forget_expected()
        for _offset, _id, fut in self._commit_waiters:
            if not fut.done():
                fut.set_exception(err)
        self._commit_waiters.clear()
        self.last_heartbeat_ms.clear()
        if was_leader:
            log.info("controller %d resigned: %s", self.config.node_id, why)

    # -- applied commands ----------------------------------------------------------------------------

    def _on_applied(self, applied: AppliedCommand) -> None:
        changed, self.log_changed = self.log_changed, asyncio.Event()
        changed.set()
        inflight = self._inflight.pop(applied.command_id, None)
        if inflight is not None:
            if applied.accepted:
                latency = time.perf_counter() - inflight.submitted_s
                if self.on_commit_latency is not None:
                    self.on_commit_latency(latency)
                for op, reply, offset in inflight.answers:
                    if not op.future.done():
                        op.future.set_result((reply, offset))
                if inflight.is_noop and self.is_leader:
                    self.active = True
                    self._active_event.set()
                    self._start_broker_sessions()
                    log.info("controller %d is active in term %d at offset %d", self.config.node_id,
                             self.epoch, applied.next_offset - 1)
            else:
                self._fail_inflight(inflight, "the command was computed against a log view that did not commit")
                if inflight.is_noop:
                    self._noop_pending = True
                self._needs_reset = True
        committed = applied.next_offset - 1
        while self._commit_waiters and self._commit_waiters[0][0] <= committed:
            _offset, _id, fut = heapq.heappop(self._commit_waiters)
            if not fut.done():
                fut.set_result(None)
        self._wakeup.set()

    def extend_sessions(self, held_ms: float) -> None:
        """Credit ``held_ms`` to every broker's session: time this controller could not read heartbeats.

        A heartbeat sent while the loop was held (a long operation, a busy machine) waited unread in a socket buffer; without
        the credit the next ``tick`` would fence brokers for the controller's own silence and move
        their partitions (more load). Fencing later never breaks the lease argument (a broker stops
        acknowledging when its own lease runs out); a broker that really died is fenced that much later.
        """
        credit = int(held_ms)
        for broker_id in self.last_heartbeat_ms:
            self.last_heartbeat_ms[broker_id] += credit

    def _start_broker_sessions(self) -> None:
        """A new active controller gives every unfenced broker a full session (heartbeats are not
        records, so it cannot know when they last beat): one that died meanwhile is fenced on time."""
        now = now_ms()
        for broker_id, reg in self.state.image.cluster.brokers.items():
            if not reg.fenced:
                self.last_heartbeat_ms.setdefault(broker_id, now)

    def _fail_inflight(self, inflight: _Inflight, why: str) -> None:
        leader_id, url = self.leader_hint()
        err = not_controller(leader_id, url, why)
        for op, _reply, _offset in inflight.answers:
            if not op.future.done():
                op.future.set_exception(err)

    def _on_raft_callback(self, command_id: str, result: Any, fail_reason: int, why: str = "") -> None:
        if fail_reason == 0:
            return  # answered by _on_applied
        inflight = self._inflight.pop(command_id, None)
        if inflight is None:
            return
        self._fail_inflight(inflight, why or f"Raft did not commit the command (pysyncobj reason {fail_reason})")
        if inflight.is_noop:
            self._noop_pending = True
        self._needs_reset = True
        self._wakeup.set()

    def expire_inflight(self) -> None:
        """Fail commands not committed within ``commit_timeout_ms`` (a timed-out command may still commit)."""
        deadline = time.perf_counter() - self.config.commit_timeout_ms / 1000
        for command_id in [c for c, f in self._inflight.items() if f.submitted_s < deadline]:
            inflight = self._inflight.pop(command_id)
            for op, _reply, _offset in inflight.answers:
                if not op.future.done():
                    op.future.set_exception(FerryError(
                        ErrorCode.REQUEST_TIMED_OUT,
                        f"not committed within {self.config.commit_timeout_ms} ms; it may still commit"))
            if inflight.is_noop:
                self._noop_pending = True
            self._needs_reset = True
            self._wakeup.set()

    # -- the writer ----------------------------------------------------------------------------------

    async def _write_loop(self) -> None:
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            try:
                more = self._pump(time.perf_counter() + self.config.write_slice_ms / 1000)
            except Exception:
                log.exception("controller write loop failed; dropping the uncommitted view")
                self._needs_reset = True
                more = False
            if more:
                # Out of time with work left: let the loop read its sockets (heartbeats wait there,
                # and run first once read), then go on.
                self._wakeup.set()
                await asyncio.sleep(0)

    def _pump(self, deadline_s: float = float("inf")) -> bool:
        """Run queued operations until nothing can run or ``deadline_s`` passes; True if work is left.

        Thousands of queued stream operations take seconds to run; run at once, they would keep
        the event loop from reading anything, heartbeats included, and brokers would be fenced
        for a busy controller.
        """
        while self.is_leader:
            if time.perf_counter() >= deadline_s:
                return True
            if self._needs_reset:
                if self._inflight:
                    return False  # wait until every command in flight is answered
                self.state.forget_expected()
                self._view, self._view_last_id = self.state.committed_view()
                self._needs_reset = False
                self._fail_waiters_beyond(self._view.offset)
            if self._noop_pending and len(self._inflight) < self.config.max_inflight_commands:
                self._noop_pending = False
                self._submit_noop()
                continue
            if not self.active:
                return False
            if self._priority and \
                    len(self._inflight) < self.config.max_inflight_commands + PRIORITY_EXTRA_INFLIGHT:
                self._run_group(priority_only=len(self._inflight) >= self.config.max_inflight_commands,
                                deadline_s=deadline_s)
                continue
            if len(self._inflight) >= self.config.max_inflight_commands or not self._queue:
                return False
            self._run_group(deadline_s=deadline_s)
        return False

    def _submit_noop(self) -> None:
        record = NoOpRecord(term=self.epoch, leader_id=self.config.node_id)
        next_offset = self._view.offset + 1
        self._view = advance_image(self._view, [record], next_offset, self.epoch)
        self._submit([(record,)], _Inflight([], time.perf_counter(), is_noop=True))

    def _next_op(self, priority_only: bool) -> PendingOp | None:
        if self._priority:
            return self._priority.popleft()
        if self._queue and not priority_only:
            return self._queue.popleft()
        return None

    def _run_group(self, priority_only: bool = False, deadline_s: float = float("inf")) -> None:
        view = self._view
        batches: list[tuple[Record, ...]] = []
        answers: list[tuple[PendingOp, dict[str, Any], int]] = []
        records_in_group = 0
        ops_in_group = 0
        started = time.perf_counter()
        heartbeats = MappingProxyType(self.last_heartbeat_ms)  # live: a heartbeat earlier in the group counts
        while ops_in_group < self.config.max_group_ops and records_in_group < self.config.max_group_records:
            if ops_in_group and not self._priority and time.perf_counter() >= deadline_s:
                break
            op = self._next_op(priority_only)
            if op is None:
                break
            if op.future.done():
                continue
            ops_in_group += 1
            next_offset = view.offset + 1
            ctx = OpContext(now_ms=now_ms(), next_offset=next_offset, controller_id=self.config.node_id,
                            last_heartbeat_ms=heartbeats, session_timeout_ms=self.config.session_timeout_ms,
                            reelection_timeout_ms=self.config.reelection_timeout_ms)
            try:
                result = self.operations[op.name](view, op.args, ctx)
                records = tuple(result.records)
                new_view = advance_image(view, list(records), next_offset, self.epoch) if records else view
            except FerryError as e:
                op.future.set_exception(e)
                continue
            except Exception as e:  # a bug in an operation must not take the controller down
                log.exception("operation %s failed", op.name)
                op.future.set_exception(FerryError(ErrorCode.UNKNOWN_SERVER_ERROR, f"{op.name} failed: {e!r}"))
                continue
            if op.name == "broker_heartbeat":
                self._note_heartbeat(op.args)  # only a heartbeat the operation accepted (current broker epoch)
            if records:
                view = new_view
                batches.append(records)
                records_in_group += len(records)
                answers.append((op, dict(result.reply), view.offset))
            elif view.offset <= self.state.high_watermark - 1 and not batches:
                op.future.set_result((dict(result.reply), view.offset))
            elif op.name == "broker_heartbeat" and self._session_committed(view, op.args):
                # nothing uncommitted concerns this broker: its answer is the committed state's
                hw = self.state.high_watermark
                op.future.set_result((dict(result.reply, metadata_high_watermark=hw), hw - 1))
            else:
                self._answer_after_commit(op, dict(result.reply), view.offset)
        if ops_in_group:
            group_ms = (time.perf_counter() - started) * 1000
            self._op_cost_ms = 0.8 * self._op_cost_ms + 0.2 * group_ms / ops_in_group
        if batches:
            try:
                self._view = view
                self._submit(batches, _Inflight(answers, time.perf_counter()))
            except Exception as e:
                log.exception("could not append a command; dropping the uncommitted view")
                for op, _reply, _offset in answers:
                    if not op.future.done():
                        op.future.set_exception(FerryError(ErrorCode.UNKNOWN_SERVER_ERROR, f"append failed: {e!r}"))
                self._needs_reset = True

    def _session_committed(self, view: Any, args: dict[str, Any]) -> bool:
        """The broker's registration in the view is the committed one (no change to it in flight)."""
        broker_id = int(args["broker_id"])
        committed = self.state.image.cluster.brokers.get(broker_id)
        return committed is not None and committed is view.cluster.brokers.get(broker_id)

    def _fail_waiters_beyond(self, committed_offset: int) -> None:
        keep = []
        for item in self._commit_waiters:
            if item[0] > committed_offset:
                if not item[2].done():
                    item[2].set_exception(not_controller(*self.leader_hint(), "the log view was dropped; retry"))
            else:
                keep.append(item)
        heapq.heapify(keep)
        self._commit_waiters = keep

    def _answer_after_commit(self, op: PendingOp, reply: dict[str, Any], offset: int) -> None:
        waiter: asyncio.Future[None] = self.loop.create_future()

        def done(f: asyncio.Future[None]) -> None:
            if op.future.done():
                return
            if f.exception() is not None:
                op.future.set_exception(f.exception())  # type: ignore[arg-type]
            else:
                op.future.set_result((reply, offset))

        waiter.add_done_callback(done)
        heapq.heappush(self._commit_waiters, (offset, next(self._waiter_ids), waiter))

    def _submit(self, batches: list[tuple[Record, ...]], inflight: _Inflight) -> None:
        """Send a group's batches as one command, or as a chain of bounded ones (``split_commands``).

        Every command of a chain names the one before it, so they apply in order or not at all
        past a gap; the answers and the leader's image ride on the last one. The records are
        encoded on the encoder thread (tens of thousands take seconds), which hands each command
        back to the loop, in order, to be submitted.
        """
        assert self.node is not None
        plans = split_commands(batches, self.config.max_command_records)
        for i, plan in enumerate(plans):
            last = i == len(plans) - 1
            command_id = f"{self.config.node_id}.{self.epoch}.{next(self._ids)}"
            if last:
                self.state.expect(command_id, self._view)
            self._encoder.put(command_id, self._view_last_id, self.epoch, plan)
            self._view_last_id = command_id
            self._inflight[command_id] = inflight if last else _Inflight([], inflight.submitted_s)

    def _submit_encoded(self, command: Command | None, command_id: str, error: str) -> None:
        """On the loop, in the order commands were planned: hand one to Raft (or fail it)."""
        assert self.node is not None
        if command is None:
            self._on_raft_callback(command_id, None, -1, error)
            return
        if command_id not in self._inflight:
            return  # planned in a term this controller no longer leads (its answers already failed)
        loop = self.loop

        def callback(result: Any, fail_reason: int) -> None:
            if fail_reason != 0:
                loop.call_soon_threadsafe(self._on_raft_callback, command_id, result, fail_reason)

        self.node.submit(command, callback)

    # -- replication status -------------------------------------------------------------------------

    def sample_voters(self) -> dict[int, dict[str, int]]:
        """Per voter: log end offset, last fetch time and last caught-up time (leader only)."""
        assert self.node is not None
        now = now_ms()
        hw = self.state.high_watermark
        out: dict[int, dict[str, int]] = {}
        status: dict[str, Any] = {}
        if self.is_leader:
            status = self.node.status()
        responses = self.node.last_response_monotonic() if self.is_leader else {}
        mono_now = time.monotonic()
        for nid, peer in sorted(self.config.controllers.items()):
            if nid == self.config.node_id:
                leo, fetch_ms = hw, now
            else:
                match = status.get(f"match_idx_server_{peer.raft}")
                if match is None:
                    continue
                leo = min(hw, self.state.committed_offset_at_raft_index(int(match)))
                seen = responses.get(peer.raft)
                fetch_ms = int(now - (mono_now - seen) * 1000) if seen is not None else -1
            if leo >= hw:
                self.voter_caught_up_ms[nid] = now
            out[nid] = {"log_end_offset": leo, "last_fetch_ms": fetch_ms,
                        "last_caught_up_ms": self.voter_caught_up_ms.get(nid, -1)}
        return out


class CommandEncoder:
    """Encodes planned commands on a thread of its own and hands them back to the loop in order.

    Encoding is the costliest step of a large operation (60,000 records: about 2 s here); on the
    loop it would hold up every request, heartbeats included. On a thread the interpreter still
    switches to the loop every few hundred microseconds, so requests keep being read and answered.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop,
                 deliver: Callable[[Command | None, str, str], None]) -> None:
        self._loop = loop
        self._deliver = deliver
        self._queue: queue.SimpleQueue[tuple[str, str, int, CommandPlan] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="command-encoder", daemon=True)
        self._thread.start()

    def put(self, command_id: str, prev: str, epoch: int, plan: CommandPlan) -> None:
        self._queue.put((command_id, prev, epoch, plan))

    def stop(self) -> None:
        self._queue.put(None)

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            command_id, prev, epoch, plan = item
            command: Command | None = None
            error = ""
            try:
                command = Command(command_id, prev, epoch, tuple(encode_batch(b) for b in plan.batches if b),
                                  continues=plan.continues, open_last=plan.open_last)
            except Exception as e:
                log.exception("could not encode command %s", command_id)
                error = f"could not encode the command: {e!r}"
            try:
                self._loop.call_soon_threadsafe(self._deliver, command, command_id, error)
            except RuntimeError:
                return  # the loop is closed


def _log_internal_failure(fut: asyncio.Future[Any]) -> None:
    if fut.cancelled():
        return
    exc = fut.exception()
    if exc is not None and not (isinstance(exc, FerryError) and exc.error is ErrorCode.NOT_CONTROLLER):
        log.warning("internal controller operation failed: %s", exc)
