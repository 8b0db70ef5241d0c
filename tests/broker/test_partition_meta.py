"""Partition meta, producer-state duplicate detection, the sparse time index (pure)."""
from __future__ import annotations

from broker.partition_meta import (PRODUCER_BATCHES_KEPT, SEQUENCE_MAX, TIME_INDEX_MAX_ENTRIES, PartitionMeta,
                                   ProducerState, TimeIndex, add_leader_epoch, sequence_error)
from metadata_quorum.kernel.errors import ErrorCode


def test_duplicate_batch_returns_original_offsets() -> None:
    st = ProducerState()
    st.record(7, 0, base_sequence=0, count=3, base_offset=10, last_offset=12)
    st.record(7, 0, base_sequence=3, count=2, base_offset=20, last_offset=21)
    assert st.duplicate_of(7, 0, 0) == (10, 12)
    assert st.duplicate_of(7, 0, 3) == (20, 21)
    assert st.duplicate_of(7, 0, 5) is None
    assert st.duplicate_of(7, 1, 0) is None  # another producer epoch
    assert st.duplicate_of(8, 0, 0) is None
    assert st.duplicate_of(-1, -1, -1) is None  # not idempotent: never a duplicate


def test_only_last_batches_kept_and_new_epoch_resets() -> None:
    st = ProducerState()
    for i in range(PRODUCER_BATCHES_KEPT + 3):
        st.record(1, 0, i, 1, 100 + i, 100 + i)
    assert st.duplicate_of(1, 0, 0) is None
    assert st.duplicate_of(1, 0, PRODUCER_BATCHES_KEPT + 2) == (100 + PRODUCER_BATCHES_KEPT + 2,) * 2
    st.record(1, 1, 0, 1, 500, 500)
    assert st.duplicate_of(1, 0, PRODUCER_BATCHES_KEPT + 2) is None
    st.record(1, 0, 9, 1, 600, 600)  # an older epoch is ignored
    assert st.duplicate_of(1, 1, 0) == (500, 500)
    again = ProducerState.from_json(st.to_json())
    assert again.duplicate_of(1, 1, 0) == (500, 500)


def test_a_batch_must_follow_the_producers_last_one() -> None:
    """Kafka's sequence check: after a gap the batch is refused, so a pipelining client never
    takes its success to mean that the missing batch was written."""
    known = (0, 9)  # epoch 0, last sequence 9
    assert sequence_error(known, 7, 0, 10, "t-0") is None
    gap = sequence_error(known, 7, 0, 12, "t-0")
    assert gap is not None and gap.error is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert "next expected is 10" in gap.message
    behind = sequence_error(known, 7, 0, 3, "t-0")  # older than the last five batches kept
    assert behind is not None and behind.error is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert sequence_error(known, 7, 1, 0, "t-0") is None  # a new epoch starts at 0
    new_epoch = sequence_error(known, 7, 1, 10, "t-0")
    assert new_epoch is not None and new_epoch.error is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    old_epoch = sequence_error((3, 9), 7, 2, 10, "t-0")
    assert old_epoch is not None and old_epoch.error is ErrorCode.INVALID_PRODUCER_EPOCH
    assert sequence_error(None, 7, 0, 12345, "t-0") is None  # a producer the partition does not know
    assert sequence_error(known, -1, -1, -1, "t-0") is None  # not idempotent
    assert sequence_error((0, SEQUENCE_MAX), 7, 0, 0, "t-0") is None  # the sequence wraps


def test_last_sequence_is_the_latest_batch_and_recording_twice_changes_nothing() -> None:
    st = ProducerState()
    assert st.last_sequence(7) is None
    st.record(7, 0, base_sequence=0, count=3, base_offset=10, last_offset=12)
    st.record(7, 0, base_sequence=5, count=2, base_offset=20, last_offset=21)
    st.record(7, 0, base_sequence=3, count=2, base_offset=15, last_offset=16)  # observed after a later one
    assert st.last_sequence(7) == (0, 6)
    st.record(7, 0, base_sequence=5, count=2, base_offset=20, last_offset=21)  # a rebuild re-reads it
    assert [b[0] for b in st.producers[7].batches] == [0, 3, 5]
    st.record(8, 0, base_sequence=SEQUENCE_MAX, count=2, base_offset=30, last_offset=31)
    assert st.last_sequence(8) == (0, 0)


def test_time_index_lookup() -> None:
    ix = TimeIndex()
    for i, ts in enumerate([100, 200, 150, 300, 400]):
        ix.observe(ts, i * 10)
    assert ix.lookup(50) == 0
    assert ix.lookup(100) == 0
    assert ix.lookup(150) == 0  # scan from the batch before the first max >= 150
    assert ix.lookup(250) == 10  # conservative: from the entry before (the index may be sparse)
    assert ix.lookup(400) == 30
    assert ix.lookup(401) is None


def test_time_index_stays_bounded() -> None:
    ix = TimeIndex()
    for i in range(TIME_INDEX_MAX_ENTRIES * 3):
        ix.observe(i, i)
    assert len(ix.entries) <= TIME_INDEX_MAX_ENTRIES
    start = ix.lookup(TIME_INDEX_MAX_ENTRIES * 2)
    assert start is not None and start <= TIME_INDEX_MAX_ENTRIES * 2


def test_meta_round_trip_and_empty() -> None:
    m = PartitionMeta(clean_shutdown=True, start_offset=3, end_offset=90, size_bytes=1234,
                      leader_epochs=[(0, 0), (4, 50)], producers={"1": {"epoch": 0, "batches": [[0, 0, 5, 5]]}},
                      time_index=[(100, 0)], data_stream_id=4, meta_stream_id=5, closed_by_broker=2, stream_epoch=4)
    assert PartitionMeta.decode(m.encode()) == m
    assert PartitionMeta.decode(None) == PartitionMeta()


def test_leader_epoch_cache() -> None:
    e = add_leader_epoch([], 0, 0)
    e = add_leader_epoch(e, 3, 40)
    assert add_leader_epoch(e, 3, 50) == [(0, 0), (3, 40)]
    assert add_leader_epoch(e, 2, 60) == [(0, 0), (3, 40)]
