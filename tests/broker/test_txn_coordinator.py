"""The transaction coordinator's state machine (KIP-98 / KIP-360), without processes or clocks."""
from __future__ import annotations

import pytest

from broker.txn import state as txn
from broker.txn.log_format import decode_key, decode_value, encode_key, encode_value
from broker.txn.state import TxnState as S
from metadata_quorum.kernel.errors import ErrorCode, FerryError

TP = frozenset({("t", 0), ("t", 1)})


def started(now: int = 1000) -> txn.Coordinator:
    c = txn.Coordinator()
    d = txn.init_producer_id(None, "tx", 60_000, -1, -1, now, 7)
    assert d.ok and d.persist is not None and (d.persist.producer_id, d.persist.producer_epoch) == (7, 0)
    c.apply(d.persist)
    return c


def test_a_transaction_commits_through_prepare_and_complete() -> None:
    c = started()
    d = txn.add_partitions(c.get("tx"), 7, 0, TP, 2000)
    assert d.ok and d.persist is not None and d.persist.state is S.ONGOING and d.persist.start_ms == 2000
    c.apply(d.persist)
    assert txn.add_partitions(c.get("tx"), 7, 0, frozenset({("t", 1)}), 2100).persist is None  # nothing new
    end = txn.end_txn(c.get("tx"), 7, 0, True, 3000)
    assert end.ok and end.persist is not None and end.persist.state is S.PREPARE_COMMIT
    assert end.markers == txn.MarkerJob("tx", 7, 0, True, TP)
    c.apply(end.persist)
    assert c.pending_markers() == [end.markers]  # a new owner would send them again
    assert txn.end_txn(c.get("tx"), 7, 0, True, 3001).error is ErrorCode.CONCURRENT_TRANSACTIONS
    assert txn.add_partitions(c.get("tx"), 7, 0, TP, 3001).error is ErrorCode.CONCURRENT_TRANSACTIONS
    done = txn.complete(c.get("tx"), end.markers, 3100)  # type: ignore[arg-type]
    assert done.persist is not None and done.persist.state is S.COMPLETE_COMMIT and not done.persist.partitions
    c.apply(done.persist)
    assert txn.end_txn(c.get("tx"), 7, 0, True, 3200).ok  # a retried EndTxn
    assert txn.end_txn(c.get("tx"), 7, 0, False, 3200).error is ErrorCode.INVALID_TXN_STATE
    again = txn.add_partitions(c.get("tx"), 7, 0, frozenset({("u", 0)}), 4000)
    assert again.persist is not None and again.persist.partitions == {("u", 0)} and again.persist.start_ms == 4000


def test_fencing_old_epochs_other_producers_and_bad_timeouts() -> None:
    c = started()
    bumped = txn.init_producer_id(c.get("tx"), "tx", 60_000, -1, -1, 1500, -1)
    assert bumped.persist is not None and bumped.persist.producer_epoch == 1
    c.apply(bumped.persist)
    assert txn.add_partitions(c.get("tx"), 7, 0, TP, 1600).error is ErrorCode.PRODUCER_FENCED
    assert txn.add_partitions(c.get("tx"), 8, 1, TP, 1600).error is ErrorCode.INVALID_PRODUCER_ID_MAPPING
    assert txn.end_txn(c.get("tx"), 7, 2, True, 1600).error is ErrorCode.INVALID_PRODUCER_EPOCH
    assert txn.init_producer_id(c.get("tx"), "tx", 0, -1, -1, 1600, -1).error is ErrorCode.INVALID_TRANSACTION_TIMEOUT
    assert txn.init_producer_id(c.get("tx"), "tx", txn.MAX_TRANSACTION_TIMEOUT_MS + 1, -1, -1, 1600,
                                -1).error is ErrorCode.INVALID_TRANSACTION_TIMEOUT
    # KIP-360: a re-initialising producer names its id and epoch; another id is fenced
    assert txn.init_producer_id(c.get("tx"), "tx", 60_000, 9, 1, 1700, -1).error is ErrorCode.PRODUCER_FENCED
    ok = txn.init_producer_id(c.get("tx"), "tx", 60_000, 7, 1, 1700, -1)
    assert ok.persist is not None and ok.persist.producer_epoch == 2


def test_init_with_an_open_transaction_aborts_it_under_a_bumped_epoch() -> None:
    c = started()
    d = txn.add_partitions(c.get("tx"), 7, 0, TP, 2000)
    assert d.persist is not None
    c.apply(d.persist)
    init = txn.init_producer_id(c.get("tx"), "tx", 60_000, -1, -1, 2500, -1)
    assert init.error is ErrorCode.CONCURRENT_TRANSACTIONS  # the client retries
    assert init.persist is not None and init.persist.state is S.PREPARE_ABORT and init.persist.producer_epoch == 1
    assert init.markers == txn.MarkerJob("tx", 7, 1, False, TP)
    c.apply(init.persist)
    assert txn.init_producer_id(c.get("tx"), "tx", 60_000, -1, -1, 2600, -1).error is \
        ErrorCode.CONCURRENT_TRANSACTIONS
    done = txn.complete(c.get("tx"), init.markers, 2700)  # type: ignore[arg-type]
    assert done.persist is not None and done.persist.state is S.COMPLETE_ABORT
    c.apply(done.persist)
    retried = txn.init_producer_id(c.get("tx"), "tx", 60_000, -1, -1, 2800, -1)
    assert retried.ok and retried.persist is not None and retried.persist.producer_epoch == 2


def test_a_timed_out_transaction_is_aborted_and_its_producer_fenced() -> None:
    c = started()
    d = txn.add_partitions(c.get("tx"), 7, 0, TP, 2000)
    assert d.persist is not None
    c.apply(d.persist)
    assert c.next_deadline_ms() == 62_000 and c.expired(61_999) == []
    assert c.expired(62_000) == ["tx"]
    e = txn.expired(c.get("tx"), 62_000)  # type: ignore[arg-type]
    assert e.persist is not None and e.persist.state is S.PREPARE_ABORT and e.persist.producer_epoch == 1
    assert e.markers == txn.MarkerJob("tx", 7, 1, False, TP)
    c.apply(e.persist)
    assert txn.end_txn(c.get("tx"), 7, 0, True, 62_100).error is ErrorCode.PRODUCER_FENCED


def test_an_exhausted_epoch_takes_a_new_producer_id() -> None:
    c = started()
    meta = c.get("tx")
    assert meta is not None
    from dataclasses import replace
    c.apply(replace(meta, producer_epoch=txn.MAX_PRODUCER_EPOCH))
    assert txn.needs_new_producer_id(c.get("tx")) and txn.needs_new_producer_id(None)
    d = txn.init_producer_id(c.get("tx"), "tx", 60_000, -1, -1, 2000, 99)
    assert d.persist is not None and (d.persist.producer_id, d.persist.producer_epoch) == (99, 0)


def test_records_are_kafkas_transaction_log_format_and_parsed_strictly() -> None:
    meta = txn.TxnMetadata("tx-é", 123456789012, 5, 60_000, S.ONGOING, TP, 1700000000000, 1699999999000)
    key, value = encode_key(meta.transactional_id), encode_value(meta)
    assert key == b"\x00\x00\x00\x05tx-\xc3\xa9"
    assert value[:2] == b"\x00\x00" and value[2:10] == (123456789012).to_bytes(8, "big")
    assert decode_value(decode_key(key), value) == meta
    loaded = txn.Coordinator.load([("tx-é", meta), ("gone", meta), ("gone", None)])
    assert set(loaded.txns) == {"tx-é"}
    with pytest.raises(FerryError):
        decode_value("tx", value + b"\x00")
    with pytest.raises(FerryError):
        decode_value("tx", value[:-3])
    with pytest.raises(FerryError):
        decode_key(b"\x00\x01" + key[2:])
    assert S.PREPARE_COMMIT.kafka_name == "PrepareCommit" and S.EMPTY.kafka_name == "Empty"


def test_marker_outcomes_and_leaders() -> None:
    from broker.kafka.txn_marker_sender import Outcome, marker_outcome
    assert marker_outcome(ErrorCode.NONE) is Outcome.WRITTEN
    assert marker_outcome(ErrorCode.NOT_LEADER_OR_FOLLOWER) is Outcome.RETRY
    assert marker_outcome(ErrorCode.REQUEST_TIMED_OUT) is Outcome.RETRY
    assert marker_outcome(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION) is Outcome.DROPPED
    assert marker_outcome(ErrorCode.TRANSACTION_COORDINATOR_FENCED) is Outcome.DROPPED
