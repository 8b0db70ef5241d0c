"""The produce-side record validator: Kafka's refusals for hostile batches (each also with its CRC
recomputed, so that the content check is what refuses it), every codec accepted and readable back
by kafka-python, LogAppendTime rewrites, topic config parsing, properties over random batches and
mutations, and the stored-batch scan that skips a corrupt batch instead of raising."""
from __future__ import annotations

import gzip
import struct
import time
import zlib
from dataclasses import dataclass

import lz4.frame
import pytest
import zstandard
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka import codec as kafka_codec
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.legacy_records import LegacyRecordBatchBuilder

from metadata_quorum.kernel.errors import ErrorCode, FerryError
from stream_storage import batches, record_format
from stream_storage.batch_scan import CorruptBatch, DecodedBatch, scan_batches
from stream_storage.compression import Codec
from stream_storage.record_format import RecordsSummary, _walk_common, _walk_uniform, walk_records
from stream_storage.record_validator import (
    LOG_APPEND_TIME, LONG_MAX, ValidatedBatch, ValidationPolicy, validate_produce_records,
)

NOW_MS = 1_700_000_000_000
POLICY = ValidationPolicy()
ENCODERS = {
    Codec.GZIP: kafka_codec.gzip_encode,
    Codec.SNAPPY: kafka_codec.snappy_encode,
    Codec.LZ4: kafka_codec.lz4_encode,
    Codec.ZSTD: kafka_codec.zstd_encode,
}


@dataclass(frozen=True)
class Rec:
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()
    timestamp_ms: int = NOW_MS


def build(records: list[Rec] | None = None, codec: Codec = Codec.NONE, producer: tuple[int, int, int] = (-1, -1, -1),
          transactional: bool = False) -> bytes:
    """A batch as kafka-python's producer builds it (compressing only when that saves bytes)."""
    records = records if records is not None else [Rec(b"k0", b"v0"), Rec(None, b"v1", (("h", b"x"),)),
                                                   Rec(b"k2", None, (("n", None),))]
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=int(codec), is_transactional=transactional,
                                        producer_id=producer[0], producer_epoch=producer[1],
                                        base_sequence=producer[2], batch_size=2 ** 31 - 1)
    for i, rec in enumerate(records):
        builder.append(i, rec.timestamp_ms, rec.key, rec.value, list(rec.headers))
    return bytes(builder.build())


def fix_crc(buf: bytes | bytearray) -> bytes:
    out = bytearray(buf)
    struct.pack_into(">I", out, batches.CRC_OFFSET, crc32c(memoryview(out)[batches.ATTRIBUTES_OFFSET:]))
    return bytes(out)


def patch(buf: bytes, fmt: str, offset: int, value: int, crc: bool = True) -> bytes:
    out = bytearray(buf)
    struct.pack_into(fmt, out, offset, value)
    return fix_crc(out) if crc else bytes(out)


def with_payload(buf: bytes, payload: bytes, codec: Codec | None = None) -> bytes:
    """``buf``'s header over a new payload: length fixed, codec bits set if given, CRC recomputed."""
    out = bytearray(buf[:batches.HEADER_BYTES] + payload)
    struct.pack_into(">i", out, 8, len(out) - batches.LOG_OVERHEAD)
    if codec is not None:
        (attributes,) = struct.unpack_from(">h", out, batches.ATTRIBUTES_OFFSET)
        struct.pack_into(">h", out, batches.ATTRIBUTES_OFFSET, (attributes & ~0x07) | codec)
    return fix_crc(out)


def compressed(buf: bytes, codec: Codec) -> bytes:
    return with_payload(buf, ENCODERS[codec](buf[batches.HEADER_BYTES:]), codec)


def refused(buf: bytes | bytearray, policy: ValidationPolicy = POLICY, now_ms: int = NOW_MS) -> FerryError:
    with pytest.raises(FerryError) as err:
        validate_produce_records(buf, policy, now_ms)
    assert err.value.message, "a refusal names its reason"
    return err.value


def readback(vb: ValidatedBatch) -> list[Rec]:
    batch = DefaultRecordBatch(bytes(vb.data))
    assert batch.validate_crc()
    out = [Rec(r.key, r.value, tuple(r.headers), r.timestamp) for r in batch]
    assert len(out) == vb.records_count == batch.records_count
    return out


def test_codec_seven_is_unsupported_and_checked_after_the_crc() -> None:
    buf = build()
    assert refused(patch(buf, ">h", 21, 0x07)).error is ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    assert refused(patch(buf, ">h", 21, 0x07, crc=False)).error is ErrorCode.CORRUPT_MESSAGE
    assert refused(patch(buf, ">h", 21, 0x05)).error is ErrorCode.UNSUPPORTED_COMPRESSION_TYPE


@pytest.mark.parametrize("codec", [Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.ZSTD])
def test_a_codec_flag_on_uncompressed_records_does_not_decode(codec: Codec) -> None:
    err = refused(patch(build(), ">h", 21, int(codec)))
    assert err.error is ErrorCode.CORRUPT_MESSAGE
    assert codec.name.lower() in err.message


def test_control_bit_from_a_client_is_invalid_record() -> None:
    assert refused(patch(build(), ">h", 21, 0x20)).error is ErrorCode.INVALID_RECORD


def test_a_huge_record_count_is_refused_before_any_work() -> None:
    buf = patch(build(), ">i", 57, 2 ** 31 - 1)
    buf = patch(buf, ">i", 23, 2 ** 31 - 2)  # lastOffsetDelta consistent with it
    started = time.perf_counter()
    assert refused(buf).error is ErrorCode.INVALID_RECORD
    gz = compressed(buf, Codec.GZIP)
    assert refused(gz).error is ErrorCode.INVALID_RECORD
    assert time.perf_counter() - started < 0.05


def test_a_count_that_does_not_match_the_records() -> None:
    buf = build()  # three records
    fewer = patch(patch(build(), ">i", 57, 2), ">i", 23, 1)
    more = patch(patch(build(), ">i", 57, 4), ">i", 23, 3)
    assert "remain" in refused(fewer).message
    assert "declares 4 records" in refused(more).message
    assert refused(fewer).error is refused(more).error is ErrorCode.INVALID_RECORD
    assert refused(patch(buf, ">i", 57, 2)).error is ErrorCode.INVALID_RECORD  # count vs lastOffsetDelta
    assert refused(patch(patch(buf, ">i", 57, 0), ">i", 23, -1)).error is ErrorCode.INVALID_RECORD
    assert refused(patch(buf, ">i", 57, -1)).error is ErrorCode.INVALID_RECORD
    for codec in (Codec.GZIP, Codec.ZSTD):
        assert refused(compressed(fewer, codec)).error is ErrorCode.INVALID_RECORD
        assert refused(compressed(more, codec)).error is ErrorCode.INVALID_RECORD


def test_garbage_records_are_invalid_record() -> None:
    buf = build()
    payload_bytes = len(buf) - batches.HEADER_BYTES
    for garbage in (b"\xff" * payload_bytes, bytes(range(payload_bytes)), b"\x01" * payload_bytes):
        assert refused(with_payload(buf, garbage)).error is ErrorCode.INVALID_RECORD
    assert refused(compressed(with_payload(buf, b"\xff" * payload_bytes), Codec.SNAPPY)).error \
        is ErrorCode.INVALID_RECORD


def test_last_offset_delta_of_a_million_is_invalid_record() -> None:
    err = refused(patch(build(), ">i", 23, 1_000_000))
    assert err.error is ErrorCode.INVALID_RECORD
    assert "1000000" in err.message


def test_bad_crc_is_corrupt_message() -> None:
    buf = bytearray(build())
    buf[-1] ^= 0x01
    err = refused(buf)
    assert err.error is ErrorCode.CORRUPT_MESSAGE and "CRC" in err.message
    assert refused(patch(build(), ">I", 17, 12345, crc=False)).error is ErrorCode.CORRUPT_MESSAGE


def test_truncated_batches_are_corrupt_and_nothing_at_all_is_invalid() -> None:
    buf = build()
    for cut in (len(buf) - 1, 60, 40, 17, 10, 1):
        assert refused(buf[:cut]).error is ErrorCode.CORRUPT_MESSAGE
    assert refused(b"").error is ErrorCode.INVALID_RECORD
    assert refused(patch(buf, ">i", 8, 10)).error is ErrorCode.CORRUPT_MESSAGE  # length below the header
    # the same cut with the length field and CRC made to agree: the records are what is short
    assert refused(with_payload(buf, buf[61:-1])).error is ErrorCode.INVALID_RECORD
    assert refused(with_payload(buf, b"")).error is ErrorCode.INVALID_RECORD


def test_trailing_garbage_and_a_second_batch() -> None:
    buf = build()
    err = refused(buf + b"\x00\x01\x02")
    assert err.error is ErrorCode.CORRUPT_MESSAGE and "3 bytes follow" in err.message
    assert refused(buf + b"\x00" * 100).error is ErrorCode.CORRUPT_MESSAGE
    err = refused(buf + build())
    assert err.error is ErrorCode.INVALID_RECORD and "second record batch" in err.message


@pytest.mark.parametrize("magic", [0, 1])
def test_old_message_formats_are_unsupported(magic: int) -> None:
    builder = LegacyRecordBatchBuilder(magic=magic, compression_type=0, batch_size=2 ** 20)
    builder.append(0, NOW_MS if magic else None, b"k", b"v")
    err = refused(bytes(builder.build()))
    assert err.error is ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT
    assert f"v{magic}" in err.message and "v2" in err.message
    assert refused(patch(build(), ">b", 16, magic)).error is ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT


def test_unknown_magic_is_corrupt() -> None:
    assert refused(patch(build(), ">b", 16, 3)).error is ErrorCode.CORRUPT_MESSAGE
    assert refused(patch(build(), ">b", 16, -1)).error is ErrorCode.CORRUPT_MESSAGE


def test_a_transactional_batch_is_taken_unless_refused() -> None:
    buf = build(producer=(7, 0, 0), transactional=True)
    err = refused(buf, ValidationPolicy(allow_transactional=False))
    assert err.error is ErrorCode.INVALID_TXN_STATE and "transaction" in err.message
    vb = validate_produce_records(buf, ValidationPolicy(), NOW_MS)
    assert vb.info.producer_id == 7
    no_pid = patch(buf, ">q", 43, -1)
    assert refused(no_pid, ValidationPolicy(allow_transactional=True)).error is ErrorCode.INVALID_RECORD


def test_timestamps_out_of_bounds_are_invalid_timestamp() -> None:
    policy = ValidationPolicy(timestamp_before_max_ms=60_000, timestamp_after_max_ms=1_000)
    assert validate_produce_records(build([Rec(b"k", b"v", timestamp_ms=NOW_MS - 60_000)]), policy, NOW_MS)
    old = build([Rec(b"k", b"v"), Rec(b"k", b"v", timestamp_ms=NOW_MS - 60_001)])
    err = refused(old, policy)
    assert err.error is ErrorCode.INVALID_TIMESTAMP and "record 1" in err.message
    future = build([Rec(b"k", b"v", timestamp_ms=NOW_MS + 1_001)])
    assert refused(future, policy).error is ErrorCode.INVALID_TIMESTAMP
    assert validate_produce_records(future, POLICY, NOW_MS).max_timestamp_ms == NOW_MS + 1_001
    assert refused(compressed(old, Codec.ZSTD), policy).error is ErrorCode.INVALID_TIMESTAMP
    # a LogAppendTime topic ignores the producer's timestamps
    lat = ValidationPolicy(timestamp_type=LOG_APPEND_TIME, timestamp_before_max_ms=0, timestamp_after_max_ms=0)
    assert validate_produce_records(future, lat, NOW_MS).max_timestamp_ms == NOW_MS


def test_negative_and_overflowing_timestamps() -> None:
    assert refused(build([Rec(b"k", b"v", timestamp_ms=-5)])).error is ErrorCode.INVALID_TIMESTAMP
    none = build([Rec(b"k", b"v", timestamp_ms=-1), Rec(b"k", b"v", timestamp_ms=-1)])
    vb = validate_produce_records(none, POLICY, NOW_MS)
    assert vb.max_timestamp_ms == -1 and not vb.rewritten
    # firstTimestamp near Long.MAX_VALUE and a positive delta: a timestamp Java would wrap negative
    overflow = patch(build([Rec(b"k", b"v"), Rec(b"k", b"v", timestamp_ms=NOW_MS + 10)]), ">q", 27, LONG_MAX - 5)
    err = refused(overflow)
    assert err.error is ErrorCode.INVALID_TIMESTAMP and "record 1" in err.message
    assert refused(build([Rec(b"k", b"v", timestamp_ms=-1), Rec(b"k", b"v", timestamp_ms=-7)])).error \
        is ErrorCode.INVALID_TIMESTAMP


def test_log_append_time_bit_from_a_producer_is_invalid_timestamp() -> None:
    assert refused(patch(build(), ">h", 21, 0x08)).error is ErrorCode.INVALID_TIMESTAMP


@pytest.mark.parametrize("producer", [(-2, -1, -1), (5, -1, 0), (5, 0, -1), (5, -3, 9)])
def test_inconsistent_producer_fields_are_invalid_record(producer: tuple[int, int, int]) -> None:
    buf = patch(patch(patch(build(), ">q", 43, producer[0]), ">h", 51, producer[1]), ">i", 53, producer[2])
    assert refused(buf).error is ErrorCode.INVALID_RECORD


@pytest.mark.parametrize("producer", [(-1, -1, -1), (-1, 0, 0), (-1, -1, 0), (0, 0, 0), (12345, 3, 100)])
def test_producer_fields_kafka_accepts(producer: tuple[int, int, int]) -> None:
    """Without a producer id Kafka ignores epoch and sequence (Sarama sends 0 for them)."""
    vb = validate_produce_records(build(producer=producer), POLICY, NOW_MS)
    assert (vb.info.producer_id, vb.info.producer_epoch, vb.info.base_sequence) == producer


def test_header_checks_kafka_makes_for_client_batches() -> None:
    buf = build()
    assert refused(patch(buf, ">q", 0, 5, crc=False)).error is ErrorCode.INVALID_RECORD  # base offset not 0
    assert refused(patch(buf, ">h", 21, 0x40)).error is ErrorCode.INVALID_RECORD  # unused attribute bit
    assert refused(buf, ValidationPolicy(max_message_bytes=len(buf) - 1)).error is ErrorCode.MESSAGE_TOO_LARGE
    assert validate_produce_records(buf, ValidationPolicy(max_message_bytes=len(buf)), NOW_MS)


def test_record_level_grammar() -> None:
    records = [Rec(b"a", b"1"), Rec(b"b", b"2")]
    buf = build(records)
    payload = bytearray(buf[61:])
    # record 1's offset delta (byte 3 of the record: length, attributes, timestamp delta, offset delta)
    second = 1 + payload[0] // 2
    skipped = bytearray(payload)
    skipped[second + 3] = 4  # zigzag 2
    err = refused(with_payload(buf, bytes(skipped)))
    assert err.error is ErrorCode.INVALID_RECORD and "offset delta" in err.message
    attrs = bytearray(payload)
    attrs[1] = 0x01
    assert refused(with_payload(buf, bytes(attrs))).error is ErrorCode.INVALID_RECORD
    bad_key = bytearray(payload)
    bad_key[4] = 0x03  # key length -2
    assert refused(with_payload(buf, bytes(bad_key))).error is ErrorCode.INVALID_RECORD
    long_varint = bytes([payload[0]]) + b"\x80\x80\x80\x80\x80\x00"
    assert refused(with_payload(buf, long_varint + bytes(payload[1:]))).error is ErrorCode.INVALID_RECORD
    non_utf8 = build([Rec(b"k", b"v", (("h\xe9", b"x"),))])
    raw = non_utf8.replace("h\xe9".encode(), b"h\xff\xfe")
    assert refused(fix_crc(raw)).error is ErrorCode.INVALID_RECORD


@pytest.mark.parametrize("codec", [Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.ZSTD])
def test_truncated_or_padded_compressed_payloads_are_corrupt(codec: Codec) -> None:
    buf = compressed(build(), codec)
    payload = buf[61:]
    assert refused(with_payload(buf, payload[:-3])).error in (ErrorCode.CORRUPT_MESSAGE, ErrorCode.INVALID_RECORD)
    assert refused(with_payload(buf, payload + b"\x00junk")).error is ErrorCode.CORRUPT_MESSAGE
    assert refused(with_payload(buf, b"")).error is ErrorCode.CORRUPT_MESSAGE


@pytest.mark.parametrize("codec", [Codec.GZIP, Codec.ZSTD, Codec.LZ4, Codec.SNAPPY])
def test_a_decompression_bomb_stops_at_the_limit(codec: Codec) -> None:
    buf = build()
    records = buf[61:] + b"\x00" * (8 << 20)
    bomb = with_payload(buf, ENCODERS[codec](records), codec)
    started = time.perf_counter()
    err = refused(bomb, ValidationPolicy(max_uncompressed_bytes=1 << 20))
    assert err.error is ErrorCode.MESSAGE_TOO_LARGE and "decompresses" in err.message
    assert time.perf_counter() - started < 1.0


def test_lz4_frames_kafka_cannot_read_are_refused() -> None:
    buf = build()
    frame = bytearray(lz4.frame.compress(buf[61:], block_linked=False))
    for flags, why in ((frame[4] & ~0x20, "dependent blocks"), (frame[4] | 0x01, "dictionary id"),
                       ((frame[4] & 0x3F) | 0x80, "version 2")):
        bad = bytearray(frame)
        bad[4] = flags
        err = refused(with_payload(buf, bytes(bad), Codec.LZ4))
        assert err.error is ErrorCode.CORRUPT_MESSAGE and why in err.message


def test_concatenated_gzip_members_and_zstd_frames_decode_whole() -> None:
    records = [Rec(b"k%d" % i, b"value %d" % i) for i in range(6)]
    buf = build(records)
    payload = buf[61:]
    half = len(payload) // 2
    for codec, joined in ((Codec.GZIP, gzip.compress(payload[:half]) + gzip.compress(payload[half:])),
                          (Codec.ZSTD, zstandard.compress(payload[:half]) + zstandard.compress(payload[half:]))):
        vb = validate_produce_records(with_payload(buf, joined, codec), POLICY, NOW_MS)
        assert [r.value for r in readback(vb)] == [r.value for r in records]
    raw_deflate = zlib.compress(payload)
    assert refused(with_payload(buf, raw_deflate, Codec.GZIP)).error is ErrorCode.CORRUPT_MESSAGE


def test_control_batches_when_the_broker_allows_them() -> None:
    allowed = ValidationPolicy(allow_control_batches=True)
    marker = patch(build([Rec(b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00")], producer=(9, 0, 0)), ">h", 21, 0x20)
    vb = validate_produce_records(marker, allowed, NOW_MS)
    assert vb.records_count == 1
    bad_key = patch(build([Rec(b"\x00", b"")], producer=(9, 0, 0)), ">h", 21, 0x20)
    assert refused(bad_key, allowed).error is ErrorCode.INVALID_RECORD
    two = patch(build([Rec(b"\x00\x00\x00\x01", b""), Rec(b"\x00\x00\x00\x01", b"")]), ">h", 21, 0x20)
    assert refused(two, allowed).error is ErrorCode.INVALID_RECORD


# ---------------------------------------------------------------------------- accepted batches

VARIED = [Rec(b"key", b"value"), Rec(None, b"no key"), Rec(b"no value", None), Rec(None, None),
          Rec(b"k", b"h" * 300, (("trace", b"abc"), ("null", None), ("\u00e9t\u00e9", b""))),
          Rec(b"", b"", timestamp_ms=NOW_MS - 5)] + [Rec(b"k%d" % i, b"compressible value " * 20) for i in range(40)]


@pytest.mark.parametrize("codec", list(Codec))
@pytest.mark.parametrize("producer", [(-1, -1, -1), (4242, 7, 1000)])
def test_every_codec_is_accepted_and_reads_back(codec: Codec, producer: tuple[int, int, int]) -> None:
    buf = build(VARIED, codec, producer)
    assert buf[22] & 0x07 == codec, "kafka-python compressed it"
    vb = validate_produce_records(buf, POLICY, NOW_MS)
    assert vb.codec is codec and vb.records_count == len(VARIED) and not vb.rewritten
    assert bytes(vb.data) == buf
    assert vb.max_timestamp_ms == NOW_MS and vb.log_append_time_ms == -1
    assert vb.info.offset_count == len(VARIED) and vb.info.size_bytes == len(buf)
    assert (vb.info.producer_id, vb.info.producer_epoch, vb.info.base_sequence) == producer
    assert readback(vb) == VARIED


def test_the_callers_bytearray_is_returned_uncopied() -> None:
    buf = bytearray(build())
    vb = validate_produce_records(buf, POLICY, NOW_MS)
    assert vb.data is buf and vb.infos == [vb.info]
    assert validate_produce_records(memoryview(bytes(buf)), POLICY, NOW_MS).data == buf


def test_log_append_time_rewrites_the_header_and_crc() -> None:
    for codec in (Codec.NONE, Codec.LZ4):
        original = build(VARIED, codec)
        buf = bytearray(original)
        vb = validate_produce_records(buf, ValidationPolicy(timestamp_type=LOG_APPEND_TIME), NOW_MS + 777)
        assert bytes(buf) == original, "the input is not modified"
        assert vb.rewritten and vb.data is not buf
        assert vb.max_timestamp_ms == vb.info.max_timestamp_ms == vb.log_append_time_ms == NOW_MS + 777
        assert batches.crc_ok(vb.data, vb.info)
        assert vb.data[22] & 0x08 and vb.data[22] & 0x07 == codec
        assert vb.data[27:35] == original[27:35], "firstTimestamp is kept"
        read = DefaultRecordBatch(bytes(vb.data))
        assert read.timestamp_type == 1
        assert {r.timestamp for r in read} == {NOW_MS + 777}
        assert [r.timestamp_ms for r in batches.read_records(vb.data)] == [NOW_MS + 777] * len(VARIED)


def test_a_wrong_max_timestamp_is_rewritten_as_kafka_does() -> None:
    buf = patch(build([Rec(b"a", b"1", timestamp_ms=NOW_MS - 10), Rec(b"b", b"2", timestamp_ms=NOW_MS - 3)]),
                ">q", 35, 0)
    vb = validate_produce_records(buf, POLICY, NOW_MS)
    assert vb.rewritten and vb.max_timestamp_ms == vb.info.max_timestamp_ms == NOW_MS - 3
    assert batches.crc_ok(vb.data, vb.info)


def test_validation_is_fast_for_a_64_kib_uncompressed_batch() -> None:
    buf = bytearray(build([Rec(b"key-%d" % i, bytes(1000)) for i in range(64)]))
    assert len(buf) > 64_000
    validate_produce_records(buf, POLICY, NOW_MS)
    best = min(_timed(lambda: validate_produce_records(buf, POLICY, NOW_MS)) for _ in range(50))
    assert best < 0.002, f"{best * 1e6:.0f} us"


def _timed(fn: object) -> float:
    started = time.perf_counter()
    fn()  # type: ignore[operator]
    return time.perf_counter() - started


# ---------------------------------------------------------------------------- topic configs

def test_policy_from_topic_configs() -> None:
    policy = ValidationPolicy.from_topic_configs({
        "max.message.bytes": "2000", "message.timestamp.type": "LogAppendTime",
        "message.timestamp.before.max.ms": " 60000 ", "retention.ms": "whatever is not ours"})
    assert (policy.max_message_bytes, policy.timestamp_type, policy.timestamp_before_max_ms,
            policy.timestamp_after_max_ms) == (2000, "LogAppendTime", 60000, LONG_MAX)
    assert ValidationPolicy.from_topic_configs({}) == ValidationPolicy()
    broker = ValidationPolicy(max_message_bytes=5000, allow_control_batches=True)
    assert ValidationPolicy.from_topic_configs({}, broker) == broker
    assert ValidationPolicy.from_topic_configs({"max.message.bytes": "10"}, broker).allow_control_batches


def test_the_deprecated_difference_bound_applies_where_before_and_after_are_default() -> None:
    both = ValidationPolicy.from_topic_configs({"message.timestamp.difference.max.ms": "1000"})
    assert (both.timestamp_before_max_ms, both.timestamp_after_max_ms) == (1000, 1000)
    one = ValidationPolicy.from_topic_configs({"message.timestamp.difference.max.ms": "1000",
                                               "message.timestamp.after.max.ms": "5"})
    assert (one.timestamp_before_max_ms, one.timestamp_after_max_ms) == (1000, 5)


@pytest.mark.parametrize(("name", "value", "reason"), [
    ("max.message.bytes", "1e6", "Not a number of type INT"),
    ("max.message.bytes", "2147483648", "Not a number of type INT"),
    ("max.message.bytes", "-1", "Value must be at least 0"),
    ("max.message.bytes", "1_000", "Not a number of type INT"),
    ("message.timestamp.type", "createtime", "String must be one of: CreateTime, LogAppendTime"),
    ("message.timestamp.before.max.ms", "-5", "Value must be at least 0"),
    ("message.timestamp.after.max.ms", "9223372036854775808", "Not a number of type LONG"),
    ("message.timestamp.difference.max.ms", "soon", "Not a number of type LONG"),
])
def test_bad_topic_config_values_are_invalid_config(name: str, value: str, reason: str) -> None:
    with pytest.raises(FerryError) as err:
        ValidationPolicy.from_topic_configs({name: value})
    assert err.value.error is ErrorCode.INVALID_CONFIG
    assert err.value.message == f"Invalid value {value} for configuration {name}: {reason}"


# ---------------------------------------------------------------------------- properties

header_values = st.one_of(st.none(), st.binary(max_size=8))
records_strategy = st.lists(st.builds(
    Rec, key=st.one_of(st.none(), st.binary(max_size=20)), value=st.one_of(st.none(), st.binary(max_size=60)),
    headers=st.lists(st.tuples(st.text(max_size=6), header_values), max_size=3).map(tuple),
    timestamp_ms=st.one_of(st.just(-1), st.integers(NOW_MS - 10 ** 9, NOW_MS + 10 ** 6))), min_size=1, max_size=12)
producers = st.one_of(st.just((-1, -1, -1)), st.tuples(st.integers(0, 2 ** 63 - 1), st.integers(0, 2 ** 15 - 1),
                                                         st.integers(0, 2 ** 31 - 1)))
codecs = st.sampled_from(list(Codec))
FAST = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def forced(records: list[Rec], codec: Codec, producer: tuple[int, int, int]) -> bytes:
    """A valid batch in ``codec`` even when compressing would not pay (kafka-python would skip it)."""
    buf = build(records, Codec.NONE, producer)
    return buf if codec is Codec.NONE else compressed(buf, codec)


@FAST
@given(records=records_strategy, codec=codecs, producer=producers)
def test_random_valid_batches_are_accepted_and_read_back(records: list[Rec], codec: Codec,
                                                         producer: tuple[int, int, int]) -> None:
    vb = validate_produce_records(forced(records, codec, producer), POLICY, NOW_MS)
    assert vb.codec is codec
    assert readback(vb) == records
    stamped = [r.timestamp_ms for r in records if r.timestamp_ms != -1]
    assert vb.max_timestamp_ms == max(stamped, default=-1)


def assert_refused_or_readable(buf: bytes) -> None:
    """The property every input must have: a FerryError, or a batch kafka-python reads in full."""
    try:
        vb = validate_produce_records(buf, POLICY, NOW_MS)
    except FerryError:
        return
    batch = DefaultRecordBatch(bytes(vb.data))
    assert batch.validate_crc()
    assert len(list(batch)) == vb.records_count == batch.records_count
    assert DecodedBatch is type(next(scan_batches(vb.data)))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=records_strategy, codec=codecs, producer=producers, data=st.data())
def test_mutations_with_a_fixed_crc_are_refused_or_stay_readable(records: list[Rec], codec: Codec,
                                                                  producer: tuple[int, int, int],
                                                                  data: st.DataObject) -> None:
    buf = bytearray(forced(records, codec, producer))
    kind = data.draw(st.sampled_from(["byte", "payload byte", "field", "insert", "delete"]))
    if kind == "byte":
        buf[data.draw(st.integers(0, len(buf) - 1))] = data.draw(st.integers(0, 255))
    elif kind == "payload byte":
        buf[data.draw(st.integers(61, len(buf) - 1))] = data.draw(st.integers(0, 255))
    elif kind == "field":
        fmt, offset = data.draw(st.sampled_from([(">q", 0), (">i", 8), (">b", 16), (">h", 21), (">i", 23),
                                                 (">q", 27), (">q", 35), (">q", 43), (">h", 51), (">i", 53),
                                                 (">i", 57)]))
        bits = struct.calcsize(fmt) * 8
        struct.pack_into(fmt, buf, offset, data.draw(st.one_of(
            st.integers(-3, 3), st.integers(-(2 ** (bits - 1)), 2 ** (bits - 1) - 1))))
    else:
        at = data.draw(st.integers(61, len(buf) - (kind == "delete")))
        if kind == "insert":
            buf[at:at] = bytes([data.draw(st.integers(0, 255))])
        else:
            del buf[at]
        struct.pack_into(">i", buf, 8, len(buf) - 12)
    if len(buf) >= 61:
        buf = bytearray(fix_crc(buf))
    assert_refused_or_readable(bytes(buf))


@FAST
@given(raw=st.binary(max_size=200))
def test_arbitrary_bytes_raise_only_ferry_errors(raw: bytes) -> None:
    assert_refused_or_readable(raw)


@FAST
@given(attributes=st.integers(0, 0x3F), count=st.integers(-2, 40), payload=st.binary(max_size=120),
       producer=producers)
def test_a_well_framed_header_over_random_records_raises_only_ferry_errors(
        attributes: int, count: int, payload: bytes, producer: tuple[int, int, int]) -> None:
    header = bytearray(61)
    struct.pack_into(">qiibIhiqqqhii", header, 0, 0, 49 + len(payload), 0, 2, 0, attributes, max(count - 1, 0),
                     NOW_MS, NOW_MS, *producer, count)
    assert_refused_or_readable(fix_crc(bytes(header) + payload))


# ---------------------------------------------------------------------------- the common-case walk

def mutate(buf: bytearray, record_count: int, data: st.DataObject, kinds: list[str]) -> str:
    """Change ``buf`` (a built batch) in place as one drawn kind says: a byte changed, inserted or
    removed past the batch header, or the record count changed; "none" leaves it valid."""
    kind = data.draw(st.sampled_from(kinds))
    if kind == "byte":
        buf[data.draw(st.integers(61, len(buf) - 1))] = data.draw(st.integers(0, 255))
    elif kind == "insert":
        at = data.draw(st.integers(61, len(buf)))
        buf[at:at] = bytes([data.draw(st.integers(0, 255))])
    elif kind == "delete":
        del buf[data.draw(st.integers(61, len(buf) - 1))]
    elif kind == "count":
        struct.pack_into(">i", buf, 57, data.draw(st.integers(1, record_count + 2)))
    return kind


def both_walks(buf: bytes | bytearray) -> tuple[RecordsSummary | ErrorCode, RecordsSummary | None]:
    """The strict walk's summary (or its error) and the common-case walk's answer, over the
    records of an uncompressed batch as its header declares them."""
    count = int.from_bytes(buf[57:61], "big", signed=True)
    common = _walk_common(buf, 61, len(buf), count)
    try:  # a sink forces the strict walk
        strict: RecordsSummary | ErrorCode = walk_records(buf, 61, len(buf), count, last_offset_delta=count - 1,
                                                          consecutive_offsets=True, sink=[])
    except FerryError as exc:
        strict = exc.error
    return strict, common


def test_producer_batches_take_the_common_walk() -> None:
    librdkafka_like = build([Rec(None, bytes(1024), (), NOW_MS)] * 64)
    keyed = build([Rec(b"key-%d" % i, bytes(300 + i), (("trace", b"x" * i), ("n", None)), NOW_MS + i)
                   for i in range(150)])
    for buf in (librdkafka_like, keyed):
        strict, common = both_walks(buf)
        assert common is not None and common == strict
    assert both_walks(keyed)[1] == RecordsSummary(0, 149)


def test_the_common_walk_leaves_what_it_does_not_read_to_the_strict_walk() -> None:
    # timestamp deltas of 3+ byte varints, a value of 8 KiB (a 3-byte record length): accepted, strictly
    for records in ([Rec(None, b"v", (), NOW_MS), Rec(None, b"w", (), NOW_MS + 10 ** 6)],
                    [Rec(None, bytes(8192), (), NOW_MS)]):
        strict, common = both_walks(build(records))
        assert common is None and isinstance(strict, RecordsSummary)
    vb = validate_produce_records(build([Rec(None, b"v", (), NOW_MS), Rec(None, b"w", (), NOW_MS + 10 ** 6)]),
                                  POLICY, NOW_MS + 10 ** 6)
    assert vb.max_timestamp_ms == NOW_MS + 10 ** 6


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=records_strategy, same_time=st.booleans(), data=st.data())
def test_the_common_walk_accepts_only_what_the_strict_walk_accepts(records: list[Rec], same_time: bool,
                                                                    data: st.DataObject) -> None:
    """Over valid and mutated batches: the common walk gives up, or gives the strict walk's summary;
    and on a valid batch whose varints are all short it does not give up."""
    if same_time:
        records = [Rec(r.key, r.value, r.headers, NOW_MS) for r in records]
    buf = bytearray(build(records))
    kind = mutate(buf, len(records), data, ["none", "byte", "insert", "delete", "count"])
    strict, common = both_walks(buf)
    if common is not None:
        assert common == strict
    if kind == "none":
        assert isinstance(strict, RecordsSummary)
        if same_time:
            assert common is not None
    # and the validator as a whole answers the same with or without the common walk
    fixed = fix_crc(buf)
    struct_count = int.from_bytes(fixed[57:61], "big", signed=True)
    if struct_count >= 1:
        fixed = patch(fixed, ">i", 23, struct_count - 1)
    assert outcome(fixed) == outcome(fixed, strict_only=True)


def outcome(buf: bytes, strict_only: bool = False) -> tuple[object, ...]:
    """What validation answers: the error code and message, or what it accepted."""
    saved = record_format._walk_common, record_format._walk_uniform
    if strict_only:
        record_format._walk_common = lambda *_args: None  # type: ignore[assignment]
        record_format._walk_uniform = lambda *_args: None  # type: ignore[assignment]
    try:
        vb = validate_produce_records(buf, POLICY, NOW_MS)
    except FerryError as exc:
        return exc.error, exc.message
    finally:
        record_format._walk_common, record_format._walk_uniform = saved
    return bytes(vb.data), vb.records_count, vb.max_timestamp_ms


def uniform_and_strict(buf: bytes | bytearray) -> tuple[RecordsSummary | ErrorCode, RecordsSummary | None]:
    """The strict walk's summary (or its error) and the uniform-records walk's answer."""
    count = int.from_bytes(buf[57:61], "big", signed=True)
    strict, _common = both_walks(buf)
    return strict, _walk_uniform(buf, 61, len(buf), count)


def test_fixed_size_records_take_the_uniform_walk_and_others_do_not() -> None:
    librdkafka_like = [Rec(None, bytes(1024), (), NOW_MS + i % 3) for i in range(64)]
    keyed = [Rec(b"key-%03d" % i, b"v" * 100, (), NOW_MS - i) for i in range(40)]
    null_values = [Rec(b"k", None, (), NOW_MS)] * 5
    for records in (librdkafka_like, keyed, null_values, librdkafka_like[:1]):
        strict, uniform = uniform_and_strict(build(records))
        assert uniform is not None and uniform == strict
    assert uniform_and_strict(build(keyed))[1] == RecordsSummary(-39, 0)
    # other shapes are left to the record-by-record walks, which accept them
    for records in ([Rec(None, bytes(10 + i), (), NOW_MS) for i in range(5)],  # values of different sizes
                    [Rec(None, b"v", (("h", b"x"),), NOW_MS)] * 3,  # headers
                    [Rec(None, b"v", (), NOW_MS)] * 65,  # offset deltas of two bytes
                    [Rec(None, b"v", (), NOW_MS + 100 * i) for i in range(3)],  # two-byte timestamp deltas
                    [Rec(b"a", b"v", (), NOW_MS), Rec(None, b"vv", (), NOW_MS)]):  # same size, another layout
        strict, uniform = uniform_and_strict(build(records))
        assert uniform is None and isinstance(strict, RecordsSummary)


uniform_records = st.builds(
    lambda key, value, n, deltas: [Rec(key, value, (), NOW_MS + deltas[i % len(deltas)]) for i in range(n)],
    key=st.one_of(st.none(), st.binary(max_size=12)), value=st.one_of(st.none(), st.binary(max_size=200)),
    n=st.integers(1, 70), deltas=st.lists(st.integers(-70, 70), min_size=1, max_size=5))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=uniform_records, data=st.data())
def test_the_uniform_walk_accepts_only_what_the_strict_walk_accepts(records: list[Rec], data: st.DataObject) -> None:
    """Over batches of same-size records, valid and mutated (a byte changed, inserted or removed,
    the count changed): the uniform walk gives up, or gives the strict walk's summary; and the
    validator as a whole answers the same with or without the fast walks."""
    buf = bytearray(build(records))
    kind = mutate(buf, len(records), data, ["none", "byte", "byte", "insert", "delete", "count"])
    strict, uniform = uniform_and_strict(buf)
    if uniform is not None:
        assert uniform == strict
    if kind == "none":
        assert isinstance(strict, RecordsSummary)
    fixed = fix_crc(buf)
    struct_count = int.from_bytes(fixed[57:61], "big", signed=True)
    if struct_count >= 1:
        fixed = patch(fixed, ">i", 23, struct_count - 1)
    assert outcome(fixed) == outcome(fixed, strict_only=True)


# ---------------------------------------------------------------------------- stored batches

def stored(*bodies: bytes) -> bytearray:
    buf = bytearray(b"".join(bodies))
    batches.assign_offsets(buf, 100)
    return buf


def test_scan_yields_a_corrupt_batch_between_good_ones() -> None:
    first, second, third = build(), compressed(build(VARIED), Codec.ZSTD), build([Rec(b"z", b"last")])
    buf = stored(first, second, third)
    buf[len(first) + 70] ^= 0xFF  # inside the second batch: its CRC fails
    out = list(scan_batches(buf, end_offset=100 + 3 + len(VARIED) + 1))
    assert [type(x) for x in out] == [DecodedBatch, CorruptBatch, DecodedBatch]
    good, bad, last = out
    assert isinstance(good, DecodedBatch) and isinstance(bad, CorruptBatch) and isinstance(last, DecodedBatch)
    assert good.records is not None and [r.offset for r in good.records] == [100, 101, 102]
    assert (bad.base_offset, bad.next_offset, bad.position, bad.size_bytes) == (103, 103 + len(VARIED),
                                                                              len(first), len(second))
    assert "CRC" in bad.reason
    err = bad.error()
    assert err.error is ErrorCode.CORRUPT_MESSAGE and "103" in err.message
    assert last.records is not None and [(r.offset, r.value) for r in last.records] == [(149, b"last")]
    with pytest.raises(Exception):  # noqa: B017 - the existing reader is unchanged: it still raises
        batches.read_records(buf)


def test_scan_decodes_what_read_records_decodes() -> None:
    buf = stored(*(compressed(build(VARIED), codec) for codec in (Codec.GZIP, Codec.SNAPPY, Codec.LZ4)),
                 patch(build(), ">h", 21, 0x08))
    decoded = [r for item in scan_batches(buf) if isinstance(item, DecodedBatch) for r in item.records or ()]
    assert decoded == batches.read_records(buf)
    infos = [item.info for item in scan_batches(buf, decode_records=False) if isinstance(item, DecodedBatch)]
    assert infos == list(batches.iter_batches(buf))


def test_scan_stops_at_a_broken_length_and_resumes_at_the_end_offset() -> None:
    buf = stored(build(), build())
    second = len(build())
    struct.pack_into(">i", buf, second + 8, 10 ** 6)
    out = list(scan_batches(buf, end_offset=106))
    assert isinstance(out[0], DecodedBatch) and isinstance(out[1], CorruptBatch)
    assert (out[1].base_offset, out[1].next_offset, out[1].size_bytes) == (103, 106, len(buf) - second)
    tail = list(scan_batches(buf[:second + 30]))
    assert isinstance(tail[1], CorruptBatch) and tail[1].base_offset == 103 and tail[1].next_offset > 103


def test_scan_finds_records_a_garbled_batch_does_not_hold() -> None:
    body = build()
    garbled = with_payload(body, b"\xff" * (len(body) - 61))
    (item,) = scan_batches(stored(garbled), end_offset=103)
    assert isinstance(item, CorruptBatch) and item.next_offset == 103 and "record" in item.reason


# ---------------------------------------------------------------------------- compacted topics

COMPACTED = ValidationPolicy(compacted=True)


def test_cleanup_policy_compact_makes_the_policy_compacted() -> None:
    for value, compacted in (("compact", True), ("delete,compact", True), (" delete , compact ", True),
                             ("delete", False), ("", False)):
        assert ValidationPolicy.from_topic_configs({"cleanup.policy": value}).compacted is compacted
    assert ValidationPolicy.from_topic_configs({}, COMPACTED).compacted  # the default's value stays


@pytest.mark.parametrize("codec", [Codec.NONE, Codec.GZIP, Codec.ZSTD])
def test_a_compacted_topic_refuses_keyless_records_one_record_error_each(codec: Codec) -> None:
    records = [Rec(b"k0", b"v"), Rec(None, b"v"), Rec(b"", b"v"), Rec(None, None), Rec(None, b"v"), Rec(None, b"v")]
    batch = build(records * 20 if codec is not Codec.NONE else records, codec)
    with pytest.raises(FerryError) as err:
        validate_produce_records(batch, COMPACTED, NOW_MS, "logs-3")
    assert err.value.error is ErrorCode.INVALID_RECORD
    message = "Compacted topic cannot accept message without key in topic partition logs-3."
    errors = err.value.details["record_errors"]  # type: ignore[index]
    keyless = [i for i, r in enumerate(records * (20 if codec is not Codec.NONE else 1)) if r.key is None]
    assert errors == [{"batch_index": i, "message": message} for i in keyless]
    assert err.value.message.startswith(f"One or more records have been rejected due to {len(keyless)} record "
                                        "errors in total, and only showing the first three errors at most: "
                                        f"[RecordError(batchIndex=1, message='{message}'), RecordError(batchIndex=3")
    # an empty key is a key, a delete-policy topic takes keyless records, a keyed batch passes
    assert validate_produce_records(build([Rec(b"", b"v"), Rec(b"k", None)], codec), COMPACTED, NOW_MS)
    assert validate_produce_records(batch, POLICY, NOW_MS).records_count == len(records) * (
        20 if codec is not Codec.NONE else 1)


def test_a_bad_timestamp_beside_a_missing_key_is_invalid_timestamp_as_in_kafka() -> None:
    bounded = ValidationPolicy(compacted=True, timestamp_before_max_ms=1000)
    with pytest.raises(FerryError) as err:
        validate_produce_records(build([Rec(None, b"v"), Rec(b"k", b"v", timestamp_ms=NOW_MS - 5000)]), bounded,
                                 NOW_MS)
    assert err.value.error is ErrorCode.INVALID_TIMESTAMP


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.one_of(st.none(), st.binary(max_size=80)), st.one_of(st.none(), st.binary(max_size=9000)),
                          st.integers(min_value=-10 ** 9, max_value=10 ** 9)), min_size=1, max_size=140))
def test_the_key_scan_agrees_with_the_strict_walk(spec: list[tuple[bytes | None, bytes | None, int]]) -> None:
    batch = build([Rec(key, value, timestamp_ms=NOW_MS + delta) for key, value, delta in spec])
    sink: list[record_format.RawRecord] = []
    walk_records(batch, batches.HEADER_BYTES, len(batch), len(spec), last_offset_delta=len(spec) - 1,
                 consecutive_offsets=True, sink=sink)
    assert record_format.keyless_records(batch, batches.HEADER_BYTES, len(batch), len(spec)) == [
        i for i, record in enumerate(sink) if record.key is None]


def test_a_producers_batch_without_a_sequence_is_refused_unless_a_coordinator_writes_it() -> None:
    """TxnOffsetCommit's offsets: the group coordinator writes them under the producer's id and
    epoch with sequence -1 (Kafka's AppendOrigin.COORDINATOR); a client may not."""
    buf = bytearray(batches.build_batch([(b"k", b"v")], timestamp_ms=NOW_MS, producer_id=5, producer_epoch=0,
                                        base_sequence=-1, transactional=True))
    assert refused(buf).error is ErrorCode.INVALID_RECORD
    validate_produce_records(buf, ValidationPolicy(unsequenced_producer_batches=True), NOW_MS)
    worse = bytearray(batches.build_batch([(b"k", b"v")], timestamp_ms=NOW_MS, producer_id=5, producer_epoch=0,
                                          base_sequence=-2, transactional=True))
    assert refused(worse, ValidationPolicy(unsequenced_producer_batches=True)).error is ErrorCode.INVALID_RECORD
