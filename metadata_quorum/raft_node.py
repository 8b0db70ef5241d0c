"""The controller's side of its Raft node: starts ``raft_process`` and mirrors what it reports.

Commands go to the Raft process over a socket pair; committed commands come back in commit order
and are applied to the controller's ``CommittedLog`` on a reader thread (the leader's answers,
followers' pending batches, long-poll wake-ups all follow from there, as they did when pysyncobj
ran in this process). Leadership, term and replication status are the last values the Raft
process reported, so reading them never waits on it.
"""
from __future__ import annotations

import logging
import queue
import socket
import subprocess
import sys
import threading
from multiprocessing.connection import Connection
from typing import Any, Callable

from metadata_quorum.config import ControllerConfig
from metadata_quorum.raft import Command, CommittedLog, encode_snapshot
from metadata_quorum.raft_process import (Applied, Compact, Failed, FromRaft, Reset, Start, State, Status, Stop,
                                          Submit, ToRaft)

log = logging.getLogger(__name__)

FailureCallback = Callable[[Any, int], None]


class TickGapsView:
    """The Raft process's tick gaps as last reported (``/v1/health``)."""

    def __init__(self) -> None:
        self.max_gap_ms = 0.0
        self.stalls = 0


class LogSyncView:
    """The Raft journal's group commit as last reported (``/v1/health``): is the journal synced
    before appends are acknowledged, how many syncs covered how many appends, the slowest sync."""

    def __init__(self) -> None:
        self.synced = False
        self.syncs = 0
        self.appends = 0
        self.sync_max_ms = 0.0


class RaftNode:
    """Runs the Raft process for ``config`` and feeds ``state`` from it.

    ``on_state_changed(old, new)`` and ``on_ready()`` are called on the reader thread;
    ``on_lost()`` when the Raft process exits without being asked to (the controller cannot go on
    without it and should stop).
    """

    def __init__(self, config: ControllerConfig, state: CommittedLog,
                 on_state_changed: Callable[[int, int], None], on_ready: Callable[[], None],
                 on_lost: Callable[[], None] | None = None) -> None:
        self.config = config
        self.state = state
        self._on_state_changed = on_state_changed
        self._on_ready = on_ready
        self._on_lost = on_lost
        self.is_leader = False
        self.term = 0
        self.is_ready = False
        self._leader_raft: str | None = None
        self._status = Status()
        self.tick_gaps = TickGapsView()
        self.log_sync = LogSyncView()
        self._callbacks: dict[str, FailureCallback] = {}
        self._closing = False
        self._outbox: queue.SimpleQueue[ToRaft | None] = queue.SimpleQueue()
        self._compaction: tuple[int, int, int, Any] | None = None
        self._compaction_ready = threading.Condition()
        parent, child = socket.socketpair()
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "metadata_quorum.raft_process", "--fd", str(child.fileno())],
                pass_fds=(child.fileno(),), stdin=subprocess.DEVNULL)
        finally:
            child.close()
        self._conn = Connection(parent.detach())
        self._outbox.put(Start(config, logging.getLogger().getEffectiveLevel()))
        state.on_compacted = self._request_compaction
        self._threads = [threading.Thread(target=self._send_loop, name="raft-send", daemon=True),
                         threading.Thread(target=self._read_loop, name="raft-read", daemon=True),
                         threading.Thread(target=self._compact_loop, name="raft-compact", daemon=True)]
        for thread in self._threads:
            thread.start()

    # -- commands --------------------------------------------------------------------------------------

    def submit(self, command: Command, callback: FailureCallback) -> None:
        """Hand one command to Raft (non-blocking); ``callback(None, reason)`` if it is refused or lost."""
        self._callbacks[command.command_id] = callback
        self._outbox.put(Submit(command))

    # -- status ------------------------------------------------------------------------------------------

    def leader_id(self) -> int | None:
        return None if self._leader_raft is None else self.config.node_id_for_raft(self._leader_raft)

    def status(self) -> dict[str, Any]:
        return dict(self._status.status)

    def last_response_monotonic(self) -> dict[str, float]:
        """When the leader last heard from each peer (CLOCK_MONOTONIC is shared by both processes)."""
        return dict(self._status.last_response_monotonic)

    # -- threads -----------------------------------------------------------------------------------------

    def _send_loop(self) -> None:
        while True:
            message = self._outbox.get()
            if message is None:
                return
            try:
                self._conn.send(message)
            except (OSError, EOFError):
                return

    def _read_loop(self) -> None:
        while True:
            try:
                message: FromRaft = self._conn.recv()
            except (EOFError, OSError):
                break
            try:
                self._dispatch(message)
            except Exception:
                log.exception("could not handle %s from the Raft process", type(message).__name__)
        if not self._closing:
            log.error("the Raft process of controller %d exited (code %s)", self.config.node_id,
                      self.process.poll())
            was_leader, self.is_leader = self.is_leader, False
            self._leader_raft = None
            if was_leader:
                self._on_state_changed(2, 0)
            if self._on_lost is not None:
                self._on_lost()

    def _dispatch(self, message: FromRaft) -> None:
        if isinstance(message, Applied):
            self._callbacks.pop(message.command.command_id, None)
            self.state.apply_committed(message.command, message.raft_index)
        elif isinstance(message, Failed):
            callback = self._callbacks.pop(message.command_id, None)
            if callback is not None:
                callback(None, message.reason)
        elif isinstance(message, State):
            changed = (message.is_leader, message.term) != (self.is_leader, self.term)
            self._leader_raft = message.leader_raft
            old = 2 if self.is_leader else 0
            self.is_leader, self.term = message.is_leader, message.term
            if not message.is_leader:
                self._callbacks.clear()  # what is still in flight is answered by commit, reset or timeout
            if changed:
                self._on_state_changed(old, 2 if message.is_leader else 0)
            if message.ready and not self.is_ready:
                self.is_ready = True
                self._on_ready()
        elif isinstance(message, Status):
            self._status = message
            self.tick_gaps.max_gap_ms = message.tick_gap_max_ms
            self.tick_gaps.stalls = message.tick_stalls
            self.log_sync.synced = message.log_synced
            self.log_sync.syncs = message.log_syncs
            self.log_sync.appends = message.log_appends
            self.log_sync.sync_max_ms = message.log_sync_max_ms
        elif isinstance(message, Reset):
            self.state.reset(message.state)

    def _request_compaction(self, keep_from: int, offset: int, epoch: int, image: Any) -> None:
        """The controller dropped the batches before ``keep_from``: let the Raft process drop them too.

        Encoding the snapshot takes a while on a large cluster, so it is done on a thread of its
        own; only the newest request matters.
        """
        with self._compaction_ready:
            self._compaction = (keep_from, offset, epoch, image)
            self._compaction_ready.notify()

    def _compact_loop(self) -> None:
        while True:
            with self._compaction_ready:
                while self._compaction is None and not self._closing:
                    self._compaction_ready.wait()
                if self._closing:
                    return
                keep_from, offset, epoch, image = self._compaction  # type: ignore[misc]
                self._compaction = None
            try:
                self._outbox.put(Compact(keep_from, offset, epoch, encode_snapshot(image)))
            except Exception:
                log.exception("could not encode the snapshot at offset %d", offset)

    # -- shutdown ----------------------------------------------------------------------------------------

    def destroy(self, timeout_s: float = 5.0) -> None:
        """Stop the Raft process (its node closes the journal and sockets) and the threads."""
        self._closing = True
        with self._compaction_ready:
            self._compaction_ready.notify()
        self._outbox.put(Stop())
        self._outbox.put(None)
        try:
            self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            log.warning("the Raft process did not stop in %.0f s; killing it", timeout_s)
            self.process.kill()
            self.process.wait(timeout_s)
        try:
            self._conn.close()
        except OSError:
            pass
        for thread in self._threads:
            thread.join(timeout_s)

