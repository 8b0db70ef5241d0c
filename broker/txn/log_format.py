"""The records of ``__transaction_state``: Kafka's TransactionLogKey (version 0) and
TransactionLogValue (version 0), byte for byte, so that the log is Kafka's and its tools read it.

Key: version int16 (0), transactional_id string. Value: version int16 (0), producer_id int64,
producer_epoch int16, transaction_timeout_ms int32, transaction_status int8,
transaction_partitions nullable array of (topic string, partition_ids array of int32),
transaction_last_update_timestamp_ms int64, transaction_start_timestamp_ms int64. A value of
``None`` (a tombstone) removes the transactional id (expiration). Parsing is strict: a record that
does not decode whole is an error, not a guess.
"""
from __future__ import annotations

import struct

from broker.txn.state import TxnMetadata, TxnState
from metadata_quorum.kernel.errors import ErrorCode, FerryError

KEY_VERSION = 0
VALUE_VERSION = 0
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_I8 = struct.Struct(">b")


def _string(value: str) -> bytes:
    raw = value.encode("utf-8")
    return _I16.pack(len(raw)) + raw


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, fmt: struct.Struct) -> int:
        if self.pos + fmt.size > len(self.data):
            raise FerryError(ErrorCode.CORRUPT_MESSAGE, "a __transaction_state record ends early")
        (value,) = fmt.unpack_from(self.data, self.pos)
        self.pos += fmt.size
        return int(value)

    def string(self) -> str:
        n = self.take(_I16)
        if n < 0 or self.pos + n > len(self.data):
            raise FerryError(ErrorCode.CORRUPT_MESSAGE, "a __transaction_state string is malformed")
        raw = self.data[self.pos:self.pos + n]
        self.pos += n
        return raw.decode("utf-8")

    def done(self) -> None:
        if self.pos != len(self.data):
            raise FerryError(ErrorCode.CORRUPT_MESSAGE, "a __transaction_state record has trailing bytes")


def encode_key(transactional_id: str) -> bytes:
    return _I16.pack(KEY_VERSION) + _string(transactional_id)


def decode_key(data: bytes) -> str:
    r = _Reader(data)
    version = r.take(_I16)
    if version != KEY_VERSION:
        raise FerryError(ErrorCode.CORRUPT_MESSAGE, f"unknown __transaction_state key version {version}")
    txn_id = r.string()
    r.done()
    return txn_id


def encode_value(meta: TxnMetadata) -> bytes:
    out = bytearray(_I16.pack(VALUE_VERSION))
    out += _I64.pack(meta.producer_id) + _I16.pack(meta.producer_epoch) + _I32.pack(meta.timeout_ms)
    out += _I8.pack(meta.state.value)
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(meta.partitions):
        by_topic.setdefault(topic, []).append(partition)
    out += _I32.pack(len(by_topic))
    for topic, partitions in by_topic.items():
        out += _string(topic) + _I32.pack(len(partitions)) + b"".join(_I32.pack(p) for p in partitions)
    out += _I64.pack(meta.last_update_ms) + _I64.pack(meta.start_ms)
    return bytes(out)


def decode_value(transactional_id: str, data: bytes) -> TxnMetadata:
    r = _Reader(data)
    version = r.take(_I16)
    if version != VALUE_VERSION:
        raise FerryError(ErrorCode.CORRUPT_MESSAGE, f"unknown __transaction_state value version {version}")
    producer_id, epoch, timeout_ms = r.take(_I64), r.take(_I16), r.take(_I32)
    status = r.take(_I8)
    try:
        state = TxnState(status)
    except ValueError:
        raise FerryError(ErrorCode.CORRUPT_MESSAGE, f"unknown transaction status {status}") from None
    partitions: set[tuple[str, int]] = set()
    topics = r.take(_I32)
    for _ in range(max(0, topics)):  # -1: null
        topic = r.string()
        for _ in range(r.take(_I32)):
            partitions.add((topic, r.take(_I32)))
    last_update_ms, start_ms = r.take(_I64), r.take(_I64)
    r.done()
    return TxnMetadata(transactional_id, producer_id, epoch, timeout_ms, state, frozenset(partitions),
                       last_update_ms, start_ms)


__all__ = ["decode_key", "decode_value", "encode_key", "encode_value"]
