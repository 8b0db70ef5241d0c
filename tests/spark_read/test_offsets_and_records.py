"""The data source's pure parts: offset options as Spark's Kafka source takes them, input
partitions, and the batch decoder against the strict one."""
from __future__ import annotations

import os
from datetime import datetime, timezone
from itertools import pairwise

import pyarrow as pa
import pytest

from metadata_quorum.kernel.errors import ErrorCode, FerryError
from stream_storage.batches import Record, assign_offsets, build_batch, read_records
from stream_storage.compression import Codec
from tools.spark_read.offsets import (
    EARLIEST, LATEST, ObjectSpan, PartitionStream, parse_offsets, parse_stream, plan_read_tasks, resolve_ranges,
)
from tools.spark_read.records import Columns, decode_batches, to_arrow


def stream(topic: str, partition: int, start: int, bounds: list[int]) -> PartitionStream:
    objects = tuple(ObjectSpan(f"o-{topic}-{partition}-{a}", a, b, 1000) for a, b in pairwise(bounds))
    return PartitionStream(topic, partition, 100 + partition, start, bounds[-1], objects)


STREAMS = [stream("t", 0, 0, [0, 40, 100]), stream("t", 1, 10, [0, 50])]


def test_offset_options_parse_like_sparks_kafka_source():
    assert parse_offsets(None, "startingOffsets", EARLIEST) == EARLIEST
    assert parse_offsets("latest", "endingOffsets", LATEST) == LATEST
    assert parse_offsets(" EARLIEST ", "startingOffsets", LATEST) == EARLIEST
    assert parse_offsets('{"t": {"0": 23, "1": -2}}', "startingOffsets", EARLIEST) == {"t": {0: 23, 1: -2}}


@pytest.mark.parametrize("text, message", [
    ("soonest", "must be earliest, latest or JSON"),
    ("[1]", "must be an object of topics"),
    ('{"t": 5}', "must map partitions to offsets"),
    ('{"t": {"x": 5}}', "partition 'x' of topic 't' is not an integer"),
    ('{"t": {"0": -3}}', "must be an integer >= -2"),
    ('{"t": {"0": true}}', "must be an integer >= -2"),
])
def test_bad_offset_options_are_clear_errors(text, message):
    with pytest.raises(FerryError) as err:
        parse_offsets(text, "startingOffsets", EARLIEST)
    assert err.value.error == ErrorCode.INVALID_REQUEST and message in err.value.message


def test_ranges_resolve_earliest_latest_and_specific_offsets():
    got = [(s.partition, a, b) for s, a, b in resolve_ranges(STREAMS, EARLIEST, LATEST)]
    assert got == [(0, 0, 100), (1, 10, 50)]
    spec = parse_offsets('{"t": {"0": 30, "1": -2}}', "startingOffsets", EARLIEST)
    end = parse_offsets('{"t": {"0": -1, "1": 20}}', "endingOffsets", LATEST)
    assert [(s.partition, a, b) for s, a, b in resolve_ranges(STREAMS, spec, end)] == [(0, 30, 100), (1, 10, 20)]


@pytest.mark.parametrize("starting, ending, error, message", [
    (LATEST, LATEST, ErrorCode.INVALID_REQUEST, "startingOffsets for t-0 is latest (-1): not allowed"),
    (EARLIEST, EARLIEST, ErrorCode.INVALID_REQUEST, "endingOffsets for t-0 is earliest (-2)"),
    ({"t": {0: 5}}, LATEST, ErrorCode.INVALID_REQUEST, "must specify every partition read; missing t-1"),
    ({"t": {0: 5, 1: 10, 2: 0}}, LATEST, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "not read: t-2"),
    ({"t": {0: 0, 1: 5}}, LATEST, ErrorCode.OFFSET_OUT_OF_RANGE, "t-1: offsets 5..50 are outside"),
    (EARLIEST, {"t": {0: 101, 1: 50}}, ErrorCode.OFFSET_OUT_OF_RANGE, "end of the committed objects"),
    ({"t": {0: 60, 1: 10}}, {"t": {0: 50, 1: 50}}, ErrorCode.INVALID_REQUEST, "starting offset 60 is after"),
])
def test_ranges_refuse_what_spark_refuses_and_data_not_stored(starting, ending, error, message):
    with pytest.raises(FerryError) as err:
        resolve_ranges(STREAMS, starting, ending)
    assert err.value.error == error and message in err.value.message


def test_fail_on_data_loss_off_clamps_to_what_is_stored():
    got = resolve_ranges(STREAMS, {"t": {0: 0, 1: 5}}, {"t": {0: 500, 1: 50}}, fail_on_data_loss=False)
    assert [(s.partition, a, b) for s, a, b in got] == [(0, 0, 100), (1, 10, 50)]


def test_input_partitions_one_per_partition_then_split_at_object_boundaries():
    ranges = resolve_ranges(STREAMS, EARLIEST, LATEST)
    tasks = plan_read_tasks(ranges)
    assert [(t.partition, t.start_offset, t.end_offset, len(t.objects)) for t in tasks] == [(0, 0, 100, 2),
                                                                                           (1, 10, 50, 1)]
    split = plan_read_tasks(ranges, min_partitions=3)
    # partition 0 (100 offsets) is split at its object boundary 40 (ideal 50, within a quarter piece)
    assert [(t.partition, t.start_offset, t.end_offset) for t in split] == [(0, 0, 40), (0, 40, 100), (1, 10, 50)]
    assert [o.start_offset for o in split[1].objects] == [40]
    many = plan_read_tasks(ranges, min_partitions=10)
    assert len(many) >= 10
    for partition, lo, hi in ((0, 0, 100), (1, 10, 50)):  # the pieces tile each range exactly
        pieces = sorted((t.start_offset, t.end_offset) for t in many if t.partition == partition)
        assert pieces[0][0] == lo and pieces[-1][1] == hi
        assert all(a[1] == b[0] for a, b in pairwise(pieces))
    assert plan_read_tasks(resolve_ranges(STREAMS, EARLIEST, {"t": {0: 0, 1: 10}})) == []


def test_stream_parsed_from_describe_stream_ends_at_its_committed_objects():
    described = {"start_offset": 5, "end_offset": 999, "objects": [
        {"object_key": "b", "start_offset": 40, "end_offset": 90, "size": 10},
        {"object_key": "a", "start_offset": 0, "end_offset": 40, "size": 20}]}
    s = parse_stream("t", 0, 7, described)
    assert s.start_offset == 5 and s.end_offset == 90 and [o.object_key for o in s.objects] == ["a", "b"]


def batches(codec: Codec = Codec.NONE, headers: bool = False) -> bytes:
    buf = bytearray()
    for b in range(5):
        recs = [Record(0, 1_700_000_000_000 + b * 10 + i, None if i == 3 else f"k{i % 4}".encode(),
                       None if i == 5 else os.urandom(100 + 200 * (i % 3)),
                       (("h", f"{b}".encode()),) if headers else ()) for i in range(20)]
        data = build_batch(recs)
        if codec != Codec.NONE:
            from kafka.record.default_records import DefaultRecordBatchBuilder

            builder = DefaultRecordBatchBuilder(2, int(codec), False, -1, -1, -1, batch_size=1 << 20)
            for i, r in enumerate(recs):
                builder.append(i, r.timestamp_ms, r.key, r.value, list(r.headers))
            data = bytes(builder.build())
        buf += data
    assign_offsets(buf, 1000)
    return bytes(buf)


@pytest.mark.parametrize("codec, headers", [(Codec.NONE, False), (Codec.GZIP, False), (Codec.NONE, True),
                                            (Codec.LZ4, True)])
def test_decoder_matches_the_strict_reader(codec, headers):
    data = batches(codec, headers)
    expected = read_records(data)
    out = Columns(include_headers=headers)
    assert decode_batches(data, 0, 10**9, out) == 1100
    assert out.offsets == [r.offset for r in expected] == list(range(1000, 1100))
    assert out.keys() == [r.key for r in expected] and out.values() == [r.value for r in expected]
    assert out.timestamps_ms == [r.timestamp_ms for r in expected] and set(out.timestamp_types) == {0}
    if headers:
        assert out.headers == [[{"key": k, "value": v} for k, v in r.headers] for r in expected]
    window = Columns(include_headers=headers)
    decode_batches(data, 1015, 1047, window)
    assert window.offsets == list(range(1015, 1047))
    batch = to_arrow(out, "t", 3)
    assert batch.schema.names == ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"] + (
        ["headers"] if headers else [])
    assert batch.column("partition").to_pylist() == [3] * 100
    assert batch.column("key").to_pylist() == [r.key for r in expected]
    assert batch.column("value").to_pylist() == [r.value for r in expected]
    assert batch.column("offset").to_pylist() == list(range(1000, 1100))
    assert batch.column("topic").to_pylist() == ["t"] * 100 and batch.column("topic").type == pa.string()
    assert batch.column("timestamp").to_pylist()[0] == datetime.fromtimestamp(1_700_000_000, timezone.utc)


def test_one_arrow_batch_over_several_fetches_and_mixed_codecs():
    """Rows point into several fetched buffers and, for compressed batches, into a side buffer;
    the Arrow columns still hold each row's own bytes, in offset order."""
    plain = batches()
    mixed = bytearray()
    for chunk in (batches(), batches(Codec.GZIP), batches()):
        mixed += chunk
    assign_offsets(mixed, 2000)
    mixed = bytes(mixed)
    out = Columns()
    decode_batches(plain, 0, 10**9, out)
    decode_batches(mixed, 2010, 2290, out)
    expected = [r for r in read_records(plain)] + [r for r in read_records(mixed) if 2010 <= r.offset < 2290]
    batch = to_arrow(out, "t", 0)
    assert batch.column("offset").to_pylist() == [r.offset for r in expected]
    assert batch.column("key").to_pylist() == [r.key for r in expected]
    assert batch.column("value").to_pylist() == [r.value for r in expected]
    assert batch.column("key").null_count == sum(r.key is None for r in expected) > 0


def test_an_empty_read_is_an_empty_batch():
    batch = to_arrow(Columns(), "t", 0)
    assert batch.num_rows == 0 and batch.column("value").type == pa.binary()


def test_decoder_reports_a_damaged_batch_as_corrupt_message():
    sound = batches()
    data = bytearray(sound)
    data[200] ^= 0xFF
    with pytest.raises(FerryError) as err:
        decode_batches(bytes(data), 0, 10**9, Columns(), "t-0")
    assert err.value.error == ErrorCode.CORRUPT_MESSAGE and "CRC mismatch" in err.value.message
    with pytest.raises(FerryError) as err:
        decode_batches(sound[:-10], 0, 10**9, Columns(), "t-0")
    assert err.value.error == ErrorCode.CORRUPT_MESSAGE and "bad framing" in err.value.message


def test_binary_column_gathers_slices_of_several_buffers():
    """Short slices are held inline, long ones by reference; slices near a buffer's end, empty
    and null ones, and rows of two buffers all come out as their own bytes."""
    import numpy as np

    from tools.spark_read.records import _binary_column

    first, second = bytes(range(40)), os.urandom(100)
    rows = [(0, 0, 5), (0, 30, 10), (1, 90, 10), (1, 3, 80), (0, 39, 1), (1, 0, 0), (0, 7, -1), (1, 99, 1)]
    column = _binary_column([first, second], [0, 1], np.asarray([b for b, _p, _n in rows]),
                            [p for _b, p, _n in rows], [n for _b, _p, n in rows])
    want = [None if n < 0 else (first, second)[b][p:p + n] for b, p, n in rows]
    assert column.type == pa.binary() and column.to_pylist() == want and column.null_count == 1
    with pytest.raises(ValueError, match="outside"):
        _binary_column([first], [0], np.asarray([0]), [35], [10])


def test_blocks_located_while_planning_are_the_tasks_run():
    """The driver reads an object's index once; each task gets the contiguous run of its stream's
    blocks from its start up to its end, and a stream missing from the object is CORRUPT_MESSAGE."""
    from stream_storage.object_format import Chunk, build_object
    from tools.spark_read.offsets import ObjectSpan, ReadTask
    from tools.spark_read.source import blocks_for_task

    chunks = [Chunk(o, o + 10, os.urandom(400)) for o in range(100, 200, 10)]
    built = build_object([(7, [Chunk(0, 5, b"x" * 300)]), (9, chunks)], block_bytes=1000)
    span = ObjectSpan("k", 100, 200, len(built.data))
    got = blocks_for_task(built.index, ReadTask("t", 0, 9, 125, 160, (span,)), span)
    assert [(b.start_offset, b.end_offset) for b in got] == [(120, 140), (140, 160)]
    assert all(b.stream_id == 9 for b in got) and got[0].position + got[0].size == got[1].position
    with pytest.raises(FerryError) as err:
        blocks_for_task(built.index, ReadTask("t", 0, 8, 125, 160, (span,)), span)
    assert err.value.error == ErrorCode.CORRUPT_MESSAGE


def test_varied_records_decode_as_the_strict_reader_does():
    """Multi-byte varints in every field (timestamps far apart, offset deltas past 63, values of
    0 B to 20 KiB, empty and null keys and values) decode exactly as the strict reader does."""
    import random

    rng = random.Random(7)
    buf = bytearray()
    for _ in range(4):
        recs = []
        for _ in range(300):
            key = None if rng.random() < 0.1 else os.urandom(rng.choice([0, 3, 12, 13, 200]))
            value = None if rng.random() < 0.1 else os.urandom(rng.choice([0, 1, 11, 1024, 20_000]))
            recs.append(Record(0, 1_700_000_000_000 + rng.randrange(0, 1 << 40), key, value, ()))
        buf += build_batch(recs)
    assign_offsets(buf, 5000)
    data = bytes(buf)
    expected = [r for r in read_records(data) if 5100 <= r.offset < 6150]
    out = Columns()
    assert decode_batches(data, 5100, 6150, out, check_batch_crc=False) == 6200
    batch = to_arrow(out, "t", 0)
    assert batch.column("offset").to_pylist() == [r.offset for r in expected]
    assert batch.column("key").to_pylist() == [r.key for r in expected]
    assert batch.column("value").to_pylist() == [r.value for r in expected]
    assert out.timestamps_ms == [r.timestamp_ms for r in expected]


@pytest.mark.parametrize("damage", ["record length", "value length"])
def test_records_that_do_not_parse_are_corrupt_even_without_the_batch_crc(damage):
    """With the batch CRC left to the object block's, a record whose length or value length does
    not fit its batch is still CORRUPT_MESSAGE, never a row pointing at other bytes."""
    data = bytearray(build_batch([Record(0, 1_700_000_000_000, b"k", b"v" * 100, ())] * 3))
    first_record = 61  # record: length (2 bytes), attributes, ts delta, offset delta, key length, key, value length
    if damage == "record length":
        data[first_record:first_record + 2] = bytes([0xFE, 0x03])  # 255 bytes: past the batch
    else:
        value_length = first_record + 2 + 5
        assert data[value_length:value_length + 2] == bytes([0xC8, 0x01])  # 100
        data[value_length:value_length + 2] = bytes([0xCA, 0x01])  # 101: one byte past the record
    with pytest.raises(FerryError) as err:
        decode_batches(bytes(data), 0, 10**9, Columns(), "t-0", check_batch_crc=False)
    assert err.value.error == ErrorCode.CORRUPT_MESSAGE


def _offsets_batch(first: int, last: int):  # type: ignore[no-untyped-def]
    return pa.record_batch({"offset": pa.array(range(first, last), pa.int64())})


def test_a_read_whose_object_was_compacted_away_goes_on_from_the_new_objects():
    """An object deleted after the plan (replaced by a compacted one) is re-planned from the last
    offset handed on: every offset once, in order; offsets no object holds are OFFSET_OUT_OF_RANGE."""
    from stream_storage.object_store import ObjectNotFound
    from tools.spark_read.offsets import ObjectSpan, ReadTask
    from tools.spark_read.source import read_resuming

    old = (ObjectSpan("a", 0, 50, 1), ObjectSpan("b", 50, 100, 1))
    new = (ObjectSpan("a", 0, 50, 1), ObjectSpan("ab", 50, 100, 1))
    calls = []

    def read(task, blocks):  # type: ignore[no-untyped-def]
        calls.append((task.start_offset, [o.object_key for o in task.objects], blocks))
        yield _offsets_batch(task.start_offset, 50) if task.start_offset < 50 else _offsets_batch(task.start_offset, 60)
        if any(o.object_key == "b" for o in task.objects):
            raise ObjectNotFound("b")
        if task.start_offset < 60:
            yield _offsets_batch(60, 100)

    task = ReadTask("t", 0, 7, 10, 100, old)
    got = [o for b in read_resuming(task, [["x"], ["y"]], read, lambda t: new) for o in b.column("offset").to_pylist()]
    assert got == list(range(10, 100))
    assert calls == [(10, ["a", "b"], [["x"], ["y"]]), (50, ["ab"], None)]

    def always_gone(task, blocks):  # type: ignore[no-untyped-def]
        raise ObjectNotFound("b")
        yield  # pragma: no cover

    with pytest.raises(FerryError) as err:
        list(read_resuming(task, None, always_gone, lambda t: (ObjectSpan("c", 60, 100, 1),)))
    assert err.value.error == ErrorCode.OFFSET_OUT_OF_RANGE and "10..100" in err.value.message
    with pytest.raises(FerryError) as err:
        list(read_resuming(task, None, always_gone, lambda t: new, max_replans=2))
    assert err.value.error == ErrorCode.OFFSET_OUT_OF_RANGE and "2 times" in err.value.message


def test_covering_objects_needs_every_offset():
    from tools.spark_read.offsets import ObjectSpan, covering_objects

    spans = (ObjectSpan("a", 0, 50, 1), ObjectSpan("b", 50, 80, 1), ObjectSpan("c", 90, 100, 1))
    assert [o.object_key for o in covering_objects(spans, 10, 80)] == ["a", "b"]
    assert covering_objects(spans, 60, 95) is None and covering_objects(spans, 95, 101) is None


def test_batches_decode_where_they_lie_in_a_larger_buffer():
    """A stream's run of blocks is decoded inside the whole fetched object: rows point into it, and
    a batch running past the end of the range is corrupt even when the buffer goes on."""
    data = batches(Codec.NONE, False)
    junk = os.urandom(37)
    whole = junk + data + junk
    out = Columns()
    assert decode_batches(whole, 1015, 1047, out, first_byte=len(junk), end_byte=len(junk) + len(data)) == 1100
    alone = Columns()
    decode_batches(data, 1015, 1047, alone)
    assert out.offsets == alone.offsets == list(range(1015, 1047))
    assert out.keys() == alone.keys() and out.values() == alone.values()
    assert to_arrow(out, "t", 0).equals(to_arrow(alone, "t", 0))
    with pytest.raises(FerryError) as err:  # the last batch cut short by the range, not by the buffer
        decode_batches(whole, 0, 10**9, Columns(), "t-0", first_byte=len(junk), end_byte=len(junk) + len(data) - 1)
    assert err.value.error == ErrorCode.CORRUPT_MESSAGE
    with pytest.raises(ValueError):
        decode_batches(data, 0, 10**9, Columns(), first_byte=10, end_byte=len(data) + 1)
