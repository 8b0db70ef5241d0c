"""The pure parts of the word count harness: its expected counts, output decoding and the
transactions list it reads the coordinator from."""
from __future__ import annotations

import struct

import pytest

from tools.peer.streams_wordcount import expected_counts, last_counts, parse_transactions_list


def test_expected_counts_split_as_javas_non_word_class_after_lower_casing() -> None:
    assert expected_counts(["Kafka, kafka! once-more", "w_1 w_1"]) == {"kafka": 2, "once": 1, "more": 1, "w_1": 2}


def test_last_counts_keep_each_words_last_value_and_refuse_a_bad_record() -> None:
    n = lambda v: struct.pack(">q", v)  # noqa: E731
    assert last_counts([(b"a", n(1)), (b"b", n(1)), (b"a", n(3))]) == {"a": 3, "b": 1}
    with pytest.raises(ValueError):
        last_counts([(b"a", b"3")])


def test_the_transactions_list_table_gives_each_ids_coordinator() -> None:
    out = "TransactionalId          Coordinator ProducerId TransactionState\nstreams-wordcount-x-1 2 1001 Ongoing\n"
    assert parse_transactions_list(out) == {"streams-wordcount-x-1": 2}
    with pytest.raises(ValueError):
        parse_transactions_list("Error: something")
