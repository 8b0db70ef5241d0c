"""The pysyncobj adapter: the replicated, committed metadata log and the image built from it.

The replicated state is the committed metadata log: a list of record batches, each one
controller operation's records, with contiguous offsets starting at 0. Every controller applies
committed commands in Raft order, on pysyncobj's tick thread, to its copy of the log and to its
``MetadataImage``; offsets are therefore identical on every node.

A command is a group of operation batches computed by the active controller against its view
of the log *including* commands not yet committed. It names the batch it was computed after
(``prev``); applying it checks that this is still the last applied batch, so a command that was
computed against a view that never committed (a deposed leader, a call pysyncobj forwarded to
another node, a timed-out call applied late, a duplicate) is rejected, deterministically, on every
node. Application is thus idempotent and never mixes views.

Old batches are dropped once more than ``retention_records`` are kept; a reader asking for a
dropped offset gets a snapshot of the image instead (Kafka's metadata snapshots).
"""
from __future__ import annotations

import bisect
import dataclasses
import logging
import os
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable

from pysyncobj import SyncObj, SyncObjConf, SyncObjConsumer, replicated

from metadata_quorum.config import ControllerConfig
from metadata_quorum.records import Record, encode_record

log = logging.getLogger(__name__)

RAFT_LEADER_STATE = 2


def empty_image() -> Any:
    from metadata_quorum.image import EMPTY_IMAGE

    return EMPTY_IMAGE


def advance_image(image: Any, records: list[Record], first_offset: int, epoch: int,
                  last_offset: int | None = None) -> Any:
    """Replay ``records`` (offsets from ``first_offset``) onto ``image``: the one replay path."""
    from metadata_quorum.delta import MetadataDelta

    delta = MetadataDelta(image)
    for i, record in enumerate(records):
        delta.replay(record, first_offset + i, epoch)
    new_image = delta.apply()
    offset = first_offset + len(records) - 1 if last_offset is None else last_offset
    if new_image.offset != offset or new_image.epoch != epoch:
        new_image = dataclasses.replace(new_image, offset=offset, epoch=epoch)
    return new_image


def image_records(image: Any) -> list[Record]:
    return list(image.to_records())


@dataclass(frozen=True)
class Command:
    """One replicated command: operation batches computed after command ``prev``, in term ``epoch``.

    Records travel as the record objects themselves (pysyncobj pickles the command), so that no
    node decodes JSON on the apply path; the log encodes a batch (``encode_record``) when it is
    first read.
    """

    command_id: str
    prev: str
    epoch: int
    batches: tuple[tuple[Record, ...], ...]


@dataclass(frozen=True)
class AppliedCommand:
    """What applying one command did, handed to the listener (on the tick thread)."""

    command_id: str
    accepted: bool
    first_offset: int
    next_offset: int
    epoch: int


@dataclass(frozen=True)
class LogSlice:
    """A read of the committed log: whole batches from ``offset``, or a snapshot when it was dropped."""

    records: list[tuple[int, dict[str, Any]]]
    high_watermark: int
    snapshot_offset: int | None = None
    snapshot_records: list[dict[str, Any]] | None = None


class CommittedLog(SyncObjConsumer):
    """The replicated state machine. Only attributes assigned after ``super().__init__()`` replicate."""

    def __init__(self, retention_records: int, on_applied: Callable[[AppliedCommand], None] | None = None) -> None:
        # Local, derived state (not part of the dump): rebuilt from the replicated state.
        self._lock = threading.RLock()
        self._retention_records = max(2, retention_records)
        self._on_applied = on_applied
        self._bases: list[int] = []
        self._image: Any = empty_image()
        self._snapshot_cache: tuple[int, list[dict[str, Any]]] | None = None
        self._snapshot_image: Any = None
        self._expected: dict[str, Any] = {}  # command id -> image after it, as the leader computed it
        self.applied_at_raft_index: deque[tuple[int, int]] = deque(maxlen=4096)
        self.last_apply_monotonic = 0.0
        super().__init__()
        # Replicated state.
        self.snapshot_offset = -1
        self.snapshot_epoch = 0
        # The image at snapshot_offset as records; computed from _snapshot_image only when a dump needs it.
        self.snapshot_records: list[Record] | None = []
        # [base_offset, epoch, records, their encoding (filled on first read, then kept)]
        self.batches: list[list[Any]] = []
        self.last_command_id = ""
        self.next_offset = 0
        self.epoch = 0

    # -- dump / restore -------------------------------------------------------------------------

    def _serialize(self) -> dict[str, Any]:
        with self._lock:
            return {
                "snapshot_offset": self.snapshot_offset,
                "snapshot_epoch": self.snapshot_epoch,
                "snapshot_records": self._snapshot_records(),
                "batches": [[b[0], b[1], b[2], None] for b in self.batches],  # not the read cache
                "last_command_id": self.last_command_id,
                "next_offset": self.next_offset,
                "epoch": self.epoch,
            }

    def _deserialize(self, data: dict[str, Any]) -> None:
        with self._lock:
            self.snapshot_offset = int(data["snapshot_offset"])
            self.snapshot_epoch = int(data["snapshot_epoch"])
            self.snapshot_records = list(data["snapshot_records"])
            self._snapshot_image = None
            self.batches = list(data["batches"])
            self.last_command_id = str(data["last_command_id"])
            self.next_offset = int(data["next_offset"])
            self.epoch = int(data["epoch"])
            self._rebuild()

    def _snapshot_records(self) -> list[Record]:
        if self.snapshot_records is None:
            self.snapshot_records = image_records(self._snapshot_image)
        return self.snapshot_records

    def _rebuild(self) -> None:
        """Rebuild the image from the snapshot and the kept batches (after a restart)."""
        image = empty_image()
        if self.snapshot_offset >= 0:
            records = self._snapshot_records()
            image = advance_image(image, records, self.snapshot_offset - len(records) + 1, self.snapshot_epoch,
                                  last_offset=self.snapshot_offset)
        for base, epoch, records, _encoded in self.batches:
            if base > self.snapshot_offset:
                image = advance_image(image, list(records), base, epoch)
        self._image = image
        self._bases = [b[0] for b in self.batches]
        self._snapshot_cache = None

    # -- the replicated command -----------------------------------------------------------------

    @replicated
    def append(self, command: Command) -> tuple[bool, int, int]:
        """Apply one command; rejected unless ``command.prev`` is the last applied command's id.

        The new batches and image are computed before anything changes, so a command whose records
        cannot be replayed is rejected whole — the same way on every node, since replay is deterministic.
        """
        with self._lock:
            accepted = command.prev == self.last_command_id
            first = self.next_offset
            if accepted:
                try:
                    epoch = int(command.epoch)
                    new_batches: list[list[Any]] = []
                    flat: list[Record] = []
                    for batch in command.batches:
                        if batch:
                            new_batches.append([first + len(flat), epoch, tuple(batch), None])
                            flat.extend(batch)
                    image = self._expected.pop(command.command_id, None)
                    if image is None or image.offset != first + len(flat) - 1 or image.epoch != epoch:
                        image = advance_image(self._image, flat, first, epoch) if flat else self._image
                except Exception:
                    log.exception("command %s cannot be replayed; rejected", command.command_id)
                    accepted = False
            if accepted:
                self.batches.extend(new_batches)
                self._bases.extend(b[0] for b in new_batches)
                self.next_offset = first + len(flat)
                self._image = image
                self.epoch = epoch
                self.last_command_id = command.command_id
                self._maybe_drop_old_batches()
            self._expected.pop(command.command_id, None)
            raft_index = self._syncObj.raftLastApplied + 1 if self._syncObj is not None else 0
            self.applied_at_raft_index.append((raft_index, self.next_offset))
            self.last_apply_monotonic = time.monotonic()
            result = AppliedCommand(command.command_id, accepted, first, self.next_offset, self.epoch)
        if self._on_applied is not None:
            try:
                self._on_applied(result)
            except Exception:  # a listener must never stop the state machine
                log.exception("metadata log listener failed")
        return accepted, first, result.next_offset

    def _maybe_drop_old_batches(self) -> None:
        kept_from = self.batches[0][0] if self.batches else self.next_offset
        if self.next_offset - kept_from <= self._retention_records:
            return
        keep_from_offset = self.next_offset - self._retention_records // 2
        cut = bisect.bisect_left(self._bases, keep_from_offset)
        if cut == 0:
            return
        # Only a reference here: the image is immutable, and turning it into records on the Raft
        # thread could stall heartbeats on a large cluster. Dumps and restarts materialise it.
        self._snapshot_image = self._image
        self.snapshot_records = None
        self.snapshot_offset = self._image.offset
        self.snapshot_epoch = self.epoch
        del self.batches[:cut]
        del self._bases[:cut]
        self._snapshot_cache = None

    def expect(self, command_id: str, image: Any) -> None:
        """The leader hands over the image it computed after ``command_id``, sparing the replay.

        Sound because a command is applied only if it follows the last applied command: then the
        committed image before it is the very view the leader computed it against, and the image
        after it is what the same replay produced on the leader.
        """
        self._expected[command_id] = image

    def forget_expected(self) -> None:
        self._expected.clear()

    # -- reads (any thread) ---------------------------------------------------------------------

    @property
    def image(self) -> Any:
        return self._image

    def committed_view(self) -> tuple[Any, str]:
        """The committed image and the id of the last applied command, read together."""
        with self._lock:
            return self._image, self.last_command_id

    @property
    def high_watermark(self) -> int:
        """Kafka's high watermark: the offset the next committed record will get."""
        return self.next_offset

    @property
    def log_start_offset(self) -> int:
        with self._lock:
            return self.batches[0][0] if self.batches else self.next_offset

    def snapshot(self) -> tuple[int, list[dict[str, Any]]]:
        """The committed image as records, with its offset (cached per offset)."""
        with self._lock:
            image = self._image
            cache = self._snapshot_cache
        if cache is not None and cache[0] == image.offset:
            return cache
        result = (image.offset, [encode_record(r) for r in image_records(image)])
        with self._lock:
            if self._image is image:
                self._snapshot_cache = result
        return result

    def read(self, offset: int, max_records: int) -> LogSlice:
        """Whole batches starting at ``offset`` (at least one if any), or a snapshot if dropped.

        Batches are encoded on their first read (not on the Raft thread), outside the lock.
        """
        entries: list[list[Any]] = []
        with self._lock:
            hw = self.next_offset
            start = self.batches[0][0] if self.batches else hw
            dropped = offset < start
            if not dropped:
                i = max(0, bisect.bisect_right(self._bases, offset) - 1)
                count = 0
                while i < len(self.batches):
                    entry = self.batches[i]
                    i += 1
                    size = len(entry[2])
                    if entry[0] + size <= offset:
                        continue
                    if entries and count + size > max_records:
                        break
                    entries.append(entry)
                    count += size
        if dropped:
            snap_offset, snap_records = self.snapshot()
            return LogSlice(records=[], high_watermark=snap_offset + 1, snapshot_offset=snap_offset,
                            snapshot_records=snap_records)
        records: list[tuple[int, dict[str, Any]]] = []
        for entry in entries:
            encoded = entry[3]
            if encoded is None:
                encoded = entry[3] = [encode_record(r) for r in entry[2]]
            base = entry[0]
            records.extend((base + k, r) for k, r in enumerate(encoded) if base + k >= offset)
        return LogSlice(records=records, high_watermark=hw)

    def committed_offset_at_raft_index(self, raft_index: int) -> int:
        """The metadata log end offset once Raft entry ``raft_index`` was applied (best known)."""
        best = -1
        for idx, next_offset in self.applied_at_raft_index:
            if idx <= raft_index:
                best = next_offset
            else:
                break
        if best < 0:
            return self.next_offset if not self.applied_at_raft_index else 0
        return best


def make_syncobj_conf(config: ControllerConfig, on_state_changed: Callable[[int, int], None],
                      on_ready: Callable[[], None]) -> SyncObjConf:
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
        leaderFallbackTimeout=raft.leader_fallback_timeout_s,
        logCompactionMinEntries=raft.log_compaction_min_entries,
        logCompactionMinTime=raft.log_compaction_min_time_s,
        journalFile=os.path.join(config.node_data_dir, "raft.journal"),
        fullDumpFile=os.path.join(config.node_data_dir, "raft.dump"),
        onStateChanged=on_state_changed,
        onReady=on_ready,
        commandsWaitLeader=False,
        dynamicMembershipChange=False,
    )


def align_journal_with_dump(journal_path: str, dump_path: str) -> None:
    """Drop journal entries the dump already covers, so a restart keeps the entries after it.

    pysyncobj trims the journal only on the tick after a dump is written; a node stopped in
    between restarts with a journal that does not start at the dump's last two entries, and
    pysyncobj then clears the whole journal, losing every committed entry after the dump.
    """
    if not (os.path.exists(journal_path) and os.path.exists(dump_path)):
        return
    import gzip
    import pickle
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


class RaftNode:
    """One pysyncobj node holding a :class:`CommittedLog`; thin accessors over its status."""

    def __init__(self, config: ControllerConfig, state: CommittedLog,
                 on_state_changed: Callable[[int, int], None], on_ready: Callable[[], None]) -> None:
        self.config = config
        self.state = state
        conf = make_syncobj_conf(config, on_state_changed, on_ready)
        align_journal_with_dump(conf.journalFile, conf.fullDumpFile)
        self.sync = SyncObj(config.me.raft, config.peer_raft_addresses(), conf=conf, consumers=[state])

    def submit(self, command: Command, callback: Callable[[Any, int], None]) -> None:
        """Hand one command to pysyncobj (non-blocking); ``callback(result, fail_reason)`` on its thread."""
        self.state.append(command, callback=callback)

    @property
    def is_leader(self) -> bool:
        return bool(self.sync._isLeader())

    @property
    def term(self) -> int:
        return int(self.sync.raftCurrentTerm)

    @property
    def is_ready(self) -> bool:
        return bool(self.sync.isReady())

    def leader_id(self) -> int | None:
        leader = self.sync._getLeader()
        if leader is None:
            return None
        return self.config.node_id_for_raft(getattr(leader, "id", str(leader)))

    def status(self) -> dict[str, Any]:
        return dict(self.sync.getStatus())

    def last_response_monotonic(self) -> dict[str, float]:
        """When the leader last heard from each peer (pysyncobj keeps it privately)."""
        times = getattr(self.sync, "_SyncObj__lastResponseTime", {})
        return {getattr(node, "id", str(node)): float(t) for node, t in dict(times).items()}

    def destroy(self, timeout_s: float = 5.0) -> None:
        """Stop the tick thread and close the journal and sockets (blocks until done)."""
        self.sync.destroy()
        thread = getattr(self.sync, "_SyncObj__thread", None)
        if thread is not None:
            thread.join(timeout_s)
