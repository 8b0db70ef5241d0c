"""Incremental fetch sessions (KIP-227) as Kafka's FetchSession.scala keeps them: creation by a
full fetch, incremental fetches that name only changes and answer only what is new, epochs,
closing, and the bounded cache's eviction."""
from __future__ import annotations

import itertools

from broker.kafka.fetch_sessions import (FINAL_EPOCH, INITIAL_EPOCH, FetchContext, FetchPartition,
                                         FetchSessionCache, PartitionOutcome, next_epoch)
from metadata_quorum.kernel.errors import ErrorCode

A0, A1, B0 = FetchPartition("a", 0, 0, 1000), FetchPartition("a", 1, 0, 1000), FetchPartition("b", 0, 5, 1000)
NOTHING = PartitionOutcome(0, 10, 0)


def ids(start: int = 100) -> itertools.count[int]:
    return itertools.count(start)


def context(opened: FetchContext | ErrorCode) -> FetchContext:
    assert isinstance(opened, FetchContext), opened
    return opened


def new_session(cache: FetchSessionCache, partitions: list[FetchPartition], now_ms: int = 0,
                outcome: PartitionOutcome = NOTHING) -> int:
    full = context(cache.new_context(0, INITIAL_EPOCH, partitions, [], now_ms))
    assert not full.incremental and full.partitions == partitions
    assert full.answer([outcome] * len(partitions)) == [True] * len(partitions)
    return full.session_id


def test_a_full_fetch_creates_a_session_and_incremental_fetches_answer_only_what_changed() -> None:
    counter = ids()
    cache = FetchSessionCache(new_session_id=lambda: next(counter))
    session_id = new_session(cache, [A0, A1, B0])
    assert session_id == 100 and len(cache) == 1
    # epoch 1, nothing asked: every session partition is read, none has news
    inc = context(cache.new_context(session_id, 1, [], [], 10))
    assert inc.incremental and inc.session_id == session_id and inc.partitions == [A0, A1, B0]
    assert inc.answer([NOTHING] * 3) == [False, False, False]
    # records on a-1, a moved high watermark on b-0, an error on a-0
    inc = context(cache.new_context(session_id, 2, [], [], 20))
    assert inc.answer([PartitionOutcome(0, 10, 0, error=True), PartitionOutcome(300, 12, 0),
                       PartitionOutcome(0, 11, 0)]) == [True, True, True]
    # a-1 returned records, so it goes last; a-0 is answered again once its error is gone
    inc = context(cache.new_context(session_id, 3, [FetchPartition("a", 1, 2, 1000)], [("b", 0)], 30))
    assert [p.key for p in inc.partitions] == [("a", 0), ("a", 1)]
    assert inc.partitions[1].fetch_offset == 2  # the client's new position replaced the cached one
    assert inc.answer([NOTHING, PartitionOutcome(0, 12, 0)]) == [True, False]
    # a partition added by an incremental fetch joins the session
    inc = context(cache.new_context(session_id, 4, [B0], [], 40))
    assert [p.key for p in inc.partitions] == [("a", 0), ("a", 1), ("b", 0)]
    assert inc.answer([NOTHING, PartitionOutcome(0, 12, 0), PartitionOutcome(0, 11, 0)]) == [False, False, True]
    # a log start offset that moved is news too
    inc = context(cache.new_context(session_id, 5, [], [], 50))
    assert inc.answer([PartitionOutcome(0, 10, 3), PartitionOutcome(0, 12, 0), PartitionOutcome(0, 11, 0)]) \
        == [True, False, False]


def test_unknown_sessions_and_wrong_epochs_are_refused_and_change_nothing() -> None:
    cache = FetchSessionCache(new_session_id=lambda: 7)
    assert cache.new_context(99, 1, [A0], [], 0) is ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    assert cache.new_context(0, 3, [A0], [], 0) is ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    session_id = new_session(cache, [A0])
    assert cache.new_context(session_id, 2, [A1], [], 0) is ErrorCode.INVALID_FETCH_SESSION_EPOCH
    assert cache.new_context(session_id, 0 - 2, [], [], 0) is ErrorCode.INVALID_FETCH_SESSION_EPOCH
    session = cache.get(session_id)
    assert session is not None and session.epoch == 1 and list(session.partitions) == [("a", 0)]
    assert context(cache.new_context(session_id, 1, [], [], 0)).partitions == [A0]
    assert context(cache.new_context(session_id, 2, [], [], 0)).partitions == [A0]  # epochs go on


def test_epoch_minus_one_closes_a_session_and_epoch_zero_replaces_it() -> None:
    counter = ids()
    cache = FetchSessionCache(new_session_id=lambda: next(counter))
    first = new_session(cache, [A0])
    sessionless = context(cache.new_context(first, FINAL_EPOCH, [A1], [], 0))
    assert sessionless.answer([NOTHING]) == [True] and sessionless.session_id == 0
    assert cache.get(first) is None and len(cache) == 0
    second = new_session(cache, [A0])
    replaced = context(cache.new_context(second, INITIAL_EPOCH, [B0], [], 0))
    assert cache.get(second) is None
    replaced.answer([NOTHING])
    assert replaced.session_id not in (0, second) and len(cache) == 1
    plain = context(cache.new_context(0, FINAL_EPOCH, [A0, A1], [], 0))  # librdkafka's: no session at all
    assert plain.answer([NOTHING, NOTHING]) == [True, True] and plain.session_id == 0 and len(cache) == 1


def test_the_cache_is_bounded_and_evicts_stale_then_smaller_sessions() -> None:
    counter = ids()
    cache = FetchSessionCache(max_sessions=2, eviction_ms=1000, new_session_id=lambda: next(counter))
    s1 = new_session(cache, [A0, A1], now_ms=0)
    s2 = new_session(cache, [A0], now_ms=100)
    # full, none stale, the new one no larger than the smallest: no session (the client fetches in full)
    assert new_session(cache, [B0], now_ms=200) == 0
    assert len(cache) == 2
    # a larger session takes the smallest one's slot
    s3 = new_session(cache, [A0, A1, B0], now_ms=300)
    assert s3 != 0 and cache.get(s2) is None and cache.get(s1) is not None
    # s1 used at 400, s3 idle since 300: at 1350 s3 is stale and goes first
    context(cache.new_context(s1, 1, [], [], 400)).answer([NOTHING, NOTHING])
    s4 = new_session(cache, [B0], now_ms=1350)
    assert s4 != 0 and cache.get(s3) is None and cache.get(s1) is not None
    assert FetchSessionCache(max_sessions=0).create([A0], [NOTHING], 0) is None


def test_epochs_wrap_to_one() -> None:
    assert next_epoch(0) == 1 and next_epoch(41) == 42 and next_epoch(2 ** 31 - 1) == 1
