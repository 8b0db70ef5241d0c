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
import json
import logging
import os
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable

from pysyncobj import SyncObj, SyncObjConf, SyncObjConsumer, replicated

from metadata_quorum.config import ControllerConfig
from metadata_quorum.records import Record, decode_record, encode_record

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


EncodedBatch = tuple[int, bytes]  # (record count, the records' JSON encoding as one array)


def encode_batch(records: tuple[Record, ...] | list[Record]) -> EncodedBatch:
    """One operation's records in their wire form (what ``/v1/log`` serves and followers replay)."""
    return len(records), json.dumps([encode_record(r) for r in records], separators=(",", ":")).encode()


def decode_batch(batch: EncodedBatch) -> list[dict[str, Any]]:
    count, raw = batch
    encoded = json.loads(raw)
    if not isinstance(encoded, list) or len(encoded) != count:
        raise ValueError(f"a batch says {count} records but holds {len(encoded) if isinstance(encoded, list) else '?'}")
    return encoded


@dataclass(frozen=True)
class Command:
    """One replicated command: operation batches computed after command ``prev``, in term ``epoch``.

    Each batch travels as its records' JSON encoding (``EncodedBatch``), not as record objects:
    pysyncobj unpickles every command on its tick thread, on every node, before applying it, and
    unpickling tens of thousands of record objects there stalls the Raft heartbeats for seconds
    (measured: 60,000 records took 1.3 s). A byte string unpickles in microseconds, and the
    encoding is the one ``/v1/log`` serves anyway.
    """

    command_id: str
    prev: str
    epoch: int
    batches: tuple[EncodedBatch, ...]

    @classmethod
    def of(cls, command_id: str, prev: str, epoch: int,
           record_batches: tuple[tuple[Record, ...], ...] | list[tuple[Record, ...]]) -> "Command":
        return cls(command_id, prev, epoch, tuple(encode_batch(b) for b in record_batches if b))


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
    """The replicated state machine. Only attributes assigned after ``super().__init__()`` replicate.

    Applying a command (pysyncobj's tick thread) only appends its encoded batches: the tick thread
    also answers Raft heartbeats, and pysyncobj checks a follower's election deadline *before* it
    reads the messages waiting on its sockets, so any long apply starts an election. The image is
    brought up to date elsewhere: on the leader it is the image the leader computed for the
    command (``expect``); on other nodes ``materialize`` replays the pending batches, from the
    controller's own loop or on the first read that needs the image.
    """

    def __init__(self, retention_records: int, on_applied: Callable[[AppliedCommand], None] | None = None) -> None:
        # Local, derived state (not part of the dump): rebuilt from the replicated state.
        self._lock = threading.RLock()
        self._materialize_lock = threading.Lock()
        self._retention_records = max(2, retention_records)
        self._on_applied = on_applied
        self._bases: list[int] = []
        self._image: Any = empty_image()
        self._pending: deque[list[Any]] = deque()  # batch entries applied but not yet in _image
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
        # [base_offset, epoch, EncodedBatch, its decoded JSON (filled on first read, then kept)]
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
        for entry in self.batches:
            if entry[0] > self.snapshot_offset:
                image = _replay_entry(image, entry)
        self._image = image
        self._pending.clear()
        self._bases = [b[0] for b in self.batches]
        self._snapshot_cache = None

    # -- the replicated command -----------------------------------------------------------------

    @replicated
    def append(self, command: Command) -> tuple[bool, int, int]:
        """Apply one command; rejected unless ``command.prev`` is the last applied command's id.

        The check is the same on every node, so a command computed against a view that never
        committed is rejected everywhere. Its records were replayed by the leader that computed
        it (that is how it got its view), so they replay on every node.
        """
        with self._lock:
            accepted = command.prev == self.last_command_id
            first = self.next_offset
            if accepted:
                epoch = int(command.epoch)
                new_batches: list[list[Any]] = []
                count = 0
                for batch in command.batches:
                    if batch[0] > 0:
                        new_batches.append([first + count, epoch, batch, None])
                        count += batch[0]
                self.batches.extend(new_batches)
                self._bases.extend(b[0] for b in new_batches)
                self.next_offset = first + count
                self.epoch = epoch
                self.last_command_id = command.command_id
                image = self._expected.pop(command.command_id, None)
                if image is not None and image.offset == self.next_offset - 1 and image.epoch == epoch:
                    # the leader's view when it computed the command was the committed image plus
                    # what is pending here, since its ``prev`` matched: its image is the replay
                    self._image = image
                    self._pending.clear()
                else:
                    self._pending.extend(new_batches)
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
        """Snapshot at the materialised image and drop the batches it covers, keeping the newest half."""
        kept_from = self.batches[0][0] if self.batches else self.next_offset
        if self.next_offset - kept_from <= self._retention_records:
            return
        keep_from_offset = min(self.next_offset - self._retention_records // 2, self._image.offset + 1)
        cut = bisect.bisect_left(self._bases, keep_from_offset)
        if cut == 0:
            return
        # Only a reference here: the image is immutable, and turning it into records on the Raft
        # thread could stall heartbeats on a large cluster. Dumps and restarts materialise it.
        self._snapshot_image = self._image
        self.snapshot_records = None
        self.snapshot_offset = self._image.offset
        self.snapshot_epoch = self._image.epoch
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

    # -- the image ------------------------------------------------------------------------------

    @property
    def pending_records(self) -> int:
        """Committed records not yet replayed into the image."""
        with self._lock:
            return self.next_offset - 1 - self._image.offset

    def materialize(self) -> Any:
        """Replay the pending batches into the image, outside the lock the tick thread takes."""
        with self._materialize_lock:
            with self._lock:
                base = self._image
                todo = list(self._pending)
            if not todo:
                return base
            image = base
            for entry in todo:
                image = _replay_entry(image, entry)
            with self._lock:
                if self._image is base:  # else the leader's own image replaced it meanwhile
                    self._image = image
                    for _ in todo:
                        self._pending.popleft()
                    self._maybe_drop_old_batches()
                return self._image

    # -- reads (any thread) ---------------------------------------------------------------------

    @property
    def image(self) -> Any:
        """The committed image (replaying what is pending first)."""
        if self._pending:
            return self.materialize()
        return self._image

    def committed_view(self) -> tuple[Any, str]:
        """The committed image and the id of the last applied command, read together."""
        while True:
            image = self.materialize()
            with self._lock:
                if not self._pending and self._image is image:
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
        image = self.image
        with self._lock:
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

        Batches are decoded on their first read (not on the Raft thread), outside the lock.
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
                    size = entry[2][0]
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
                encoded = entry[3] = decode_batch(entry[2])
            base = entry[0]
            records.extend((base + k, r) for k, r in enumerate(encoded) if base + k >= offset)
        return LogSlice(records=records, high_watermark=hw)

    def committed_offset_at_raft_index(self, raft_index: int) -> int:
        """The metadata log end offset once Raft entry ``raft_index`` was applied (best known)."""
        best = -1
        with self._lock:
            applied = list(self.applied_at_raft_index)
        for idx, next_offset in applied:
            if idx <= raft_index:
                best = next_offset
            else:
                break
        if best < 0:
            return self.next_offset if not applied else 0
        return best


def _replay_entry(image: Any, entry: list[Any]) -> Any:
    """Replay one kept batch entry ``[base, epoch, EncodedBatch, decoded or None]`` onto ``image``."""
    encoded = entry[3] if entry[3] is not None else decode_batch(entry[2])
    return advance_image(image, [decode_record(r) for r in encoded], entry[0], entry[1])


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
        appendEntriesBatchSizeBytes=raft.append_entries_batch_size_bytes,
        sendBufferSize=raft.socket_buffer_bytes,
        recvBufferSize=raft.socket_buffer_bytes,
        logCompactionMinEntries=raft.log_compaction_min_entries,
        logCompactionMinTime=raft.log_compaction_min_time_s,
        journalFile=os.path.join(config.node_data_dir, "raft.journal"),
        fullDumpFile=os.path.join(config.node_data_dir, "raft.dump"),
        onStateChanged=on_state_changed,
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


class _ReadFirstSyncObj(SyncObj):  # type: ignore[misc]
    """pysyncobj's node, reading its sockets before each tick's election check.

    pysyncobj checks a follower's election deadline at the start of a tick and reads the messages
    waiting on its sockets only at the end. A tick thread held up longer than the election timeout
    (CPU starvation on a busy machine, a long apply) therefore starts an election although the
    leader's heartbeats are sitting in its socket buffer, and the quorum churns under load. Reading
    first lets those heartbeats reset the deadline; a leader that is really gone sends none.
    """

    def _onTick(self, timeToWait: float = 0.0) -> None:  # noqa: N802, N803 - pysyncobj's names
        if self._SyncObj__transport.ready:
            self._poller.poll(0)
        super()._onTick(timeToWait)


class TickGaps:
    """How late pysyncobj's tick thread runs: the longest gap between two ticks, and the stalls.

    A follower whose tick thread is held up past the election timeout starts an election, whatever
    its sockets hold; so a gap near ``raft_min_timeout_s`` is the warning sign of leadership churn
    (CPU starvation, a long apply, a long GIL hold on the other thread).
    """

    def __init__(self, stall_ms: int) -> None:
        self.stall_ms = stall_ms
        self.last_mono_s = 0.0
        self.max_gap_ms = 0.0
        self.stalls = 0

    def on_tick(self) -> None:
        now = time.monotonic()
        if self.last_mono_s:
            gap_ms = (now - self.last_mono_s) * 1000
            if gap_ms > self.max_gap_ms:
                self.max_gap_ms = gap_ms
            if gap_ms > self.stall_ms:
                self.stalls += 1
                log.warning("raft tick thread stalled %.0f ms (elections start at %d ms)", gap_ms, 2 * self.stall_ms)
        self.last_mono_s = now


class RaftNode:
    """One pysyncobj node holding a :class:`CommittedLog`; thin accessors over its status."""

    def __init__(self, config: ControllerConfig, state: CommittedLog,
                 on_state_changed: Callable[[int, int], None], on_ready: Callable[[], None]) -> None:
        self.config = config
        self.state = state
        conf = make_syncobj_conf(config, on_state_changed, on_ready)
        align_journal_with_dump(conf.journalFile, conf.fullDumpFile)
        self.sync = _ReadFirstSyncObj(config.me.raft, config.peer_raft_addresses(), conf=conf, consumers=[state])
        self.tick_gaps = TickGaps(stall_ms=int(config.raft.raft_min_timeout_s * 1000 / 2))
        self.sync.addOnTickCallback(self.tick_gaps.on_tick)

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
