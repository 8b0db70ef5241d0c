"""The Raft node's own process: pysyncobj and the log of encoded commands, nothing else.

pysyncobj runs its tick (elections, heartbeats, appends) on a thread, and a thread shares the
interpreter lock with everything else in its process. In the controller process that is the
aiohttp loop computing operations and encoding replies: under a large create or move it held
the lock long enough (up to 0.9 s measured at 5,000 partitions) for followers to start elections
while the leader's heartbeats sat in their socket buffers. Here the tick thread competes only with
two threads that wait on a socket, so request handling can no longer starve Raft.

The controller process starts this one (``python -m metadata_quorum.raft_process --fd N``) and
talks to it over one socket pair with pickled messages:

- to the Raft process: ``Start`` (the config, first), ``Submit`` (a command to replicate),
  ``Compact`` (a snapshot of the image at an offset, so the log before it can be dropped),
  ``Stop``;
- from it: ``Applied`` (each committed command with its Raft index, in commit order), ``Failed``
  (pysyncobj refused or lost a command), ``Reset`` (the whole log, after loading the dump or
  installing the leader's snapshot), ``State`` (leadership, term, leader, readiness, on each
  change) and ``Status`` (replication progress and tick gaps, every ``STATUS_INTERVAL_S``).

The process exits when its socket closes (the controller died or stopped) and, on Linux, when its
parent dies, so a killed controller never leaves a Raft member voting on its behalf. It ignores
SIGINT and SIGTERM, which the whole process group gets: the controller stops it in order.
"""
from __future__ import annotations

import argparse
import ctypes
import gzip
import logging
import os
import pickle
import queue
import signal
import socket
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any, Callable, Union

from pysyncobj import SyncObj, SyncObjConf, SyncObjConsumer, replicated
from pysyncobj.transport import TCPTransport

from metadata_quorum.config import ControllerConfig
from metadata_quorum.durable_log import AckGate, DurableJournal, NoListener, SyncListener
from metadata_quorum.power_loss import SyncRecorder, recording_enabled
from metadata_quorum.raft import Command, EncodedBatch, LogCore

log = logging.getLogger("ferry.raft")

STATUS_INTERVAL_S = 0.2


# -- messages ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Start:
    config: ControllerConfig
    log_level: int = logging.INFO


@dataclass(frozen=True)
class Submit:
    command: Command


@dataclass(frozen=True)
class Compact:
    keep_from: int
    offset: int
    epoch: int
    snapshot: EncodedBatch


@dataclass(frozen=True)
class Stop:
    pass


@dataclass(frozen=True)
class Applied:
    raft_index: int
    command: Command


@dataclass(frozen=True)
class Failed:
    command_id: str
    reason: int


@dataclass(frozen=True)
class Reset:
    state: dict[str, Any]


@dataclass(frozen=True)
class State:
    is_leader: bool
    term: int
    leader_raft: str | None
    ready: bool


@dataclass(frozen=True)
class Status:
    status: dict[str, Any] = field(default_factory=dict)
    last_response_monotonic: dict[str, float] = field(default_factory=dict)
    tick_gap_max_ms: float = 0.0
    tick_stalls: int = 0
    log_synced: bool = False  # the journal is synced before appends are acknowledged
    log_syncs: int = 0
    log_appends: int = 0
    log_sync_max_ms: float = 0.0


ToRaft = Union[Start, Submit, Compact, Stop]
FromRaft = Union[Applied, Failed, Reset, State, Status]


# -- the replicated state ------------------------------------------------------------------------------

class RaftLog(SyncObjConsumer):
    """pysyncobj's state machine: a ``LogCore`` of encoded batches, applied on the tick thread.

    Applying a command is the prev-check and a list append; each applied command goes to the
    controller as it is. Compactions the controller asks for are applied on the tick thread too,
    so a dump (pysyncobj forks to write it) never sees a half-changed log.
    """

    def __init__(self, emit: Callable[[FromRaft], None]) -> None:
        self._emit = emit
        self._compactions: deque[Compact] = deque()
        super().__init__()
        self.core = LogCore()

    def _serialize(self) -> dict[str, Any]:
        return self.core.to_dict()

    def _deserialize(self, data: dict[str, Any]) -> None:
        self.core = LogCore.from_dict(data)
        self._emit(Reset(self.core.to_dict()))

    @replicated
    def append(self, command: Command) -> tuple[bool, int, int]:
        accepted, first, _batches = self.core.apply(command)
        raft_index = self._syncObj.raftLastApplied + 1 if self._syncObj is not None else 0
        self._emit(Applied(raft_index, command))
        return accepted, first, self.core.next_offset

    def request_compaction(self, message: Compact) -> None:
        """Any thread: queue a compaction for the tick thread."""
        self._compactions.append(message)

    def run_compactions(self) -> None:
        """Tick thread: drop the batches each queued snapshot covers (stale ones are ignored)."""
        while self._compactions:
            c = self._compactions.popleft()
            self.core.drop_before(c.keep_from, c.offset, c.epoch, c.snapshot)


KEEPALIVE = {"type": "ferry_keepalive"}  # a message type pysyncobj ignores; reading it is the point


class _GatedTransport(TCPTransport):
    """pysyncobj's TCP transport, sending through an ``AckGate`` once the node has one."""

    gate: AckGate | None = None

    def send(self, node: Any, message: Any) -> bool:
        if self.gate is None:
            return bool(super().send(node, message))
        return self.gate.send(node, message)

    def send_now(self, node: Any, message: Any) -> bool:
        return bool(super().send(node, message))


class _ReadFirstSyncObj(SyncObj):
    """pysyncobj's node, reading its sockets before each tick's election check, keeping its
    connections to every peer alive, and (unless ``durable`` is off) syncing its journal before
    acknowledging appends or counting itself toward a commit.

    pysyncobj checks a follower's election deadline at the start of a tick and reads the messages
    waiting on its sockets only at the end. A tick thread held up longer than the election timeout
    (CPU starvation on a busy machine) would therefore start an election although the leader's
    heartbeats are sitting in its socket buffer. Reading first lets those heartbeats reset the
    deadline; a leader that is really gone sends none.

    pysyncobj drops a connection that has read nothing for ``connectionTimeout``, and checks that
    only when the connection is used. Two followers exchange nothing while a leader lives, so the
    first thing one sends the other after the leader dies, its vote request, found the connection
    stale and was dropped with it: every failover after a quiet spell took a second election round
    (about 1.2-1.5 s instead of 0.5-0.8 s). A keepalive to every peer each ``keepalive_interval_s``
    keeps all connections read from.

    Durability (metadata_quorum/durable_log.py): pysyncobj builds its transport after opening the
    journal and before starting its tick thread, so the transport factory is where the journal is
    wrapped in a ``DurableJournal`` and the transport given an ``AckGate``. The gate is flushed
    (one sync, then the held acknowledgements) after the sockets are read at the start of a tick,
    by a tick callback right before pysyncobj waits on its sockets (a leader's new appends are
    then synced while the followers write theirs), and after the tick's last read. Attributes are
    all set before pysyncobj lists the replicated ones, so none of this is dumped.
    """

    def __init__(self, self_address: str, peers: list[str], conf: SyncObjConf, consumers: list[Any],
                 keepalive_interval_s: float, durable: bool = True,
                 sync_listener: SyncListener | None = None) -> None:
        self._keepalive_interval_s = keepalive_interval_s
        self._next_keepalive_s = 0.0
        self._gate: AckGate | None = None
        self.durable_journal: DurableJournal | None = None
        listener = sync_listener or NoListener()

        def make_transport(syncobj: SyncObj, self_node: Any, other_nodes: Any) -> _GatedTransport:
            transport = _GatedTransport(syncobj, self_node, other_nodes)
            if durable and conf.journalFile is not None:
                journal = DurableJournal(syncobj._SyncObj__raftLog, conf.journalFile, conf.fullDumpFile, listener)
                syncobj._SyncObj__raftLog = journal
                self.durable_journal = journal
                self._gate = transport.gate = AckGate(journal, transport.send_now)
            return transport

        super().__init__(self_address, peers, conf=conf, consumers=consumers, transportClass=make_transport)
        gate: AckGate | None = self._gate  # set by make_transport, which the constructor calls
        if gate is not None:
            self.addOnTickCallback(gate.flush)

    def _onTick(self, timeToWait: float = 0.0) -> None:  # noqa: N802, N803 - pysyncobj's names
        transport = self._SyncObj__transport
        if transport.ready:
            self._poller.poll(0)
            now = time.monotonic()
            if now >= self._next_keepalive_s:
                self._next_keepalive_s = now + self._keepalive_interval_s
                for node in self._SyncObj__otherNodes:
                    transport.send(node, KEEPALIVE)
        if self._gate is not None:
            self._gate.flush()
        super()._onTick(timeToWait)
        if self._gate is not None:
            self._gate.flush()


class TickGaps:
    """How late pysyncobj's tick thread runs: the longest gap between two ticks, and the stalls.

    A follower whose tick thread is held up past the election timeout starts an election, whatever
    its sockets hold; so a gap near ``raft_min_timeout_s`` is the warning sign of leadership churn.
    """

    def __init__(self, stall_ms: int) -> None:
        self.stall_ms = stall_ms
        self.last_mono_s = 0.0
        self.max_gap_ms = 0.0
        self.stalls = 0

    def on_tick(self, now_s: float) -> None:
        if self.last_mono_s:
            gap_ms = (now_s - self.last_mono_s) * 1000
            if gap_ms > self.max_gap_ms:
                self.max_gap_ms = gap_ms
            if gap_ms > self.stall_ms:
                self.stalls += 1
                log.warning("raft tick thread stalled %.0f ms (elections start at %d ms)", gap_ms, 2 * self.stall_ms)
        self.last_mono_s = now_s


def leader_fallback_s(config: ControllerConfig) -> float:
    """How long a leader that hears from no majority keeps leading: ``raft.leader_fallback_timeout_s``,
    but at most a third of the broker session timeout (never below the longest election timeout).

    While a leader cut off from its followers still believes it leads, brokers that reach it send
    it their heartbeats, which cannot commit there; the new leader counts their sessions from its
    own activation and fences every broker still talking to the old one when the session runs out
    (a network partition of the leader fenced all three brokers at once). Stepping down within a
    third of the session leaves the brokers two thirds of it to find the new leader."""
    raft = config.raft
    return max(raft.raft_max_timeout_s, min(raft.leader_fallback_timeout_s, config.session_timeout_ms / 1000 / 3))


def make_syncobj_conf(config: ControllerConfig, on_ready: Callable[[], None]) -> SyncObjConf:
    raft = config.raft
    os.makedirs(config.node_data_dir, exist_ok=True)
    return SyncObjConf(
        appendEntriesUseBatch=raft.append_entries_use_batch,
        raftMinTimeout=raft.raft_min_timeout_s,
        raftMaxTimeout=raft.raft_max_timeout_s,
        appendEntriesPeriod=raft.append_entries_period_s,
        connectionRetryTime=raft.connection_retry_time_s,
        connectionTimeout=raft.connection_timeout_s,
        autoTickPeriod=raft.auto_tick_period_s,
        leaderFallbackTimeout=leader_fallback_s(config),
        appendEntriesBatchSizeBytes=raft.append_entries_batch_size_bytes,
        sendBufferSize=raft.socket_buffer_bytes,
        recvBufferSize=raft.socket_buffer_bytes,
        logCompactionMinEntries=raft.log_compaction_min_entries,
        logCompactionMinTime=raft.log_compaction_min_time_s,
        journalFile=os.path.join(config.node_data_dir, "raft.journal"),
        fullDumpFile=os.path.join(config.node_data_dir, "raft.dump"),
        onReady=on_ready,
        commandsWaitLeader=False,
        dynamicMembershipChange=False,
        # Encrypts and authenticates every Raft message (Fernet); None: plain pickles, open to anyone.
        password=config.security.raft_password if config.security is not None else None,
    )


def align_journal_with_dump(journal_path: str, dump_path: str) -> None:
    """Drop journal entries the dump already covers, so a restart keeps the entries after it.

    pysyncobj trims the journal only on the tick after a dump is written; a node stopped in
    between restarts with a journal that does not start at the dump's last two entries, and
    pysyncobj then clears the whole journal, losing every committed entry after the dump.
    """
    if not (os.path.exists(journal_path) and os.path.exists(dump_path)):
        return
    from pysyncobj.journal import createJournal
    try:
        with open(dump_path, "rb") as f, gzip.GzipFile(fileobj=f) as g:
            data = pickle.load(g)
        before, last = tuple(data[2]), tuple(data[1])
    except Exception:
        log.exception("cannot read %s to align the journal", dump_path)
        return
    journal = createJournal(journal_path)
    try:
        for pos in range(len(journal) - 1):
            if tuple(journal[pos]) == before and tuple(journal[pos + 1]) == last:
                if pos > 0:
                    journal.deleteEntriesTo(pos)
                    journal.flush()
                break
    finally:
        journal._destroy()


# -- the process ---------------------------------------------------------------------------------------

class RaftHost:
    """One pysyncobj node and its ``RaftLog``, reporting to the controller through ``emit``."""

    def __init__(self, config: ControllerConfig, emit: Callable[[FromRaft], None]) -> None:
        self.config = config
        self.emit = emit
        self.ready = False
        self.log = RaftLog(emit)
        conf = make_syncobj_conf(config, on_ready=self._on_ready)
        align_journal_with_dump(conf.journalFile, conf.fullDumpFile)
        self.tick_gaps = TickGaps(stall_ms=int(config.raft.raft_min_timeout_s * 1000 / 2))
        self._last_state: State | None = None
        self._next_status_s = 0.0
        self.sync = _ReadFirstSyncObj(config.me.raft, config.peer_raft_addresses(), conf=conf, consumers=[self.log],
                                      keepalive_interval_s=config.raft.connection_timeout_s / 4,
                                      durable=not config.raft.unsafe_no_fsync,
                                      sync_listener=SyncRecorder() if recording_enabled() else None)
        self.sync.addOnTickCallback(self._on_tick)

    def _on_ready(self) -> None:
        self.ready = True

    def _on_tick(self) -> None:
        now = time.monotonic()
        self.tick_gaps.on_tick(now)
        self.log.run_compactions()
        leader = self.sync._getLeader()
        state = State(bool(self.sync._isLeader()), int(self.sync.raftCurrentTerm),
                      None if leader is None else str(getattr(leader, "id", leader)), self.ready)
        if state != self._last_state:
            log.info("raft state: leader=%s term=%d leader=%s ready=%s raftState=%s", state.is_leader, state.term,
                     state.leader_raft, state.ready, getattr(self.sync, "_SyncObj__raftState", "?"))
            self._last_state = state
            self.emit(state)
        if now >= self._next_status_s:
            self._next_status_s = now + STATUS_INTERVAL_S
            status = dict(self.sync.getStatus()) if state.is_leader else {}
            times = getattr(self.sync, "_SyncObj__lastResponseTime", {}) if state.is_leader else {}
            journal = self.sync.durable_journal
            stats = journal.stats if journal is not None else None
            self.emit(Status({k: v for k, v in status.items() if isinstance(v, (int, float, str, bool))},
                             {str(getattr(n, "id", n)): float(t) for n, t in dict(times).items()},
                             round(self.tick_gaps.max_gap_ms, 1), self.tick_gaps.stalls,
                             log_synced=journal is not None,
                             log_syncs=stats.syncs if stats else 0, log_appends=stats.appends if stats else 0,
                             log_sync_max_ms=round(stats.sync_seconds_max * 1000, 2) if stats else 0.0))

    def handle(self, message: ToRaft) -> bool:
        """One message from the controller; False once it asks to stop."""
        if isinstance(message, Submit):
            command_id = message.command.command_id

            def callback(_result: Any, fail_reason: int) -> None:
                if fail_reason != 0:
                    self.emit(Failed(command_id, int(fail_reason)))

            self.log.append(message.command, callback=callback)
        elif isinstance(message, Compact):
            self.log.request_compaction(message)
        elif isinstance(message, Stop):
            return False
        return True

    def destroy(self, timeout_s: float = 5.0) -> None:
        self.sync.destroy()
        thread = getattr(self.sync, "_SyncObj__thread", None)
        if thread is not None:
            thread.join(timeout_s)


def _die_with_parent() -> None:
    """Linux: SIGKILL this process when its parent dies (a kill -9 of the controller)."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def run(conn: Connection) -> int:
    """Serve one controller over ``conn`` until it stops or goes away."""
    start = conn.recv()
    if not isinstance(start, Start):
        raise SystemExit(f"raft process: expected Start, got {type(start).__name__}")
    logging.basicConfig(level=start.log_level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("pysyncobj").setLevel(logging.WARNING)
    outbox: queue.SimpleQueue[FromRaft | None] = queue.SimpleQueue()

    def send_loop() -> None:
        while True:
            message = outbox.get()
            if message is None:
                return
            try:
                conn.send(message)
            except (OSError, EOFError):
                return

    sender = threading.Thread(target=send_loop, name="raft-send", daemon=True)
    sender.start()
    host = RaftHost(start.config, outbox.put)
    try:
        while True:
            try:
                message = conn.recv()
            except (EOFError, OSError):
                break  # the controller is gone
            if not host.handle(message):
                break
    finally:
        host.destroy()
        outbox.put(None)
        sender.join(2.0)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m metadata_quorum.raft_process")
    parser.add_argument("--fd", type=int, required=True, help="the socket inherited from the controller")
    args = parser.parse_args(argv)
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    # Only the tick thread has work to do here; the other two wait on sockets and a queue.
    sys.setswitchinterval(0.001)
    sock = socket.socket(fileno=args.fd)
    return run(Connection(sock.detach()))


if __name__ == "__main__":
    # Run from the imported module, not ``__main__``: the messages pickled both ways must name
    # their classes as the controller process knows them.
    from metadata_quorum import raft_process

    sys.exit(raft_process.main())
