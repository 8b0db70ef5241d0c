"""Incremental fetch sessions (KIP-227) as a pure state machine: a bounded cache of sessions.

A consumer that fetches many partitions from one broker need not name them all in every Fetch:
its first full fetch (session id 0, epoch 0) creates a session holding the partitions and their
fetch parameters, and the answer carries the new session id. Each later fetch (that id, epochs
1, 2, ...) names only what changed — partitions added or whose offset, max bytes or leader epoch
moved, and partitions to forget — and reads every partition of the session; its answer lists
only the partitions with something new: records, a changed high watermark or log start offset,
or an error. Epoch -1 closes a session (a sessionless full fetch, as before sessions); epoch 0
with a session id replaces that session by a new one.

The rules follow Kafka's FetchSession.scala (FetchSessionCache, FullFetchContext,
IncrementalFetchContext): an unknown session id is FETCH_SESSION_ID_NOT_FOUND, an epoch other
than the one expected is INVALID_FETCH_SESSION_EPOCH (the client then starts a new session); a
partition that returned records moves to the end of the session's order, so others go first
when the response's byte budget runs out. The cache holds at most ``max_sessions`` (Kafka's
``max.incremental.fetch.session.cache.slots``, 1000). When it is full a new session takes the
slot of the least recently used one idle for ``eviction_ms`` (Kafka's
``min.incremental.fetch.session.eviction.ms``, 120 s), else of the smallest session if it is
smaller than the new one (least recently used first among equals), else no session is created
(the answer's session id is 0 and the client keeps making full fetches). The caller supplies
the clock (``now_ms``) and the session ids; nothing here does I/O.
"""
from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import Callable, Sequence

from metadata_quorum.kernel.errors import ErrorCode

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
DEFAULT_MAX_SESSIONS = 1000
DEFAULT_EVICTION_MS = 120_000
_INT32_MAX = 2 ** 31 - 1

PartitionKey = tuple[str, int]


@dataclass(frozen=True)
class FetchPartition:
    """What a fetch asks of one partition."""

    topic: str
    partition: int
    fetch_offset: int
    partition_max_bytes: int
    current_leader_epoch: int | None = None

    @property
    def key(self) -> PartitionKey:
        return self.topic, self.partition


@dataclass(frozen=True)
class PartitionOutcome:
    """What reading one partition gave, as far as the session cares."""

    records_bytes: int
    high_watermark: int
    log_start_offset: int
    error: bool = False


@dataclass
class _Cached:
    request: FetchPartition
    #: what the client was last told (-1 after an error, so the next answer includes it again)
    high_watermark: int = -1
    log_start_offset: int = -1


@dataclass
class FetchSession:
    session_id: int
    #: the epoch the next incremental fetch must carry
    epoch: int
    partitions: dict[PartitionKey, _Cached]
    last_used_ms: int

    @property
    def size(self) -> int:
        return len(self.partitions)


def next_epoch(epoch: int) -> int:
    """Kafka's FetchMetadata.nextEpoch: 1, 2, ... wrapping to 1 after the largest int32."""
    return 1 if epoch >= _INT32_MAX or epoch < 0 else epoch + 1


@dataclass
class FetchContext:
    """One fetch's view of its session: which partitions to read (``partitions``, in order) and,
    once read, which to answer (:meth:`answer`)."""

    partitions: list[FetchPartition]
    incremental: bool
    #: a full fetch that asks for a session (epoch 0); its session is made when answered
    create: bool
    now_ms: int
    cache: FetchSessionCache
    session: FetchSession | None = None
    session_id: int = INVALID_SESSION_ID
    answered: bool = field(default=False, repr=False)

    def answer(self, outcomes: Sequence[PartitionOutcome]) -> list[bool]:
        """Which partitions (aligned with ``partitions``) go in the response; updates the session
        with what this response tells the client. Sets ``session_id`` for the response."""
        if len(outcomes) != len(self.partitions):
            raise ValueError(f"{len(outcomes)} outcomes for {len(self.partitions)} partitions")
        if self.answered:
            raise RuntimeError("a fetch context is answered once")
        self.answered = True
        if not self.incremental:
            if self.create:
                self.session = self.cache.create(self.partitions, outcomes, self.now_ms)
                self.session_id = self.session.session_id if self.session is not None else INVALID_SESSION_ID
            return [True] * len(self.partitions)
        session = self.session
        assert session is not None
        included: list[bool] = []
        to_end: list[PartitionKey] = []
        for request, outcome in zip(self.partitions, outcomes, strict=True):
            cached = session.partitions.get(request.key)
            if cached is None:  # forgotten by a later fetch meanwhile: nothing to say about it
                included.append(False)
                continue
            must = outcome.records_bytes > 0 or outcome.error
            if outcome.high_watermark != cached.high_watermark:
                must = True
                cached.high_watermark = outcome.high_watermark
            if outcome.log_start_offset != cached.log_start_offset:
                must = True
                cached.log_start_offset = outcome.log_start_offset
            if outcome.error:
                cached.high_watermark = -1
            if outcome.records_bytes > 0:
                to_end.append(request.key)
            included.append(must)
        for key in to_end:  # partitions that returned records yield their turn to the others
            session.partitions[key] = session.partitions.pop(key)
        return included


class FetchSessionCache:
    """The broker's fetch sessions, at most ``max_sessions`` of them."""

    def __init__(self, max_sessions: int = DEFAULT_MAX_SESSIONS, eviction_ms: int = DEFAULT_EVICTION_MS,
                 new_session_id: Callable[[], int] | None = None) -> None:
        if max_sessions < 0 or eviction_ms < 0:
            raise ValueError("max_sessions and eviction_ms must be at least 0")
        self.max_sessions = max_sessions
        self.eviction_ms = eviction_ms
        self._new_session_id = new_session_id or (lambda: 1 + secrets.randbelow(_INT32_MAX))
        self._sessions: dict[int, FetchSession] = {}

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, session_id: int) -> FetchSession | None:
        return self._sessions.get(session_id)

    def new_context(self, session_id: int, epoch: int, requested: Sequence[FetchPartition],
                    forgotten: Sequence[PartitionKey], now_ms: int) -> FetchContext | ErrorCode:
        """The context of one Fetch (v7+), or the error that answers it whole."""
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            if session_id != INVALID_SESSION_ID:
                self._sessions.pop(session_id, None)  # closed, or replaced by a new one
            return FetchContext(list(requested), incremental=False, create=epoch == INITIAL_EPOCH,
                                now_ms=now_ms, cache=self)
        session = self._sessions.get(session_id)
        if session is None:
            return ErrorCode.FETCH_SESSION_ID_NOT_FOUND
        if session.epoch != epoch:
            return ErrorCode.INVALID_FETCH_SESSION_EPOCH
        for request in requested:
            cached = session.partitions.get(request.key)
            if cached is None:
                session.partitions[request.key] = _Cached(request)
            else:
                cached.request = request
        for key in forgotten:
            session.partitions.pop(key, None)
        session.epoch = next_epoch(session.epoch)
        session.last_used_ms = now_ms
        self._touch(session)
        return FetchContext([c.request for c in session.partitions.values()], incremental=True, create=False,
                            now_ms=now_ms, cache=self, session=session, session_id=session.session_id)

    def create(self, partitions: Sequence[FetchPartition], outcomes: Sequence[PartitionOutcome],
               now_ms: int) -> FetchSession | None:
        """A new session holding what a full fetch answered, or None when no slot can be had."""
        cached: dict[PartitionKey, _Cached] = {}
        for request, outcome in zip(partitions, outcomes, strict=True):
            cached[request.key] = _Cached(request, -1 if outcome.error else outcome.high_watermark,
                                          outcome.log_start_offset)
        if len(self._sessions) >= self.max_sessions and not self._evict_for(len(cached), now_ms):
            return None
        session_id = self._new_session_id()
        while session_id == INVALID_SESSION_ID or session_id in self._sessions:
            session_id = self._new_session_id()
        session = FetchSession(session_id, next_epoch(INITIAL_EPOCH), cached, now_ms)
        self._sessions[session_id] = session
        return session

    def _evict_for(self, size: int, now_ms: int) -> bool:
        if not self._sessions:
            return False
        # dict order is least recently used first (see _touch)
        oldest = next(iter(self._sessions.values()))
        if now_ms - oldest.last_used_ms >= self.eviction_ms:
            del self._sessions[oldest.session_id]
            return True
        smallest = min(self._sessions.values(), key=lambda s: s.size)  # first of the smallest: LRU
        if smallest.size < size:
            del self._sessions[smallest.session_id]
            return True
        return False

    def _touch(self, session: FetchSession) -> None:
        self._sessions[session.session_id] = self._sessions.pop(session.session_id)
