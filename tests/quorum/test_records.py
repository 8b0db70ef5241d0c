"""Every record type round-trips through its versioned, self-describing encoding."""
from __future__ import annotations

import json
import typing
from dataclasses import fields

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from metadata_quorum import records
from metadata_quorum.records import (
    RECORD_TYPES,
    PartitionChangeRecord,
    PartitionRecord,
    decode_record,
    decode_record_bytes,
    encode_record,
    encode_record_bytes,
)


def record_strategy(cls: type) -> st.SearchStrategy[typing.Any]:
    hints = typing.get_type_hints(cls, globalns=vars(records))
    return st.builds(cls, **{f.name: st.from_type(hints[f.name]) for f in fields(cls)})


ANY_RECORD = st.one_of(*[record_strategy(cls) for cls in RECORD_TYPES.values()])


@pytest.mark.parametrize("name", sorted(RECORD_TYPES))
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_each_record_type_round_trips(name: str, data: st.DataObject) -> None:
    record = data.draw(record_strategy(RECORD_TYPES[name]))
    encoded = encode_record(record)
    assert encoded["type"] == name and encoded["version"] == 1
    assert decode_record(json.loads(json.dumps(encoded))) == record
    assert decode_record_bytes(encode_record_bytes(record)) == record


@settings(max_examples=100, deadline=None)
@given(record=ANY_RECORD)
def test_bytes_encoding_is_deterministic(record: typing.Any) -> None:
    assert encode_record_bytes(record) == encode_record_bytes(decode_record_bytes(encode_record_bytes(record)))


def test_unknown_fields_are_ignored_and_missing_ones_defaulted() -> None:
    data = {"type": "Partition", "version": 1,
            "fields": {"topic_id": "t", "partition": 3, "replicas": [1], "isr": [1], "from_the_future": 7}}
    record = decode_record(data)
    assert record == PartitionRecord(topic_id="t", partition=3, replicas=(1,), isr=(1,))


def test_none_means_unchanged_in_partition_change() -> None:
    change = PartitionChangeRecord(topic_id="t", partition=0, leader=-1)
    assert decode_record(encode_record(change)) == change
    assert encode_record(change)["fields"]["replicas"] is None


def test_unknown_type_and_newer_version_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown record type"):
        decode_record({"type": "Nope", "version": 1, "fields": {}})
    with pytest.raises(ValueError, match="newer"):
        decode_record({"type": "KV", "version": 99, "fields": {"key": "k", "value": None}})
