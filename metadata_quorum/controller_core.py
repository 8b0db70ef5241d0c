"""The active controller's state machine, with no event loop, socket, thread or clock of its own.

Kafka's QuorumController and etcd's raft both keep their decisions apart from their I/O; this is
that part of Ferry's controller. Its caller (a *driver*: ``QuorumController`` on asyncio and a Raft
process, ``LocalController`` in process, the simulation over a simulated replicated log) feeds it
events and carries out the effects it hands back:

- events in: ``submit`` (an operation, with the time it arrived), ``run`` (run queued operations
  within a slice of time), ``committed`` (a command was applied to the committed log),
  ``command_failed`` (Raft refused or could not encode a command), ``observe_leadership`` /
  ``became_leader`` / ``lost_leadership``, ``tick`` (timers: expire commands, queue ``tick``),
  ``extend_sessions`` and ``cancel``;
- effects out, as one ``Ready`` from ``take_ready``: commands to replicate (``PlannedCommand``,
  in order, each naming the one before it) and outcomes to send (``Answer``, ``Refusal``,
  ``NotLeader``), each for the token ``submit`` returned.

How the leader writes: operations run one at a time against its *view* — the committed image
plus the records it has planned but not yet seen committed. Operations queued together are run
back to back and their batches go to Raft as one command (group commit), each operation's records
staying one atomic batch. Up to ``max_inflight_commands`` commands are pipelined; an operation
is answered once its command is applied. An operation that returns no records, or fails, is
answered once everything written before it has committed, so no answer — a refusal included —
reveals uncommitted state (a view that never commits turns it into a retriable ``NotLeader``). A new
leader first commits a NoOpRecord carrying its term; only then is it *active* and serves writes.
When leadership is lost — or a command is rejected, fails or times out — the view is dropped and
rebuilt from the committed image once nothing is in flight.
"""
from __future__ import annotations

import heapq
import itertools
import logging
from collections import deque
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Mapping, Protocol, Union

from metadata_quorum import op_slices
from metadata_quorum.backpressure import admit, retry_after_ms as queue_retry_after_ms, throttled
from metadata_quorum.controller_result import OpContext, WriteOperation
from metadata_quorum.kernel import messages as ops
from metadata_quorum.kernel.errors import ErrorCode, FerryError
from metadata_quorum.image import MetadataImage
from metadata_quorum.raft import AppliedCommand, Command, CommandPlan, advance_image, encode_batch, split_commands
from metadata_quorum.records import NoOpRecord, Record
from metadata_quorum.sessions import BrokerSessions

log = logging.getLogger(__name__)

# Served before anything else queued, and never refused for load: a broker whose heartbeat waits
# behind a large move is fenced, and fencing moves its partitions (more load, more fencing).
PRIORITY_OPERATIONS = frozenset({ops.BROKER_HEARTBEAT.name, ops.REGISTER_BROKER.name})
#: how often ``tick`` also looks at every leaderless partition (ops/cluster.py ``tick``)
LEADERLESS_SCAN_INTERVAL_MS = 1000
#: leaderless partitions one ``tick`` looks at, at most (~40 us each: ~20 ms of the loop)
LEADERLESS_SCAN_MAX = 500
PRIORITY_EXTRA_INFLIGHT = 16  # commands priority operations may add beyond max_inflight_commands
OP_COST_START_MS = 0.05  # the first guess of one operation's run time, before any was measured

Token = int


@dataclass(frozen=True)
class CoreConfig:
    """The limits and timeouts the state machine decides by (a subset of ``ControllerConfig``)."""

    node_id: int = 0
    session_timeout_ms: int = 9000
    reelection_timeout_ms: int = 2000
    commit_timeout_ms: int = 5000
    request_timeout_ms: int = 10000
    max_inflight_commands: int = 256
    max_inflight_records: int = 8000
    max_group_ops: int = 1000
    max_group_records: int = 20000
    max_command_records: int = 4000
    max_queued_ops: int = 20000

    @classmethod
    def of(cls, config: Any) -> "CoreConfig":
        """The fields of a ``ControllerConfig`` (or anything with the same attributes)."""
        return cls(**{name: getattr(config, name) for name in cls.__dataclass_fields__})


class CommittedState(Protocol):
    """The committed log as the core reads it (``raft.CommittedLog``)."""

    @property
    def image(self) -> MetadataImage: ...

    @property
    def high_watermark(self) -> int: ...

    def committed_view(self) -> tuple[MetadataImage, str]: ...

    def expect(self, command_id: str, image: Any) -> None: ...

    def forget_expected(self) -> None: ...


class WorkSlice(Protocol):
    """The time one ``run`` may take, as its driver measures it."""

    def now_ms(self) -> int:
        """The session clock operations see (sessions, timeouts): monotonic in a real driver."""
        ...

    def wall_ms(self) -> int:
        """The wall clock, for times written into records (``OpContext.wall_ms``)."""
        ...

    def elapsed_ms(self) -> float:
        """Time spent since the slice began (the estimate of one operation's cost)."""
        ...

    def expired(self) -> bool:
        """Out of time: return to the driver with work left."""
        ...


@dataclass
class FixedSlice:
    """A slice that never runs out, at a fixed time (in-process drivers, the simulation)."""

    at_ms: int

    def now_ms(self) -> int:
        return self.at_ms

    def wall_ms(self) -> int:
        return self.at_ms

    def elapsed_ms(self) -> float:
        return 0.0

    def expired(self) -> bool:
        return False


@dataclass(frozen=True)
class PlannedCommand:
    """A command to encode and hand to Raft, after ``prev`` and in term ``epoch``."""

    command_id: str
    prev: str
    epoch: int
    plan: CommandPlan


@dataclass(frozen=True)
class Answer:
    """The operation committed (or needed no records): its reply, and its batch's last offset."""

    token: Token
    reply: dict[str, Any]
    offset: int
    records: tuple[Record, ...] = ()


@dataclass(frozen=True)
class Refusal:
    """The operation failed and changed nothing (bad input, load, a timeout it may survive)."""

    token: Token
    error: FerryError


@dataclass(frozen=True)
class NotLeader:
    """The operation's fate is this controller's leadership: the driver names the leader it knows
    (``NOT_CONTROLLER``); ``hide_self`` when this node cannot be it."""

    token: Token
    why: str
    hide_self: bool = False


Outcome = Union[Answer, Refusal, NotLeader]


@dataclass
class Ready:
    """Effects to carry out, in order: replicate ``commands``, then deliver ``outcomes``."""

    commands: list[PlannedCommand] = field(default_factory=list)
    outcomes: list[Outcome] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.commands or self.outcomes)


def to_command(planned: PlannedCommand) -> Command:
    """A planned command in its replicated form, encoded at once (in-process drivers; the quorum
    controller encodes on a thread of its own)."""
    return Command(planned.command_id, planned.prev, planned.epoch,
                   tuple(encode_batch(b) for b in planned.plan.batches if b),
                   continues=planned.plan.continues, open_last=planned.plan.open_last)


class NotLeaderError(Exception):
    """``submit`` on a controller that is not the leader (the driver answers ``NOT_CONTROLLER``)."""


@dataclass
class _Pending:
    token: Token
    name: str
    args: dict[str, Any]
    queued_ms: int
    internal: bool = False
    cancelled: bool = False


@dataclass
class _Sliced:
    """An operation run as pieces (``op_slices``): its pieces' tokens and the outcomes so far."""

    name: str
    pieces: list[Token]
    outcomes: dict[Token, Outcome] = field(default_factory=dict)


@dataclass
class _Inflight:
    answers: list[tuple[Token, dict[str, Any], int, tuple[Record, ...]]]
    submitted_ms: int
    is_noop: bool = False
    records: int = 0  # records this command carries (a barrier or a chain's answering piece may carry 0)


class ControllerCore:
    """The leader's queue, view, in-flight commands, sessions and activation."""

    def __init__(self, config: CoreConfig, state: CommittedState, operations: Mapping[str, WriteOperation]) -> None:
        self.config = config
        self.state = state
        self.operations = operations
        self.is_leader = False
        self.active = False
        self.epoch = -1
        self.active_since_ms: int | None = None
        self.sessions = BrokerSessions()
        self.op_cost_ms = OP_COST_START_MS  # moving average of one operation's run time on the leader
        self.shed_ops = 0  # operations refused with THROTTLING_QUOTA_EXCEEDED
        self._view: Any = None
        self._view_last_id = ""
        self._queue: deque[_Pending] = deque()
        self._priority: deque[_Pending] = deque()
        self._queued: dict[Token, _Pending] = {}
        self._inflight: dict[str, _Inflight] = {}
        self._needs_reset = False
        self._noop_pending = False
        self._tokens = itertools.count(1)
        self._command_ids = itertools.count()
        self._waiter_ids = itertools.count()
        # (view offset the outcome was computed at, tie-break, token, reply or the error it raised)
        self._commit_waiters: list[tuple[int, int, Token, dict[str, Any] | FerryError]] = []
        self._ready = Ready()
        self._leaderless_scan_ms = -LEADERLESS_SCAN_INTERVAL_MS  # when a tick last began a scan of the leaderless
        self._leaderless_after: tuple[str, int] | None = None  # where a bounded scan goes on
        self._sliced: dict[Token, _Sliced] = {}  # the caller's token -> its operation run as pieces
        self._piece_of: dict[Token, Token] = {}  # a piece's token -> the caller's
        self._abandoned_pieces: set[Token] = set()  # pieces already run whose caller stopped waiting

    # -- effects -------------------------------------------------------------------------------------

    def take_ready(self) -> Ready:
        """The effects produced since the last call (the driver must carry out every one)."""
        ready, self._ready = self._ready, Ready()
        return ready

    def _out(self, outcome: Outcome) -> None:
        if outcome.token in self._abandoned_pieces:  # its caller stopped waiting
            self._abandoned_pieces.discard(outcome.token)
            return
        parent = self._piece_of.pop(outcome.token, None)
        if parent is None:
            self._ready.outcomes.append(outcome)
            return
        sliced = self._sliced[parent]
        sliced.outcomes[outcome.token] = outcome
        if len(sliced.outcomes) < len(sliced.pieces):
            return
        del self._sliced[parent]
        outcomes = [sliced.outcomes[t] for t in sliced.pieces]
        failed = next((o for o in outcomes if not isinstance(o, Answer)), None)
        if failed is not None:  # the first piece that failed answers for the operation
            self._ready.outcomes.append(replace(failed, token=parent))
            return
        answers = [o for o in outcomes if isinstance(o, Answer)]
        self._ready.outcomes.append(Answer(parent, op_slices.join(sliced.name, [a.reply for a in answers]),
                                           max(a.offset for a in answers),
                                           tuple(r for a in answers for r in a.records)))

    # -- submitting ----------------------------------------------------------------------------------

    def check_op(self, name: str, args: Any) -> None:
        if name not in self.operations:
            raise FerryError(ErrorCode.INVALID_REQUEST, f"unknown write operation {name!r}; known: {sorted(self.operations)}")
        if not isinstance(args, dict):
            raise FerryError(ErrorCode.INVALID_REQUEST, f"the arguments of {name} must be a JSON object")

    def check_leader(self) -> None:
        if not self.is_leader:
            raise NotLeaderError(f"controller {self.config.node_id} is not the active controller")

    def submit(self, name: str, args: dict[str, Any], now_ms: int, budget_ms: int | None = None) -> Token:
        """Queue one write operation that arrived at ``now_ms``.

        ``budget_ms`` is how long the caller waits: an operation the queue ahead would keep longer
        is refused now (``THROTTLING_QUOTA_EXCEEDED`` with a retry-after, ``backpressure.admit``).
        Raises ``FerryError`` for bad input or load and ``NotLeaderError`` off the leader."""
        self.check_op(name, args)
        self.check_leader()
        if name not in PRIORITY_OPERATIONS:
            budget = self.config.request_timeout_ms if budget_ms is None else budget_ms
            decision = admit(len(self._queue), self.op_cost_ms, 1, budget, self.config.max_queued_ops)
            if not decision.admitted:
                self.shed_ops += 1
                raise throttled(name, len(self._queue), decision.retry_after_ms)
        pieces = op_slices.split(name, args)
        if pieces is None:
            return self._enqueue(name, args, now_ms)
        parent = next(self._tokens)
        sliced = self._sliced[parent] = _Sliced(name, [self._enqueue(name, piece, now_ms) for piece in pieces])
        for token in sliced.pieces:
            self._piece_of[token] = parent
        return parent

    def submit_many(self, items: list[tuple[str, dict[str, Any]]], now_ms: int, budget_ms: int) -> list[Token]:
        """Queue several independent operations; those refused for load get a ``Refusal`` at once."""
        for name, args in items:
            self.check_op(name, args)
        self.check_leader()
        wanted = sum(1 for name, _ in items if name not in PRIORITY_OPERATIONS)
        decision = admit(len(self._queue), self.op_cost_ms, wanted, budget_ms, self.config.max_queued_ops)
        tokens: list[Token] = []
        admitted = 0
        for name, args in items:
            if name not in PRIORITY_OPERATIONS:
                if admitted >= decision.admitted:
                    self.shed_ops += 1
                    token = next(self._tokens)
                    self._out(Refusal(token, throttled(name, len(self._queue), decision.retry_after_ms)))
                    tokens.append(token)
                    continue
                admitted += 1
            tokens.append(self._enqueue(name, args, now_ms))
        return tokens

    def _enqueue(self, name: str, args: dict[str, Any], now_ms: int, internal: bool = False) -> Token:
        if name == ops.BROKER_HEARTBEAT.name:
            self.sessions.note_arrival(self.state.image, args, now_ms)
        pending = _Pending(next(self._tokens), name, args, now_ms, internal)
        (self._priority if name in PRIORITY_OPERATIONS else self._queue).append(pending)
        self._queued[pending.token] = pending
        return pending.token

    def enqueue_internal(self, name: str, now_ms: int) -> Token | None:
        """Queue an operation run by the controller itself unless one is already queued."""
        if not self.active or name not in self.operations:
            return None
        if any(p.internal and p.name == name for p in self._queue):
            return None
        args: dict[str, Any] = {}
        if name == ops.TICK.name:
            # a scan that stopped at its bound goes on at the next tick; a new one starts each interval
            due = self._leaderless_after is not None or \
                now_ms - self._leaderless_scan_ms >= LEADERLESS_SCAN_INTERVAL_MS
            if due and self._leaderless_after is None:
                self._leaderless_scan_ms = now_ms
            args["elect_leaderless"] = due
            args["leaderless_max"] = LEADERLESS_SCAN_MAX
            if self._leaderless_after is not None:
                args["leaderless_after"] = list(self._leaderless_after)
        return self._enqueue(name, args, now_ms, internal=True)

    def cancel(self, token: Token) -> None:
        """The caller stopped waiting: an operation not yet run is skipped (never run late)."""
        sliced = self._sliced.pop(token, None)
        if sliced is not None:
            for piece in sliced.pieces:
                self._piece_of.pop(piece, None)
                if piece in self._queued:
                    self.cancel(piece)  # skipped when its turn comes: no outcome
                elif piece not in sliced.outcomes:
                    self._abandoned_pieces.add(piece)  # run, its outcome still to come
        pending = self._queued.get(token)
        if pending is not None:
            pending.cancelled = True

    def retry_after_ms(self) -> int:
        """About the time the queue ahead takes to run (bounded)."""
        return queue_retry_after_ms(len(self._queue), self.op_cost_ms)

    @property
    def queue_depth(self) -> int:
        """Operations waiting to run plus those run and waiting for their command to commit."""
        return len(self._queue) + len(self._priority) + sum(len(f.answers) for f in self._inflight.values())

    @property
    def last_heartbeat_ms(self) -> dict[int, int]:
        return self.sessions.last_heartbeat_ms

    def is_inflight(self, command_id: str) -> bool:
        return command_id in self._inflight

    @property
    def inflight_commands(self) -> int:
        return len(self._inflight)

    @property
    def inflight_records(self) -> int:
        """Records sent to Raft and not yet committed.

        Bounded by ``max_inflight_records`` for ordinary operations: a heartbeat is answered only
        once a command sent after it commits (``_submit_barrier``), so everything already in
        Raft's pipeline delays every broker's lease renewal. 256 commands of 4,000 records each
        took seconds to commit on a loaded machine, longer than a 1.5 s session.
        """
        return sum(f.records for f in self._inflight.values())

    def has_ready(self) -> bool:
        """Whether ``take_ready`` holds effects not yet taken."""
        return bool(self._ready)

    def has_work(self) -> bool:
        """Whether ``run`` could do something now."""
        if not self.is_leader:
            return False
        return self._needs_reset or self._noop_pending or (self.active and bool(self._queue or self._priority))

    # -- leadership ----------------------------------------------------------------------------------

    def observe_leadership(self, leader_now: bool, term: int, now_ms: int, why_lost: str = "") -> None:
        """What Raft says now: leader or not, in ``term``. Re-elected in a new term counts as a loss
        then a win: the view of the old term may hold commands that never commit."""
        if leader_now and self.is_leader and term != self.epoch:
            self.lost_leadership(f"controller {self.config.node_id} was re-elected in a new term")
        if leader_now and not self.is_leader:
            self.became_leader(term, now_ms)
        elif not leader_now and self.is_leader:
            self.lost_leadership(why_lost or f"controller {self.config.node_id} lost leadership")

    def became_leader(self, epoch: int, now_ms: int) -> None:
        """Leader of ``epoch``: commit a NoOpRecord first; active (serving writes) once it commits."""
        self.is_leader = True
        self.active = False
        self.active_since_ms = None
        self.epoch = epoch
        self._inflight.clear()
        self._needs_reset = True
        self._noop_pending = True
        log.info("controller %d became leader in term %d", self.config.node_id, epoch)

    def lost_leadership(self, why: str) -> None:
        """Fail everything queued, in flight or waiting, and forget the view and the sessions."""
        was_leader = self.is_leader
        self.is_leader = False
        self.active = False
        self.active_since_ms = None
        self._view = None
        self._noop_pending = False
        for queue in (self._priority, self._queue):
            while queue:
                pending = queue.popleft()
                self._queued.pop(pending.token, None)
                if not pending.cancelled:
                    self._out(NotLeader(pending.token, why, hide_self=True))
        for inflight in self._inflight.values():
            for token, _reply, _offset, _records in inflight.answers:
                self._out(NotLeader(token, why, hide_self=True))
        self._inflight.clear()
        self.state.forget_expected()
        for _offset, _id, token, _outcome in self._commit_waiters:
            self._out(NotLeader(token, why, hide_self=True))
        self._commit_waiters.clear()
        self.sessions.forget()
        if was_leader:
            log.info("controller %d resigned: %s", self.config.node_id, why)

    # -- the committed log ---------------------------------------------------------------------------

    def committed(self, applied: AppliedCommand, now_ms: int) -> bool:
        """A command was applied to the committed log; True if it was one of this leader's in
        flight and was accepted (its operations are answered)."""
        ours = False
        inflight = self._inflight.pop(applied.command_id, None)
        if inflight is not None:
            if applied.accepted:
                ours = True
                for token, reply, offset, records in inflight.answers:
                    self._out(Answer(token, reply, offset, records))
                if inflight.is_noop and self.is_leader:
                    self.active = True
                    self.active_since_ms = now_ms
                    self.sessions.start(self.state.image, now_ms)
                    log.info("controller %d is active in term %d at offset %d", self.config.node_id,
                             self.epoch, applied.next_offset - 1)
            else:
                self._fail_inflight(inflight, "the command was computed against a log view that did not commit")
                if inflight.is_noop:
                    self._noop_pending = True
                self._needs_reset = True
        committed_offset = applied.next_offset - 1
        while self._commit_waiters and self._commit_waiters[0][0] <= committed_offset:
            offset, _id, token, outcome = heapq.heappop(self._commit_waiters)
            self._out(Refusal(token, outcome) if isinstance(outcome, FerryError) else Answer(token, outcome, offset))
        return ours

    def command_failed(self, command_id: str, why: str) -> None:
        """Raft did not take the command (or it could not be encoded): it will not commit here."""
        inflight = self._inflight.pop(command_id, None)
        if inflight is None:
            return
        self._fail_inflight(inflight, why)
        if inflight.is_noop:
            self._noop_pending = True
        self._needs_reset = True

    def _fail_inflight(self, inflight: _Inflight, why: str) -> None:
        for token, _reply, _offset, _records in inflight.answers:
            self._out(NotLeader(token, why))

    # -- timers --------------------------------------------------------------------------------------

    def tick(self, now_ms: int) -> Token | None:
        """The periodic timer: expire commands not committed in time; queue ``tick`` when active."""
        self.expire_inflight(now_ms)
        return self.enqueue_internal(ops.TICK.name, now_ms) if self.active else None

    def expire_inflight(self, now_ms: int) -> None:
        """Fail commands not committed within ``commit_timeout_ms`` (a timed-out command may still commit)."""
        deadline_ms = now_ms - self.config.commit_timeout_ms
        for command_id in [c for c, f in self._inflight.items() if f.submitted_ms < deadline_ms]:
            inflight = self._inflight.pop(command_id)
            for token, _reply, _offset, _records in inflight.answers:
                self._out(Refusal(token, FerryError(
                    ErrorCode.REQUEST_TIMED_OUT,
                    f"not committed within {self.config.commit_timeout_ms} ms; it may still commit")))
            if inflight.is_noop:
                self._noop_pending = True
            self._needs_reset = True

    def extend_sessions(self, held_ms: float) -> None:
        """Credit ``held_ms`` to every broker's session: time the driver could not read heartbeats."""
        self.sessions.extend(held_ms)

    # -- running operations --------------------------------------------------------------------------

    def run(self, work: WorkSlice) -> bool:
        """Run queued operations until nothing can run or the slice expires; True if work is left.

        Thousands of queued stream operations take seconds to run; run at once, they would keep
        the driver from reading anything, heartbeats included, and brokers would be fenced for a
        busy controller.
        """
        while self.is_leader:
            if work.expired():
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
                self._submit_noop(work.now_ms())
                continue
            if not self.active:
                return False
            if self._priority and \
                    len(self._inflight) < self.config.max_inflight_commands + PRIORITY_EXTRA_INFLIGHT:
                self._run_group(work, priority_only=self._pipeline_full())
                continue
            if self._pipeline_full() or not self._queue:
                return False
            self._run_group(work)
        return False

    def _pipeline_full(self) -> bool:
        """No room in Raft's pipeline for ordinary operations (priority ones have a little more):
        too many commands, or enough records that a heartbeat's barrier would queue behind more."""
        if len(self._inflight) >= self.config.max_inflight_commands:
            return True
        return bool(self._inflight) and self.inflight_records >= self.config.max_inflight_records

    def drop_view(self) -> None:
        """Rebuild the view from the committed image (the driver hit an unexpected failure)."""
        self._needs_reset = True

    def _submit_noop(self, now_ms: int) -> None:
        record = NoOpRecord(term=self.epoch, leader_id=self.config.node_id)
        next_offset = self._view.offset + 1
        self._view = advance_image(self._view, [record], next_offset, self.epoch)
        self._submit([(record,)], _Inflight([], now_ms, is_noop=True))

    def _next_op(self, priority_only: bool) -> _Pending | None:
        if self._priority:
            return self._priority.popleft()
        if self._queue and not priority_only:
            return self._queue.popleft()
        return None

    def _context(self, now_ms: int, next_offset: int, heartbeats: Mapping[int, int], queued_ms: int,
                 wall_ms: int | None = None) -> OpContext:
        return OpContext(now_ms=now_ms, wall_ms=wall_ms, next_offset=next_offset, controller_id=self.config.node_id,
                         last_heartbeat_ms=heartbeats, session_timeout_ms=self.config.session_timeout_ms,
                         reelection_timeout_ms=self.config.reelection_timeout_ms,
                         active_since_ms=self.active_since_ms, queued_ms=queued_ms)

    def _run_group(self, work: WorkSlice, priority_only: bool = False) -> None:
        view = self._view
        batches: list[tuple[Record, ...]] = []
        answers: list[tuple[Token, dict[str, Any], int, tuple[Record, ...]]] = []
        records_in_group = 0
        ops_in_group = 0
        started_ms = work.elapsed_ms()
        now_ms = work.now_ms()
        heartbeats = MappingProxyType(self.sessions.last_heartbeat_ms)  # live: a heartbeat earlier in the group counts
        while ops_in_group < self.config.max_group_ops and records_in_group < self.config.max_group_records:
            if ops_in_group and not self._priority and work.expired():
                break
            op = self._next_op(priority_only)
            if op is None:
                break
            self._queued.pop(op.token, None)
            if op.cancelled:
                continue
            ops_in_group += 1
            next_offset = view.offset + 1
            now_ms = work.now_ms()
            try:
                result = self.operations[op.name](view, op.args, self._context(now_ms, next_offset, heartbeats, op.queued_ms,
                                                                                work.wall_ms()))
                records = tuple(result.records)
                new_view = advance_image(view, list(records), next_offset, self.epoch) if records else view
            except FerryError as e:
                self._refuse(op.token, e, view)
                continue
            except Exception as e:  # a bug in an operation must not take the controller down
                log.exception("operation %s failed", op.name)
                self._refuse(op.token, FerryError(ErrorCode.UNKNOWN_SERVER_ERROR, f"{op.name} failed: {e!r}"), view)
                continue
            if op.name == ops.TICK.name and op.internal:
                more = result.reply.get("leaderless_next")
                self._leaderless_after = (str(more[0]), int(more[1])) if more else None
            if op.name == ops.BROKER_HEARTBEAT.name:
                # only a heartbeat the operation accepted (current broker epoch)
                self.sessions.note_heartbeat(op.args, self.state.high_watermark, now_ms)
            if records:
                view = new_view
                batches.append(records)
                records_in_group += len(records)
                answers.append((op.token, dict(result.reply), view.offset, records))
            elif op.name == ops.BROKER_HEARTBEAT.name:
                # Rides on the group's command, or on a barrier: answered once a command of this
                # term sent after it commits (``_submit_barrier``).
                answers.append((op.token, dict(result.reply), view.offset, ()))
            elif view.offset <= self.state.high_watermark - 1 and not batches:
                self._out(Answer(op.token, dict(result.reply), view.offset))
            else:
                heapq.heappush(self._commit_waiters, (view.offset, next(self._waiter_ids), op.token, dict(result.reply)))
        if ops_in_group:
            group_ms = work.elapsed_ms() - started_ms
            self.op_cost_ms = 0.8 * self.op_cost_ms + 0.2 * group_ms / ops_in_group
        if batches:
            self._view = view
            self._submit(batches, _Inflight(answers, now_ms))
        elif answers:
            self._submit_barrier(_Inflight(answers, now_ms))

    def _refuse(self, token: Token, error: FerryError, view: Any) -> None:
        """Refuse now if the view the operation failed against is committed, else once it is.

        A refusal read off uncommitted records (a fence the leader's ``tick`` has in flight, a
        topic being created) would be a definite answer about state that may never commit: the
        leader can be deposed first. Kafka's controller waits the same way for an operation that
        writes nothing.
        """
        if view.offset <= self.state.high_watermark - 1:
            self._out(Refusal(token, error))
        else:
            heapq.heappush(self._commit_waiters, (view.offset, next(self._waiter_ids), token, error))

    def _submit_barrier(self, inflight: _Inflight) -> None:
        """A command with no records, in this term, answering ``inflight`` once it commits.

        A heartbeat's answer grants a write lease (``is_fenced`` false, counted from when the
        broker sent it) or orders a shutdown; read off this leader's committed image alone, it
        may come from a leader already deposed and cut off from the quorum (pysyncobj's leader
        believes it leads until ``leaderFallbackTimeout``), which has not seen the new leader fence
        the broker or unfence it again, while the new leader counts the broker's session from its
        own activation or the heartbeats it received. A command of this term committing after
        the heartbeat was run proves no other leader was active yet when it was run (the
        majorities that committed it and elected any later leader meet in a node that took this
        term's entry before voting), so the new leader's count starts after the lease's. It
        consumes no metadata offset (``LogCore.apply`` adds no batch), and heartbeats run together,
        or with other operations' records, share one command.
        """
        command_id = f"{self.config.node_id}.{self.epoch}.{next(self._command_ids)}"
        self.state.expect(command_id, self._view)
        self._ready.commands.append(PlannedCommand(command_id, self._view_last_id, self.epoch,
                                                   CommandPlan((), False, False)))
        self._view_last_id = command_id
        self._inflight[command_id] = inflight

    def _fail_waiters_beyond(self, committed_offset: int) -> None:
        keep = []
        for item in self._commit_waiters:
            if item[0] > committed_offset:
                self._out(NotLeader(item[2], "the log view was dropped; retry"))
            else:
                keep.append(item)
        heapq.heapify(keep)
        self._commit_waiters = keep

    def _submit(self, batches: list[tuple[Record, ...]], inflight: _Inflight) -> None:
        """Send a group's batches as one command, or as a chain of bounded ones (``split_commands``).

        Every command of a chain names the one before it, so they apply in order or not at all
        past a gap; the answers and the leader's image ride on the last one.
        """
        plans = split_commands(batches, self.config.max_command_records)
        for i, plan in enumerate(plans):
            last = i == len(plans) - 1
            command_id = f"{self.config.node_id}.{self.epoch}.{next(self._command_ids)}"
            if last:
                self.state.expect(command_id, self._view)
            self._ready.commands.append(PlannedCommand(command_id, self._view_last_id, self.epoch, plan))
            self._view_last_id = command_id
            size = sum(len(batch) for batch in plan.batches)
            if last:
                inflight.records = size
            self._inflight[command_id] = inflight if last else _Inflight([], inflight.submitted_ms, records=size)
