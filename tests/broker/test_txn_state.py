"""The partition's transaction state (broker/txn_state.py): decisions, driven without I/O."""
from __future__ import annotations

from broker.partition_meta import PartitionMeta
from broker.txn_state import AbortedTxn, TxnState, stable_bytes
from metadata_quorum.kernel.errors import ErrorCode
from stream_storage import batches

W = "t-0"


def test_a_transactional_batch_opens_the_transaction_at_its_first_offset_and_holds_the_lso() -> None:
    st = TxnState()
    assert st.last_stable_offset(10) == 10
    st.on_batch(7, 0, True, 10)
    st.on_batch(7, 0, True, 15)  # a later batch of the same transaction: still open from 10
    st.on_batch(8, 0, False, 16)  # idempotent, not transactional: nothing opens
    assert st.open == {7: 10}
    assert st.last_stable_offset(20) == 10
    st.on_batch(9, 0, True, 18)
    assert st.last_stable_offset(20) == 10 and st.last_stable_offset(5) == 5  # never above the bound


def test_commit_closes_without_an_aborted_entry_abort_adds_one_ending_at_the_marker() -> None:
    st = TxnState()
    st.on_batch(1, 0, True, 0)
    st.on_batch(2, 0, True, 3)
    assert st.on_marker(1, 0, True, 5, 6) is None
    assert st.last_stable_offset(10) == 3
    assert st.on_marker(2, 0, False, 5, 7) == AbortedTxn(7, 3, 2)
    assert st.open == {} and st.last_stable_offset(10) == 10
    assert st.aborted == [AbortedTxn(last_offset=7, first_offset=3, producer_id=2)]
    # a marker with no open transaction (a coordinator's retry) changes nothing but the epochs
    assert st.on_marker(2, 0, False, 5, 8) is None and len(st.aborted) == 1


def test_replaying_batches_and_markers_after_a_crash_changes_nothing() -> None:
    st = TxnState()
    st.on_batch(1, 0, True, 0)
    st.on_marker(1, 0, False, 0, 2)
    st.on_batch(1, 0, True, 3)
    before = st.to_json()
    # a rebuild re-reads from an older checkpoint: the first batch and its marker again
    st.on_batch(1, 0, True, 0)  # the transaction from 3 is open: nothing changes
    st.on_marker(1, 0, False, 0, 2)  # the open one started after this marker: not ended by it
    assert st.to_json() == before
    st2 = TxnState()
    st2.on_batch(1, 0, True, 0)
    st2.on_marker(1, 0, False, 0, 2)
    st2.on_batch(1, 0, True, 0)
    st2.on_marker(1, 0, False, 0, 2)
    assert st2.aborted == [AbortedTxn(2, 0, 1)] and st2.open == {}


def test_aborted_between_is_kafkas_overlap_rule() -> None:
    st = TxnState()
    for pid, first in [(1, 0), (2, 5), (3, 2), (4, 20)]:
        st.on_batch(pid, 0, True, first)
    for pid, last in [(1, 4), (2, 9), (3, 12), (4, 25)]:
        st.on_marker(pid, 0, False, 0, last)
    ids = lambda a, b: sorted(x.producer_id for x in st.aborted_between(a, b))  # noqa: E731
    assert ids(0, 3) == [1, 3]  # 2 starts at 5, after the range
    assert ids(5, 6) == [2, 3]  # 1 ended at 4, before the fetch offset
    assert ids(13, 20) == []  # 4 starts at the upper bound, exclusive
    assert ids(13, 21) == [4]
    st.trim(10)
    assert [a.producer_id for a in st.aborted] == [3, 4]


def test_fencing_decisions() -> None:
    st = TxnState()
    st.on_batch(1, 3, True, 0)
    assert st.batch_error(1, 2, True, None, W).error is ErrorCode.INVALID_PRODUCER_EPOCH  # type: ignore[union-attr]
    assert st.batch_error(1, 3, True, None, W) is None
    assert st.batch_error(1, 4, True, None, W) is None  # a newer epoch (the sequence check wants 0)
    # a plain batch of a producer whose transaction is open here
    assert st.batch_error(1, 3, False, None, W).error is ErrorCode.INVALID_TXN_STATE  # type: ignore[union-attr]
    # the idempotent producer state's epoch counts too
    assert st.batch_error(9, 1, True, 2, W).error is ErrorCode.INVALID_PRODUCER_EPOCH  # type: ignore[union-attr]
    assert st.marker_error(1, 2, 0, None, W).error is ErrorCode.INVALID_PRODUCER_EPOCH  # type: ignore[union-attr]
    assert st.marker_error(1, 3, 4, None, W) is None
    st.on_marker(1, 3, True, 4, 1)
    err = st.marker_error(1, 3, 3, None, W)
    assert err is not None and err.error is ErrorCode.TRANSACTION_COORDINATOR_FENCED
    assert st.marker_error(1, 3, 4, None, W) is None
    # a marker of a bumped epoch (a fenced producer's transaction aborted) fences the old epoch's batches
    st.on_batch(1, 3, True, 2)
    st.on_marker(1, 4, False, 4, 5)
    assert st.batch_error(1, 3, True, None, W).error is ErrorCode.INVALID_PRODUCER_EPOCH  # type: ignore[union-attr]
    assert st.batch_error(-1, 0, False, None, W) is None


def test_the_state_round_trips_through_the_partition_meta() -> None:
    st = TxnState()
    st.on_batch(1, 0, True, 0)
    st.on_batch(2, 1, True, 2)
    st.on_marker(2, 1, False, 7, 4)
    meta = PartitionMeta(transactions=st.to_json())
    back = TxnState.from_json(PartitionMeta.decode(meta.encode()).transactions)
    assert back == st
    assert PartitionMeta.decode(PartitionMeta().encode()).transactions is None
    assert TxnState.from_json(None) == TxnState()


def test_a_read_committed_fetch_keeps_whole_batches_below_the_lso() -> None:
    data = b"".join(batches.build_batch([(None, b"x")] * n, base_offset=base)
                    for base, n in [(0, 2), (2, 3), (5, 1)])
    infos = list(batches.iter_batches(data))
    assert stable_bytes(infos, 6) == len(data)
    assert stable_bytes(infos, 5) == infos[2].position
    assert stable_bytes(infos, 2) == infos[1].position
    assert stable_bytes(infos, 0) == 0


def test_a_control_batch_is_kafkas_marker_format() -> None:
    from kafka.record.default_records import DefaultRecordBatch
    for commit in (True, False):
        raw = batches.build_control_batch(42, 3, commit, 9, 1000)
        (info,) = batches.validate_batches(raw)  # CRC recomputed after the control bit is set
        assert info.is_control and info.is_transactional and (info.producer_id, info.producer_epoch) == (42, 3)
        assert batches.control_marker(raw, info) == batches.ControlMarker(commit, 9)
        batch = DefaultRecordBatch(raw)
        assert batch.is_control_batch and batch.is_transactional
        (rec,) = list(batch)
        assert rec.commit is commit and rec.version == 0
        assert rec.value == b"\x00\x00\x00\x00\x00\x09"  # value version 0, coordinator epoch 9
    data = batches.build_batch([(None, b"v")], producer_id=1, producer_epoch=0, base_sequence=0, transactional=True)
    (info,) = batches.validate_batches(data)
    assert info.is_transactional and not info.is_control and batches.control_marker(data, info) is None
