"""The S3 WAL's decisions, pure: which appends go into the next WAL object, when an append may be
acknowledged, which WAL objects may be deleted, and how a stream's tail is recovered from them.

With ``wal.mode = s3`` a broker keeps no state of its own: appends of all its streams are batched
into **WAL objects** in the bucket, and an append is acknowledged only once the object holding it
is stored. Nothing here does I/O or reads a clock; the shell (``s3_wal.py``) passes the time in.

Object layout (the entries use the local WAL's entry encoding, ``wal.py``)::

    "FRYWAL01" | broker_id i32 | broker_epoch i64 | seq i64 | entry*

Keys are ``<wal prefix>/broker-<id>/<wal name>/<seq, 20 digits>-<random>``. ``seq`` orders one
WAL's objects: it is at least the previous one + 1 and at least ``wall_ms * 1024`` when sealed, so
it keeps growing across restarts of the broker even when every earlier object was deleted, and
an object sealed by a process that was stopped and resumed sorts before everything sealed after it.
"""
from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

from metadata_quorum.kernel.errors import ErrorCode, FerryError
from stream_storage.recovery import recoverable_chain
from stream_storage.wal import KIND_DATA, KIND_VOID, WalEntry, _parse_segment

MAGIC = b"FRYWAL01"
_HEADER = struct.Struct(">8siqq")
HEADER_BYTES = _HEADER.size
SEQ_PER_MS = 1024
_KEY_RE = re.compile(r"^(?P<wal>.+)/(?P<seq>\d{20})-(?P<nonce>[0-9a-f]{1,64})$")


# -- keys and the object format ----------------------------------------------------------------

def broker_prefix(key_prefix: str, broker_id: int) -> str:
    """Where every WAL object of ``broker_id`` lives (all its WALs: one per log dir)."""
    return f"{key_prefix.rstrip('/')}/broker-{broker_id}/"


def wal_prefix(key_prefix: str, broker_id: int, wal_name: str) -> str:
    """The prefix of one WAL of the broker (``wal_name``: ``main``, or a log dir's id)."""
    if not wal_name or "/" in wal_name:
        raise ValueError(f"invalid WAL name {wal_name!r}")
    return f"{broker_prefix(key_prefix, broker_id)}{wal_name}/"


def object_key(prefix: str, seq: int, nonce: str) -> str:
    return f"{prefix}{seq:020d}-{nonce}"


@dataclass(frozen=True)
class WalKey:
    key: str
    wal: str  # the WAL's prefix, without the trailing slash
    seq: int


def parse_key(key: str) -> WalKey | None:
    """The WAL and sequence number of a WAL object key; None for a key that is not one."""
    match = _KEY_RE.match(key)
    if match is None:
        return None
    return WalKey(key, match.group("wal"), int(match.group("seq")))


def encode_header(broker_id: int, broker_epoch: int, seq: int) -> bytes:
    return _HEADER.pack(MAGIC, broker_id, broker_epoch, seq)


@dataclass(frozen=True)
class WalObject:
    """One WAL object as read back: its entries carry ``position = seq << 32 | byte offset`` so
    that sorting by position is the order they were written in."""

    key: str
    broker_id: int
    broker_epoch: int
    seq: int
    entries: tuple[WalEntry, ...]


def parse_object(key: str, data: bytes) -> WalObject:
    """Strict: an object is written whole, so any bad byte is corruption (KAFKA_STORAGE_ERROR)."""
    if len(data) < HEADER_BYTES:
        raise FerryError(ErrorCode.KAFKA_STORAGE_ERROR, f"WAL object {key} is {len(data)} bytes: shorter than "
                         f"its header")
    magic, broker_id, broker_epoch, seq = _HEADER.unpack_from(data, 0)
    if magic != MAGIC:
        raise FerryError(ErrorCode.KAFKA_STORAGE_ERROR, f"WAL object {key} does not start with {MAGIC!r}")
    parsed = parse_key(key)
    if parsed is not None and parsed.seq != seq:
        raise FerryError(ErrorCode.KAFKA_STORAGE_ERROR, f"WAL object {key} holds seq {seq}, its key another")
    body = data[HEADER_BYTES:]
    entries, valid = _parse_segment(body, 0)
    if valid != len(body):
        raise FerryError(ErrorCode.KAFKA_STORAGE_ERROR, f"WAL object {key} is corrupt at byte "
                         f"{HEADER_BYTES + valid} of {len(data)}")
    placed = tuple(WalEntry(e.stream_id, e.epoch, e.start_offset, e.end_offset, e.payload,
                            (seq << 32) | e.position, e.kind) for e in entries)
    return WalObject(key, broker_id, broker_epoch, seq, placed)


# -- batching appends into objects (the write side) ---------------------------------------------

@dataclass(frozen=True)
class WalBatchPolicy:
    """``interval_ms``: how long the oldest waiting append may wait before its object is sealed;
    ``max_bytes``: an object is sealed as soon as this much waits; ``max_inflight``: PUTs at once
    (more waiting appends go into the next object, which is then larger)."""

    interval_ms: float = 250.0
    max_bytes: int = 8 * 1024 * 1024
    max_inflight: int = 4

    def __post_init__(self) -> None:
        if self.interval_ms < 0 or self.max_bytes < 1 or self.max_inflight < 1:
            raise ValueError(f"invalid WAL batch policy {self!r}")


@dataclass(frozen=True)
class Seal:
    """Put these tickets (in this order) into one object with this ``seq``, now."""

    seq: int
    tickets: tuple[int, ...]
    size_bytes: int


@dataclass(frozen=True)
class Wait:
    """Nothing to seal before ``ms`` from now (None: until an append or a PUT completes)."""

    ms: float | None


@dataclass(frozen=True)
class Resolved:
    """An object's outcome, handed out in seq order: its tickets are acknowledged (``stored``)
    or failed."""

    seq: int
    tickets: tuple[int, ...]
    stored: bool


@dataclass
class _Sealed:
    seq: int
    tickets: tuple[int, ...]
    outcome: bool | None = None


class WalBatchPlanner:
    """Appends become tickets; :meth:`next_action` says when to seal the next object; outcomes of
    PUTs come back through :meth:`on_stored` / :meth:`on_failed`, and objects are resolved in seq
    order, so an append is never acknowledged while an earlier one of its WAL may still fail (the
    offsets of a stream become durable in order, as with the local WAL's in-order syncs)."""

    def __init__(self, policy: WalBatchPolicy, last_seq: int = 0) -> None:
        self.policy = policy
        self.last_seq = last_seq
        self._next_ticket = 0
        self._pending: list[tuple[int, int]] = []  # (ticket, size)
        self._pending_bytes = 0
        self._oldest_ms: float | None = None
        self._sealed: list[_Sealed] = []  # in seq order, unresolved or waiting for an earlier one

    @property
    def pending_bytes(self) -> int:
        return self._pending_bytes

    @property
    def inflight(self) -> int:
        return sum(1 for s in self._sealed if s.outcome is None)

    @property
    def idle(self) -> bool:
        return not self._pending and not self._sealed

    def add(self, size_bytes: int, now_ms: float) -> int:
        """A new append of ``size_bytes``; returns its ticket."""
        ticket = self._next_ticket
        self._next_ticket += 1
        self._pending.append((ticket, size_bytes))
        self._pending_bytes += size_bytes
        if self._oldest_ms is None:
            self._oldest_ms = now_ms
        return ticket

    def next_action(self, now_ms: float, wall_ms: int, flush: bool = False) -> Seal | Wait:
        """Seal when ``max_bytes`` wait, when the oldest waited ``interval_ms``, or on ``flush``
        (closing); never more than ``max_inflight`` objects unresolved."""
        if not self._pending:
            return Wait(None)
        if self.inflight >= self.policy.max_inflight:
            return Wait(None)
        assert self._oldest_ms is not None
        waited = now_ms - self._oldest_ms
        if not flush and self._pending_bytes < self.policy.max_bytes and waited < self.policy.interval_ms:
            return Wait(self.policy.interval_ms - waited)
        take, size = 0, 0
        for _ticket, n in self._pending:  # at least one; no more than max_bytes when more than one
            if take and size + n > self.policy.max_bytes:
                break
            take += 1
            size += n
        tickets = tuple(t for t, _n in self._pending[:take])
        self._pending = self._pending[take:]
        self._pending_bytes -= size
        self._oldest_ms = now_ms if self._pending else None
        self.last_seq = max(self.last_seq + 1, wall_ms * SEQ_PER_MS)
        self._sealed.append(_Sealed(self.last_seq, tickets))
        return Seal(self.last_seq, tickets, size)

    def on_stored(self, seq: int) -> list[Resolved]:
        return self._settle(seq, True)

    def on_failed(self, seq: int) -> list[Resolved]:
        return self._settle(seq, False)

    def _settle(self, seq: int, stored: bool) -> list[Resolved]:
        for sealed in self._sealed:
            if sealed.seq == seq:
                if sealed.outcome is not None:
                    raise ValueError(f"WAL object {seq} already resolved")
                sealed.outcome = stored
                break
        else:
            raise ValueError(f"WAL object {seq} was never sealed")
        out: list[Resolved] = []
        while self._sealed and self._sealed[0].outcome is not None:
            head = self._sealed.pop(0)
            out.append(Resolved(head.seq, head.tickets, bool(head.outcome)))
        return out


# -- which objects may go ------------------------------------------------------------------------

@dataclass(frozen=True)
class ObjectSummary:
    """What a stored WAL object holds, enough to decide its deletion: per stream the end of its
    data, and the streams it holds void markers of."""

    key: str
    seq: int
    size_bytes: int
    data_ends: dict[int, int] = field(default_factory=dict)
    voids: frozenset[int] = frozenset()
    data_epochs: dict[int, int] = field(default_factory=dict)  # per stream, the highest epoch of its data


def summarize(key: str, seq: int, size_bytes: int, entries: Iterable[WalEntry]) -> ObjectSummary:
    ends: dict[int, int] = {}
    epochs: dict[int, int] = {}
    voids: set[int] = set()
    for entry in entries:
        if entry.kind == KIND_VOID:
            voids.add(entry.stream_id)
        elif entry.kind == KIND_DATA:
            ends[entry.stream_id] = max(ends.get(entry.stream_id, 0), entry.end_offset)
            epochs[entry.stream_id] = max(epochs.get(entry.stream_id, entry.epoch), entry.epoch)
    return ObjectSummary(key, seq, size_bytes, ends, frozenset(voids), epochs)


def deletable(objects: Sequence[ObjectSummary], committed_end: Callable[[int], int]) -> list[str]:
    """Keys of WAL objects nothing needs any more: every data range in it is committed in stream
    objects (``committed_end(stream) >= end``; a released stream answers "all"), and every void
    marker in it still has work to do only while an earlier object that stays holds data of that
    stream (the marker is what keeps those stale entries from being recovered)."""
    return _unneeded(objects, lambda obj, sid, end: committed_end(sid) < end)


@dataclass(frozen=True)
class StreamView:
    """What the metadata image says of a stream, as far as deciding whether a WAL needs it."""

    epoch: int
    end_offset: int  # everything below is in committed stream objects
    owner: int
    opened: bool
    wal_owners: frozenset[int]  # brokers whose WALs the next recovery reads (the controller's wal_owners)


def orphan_deletable(objects: Sequence[ObjectSummary], broker_id: int,
                     stream_of: Callable[[int], StreamView | None]) -> list[str]:
    """Keys of one WAL's objects of ``broker_id`` — a broker that is not live, so nobody trims
    them — that no recovery can need. Data of a stream in an object is needed unless:

    * the stream is gone, or its committed end covers it; or
    * the stream has moved on to a later epoch than that data's and the broker's WAL is neither
      the stream's current owner's nor named in its ``wal_owners``: the broker's ownership ended
      with a clean close (everything it acknowledged was committed) or a later owner recovered
      its tail and said so.

    Metadata only moves forward (epochs grow; a broker enters ``wal_owners`` in the very record
    that moves the epoch past its own), so a stale image only keeps objects longer. Void markers
    stay while an earlier object that stays holds data of their stream, as in :func:`deletable`.
    """
    def needed(obj: ObjectSummary, sid: int, end: int) -> bool:
        view = stream_of(sid)
        if view is None or view.end_offset >= end:
            return False
        moved_on = view.epoch > obj.data_epochs.get(sid, view.epoch)
        return not moved_on or broker_id in view.wal_owners or (view.opened and view.owner == broker_id)

    return _unneeded(objects, needed)


def _unneeded(objects: Sequence[ObjectSummary], needed: Callable[[ObjectSummary, int, int], bool]) -> list[str]:
    live_data: set[int] = set()  # streams with data in earlier objects that stay
    out: list[str] = []
    for obj in sorted(objects, key=lambda o: o.seq):
        data_done = not any(needed(obj, sid, end) for sid, end in obj.data_ends.items())
        voids_done = not (obj.voids & live_data)
        if data_done and voids_done:
            out.append(obj.key)
        else:
            live_data.update(obj.data_ends)
    return out


# -- recovery ------------------------------------------------------------------------------------

def recovery_plan(owners: Sequence[tuple[Iterable[WalObject], int | None]], stream_id: int,
                  from_offset: int) -> list[WalEntry]:
    """The acknowledged tail of ``stream_id`` from the WAL objects of one or more brokers, each
    given with ``owner_epoch``: the epoch that broker last held the stream with, as the controller
    recorded it (entries of later epochs were never that broker's to acknowledge). A broker has
    one WAL per log dir, and several brokers take part when owners died one after another before
    any recovered its predecessor's tail (the controller's ``wal_owners``): the run continues from
    one WAL to another where the first ends (``recovery.recoverable_chain``).

    An old owner that was stopped and resumed can only add objects with entries of its own
    epoch, sealed before it stopped: the new owner either listed them (they reached S3 before it
    opened the stream, so the old owner may have acknowledged them) or they sit past the offsets
    it recovered, where its own, higher-epoch entries win and its void marker drops them on any
    later recovery from the same WAL; and once the new owner has recovered, the controller no
    longer names the old owner's WAL to anyone.
    """
    wals: list[tuple[list[WalEntry], int | None]] = []
    for objects, owner_epoch in owners:
        by_wal: dict[str, list[WalEntry]] = {}
        for obj in objects:
            parsed = parse_key(obj.key)
            by_wal.setdefault(parsed.wal if parsed is not None else "", []).extend(
                e for e in obj.entries if e.stream_id == stream_id)
        wals.extend((by_wal[w], owner_epoch) for w in sorted(by_wal))
    return recoverable_chain(wals, stream_id, from_offset)
