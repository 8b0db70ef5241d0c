"""The replicated metadata log: its commands, the log they build, and the image built from it.

The replicated state is the committed metadata log: a list of record batches, each one
controller operation's records, with contiguous offsets starting at 0. The Raft node (pysyncobj,
in a process of its own: ``raft_process.py``) orders commands and keeps them as encoded bytes;
every controller applies the committed commands, in Raft order, to its copy of the log
(``CommittedLog``) and to its ``MetadataImage``; offsets are therefore identical on every node.

A command is a group of operation batches computed by the active controller against its view
of the log *including* commands not yet committed. It names the command it was computed after
(``prev``); applying it checks that this is still the last applied command, so a command that was
computed against a view that never committed (a deposed leader, a call pysyncobj forwarded to
another node, a timed-out call applied late, a duplicate) is rejected, deterministically, on every
node (``LogCore.apply``, the one rule both processes run). Application is thus idempotent and
never mixes views.

Old batches are dropped once more than ``retention_records`` are kept; a reader asking for a
dropped offset gets a snapshot of the image instead (Kafka's metadata snapshots). The Raft process
drops its copy of them once the controller hands it that snapshot (``on_compacted``).
"""
from __future__ import annotations

import bisect
import dataclasses
import json
import logging
import threading
import time
from collections import OrderedDict, deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Protocol

from metadata_quorum.records import Record, decode_record, encode_record

if TYPE_CHECKING:
    from metadata_quorum.image import MetadataImage

log = logging.getLogger(__name__)

# Decoded batches kept for readers, least recently read dropped first once they hold more records
# than this. Every reader (each broker's log follower, each follower controller) reads the same
# new batches within moments of each other, so a small cache spares almost every decode; kept for
# the whole retained log (100,000 records by default) the decoded JSON took ~0.7 KiB per record,
# ~5 times the encoded bytes, and was most of a controller's memory at 10,000 partitions.
DECODED_CACHE_RECORDS = 20_000


def empty_image() -> MetadataImage:
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


def encode_snapshot(image: Any) -> EncodedBatch:
    """The image as records, encoded as one batch (what the Raft process keeps for dropped batches)."""
    return encode_batch(image_records(image))


@dataclass(frozen=True)
class Command:
    """One replicated command: operation batches computed after command ``prev``, in term ``epoch``.

    Each batch travels as its records' JSON encoding (``EncodedBatch``), not as record objects:
    pysyncobj unpickles every command on its tick thread, on every node, before applying it, and
    unpickling tens of thousands of record objects there stalls the Raft heartbeats for seconds
    (measured: 60,000 records took 1.3 s). A byte string unpickles in microseconds, and the
    encoding is the one ``/v1/log`` serves anyway.

    One operation's batch larger than a command may carry is split over consecutive commands
    (``split_commands``): ``open_last`` says the last batch goes on in the next command,
    ``continues`` that the first batch is the rest of the previous command's open one. The log
    holds the pieces aside and appends the batch only with its last piece, so an operation's
    records still become visible all at once, at the offsets the leader computed.
    """

    command_id: str
    prev: str
    epoch: int
    batches: tuple[EncodedBatch, ...]
    continues: bool = False
    open_last: bool = False

    @classmethod
    def of(cls, command_id: str, prev: str, epoch: int,
           record_batches: tuple[tuple[Record, ...], ...] | list[tuple[Record, ...]]) -> "Command":
        return cls(command_id, prev, epoch, tuple(encode_batch(b) for b in record_batches if b))

    @property
    def record_count(self) -> int:
        return sum(b[0] for b in self.batches)


@dataclass(frozen=True)
class CommandPlan:
    """The shape of one command of a split group: its batches' records, and how it joins the next."""

    batches: tuple[tuple[Record, ...], ...]
    continues: bool
    open_last: bool


def split_commands(record_batches: list[tuple[Record, ...]], max_records: int) -> list[CommandPlan]:
    """Pack operation batches into commands of at most ``max_records`` records each.

    Small batches share a command (group commit); a batch that does not fit in what is left of
    the current command is cut, and its pieces fill the following commands. Bounding a command
    bounds the work every node's Raft thread does for it (pickling, the journal write, the send)
    and the time one JSON encoding holds the interpreter on the leader.
    """
    limit = max(1, max_records)
    plans: list[CommandPlan] = []
    current: list[tuple[Record, ...]] = []
    room = limit
    continues = False
    for batch in record_batches:
        rest = tuple(batch)
        while rest:
            piece, rest = rest[:room], rest[room:]
            current.append(piece)
            room -= len(piece)
            if room == 0:
                plans.append(CommandPlan(tuple(current), continues, open_last=bool(rest)))
                continues = bool(rest)
                current, room = [], limit
    if current:
        plans.append(CommandPlan(tuple(current), continues, open_last=False))
    return plans


def join_batches(pieces: list[EncodedBatch]) -> EncodedBatch:
    """Join the encoded pieces of one batch (JSON arrays) into one array, without decoding them."""
    if len(pieces) == 1:
        return pieces[0]
    inner = [raw[1:-1] for _count, raw in pieces if _count > 0]
    return sum(c for c, _raw in pieces), b"[" + b",".join(inner) + b"]"


@dataclass(frozen=True)
class AppliedCommand:
    """What applying one command did, handed to the listener (on the thread reading the Raft process)."""

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
    batch_end: bool = True  # the last record ends its batch (False only for a read that may cut one)


class LogCore:
    """The log of encoded batches and the rule that applies a command to it (pure, no I/O).

    Both processes hold one and apply the same committed commands in the same order: the Raft
    process so that its dump and the snapshots it sends lagging followers hold the log, the
    controller so that it can serve the log and build its image. ``snapshot`` is the image at
    ``snapshot_offset`` encoded as one batch (``None`` where the holder keeps the image itself).

    A kept batch is ``[base_offset, epoch, EncodedBatch, its decoded JSON or None]``; the last slot
    is a read cache of the controller's and never leaves the process.
    """

    def __init__(self) -> None:
        self.snapshot_offset = -1
        self.snapshot_epoch = 0
        self.snapshot: EncodedBatch | None = (0, b"[]")
        self.batches: list[list[Any]] = []
        self.bases: list[int] = []
        self.last_command_id = ""
        self.next_offset = 0
        self.epoch = 0
        # Pieces of a batch split over commands whose last piece has not been applied yet.
        self.open_pieces: list[EncodedBatch] = []

    def apply(self, command: Command) -> tuple[bool, int, list[list[Any]]]:
        """Apply one command: (accepted, the offset its records start at, the batches it completed).

        Rejected unless ``command.prev`` is the last applied command's id; a continuation also
        needs the pieces it continues, and any other accepted command drops them (the leader that
        was splitting an operation lost its term before the last piece: the operation never happened).
        """
        first = self.next_offset
        accepted = command.prev == self.last_command_id and (bool(self.open_pieces) or not command.continues)
        if not accepted:
            return False, first, []
        epoch = int(command.epoch)
        batches = list(command.batches)
        pieces, self.open_pieces = self.open_pieces, []
        if command.continues and command.open_last and len(batches) == 1:
            self.open_pieces, batches = pieces + batches, []  # a middle piece: joined with the last
        elif command.continues and batches:
            batches[0] = join_batches(pieces + [batches[0]])
        elif pieces:
            log.warning("dropping %d records of an operation whose last piece never came",
                        sum(p[0] for p in pieces))
        if command.open_last and batches:
            self.open_pieces = [batches.pop()]
        new_batches: list[list[Any]] = []
        count = 0
        for batch in batches:
            if batch[0] > 0:
                new_batches.append([first + count, epoch, batch, None])
                count += batch[0]
        self.batches.extend(new_batches)
        self.bases.extend(b[0] for b in new_batches)
        self.next_offset = first + count
        self.epoch = epoch
        self.last_command_id = command.command_id
        return True, first, new_batches

    def drop_before(self, keep_from: int, snapshot_offset: int, epoch: int, snapshot: EncodedBatch | None) -> bool:
        """Drop the batches that start before ``keep_from``, covered by a snapshot at ``snapshot_offset``.

        The snapshot is an image, so its offset ends a batch, and every batch starting at or before
        it ends there too: what is dropped is covered. Batches between ``keep_from`` and the
        snapshot stay readable. A snapshot older than the one held is ignored.
        """
        if snapshot_offset <= self.snapshot_offset or snapshot_offset >= self.next_offset \
                or keep_from > snapshot_offset + 1:
            return False
        cut = bisect.bisect_left(self.bases, keep_from)
        del self.batches[:cut]
        del self.bases[:cut]
        self.snapshot_offset, self.snapshot_epoch, self.snapshot = snapshot_offset, epoch, snapshot
        return True

    @property
    def log_start_offset(self) -> int:
        return self.batches[0][0] if self.batches else self.next_offset

    def to_dict(self) -> dict[str, Any]:
        """The state as plain data (pysyncobj's dump, a reset sent to the controller)."""
        return {
            "snapshot_offset": self.snapshot_offset,
            "snapshot_epoch": self.snapshot_epoch,
            "snapshot": self.snapshot,
            "batches": [[b[0], b[1], b[2], None] for b in self.batches],
            "last_command_id": self.last_command_id,
            "next_offset": self.next_offset,
            "epoch": self.epoch,
            "open_pieces": list(self.open_pieces),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "LogCore":
        core = cls()
        core.snapshot_offset = int(data["snapshot_offset"])
        core.snapshot_epoch = int(data["snapshot_epoch"])
        snapshot = data.get("snapshot")
        if snapshot is None and data.get("snapshot_records") is not None:  # a dump of the older layout
            snapshot = encode_batch(list(data["snapshot_records"]))
        core.snapshot = tuple(snapshot) if snapshot is not None else None
        core.batches = [list(b) for b in data["batches"]]
        core.bases = [b[0] for b in core.batches]
        core.last_command_id = str(data["last_command_id"])
        core.next_offset = int(data["next_offset"])
        core.epoch = int(data["epoch"])
        core.open_pieces = [tuple(p) for p in data.get("open_pieces", [])]
        return core


class CommittedLog:
    """The controller's copy of the committed log and the image built from it.

    Commands arrive from the Raft process (``apply_committed``, on the thread reading its pipe)
    in commit order; applying one only appends its encoded batches, so the next commit is not
    held up. The image is brought up to date elsewhere: on the leader it is the image the leader
    computed for the command (``expect``); on other nodes ``materialize`` replays the pending
    batches, from the controller's own loop or on the first read that needs the image.
    """

    def __init__(self, retention_records: int, on_applied: Callable[[AppliedCommand], None] | None = None) -> None:
        self._lock = threading.RLock()
        self._materialize_lock = threading.Lock()
        self._retention_records = max(2, retention_records)
        self._on_applied = on_applied
        self.on_compacted: Callable[[int, int, int, Any], None] | None = None  # (keep_from, offset, epoch, image)
        self.core = LogCore()
        self._image: MetadataImage = empty_image()
        self._pending: deque[list[Any]] = deque()  # batch entries applied but not yet in _image
        self._snapshot_cache: tuple[int, list[dict[str, Any]]] | None = None
        self._resets = 0  # reset() calls: a snapshot built from an image before one is not kept
        self._expected: dict[str, Any] = {}  # command id -> image after it, as the leader computed it
        self.applied_at_raft_index: deque[tuple[int, int]] = deque(maxlen=4096)
        self.last_apply_monotonic = 0.0
        # base offset -> kept batch entry whose decoded slot is filled, least recently read first
        self._decoded: OrderedDict[int, list[Any]] = OrderedDict()
        self._decoded_records = 0
        self.decoded_cache_records = DECODED_CACHE_RECORDS

    @property
    def last_command_id(self) -> str:
        return self.core.last_command_id

    # -- what the Raft process reports ---------------------------------------------------------------

    def reset(self, data: dict[str, Any]) -> None:
        """Take the Raft process's whole log (its dump at start-up, or a snapshot from the leader)."""
        core = LogCore.from_dict(data)
        image = empty_image()
        if core.snapshot_offset >= 0 and core.snapshot is not None:
            records = [decode_record(r) for r in decode_batch(core.snapshot)]
            image = advance_image(image, records, core.snapshot_offset - len(records) + 1, core.snapshot_epoch,
                                  last_offset=core.snapshot_offset)
        for entry in core.batches:
            if entry[0] > core.snapshot_offset:
                image = _replay_entry(image, entry)
        with self._lock:
            self.core = core
            self._image = image
            self._pending.clear()
            self._expected.clear()
            self._snapshot_cache = None
            self._resets += 1
            self._decoded.clear()
            self._decoded_records = 0

    def apply_committed(self, command: Command, raft_index: int = 0) -> AppliedCommand:
        """Apply one committed command (the same rule as the Raft process: ``LogCore.apply``)."""
        with self._lock:
            accepted, first, new_batches = self.core.apply(command)
            if accepted:
                image = self._expected.pop(command.command_id, None)
                if image is not None and image.offset == self.core.next_offset - 1 and image.epoch == self.core.epoch:
                    # the leader's view when it computed the command was the committed image plus
                    # what is pending here, since its ``prev`` matched: its image is the replay
                    self._image = image
                    self._pending.clear()
                else:
                    self._pending.extend(new_batches)
                self._maybe_drop_old_batches()
            self._expected.pop(command.command_id, None)
            self.applied_at_raft_index.append((raft_index, self.core.next_offset))
            self.last_apply_monotonic = time.monotonic()
            result = AppliedCommand(command.command_id, accepted, first, self.core.next_offset, self.core.epoch)
        if self._on_applied is not None:
            try:
                self._on_applied(result)
            except Exception:  # a listener must never stop the log
                log.exception("metadata log listener failed")
        return result

    def _maybe_drop_old_batches(self) -> None:
        """Snapshot at the materialised image and drop the batches it covers, keeping the newest half."""
        core = self.core
        if core.next_offset - core.log_start_offset <= self._retention_records:
            return
        keep_from_offset = min(core.next_offset - self._retention_records // 2, self._image.offset + 1)
        if bisect.bisect_left(core.bases, keep_from_offset) == 0:
            return
        # Only a reference here: the image is immutable, and turning it into records here would
        # hold up the next commit on a large cluster. Readers and the Raft process encode it.
        image = self._image
        if core.drop_before(keep_from_offset, image.offset, image.epoch, None):
            if self.on_compacted is not None:
                self.on_compacted(keep_from_offset, image.offset, image.epoch, image)

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
            return int(self.core.next_offset) - 1 - self._image.offset

    @property
    def materialized_offset(self) -> int:
        """The offset of the image as replayed so far (never replays: cheap enough for health checks)."""
        return int(self._image.offset)

    def materialize(self) -> Any:
        """Replay the pending batches into the image, outside the lock the pipe reader takes."""
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
                    return self._image, self.core.last_command_id

    @property
    def high_watermark(self) -> int:
        """Kafka's high watermark: the offset the next committed record will get."""
        return self.core.next_offset

    @property
    def log_start_offset(self) -> int:
        with self._lock:
            return self.core.log_start_offset

    def snapshot(self, latest: bool = True) -> tuple[int, list[dict[str, Any]]]:
        """The committed image as records, with its offset.

        ``latest=False`` (a reader whose offset the log dropped): the snapshot built last, as long
        as the log still holds every record after it. The reader goes on from there with the log,
        and the image moves with every record, so an exact one would be rebuilt for nearly every
        such reader: at 30,000 partitions that is 150,000 records to encode, seconds each time."""
        with self._lock:
            resets = self._resets  # read before the image: a reset after it drops what is built
        image = self.image
        with self._lock:
            cache = self._snapshot_cache
            log_start = self.core.log_start_offset
        if cache is not None and (cache[0] == image.offset or (not latest and cache[0] + 1 >= log_start)):
            return cache
        result = (image.offset, [encode_record(r) for r in image_records(image)])
        with self._lock:
            # kept although the image moved on while it was built (it always does under load):
            # what makes it usable is the log holding what follows it, checked when it is read
            if self._resets == resets and (self._snapshot_cache is None or self._snapshot_cache[0] < result[0]):
                self._snapshot_cache = result
        return result

    def read(self, offset: int, max_records: int, cut_batches: bool = False) -> LogSlice:
        """Whole batches starting at ``offset`` (at least one if any), or a snapshot if dropped.

        With ``cut_batches`` at most ``max_records`` records, the last batch possibly cut short
        (``batch_end`` says whether it was): one operation over thousands of partitions is one
        batch of tens of thousands of records, and a reader that decodes it whole (one
        ``json.loads``) holds its interpreter for seconds, its heartbeat thread included. Such a
        reader must apply nothing of a batch until it has all of it.

        Batches are decoded on their first read, outside the lock.
        """
        entries: list[list[Any]] = []
        with self._lock:
            core = self.core
            hw = core.next_offset
            start = core.log_start_offset
            dropped = offset < start
            if not dropped:
                i = max(0, bisect.bisect_right(core.bases, offset) - 1)
                count = 0
                while i < len(core.batches):
                    entry = core.batches[i]
                    i += 1
                    size = entry[2][0]
                    if entry[0] + size <= offset:
                        continue
                    if entries and count + size > max_records:
                        if cut_batches and count < max_records:
                            entries.append(entry)
                        break
                    entries.append(entry)
                    count += size
        if dropped:
            snap_offset, snap_records = self.snapshot(latest=False)
            return LogSlice(records=[], high_watermark=snap_offset + 1, snapshot_offset=snap_offset,
                            snapshot_records=snap_records)
        records: list[tuple[int, dict[str, Any]]] = []
        for entry in entries:
            encoded = entry[3]
            if encoded is None:
                encoded = decode_batch(entry[2])
            self._cache_decoded(entry, encoded)
            base = entry[0]
            start = max(0, offset - base)
            stop = min(len(encoded), start + max_records - len(records)) if cut_batches else len(encoded)
            records.extend((base + k, encoded[k]) for k in range(start, stop))
        if not cut_batches or not records:
            return LogSlice(records=records, high_watermark=hw)
        last = entries[-1]
        return LogSlice(records=records, high_watermark=hw, batch_end=records[-1][0] == last[0] + last[2][0] - 1)

    def _cache_decoded(self, entry: list[Any], decoded: list[dict[str, Any]]) -> None:
        """Keep ``entry``'s decoded records for the next reader, as the most recently read; drop
        the least recently read beyond ``decoded_cache_records`` (the last one read always stays,
        however large: readers take a large batch in pieces, each of which would decode it again)."""
        with self._lock:
            base = entry[0]
            if entry[3] is None:
                entry[3] = decoded
                self._decoded[base] = entry
                self._decoded_records += len(decoded)
            elif base in self._decoded:
                self._decoded.move_to_end(base)
            while self._decoded_records > self.decoded_cache_records and len(self._decoded) > 1:
                _base, old = self._decoded.popitem(last=False)
                self._decoded_records -= len(old[3] or ())
                old[3] = None

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
            return self.core.next_offset if not applied else 0
        return best


def _replay_entry(image: Any, entry: list[Any]) -> Any:
    """Replay one kept batch entry ``[base, epoch, EncodedBatch, decoded or None]`` onto ``image``."""
    encoded = entry[3] if entry[3] is not None else decode_batch(entry[2])
    return advance_image(image, [decode_record(r) for r in encoded], entry[0], entry[1])


class RaftPeer(Protocol):
    """What the active controller needs of its Raft node (``raft_node.RaftNode``, or a test's fake)."""

    is_leader: bool
    term: int

    def submit(self, command: Command, callback: Callable[[Any, int], None]) -> None: ...

    def leader_id(self) -> int | None: ...

    def status(self) -> dict[str, Any]: ...

    def last_response_monotonic(self) -> dict[str, float]: ...
