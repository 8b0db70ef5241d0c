"""Validate at the door: Kafka's checks on the record batch of one partition in a produce request.

Ferry stores what a producer sends byte for byte and serves it to every consumer, so a batch that
Kafka would refuse must be refused here, before it reaches the log: once stored, one bad batch
breaks every reader of the partition at that offset. :func:`validate_produce_records` is the one
place every write path asks; it follows UnifiedLog.analyzeAndValidateRecords, LogValidator and
DefaultRecordBatch/DefaultRecord, raising the error Kafka raises:

* framing — no batch: INVALID_RECORD; magic 0/1: UNSUPPORTED_FOR_MESSAGE_FORMAT (Ferry stores v2
  only); any other magic, a length field that disagrees with the bytes, trailing bytes:
  CORRUPT_MESSAGE; a second batch: INVALID_RECORD;
* size — a batch above max.message.bytes: MESSAGE_TOO_LARGE (RecordTooLargeException); records
  that decompress past ``max_uncompressed_bytes``: MESSAGE_TOO_LARGE too (Ferry's own bound; the
  Java producer answers it by splitting the batch);
* CRC-32C over attributes..end: CORRUPT_MESSAGE;
* attributes — codec 5-7: UNSUPPORTED_COMPRESSION_TYPE; unused bits 6-15 set: INVALID_RECORD; the
  control bit from a client: INVALID_RECORD; the transactional bit (Ferry has no transactions):
  INVALID_TXN_STATE; the LogAppendTime bit from a producer: INVALID_TIMESTAMP;
* header — base offset not 0, lastOffsetDelta + 1 not the record count, a count below 1:
  INVALID_RECORD; producer id below -1, or a producer id without a valid epoch and sequence:
  INVALID_RECORD;
* payload — does not decode with its codec: CORRUPT_MESSAGE; the records (see
  :mod:`stream_storage.record_format`) not exactly the declared count, offset deltas not
  0..n-1, a malformed length or varint: INVALID_RECORD;
* timestamps (CreateTime) — outside [now - before.max.ms, now + after.max.ms], or negative
  other than -1 (no timestamp): INVALID_TIMESTAMP;
* keys — on a compacted topic (``cleanup.policy`` holds ``compact``) every record needs a key:
  INVALID_RECORD with one record error (batch index and message) per keyless record, as
  LogValidator.validateKey and processRecordErrors report them (``details["record_errors"]``).

What it may change it changes as Kafka does, in a copy: for a LogAppendTime topic the timestamp
type bit and maxTimestamp (set to ``now_ms``), for CreateTime a maxTimestamp that is not the
records' maximum; then the CRC is recomputed. Pure: no I/O, no clock (``now_ms`` is a parameter).
"""
from __future__ import annotations

import re
import struct
from dataclasses import dataclass, replace
from typing import Literal, Mapping

from crc32c import crc32c

from metadata_quorum.kernel.errors import ErrorCode, FerryError
from stream_storage import batches
from stream_storage.compression import Codec, decompress
from stream_storage.record_format import MIN_RECORD_BYTES, RawRecord, keyless_records, walk_records

TimestampType = Literal["CreateTime", "LogAppendTime"]
CREATE_TIME: TimestampType = "CreateTime"
LOG_APPEND_TIME: TimestampType = "LogAppendTime"
TIMESTAMP_TYPES: tuple[TimestampType, ...] = (CREATE_TIME, LOG_APPEND_TIME)

INT_MAX = 2 ** 31 - 1
LONG_MAX = 2 ** 63 - 1
NO_TIMESTAMP = -1
NO_PRODUCER_ID = -1
#: Kafka's max.message.bytes default (1 MiB plus the 12-byte log overhead)
DEFAULT_MAX_MESSAGE_BYTES = 1048588
#: Ferry decodes a compressed payload in memory (Kafka streams it), so it bounds the result:
#: 64 times the default max.message.bytes, beyond what real data compresses by
DEFAULT_MAX_UNCOMPRESSED_BYTES = 64 * 1024 * 1024

MAGIC_OFFSET = 16
ATTRIBUTES_OFFSET = batches.ATTRIBUTES_OFFSET
CODEC_MASK = 0x07
TIMESTAMP_TYPE_FLAG = 0x08
TRANSACTIONAL_FLAG = 0x10
CONTROL_FLAG = 0x20
KNOWN_ATTRIBUTES = 0x3F
CONTROL_KEY_BYTES = 4

_HEADER = struct.Struct(">qiibIhiqqqhii")
_ATTRIBUTES = struct.Struct(">h")
_MAX_TIMESTAMP = struct.Struct(">q")
_MAX_TIMESTAMP_OFFSET = batches.TIMESTAMPS_OFFSET + 8
_CONTROL_KEY = struct.Struct(">hh")
_JAVA_INTEGER = re.compile(r"^[+-]?[0-9]+$")


@dataclass(frozen=True)
class ValidationPolicy:
    """A topic's rules for what a producer may append (Kafka's topic configs of the same names)."""

    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    timestamp_type: TimestampType = CREATE_TIME
    timestamp_before_max_ms: int = LONG_MAX
    timestamp_after_max_ms: int = LONG_MAX
    #: control batches (transaction markers) come from the broker itself, never from a client
    allow_control_batches: bool = False
    #: transactional batches (KIP-98) are appended as Kafka does; off where a partition's replica
    #: keeps no transaction state (a caller's choice), so such a batch is refused rather than never ended
    allow_transactional: bool = True
    #: a coordinator's own transactional write (Kafka's AppendOrigin.COORDINATOR: TxnOffsetCommit's
    #: offsets in __consumer_offsets) carries the producer's id and epoch but no sequence of its own
    unsequenced_producer_batches: bool = False
    max_uncompressed_bytes: int = DEFAULT_MAX_UNCOMPRESSED_BYTES
    #: ``cleanup.policy`` holds ``compact``: compaction keeps the last record of each key, so a
    #: record without one is refused (Kafka's LogValidator.validateKey)
    compacted: bool = False

    def __post_init__(self) -> None:
        if not 0 <= self.max_message_bytes <= INT_MAX:
            raise _bad_config("max.message.bytes", str(self.max_message_bytes), "Value must be at least 0")
        if self.timestamp_type not in TIMESTAMP_TYPES:
            raise _bad_config("message.timestamp.type", str(self.timestamp_type),
                              f"String must be one of: {', '.join(TIMESTAMP_TYPES)}")
        for name, value in (("message.timestamp.before.max.ms", self.timestamp_before_max_ms),
                            ("message.timestamp.after.max.ms", self.timestamp_after_max_ms)):
            if not 0 <= value <= LONG_MAX:
                raise _bad_config(name, str(value), "Value must be at least 0")
        if self.max_uncompressed_bytes < 1:
            raise _bad_config("max_uncompressed_bytes", str(self.max_uncompressed_bytes), "Value must be at least 1")

    @classmethod
    def from_topic_configs(cls, configs: Mapping[str, str],
                           defaults: ValidationPolicy | None = None) -> ValidationPolicy:
        """The policy a topic's configs (Kafka's strings, as stored in the metadata image) give,
        over ``defaults`` (the broker's). Keys other than the ones below are not this policy's
        business and are ignored; a bad value raises INVALID_CONFIG with Kafka's wording.

        message.timestamp.difference.max.ms is the deprecated single bound: as in Kafka 3.6+, it
        applies to before/after.max.ms where those are still at their default (Long.MAX_VALUE).
        """
        base = defaults if defaults is not None else cls()
        max_message_bytes = _integer_config(configs, "max.message.bytes", base.max_message_bytes, INT_MAX, "INT")
        timestamp_type = base.timestamp_type
        raw_type = configs.get("message.timestamp.type")
        if raw_type is not None:
            text = raw_type.strip()
            if text == CREATE_TIME:
                timestamp_type = CREATE_TIME
            elif text == LOG_APPEND_TIME:
                timestamp_type = LOG_APPEND_TIME
            else:
                raise _bad_config("message.timestamp.type", raw_type,
                                  f"String must be one of: {', '.join(TIMESTAMP_TYPES)}")
        before_ms = _integer_config(configs, "message.timestamp.before.max.ms", base.timestamp_before_max_ms,
                                    LONG_MAX, "LONG")
        after_ms = _integer_config(configs, "message.timestamp.after.max.ms", base.timestamp_after_max_ms,
                                   LONG_MAX, "LONG")
        difference_ms = _integer_config(configs, "message.timestamp.difference.max.ms", LONG_MAX, LONG_MAX, "LONG")
        if before_ms == LONG_MAX:
            before_ms = difference_ms
        if after_ms == LONG_MAX:
            after_ms = difference_ms
        compacted = base.compacted
        raw_policy = configs.get("cleanup.policy")
        if raw_policy is not None:
            compacted = "compact" in (item.strip() for item in raw_policy.split(","))
        return replace(base, max_message_bytes=max_message_bytes, timestamp_type=timestamp_type,
                       timestamp_before_max_ms=before_ms, timestamp_after_max_ms=after_ms, compacted=compacted)


def _bad_config(name: str, value: str, reason: str) -> FerryError:
    return FerryError(ErrorCode.INVALID_CONFIG, f"Invalid value {value} for configuration {name}: {reason}")


def _integer_config(configs: Mapping[str, str], name: str, default: int, maximum: int, java_type: str) -> int:
    """A non-negative integer config, parsed as Kafka's ConfigDef parses it (trimmed, optional sign)."""
    raw = configs.get(name)
    if raw is None:
        return default
    text = raw.strip()
    if not _JAVA_INTEGER.match(text) or not -maximum - 1 <= int(text) <= maximum:
        raise _bad_config(name, raw, f"Not a number of type {java_type}")
    value = int(text)
    if value < 0:
        raise _bad_config(name, raw, "Value must be at least 0")
    return value


@dataclass(frozen=True)
class ValidatedBatch:
    """A batch that passed: the bytes to append and what the log needs to know about them."""

    #: the bytes to store: the caller's bytearray itself when nothing changed, else a new one
    data: bytearray
    info: batches.BatchInfo
    records_count: int
    max_timestamp_ms: int
    codec: Codec
    timestamp_type: TimestampType
    #: whether the header was rewritten (LogAppendTime, or a maxTimestamp the records contradict)
    rewritten: bool

    @property
    def infos(self) -> list[batches.BatchInfo]:
        """``[info]``, the shape the storage append takes."""
        return [self.info]

    @property
    def log_append_time_ms(self) -> int:
        """What a produce response reports: the broker's time for LogAppendTime, else -1."""
        return self.max_timestamp_ms if self.timestamp_type == LOG_APPEND_TIME else NO_TIMESTAMP


def validate_produce_records(buf: bytes | bytearray | memoryview, policy: ValidationPolicy,
                             now_ms: int, topic_partition: str = "") -> ValidatedBatch:
    """Check the records field of one partition in a produce request as Kafka's leader does, or
    raise the FerryError Kafka's error maps to. Never raises anything else, whatever the bytes.
    ``topic_partition`` (Kafka's ``topic-partition``) names the partition in record errors."""
    data = buf if isinstance(buf, bytearray) else bytearray(buf)
    header = _check_framing(data, policy)
    (base_offset, _length, _epoch, _magic, _crc, attributes, last_offset_delta, first_timestamp,
     max_timestamp, producer_id, producer_epoch, base_sequence, count) = header
    codec = _check_attributes(attributes, policy)
    _check_header(base_offset, last_offset_delta, count, producer_id, producer_epoch, base_sequence,
                  bool(attributes & TRANSACTIONAL_FLAG), policy.unsequenced_producer_batches)
    records, start, where = _records_bytes(data, codec, count, policy)
    summary = walk_records(records, start, len(records), count, last_offset_delta=last_offset_delta,
                           consecutive_offsets=True, where=where)
    if attributes & CONTROL_FLAG:
        _check_control_record(records, start, count, where)
    if policy.timestamp_type == LOG_APPEND_TIME:
        new_max_timestamp = now_ms
        new_attributes = attributes | TIMESTAMP_TYPE_FLAG
    else:
        low_ms = first_timestamp + summary.min_timestamp_delta
        high_ms = first_timestamp + summary.max_timestamp_delta
        if not (low_ms == high_ms == NO_TIMESTAMP or _timestamps_within(low_ms, high_ms, policy, now_ms)):
            _refuse_timestamp(records, start, count, last_offset_delta, first_timestamp, policy, now_ms, where)
        new_max_timestamp = high_ms
        new_attributes = attributes
    if policy.compacted and not attributes & CONTROL_FLAG:
        # after the timestamps: Kafka reports INVALID_TIMESTAMP when any record has one wrong
        _check_keys(records, start, count, topic_partition)
    rewritten = new_max_timestamp != max_timestamp or new_attributes != attributes
    if rewritten:
        if data is buf:
            data = bytearray(data)
        _ATTRIBUTES.pack_into(data, ATTRIBUTES_OFFSET, new_attributes)
        _MAX_TIMESTAMP.pack_into(data, _MAX_TIMESTAMP_OFFSET, new_max_timestamp)
        struct.pack_into(">I", data, batches.CRC_OFFSET, crc32c(memoryview(data)[ATTRIBUTES_OFFSET:]))
    return ValidatedBatch(data, batches.header(data), count, new_max_timestamp, codec, policy.timestamp_type,
                          rewritten)


def _check_framing(data: bytearray, policy: ValidationPolicy) -> tuple[int, ...]:
    """One whole v2 batch and nothing else, within the size limit, with a good CRC; its header."""
    total = len(data)
    if total == 0:
        raise FerryError(ErrorCode.INVALID_RECORD, "the request holds no record batch for the partition")
    if total <= MAGIC_OFFSET:
        raise FerryError(ErrorCode.CORRUPT_MESSAGE, f"the record batch is truncated: {total} bytes, too few to "
                         "hold even the magic byte (byte 16)")
    magic = data[MAGIC_OFFSET]
    if magic in (0, 1):
        raise FerryError(ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT, f"the records use message format v{magic} "
                         "(magic byte 16); Ferry stores only v2 record batches (Kafka 0.11+ clients, produce "
                         "request v3+)")
    if magic != batches.MAGIC_V2:
        raise FerryError(ErrorCode.CORRUPT_MESSAGE, f"invalid magic {magic - 256 if magic > 127 else magic} at "
                         "byte 16 of the record batch (v2 batches have magic 2)")
    if total < batches.HEADER_BYTES:
        raise FerryError(ErrorCode.CORRUPT_MESSAGE, f"the record batch is truncated: {total} bytes, a v2 "
                         f"header alone is {batches.HEADER_BYTES}")
    header = _HEADER.unpack_from(data, 0)
    size = header[1] + batches.LOG_OVERHEAD
    if size < batches.HEADER_BYTES:
        raise FerryError(ErrorCode.CORRUPT_MESSAGE, f"the batch length field (byte 8) says {header[1]}, less than "
                         f"the {batches.HEADER_BYTES - batches.LOG_OVERHEAD} bytes of header it must cover")
    if size > total:
        raise FerryError(ErrorCode.CORRUPT_MESSAGE, f"the record batch is truncated: its length field (byte 8) "
                         f"says {size} bytes in all, the request holds {total}")
    if size < total:
        if _looks_like_batch(data, size):
            raise FerryError(ErrorCode.INVALID_RECORD, f"a second record batch starts at byte {size}; a produce "
                             "request carries exactly one v2 batch per partition")
        raise FerryError(ErrorCode.CORRUPT_MESSAGE, f"{total - size} bytes follow the record batch, which ends "
                         f"at byte {size} by its length field")
    if size > policy.max_message_bytes:
        raise FerryError(ErrorCode.MESSAGE_TOO_LARGE, f"the record batch is {size} bytes, which exceeds the "
                         f"topic's max.message.bytes of {policy.max_message_bytes}")
    computed = crc32c(memoryview(data)[ATTRIBUTES_OFFSET:])
    if computed != header[4]:
        raise FerryError(ErrorCode.CORRUPT_MESSAGE, f"the record batch is corrupt: stored CRC {header[4]} "
                         f"(byte 17) but the bytes from 21 to {size} compute {computed}")
    return header


def _looks_like_batch(data: bytearray, position: int) -> bool:
    """Whether a whole v2 batch sits at ``position`` (a second batch) rather than stray bytes."""
    if len(data) - position < batches.HEADER_BYTES or data[position + MAGIC_OFFSET] != batches.MAGIC_V2:
        return False
    length = int(struct.unpack_from(">i", data, position + 8)[0])
    return batches.HEADER_BYTES <= length + batches.LOG_OVERHEAD <= len(data) - position


def _check_attributes(attributes: int, policy: ValidationPolicy) -> Codec:
    codec_id = attributes & CODEC_MASK
    if codec_id > Codec.ZSTD:
        raise FerryError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, f"compression codec {codec_id} in the batch "
                         "attributes (byte 22, bits 0-2) is unknown; Kafka defines 0 none, 1 gzip, 2 snappy, "
                         "3 lz4, 4 zstd")
    if attributes & ~KNOWN_ATTRIBUTES:
        raise FerryError(ErrorCode.INVALID_RECORD, f"the batch attributes {attributes & 0xFFFF:#06x} (bytes "
                         "21-22) set unused bits 6-15")
    if attributes & CONTROL_FLAG and not policy.allow_control_batches:
        raise FerryError(ErrorCode.INVALID_RECORD, "clients are not allowed to write control records (the "
                         "control bit, bit 5 of the attributes at byte 22, is set)")
    if attributes & TRANSACTIONAL_FLAG and not policy.allow_transactional:
        raise FerryError(ErrorCode.INVALID_TXN_STATE, "the batch is transactional (bit 4 of the attributes at "
                         "byte 22) but this partition does not take transactions; produce without a transactional.id")
    if attributes & TIMESTAMP_TYPE_FLAG:
        raise FerryError(ErrorCode.INVALID_TIMESTAMP, "the batch sets timestamp type LogAppendTime (bit 3 of the "
                         "attributes at byte 22); a producer must not, the broker does")
    return Codec(codec_id)


def _check_header(base_offset: int, last_offset_delta: int, count: int, producer_id: int, producer_epoch: int,
                  base_sequence: int, transactional: bool, unsequenced: bool = False) -> None:
    if base_offset != 0:
        raise FerryError(ErrorCode.INVALID_RECORD, f"the batch's base offset (byte 0) is {base_offset}; a "
                         "producer's batch starts at 0 and the broker assigns offsets")
    if last_offset_delta < 0:
        raise FerryError(ErrorCode.INVALID_RECORD, f"the batch has an invalid offset range: lastOffsetDelta "
                         f"(byte 23) is {last_offset_delta}")
    if count <= 0:
        raise FerryError(ErrorCode.INVALID_RECORD, f"invalid record count {count} (byte 57); a batch holds at "
                         "least one record")
    if last_offset_delta + 1 != count:
        raise FerryError(ErrorCode.INVALID_RECORD, f"inconsistent batch: lastOffsetDelta (byte 23) is "
                         f"{last_offset_delta}, so {last_offset_delta + 1} offsets, but the record count "
                         f"(byte 57) is {count}")
    if producer_id < NO_PRODUCER_ID:
        raise FerryError(ErrorCode.INVALID_RECORD, f"invalid producer id {producer_id} (byte 43); it is -1 "
                         "(none) or at least 0")
    if producer_id == NO_PRODUCER_ID:
        if transactional:
            raise FerryError(ErrorCode.INVALID_RECORD, "a transactional batch needs a producer id (byte 43 is -1)")
        return  # Kafka ignores the epoch and sequence of a batch without a producer id; Sarama sends 0s
    if producer_epoch < 0:
        raise FerryError(ErrorCode.INVALID_RECORD, f"invalid producer epoch {producer_epoch} (byte 51) for "
                         f"producer id {producer_id}")
    if base_sequence < 0 and not (unsequenced and base_sequence == -1):
        raise FerryError(ErrorCode.INVALID_RECORD, f"invalid sequence number {base_sequence} (byte 53) in a "
                         f"record batch with producer id {producer_id}")


def _records_bytes(data: bytearray, codec: Codec, count: int,
                   policy: ValidationPolicy) -> tuple[bytes | bytearray, int, str]:
    """The records to walk: (buffer, where they start in it, how to name positions in it).

    A count the bytes cannot possibly hold is refused before anything is decoded or allocated.
    """
    payload_bytes = len(data) - batches.HEADER_BYTES
    if codec is Codec.NONE:
        if count > payload_bytes // MIN_RECORD_BYTES:
            raise FerryError(ErrorCode.INVALID_RECORD, f"the batch declares {count} records (byte 57) but only "
                             f"{payload_bytes} bytes follow the header; a record takes at least {MIN_RECORD_BYTES}")
        return data, batches.HEADER_BYTES, ""
    if count > policy.max_uncompressed_bytes // MIN_RECORD_BYTES:
        raise FerryError(ErrorCode.INVALID_RECORD, f"the batch declares {count} records (byte 57), more than "
                         f"{policy.max_uncompressed_bytes} decompressed bytes could hold")
    records = decompress(codec, memoryview(data)[batches.HEADER_BYTES:], policy.max_uncompressed_bytes)
    if count > len(records) // MIN_RECORD_BYTES:
        raise FerryError(ErrorCode.INVALID_RECORD, f"the batch declares {count} records (byte 57) but its "
                         f"payload decompresses to {len(records)} bytes; a record takes at least {MIN_RECORD_BYTES}")
    return records, 0, f" of the decompressed {codec.name.lower()} payload"


def _raw_records(records: bytes | bytearray, start: int, count: int, last_offset_delta: int,
                 where: str) -> list[RawRecord]:
    sink: list[RawRecord] = []
    walk_records(records, start, len(records), count, last_offset_delta=last_offset_delta,
                 consecutive_offsets=True, where=where, sink=sink)
    return sink


def _check_control_record(records: bytes | bytearray, start: int, count: int, where: str) -> None:
    """A control batch (allowed only for the broker's own writes) holds one marker record whose key
    is (version int16 >= 0, type int16), as Kafka's ControlRecordType parses it."""
    if count != 1:
        raise FerryError(ErrorCode.INVALID_RECORD, f"a control batch holds exactly one record, not {count}")
    (record,) = _raw_records(records, start, count, 0, where)
    if record.key is None or len(record.key) != CONTROL_KEY_BYTES or _CONTROL_KEY.unpack(record.key)[0] < 0:
        raise FerryError(ErrorCode.INVALID_RECORD, "the control record's key is not a (version >= 0, type) pair "
                         "of int16s")


#: Kafka's processRecordErrors shows at most this many record errors in the summary message
RECORD_ERRORS_SHOWN = 3


def _check_keys(records: bytes | bytearray, start: int, count: int, topic_partition: str) -> None:
    """A compacted topic's records each need a key; every keyless one is a record error.

    Kafka checks every record (validateKey) and then throws one RecordValidationException with
    all of them, INVALID_RECORD with a summary naming at most the first three; the produce answer
    (v8+) carries each as (batch index, message)."""
    message = f"Compacted topic cannot accept message without key in topic partition {topic_partition}."
    keyless = keyless_records(records, start, len(records), count)
    if not keyless:
        return
    shown = ", ".join(f"RecordError(batchIndex={index}, message='{message}')"
                      for index in keyless[:RECORD_ERRORS_SHOWN])
    raise FerryError(ErrorCode.INVALID_RECORD, f"One or more records have been rejected due to {len(keyless)} "
                     f"record errors in total, and only showing the first three errors at most: [{shown}]",
                     details={"record_errors": [{"batch_index": index, "message": message} for index in keyless]})


def _timestamps_within(low_ms: int, high_ms: int, policy: ValidationPolicy, now_ms: int) -> bool:
    return (low_ms >= 0 and now_ms - low_ms <= policy.timestamp_before_max_ms
            and high_ms <= LONG_MAX and high_ms - now_ms <= policy.timestamp_after_max_ms)


def _refuse_timestamp(records: bytes | bytearray, start: int, count: int, last_offset_delta: int,
                      first_timestamp: int, policy: ValidationPolicy, now_ms: int, where: str) -> None:
    """The slow path once the spread of timestamps is out of bounds: find the first record that is
    (a record without a timestamp, -1, is exempt, as in Kafka), or return if none is."""
    for index, record in enumerate(_raw_records(records, start, count, last_offset_delta, where)):
        timestamp_ms = first_timestamp + record.timestamp_delta
        if timestamp_ms == NO_TIMESTAMP or _timestamps_within(timestamp_ms, timestamp_ms, policy, now_ms):
            continue
        if timestamp_ms < 0 or timestamp_ms > LONG_MAX:
            raise FerryError(ErrorCode.INVALID_TIMESTAMP, f"record {index} has timestamp {timestamp_ms} "
                             f"(firstTimestamp {first_timestamp} + delta {record.timestamp_delta}); a "
                             "timestamp is milliseconds since the epoch, or -1 for none")
        raise FerryError(ErrorCode.INVALID_TIMESTAMP, f"record {index} has timestamp {timestamp_ms}, out of "
                         f"range: the topic accepts [{now_ms - policy.timestamp_before_max_ms}, "
                         f"{now_ms + policy.timestamp_after_max_ms}] (message.timestamp.before/after.max.ms "
                         f"around the broker's time {now_ms})")
