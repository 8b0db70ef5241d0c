"""The active controller on asyncio and a Raft process: a driver of ``controller_core``.

The state machine — the queue of write operations, the leader's uncommitted view, the commands
in flight, broker sessions, activation after a NoOpRecord commits, timeouts and admission — is
``ControllerCore``, which reads no clock and touches no socket. This module feeds it events (a
request, a command applied, a change of leadership, the ticker) and carries out what it hands
back: commands go to the encoder thread and then to Raft, outcomes settle the callers' futures.
"""
from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable

from metadata_quorum.config import ControllerConfig
from metadata_quorum.controller_core import (PRIORITY_OPERATIONS, Answer, ControllerCore, CoreConfig,
                                             NotLeaderError, Outcome, Ready, Refusal, Token)
from metadata_quorum.controller_result import WriteOperation
from metadata_quorum.kernel.clock import mono_ms, wall_ms
from metadata_quorum.kernel.errors import ErrorCode, FerryError
from metadata_quorum.raft import AppliedCommand, Command, CommandPlan, CommittedLog, RaftPeer, encode_batch
from metadata_quorum.sessions import ObserverState

log = logging.getLogger(__name__)

WriteOp = WriteOperation
__all__ = ["PRIORITY_OPERATIONS", "ObserverState", "QuorumController", "SESSION_CREDIT_MIN_MS", "now_ms"]

# An event loop late this long for the tick held up the heartbeats waiting to be read: that time
# is credited to every broker's session (``extend_sessions``).
SESSION_CREDIT_MIN_MS = 100

Reply = tuple[dict[str, Any], int]


def now_ms() -> int:
    """The controller's session clock (sessions, commit timeouts, activation): monotonic, so a
    step of the wall clock neither fences a live broker nor keeps a dead one. Times written into
    records read ``wall_ms`` (``WorkSlice.wall_ms``)."""
    return mono_ms()


def not_controller(leader_id: int | None, leader_url: str | None, why: str) -> FerryError:
    return FerryError(ErrorCode.NOT_CONTROLLER, why, {"leader_id": leader_id if leader_id is not None else -1,
                                                      "leader_url": leader_url})


@dataclass
class _WallSlice:
    """The time one run of the core may take (``write_slice_ms``), and the two clocks it sees."""

    started_s: float
    deadline_s: float

    def now_ms(self) -> int:
        return now_ms()

    def wall_ms(self) -> int:
        return wall_ms()

    def elapsed_ms(self) -> float:
        return (time.perf_counter() - self.started_s) * 1000

    def expired(self) -> bool:
        return time.perf_counter() >= self.deadline_s


class QuorumController:
    """Drives the leader's state machine (``ControllerCore``) from asyncio and the Raft node."""

    def __init__(self, config: ControllerConfig, state: CommittedLog, operations: dict[str, WriteOp],
                 loop: asyncio.AbstractEventLoop,
                 on_commit_latency: Callable[[float], None] | None = None) -> None:
        self.config = config
        self.state = state
        self.loop = loop
        self.core = ControllerCore(CoreConfig.of(config), state, operations)
        self.node: RaftPeer | None = None
        self.on_commit_latency = on_commit_latency
        self._futures: dict[Token, asyncio.Future[Reply]] = {}
        self._planned_s: dict[str, float] = {}  # command id -> when planned (commit latency)
        self._wakeup = asyncio.Event()
        self.log_changed = asyncio.Event()
        self.log_waiters = 0  # long-polls waiting for the log to grow
        self._applied_pending: deque[AppliedCommand] = deque()
        self._drain_scheduled = False
        self.voter_caught_up_ms: dict[int, int] = {}
        self._writer: asyncio.Task[None] | None = None
        self._encoder = CommandEncoder(loop, self._submit_encoded)

    # -- the core's state, as the server reads it ---------------------------------------------------

    @property
    def operations(self) -> dict[str, WriteOp]:
        return self.core.operations  # type: ignore[return-value]

    @operations.setter
    def operations(self, operations: dict[str, WriteOp]) -> None:
        self.core.operations = operations

    @property
    def is_leader(self) -> bool:
        return self.core.is_leader

    @property
    def active(self) -> bool:
        return self.core.active

    @property
    def epoch(self) -> int:
        return self.core.epoch

    @property
    def shed_ops(self) -> int:
        return self.core.shed_ops

    @property
    def last_heartbeat_ms(self) -> dict[int, int]:
        return self.core.sessions.last_heartbeat_ms

    @property
    def observers(self) -> dict[int, ObserverState]:
        return self.core.sessions.observers

    @property
    def queue_depth(self) -> int:
        """Operations waiting to run plus those run and waiting for their command to commit."""
        return self.core.queue_depth

    def retry_after_ms(self) -> int:
        """About the time the queue ahead takes to run (bounded)."""
        return self.core.retry_after_ms()

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
        self.core.lost_leadership("the controller is shutting down")
        self._deliver(self.core.take_ready())
        self._encoder.stop()

    # -- public API --------------------------------------------------------------------------------

    def leader_hint(self) -> tuple[int | None, str | None]:
        leader_id = self.node.leader_id() if self.node is not None else None
        if leader_id is None or leader_id not in self.config.controllers:
            return None, None
        return leader_id, self.config.controllers[leader_id].url

    def submit(self, name: str, args: dict[str, Any], budget_ms: int | None = None) -> asyncio.Future[Reply]:
        """Queue one write operation; the future gets its reply and its batch's last committed offset.

        ``budget_ms`` is how long the caller waits: an operation the queue ahead would keep longer
        is refused now with a retry-after (``backpressure.admit``)."""
        try:
            token = self.core.submit(name, args, now_ms(), budget_ms)
        except NotLeaderError as e:
            raise self._not_controller_hiding_self(str(e)) from None
        fut = self._future(token)
        self._after_event()
        return fut

    def submit_many(self, items: list[tuple[str, dict[str, Any]]], budget_ms: int) -> list[asyncio.Future[Reply]]:
        """Queue several independent operations at once; each future holds its answer or refusal."""
        try:
            tokens = self.core.submit_many(items, now_ms(), budget_ms)
        except NotLeaderError as e:
            raise self._not_controller_hiding_self(str(e)) from None
        futures = [self._future(token) for token in tokens]
        self._after_event()
        return futures

    def _future(self, token: Token) -> asyncio.Future[Reply]:
        fut: asyncio.Future[Reply] = self.loop.create_future()
        self._futures[token] = fut

        def done(f: asyncio.Future[Reply]) -> None:
            if f.cancelled():
                self.core.cancel(token)
            self._futures.pop(token, None)

        fut.add_done_callback(done)
        return fut

    async def write(self, name: str, args: dict[str, Any], timeout_s: float) -> Reply:
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

    def _check_leader(self) -> None:
        try:
            self.core.check_leader()
        except NotLeaderError as e:
            raise self._not_controller_hiding_self(str(e)) from None

    def _not_controller_hiding_self(self, why: str) -> FerryError:
        leader_id, url = self.leader_hint()
        if leader_id == self.config.node_id:
            leader_id, url = None, None
        return not_controller(leader_id, url, why)

    def enqueue_internal(self, name: str) -> None:
        """Queue an operation run by the controller itself (``tick``) unless one is already queued."""
        if self.core.enqueue_internal(name, now_ms()) is not None:
            self._after_event()

    def expire_inflight(self) -> None:
        """Fail commands not committed within ``commit_timeout_ms`` (a timed-out command may still commit)."""
        self.core.expire_inflight(now_ms())
        self._after_event()

    def extend_sessions(self, held_ms: float) -> None:
        """Credit ``held_ms`` to every broker's session: time this controller could not read heartbeats.

        A heartbeat sent while the loop was held (a long operation, a busy machine) waited unread in
        a socket buffer; without the credit the next ``tick`` would fence brokers for the
        controller's own silence and move their partitions (more load).
        """
        self.core.extend_sessions(held_ms)

    # -- events from Raft ----------------------------------------------------------------------------

    def _on_state_changed(self) -> None:
        assert self.node is not None
        self.core.observe_leadership(self.node.is_leader, self.node.term, now_ms())
        if not self.core.is_leader:
            self._planned_s.clear()
        self._after_event()

    def _on_applied(self, applied: AppliedCommand) -> None:
        changed, self.log_changed = self.log_changed, asyncio.Event()
        changed.set()
        planned_s = self._planned_s.pop(applied.command_id, None)
        if self.core.committed(applied, now_ms()) and planned_s is not None and self.on_commit_latency is not None:
            self.on_commit_latency(time.perf_counter() - planned_s)
        self._after_event()

    def _on_raft_callback(self, command_id: str, result: Any, fail_reason: int, why: str = "") -> None:
        if fail_reason == 0:
            return  # answered by _on_applied
        self._planned_s.pop(command_id, None)
        self.core.command_failed(command_id, why or f"Raft did not commit the command (pysyncobj reason {fail_reason})")
        self._after_event()

    # -- effects -------------------------------------------------------------------------------------

    def _after_event(self) -> None:
        """Carry out what the core decided and let the writer run whatever may run now."""
        self._deliver(self.core.take_ready())
        if not self.core.inflight_commands:
            self._planned_s.clear()
        self._wakeup.set()

    def _deliver(self, ready: Ready) -> None:
        planned_s = time.perf_counter()
        for planned in ready.commands:
            self._planned_s[planned.command_id] = planned_s
            self._encoder.put(planned.command_id, planned.prev, planned.epoch, planned.plan)
        for outcome in ready.outcomes:
            self._settle(outcome)

    def _settle(self, outcome: Outcome) -> None:
        fut = self._futures.get(outcome.token)
        if isinstance(outcome, Answer):
            if fut is None and outcome.reply.get("fenced_brokers"):
                log.warning("fenced brokers %s: silent for %s ms (session timeout %d ms)",
                            outcome.reply["fenced_brokers"], outcome.reply.get("silent_ms"),
                            self.config.session_timeout_ms)
            result = (outcome.reply, outcome.offset)
            if fut is not None and not fut.done():
                fut.set_result(result)
            return
        if isinstance(outcome, Refusal):
            error = outcome.error
        else:
            leader_id, url = self.leader_hint()
            if outcome.hide_self and leader_id == self.config.node_id:
                leader_id, url = None, None
            error = not_controller(leader_id, url, outcome.why)
        if fut is None:  # an operation the controller queued itself (``tick``)
            if error.error is not ErrorCode.NOT_CONTROLLER:
                log.warning("internal controller operation failed: %s", error)
        elif not fut.done():
            fut.set_exception(error)

    # -- the writer ----------------------------------------------------------------------------------

    async def _write_loop(self) -> None:
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            try:
                more = self._pump(time.perf_counter() + self.config.write_slice_ms / 1000)
            except Exception:
                log.exception("controller write loop failed; dropping the uncommitted view")
                self.core.drop_view()
                more = False
            if more:
                # Out of time with work left: let the loop read its sockets (heartbeats wait there,
                # and run first once read), then go on.
                self._wakeup.set()
                await asyncio.sleep(0)

    def _pump(self, deadline_s: float = float("inf")) -> bool:
        """Run queued operations until nothing can run or ``deadline_s`` passes; True if work is left."""
        more = self.core.run(_WallSlice(time.perf_counter(), deadline_s))
        self._deliver(self.core.take_ready())
        return more

    def _submit_encoded(self, command: Command | None, command_id: str, error: str) -> None:
        """On the loop, in the order commands were planned: hand one to Raft (or fail it)."""
        assert self.node is not None
        if command is None:
            self._on_raft_callback(command_id, None, -1, error)
            return
        if not self.core.is_inflight(command_id):
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
        now = wall_ms()  # reported as timestamps (DescribeQuorum)
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

