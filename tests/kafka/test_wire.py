"""The Kafka connection state machine: framing, versions, strictness, and seeded hostile frames."""
from __future__ import annotations

import random
import struct

from kafka.protocol.consumer.fetch import FetchRequest
from kafka.protocol.metadata.api_versions import ApiVersionsRequest, ApiVersionsResponse
from kafka.protocol.metadata.metadata import MetadataRequest
from kafka.protocol.producer.produce import ProduceRequest

from broker.kafka.apis import SUPPORTED_VERSIONS, check_table, request_class
from broker.kafka.wire import (MAX_READ_BYTES, MIN_READ_BYTES, NEED_DATA, KafkaConnection, Request, Unsupported,
                               Violation, api_versions_response, encode_response, encode_unsupported,
                               next_read_bytes)
from metadata_quorum.kernel.errors import ErrorCode


def frame(msg, version: int, correlation_id: int = 1, client_id: str | None = "c") -> bytes:
    msg = msg if msg.API_VERSION == version else msg
    msg.API_VERSION = version
    msg.with_header(correlation_id=correlation_id, client_id=client_id)
    return bytes(msg.encode(header=True, framed=True))


def metadata(version: int) -> bytes:
    return frame(MetadataRequest[version](topics=None, allow_auto_topic_creation=False), version)


def produce(version: int, records: bytes = b"x" * 70) -> bytes:
    T = ProduceRequest.TopicProduceData
    body = ProduceRequest[version](transactional_id=None, acks=-1, timeout_ms=1000, topic_data=[
        T(name="t", partition_data=[T.PartitionProduceData(index=0, records=records)])])
    return frame(body, version)


def test_the_advertised_table_exists_in_the_pinned_specs() -> None:
    check_table()
    assert SUPPORTED_VERSIONS[18] == (0, 4)


def test_requests_decode_at_every_advertised_version_and_in_pieces() -> None:
    conn = KafkaConnection()
    for version in range(SUPPORTED_VERSIONS[3][0], SUPPORTED_VERSIONS[3][1] + 1):
        data = metadata(version)
        for i in range(0, len(data), 3):  # fed three bytes at a time
            conn.receive_data(data[i:i + 3])
            event = conn.next_event()
            if i + 3 < len(data):
                assert event is NEED_DATA
        assert isinstance(event, Request) and (event.api_key, event.api_version) == (3, version)
        assert event.client_id == "c"
    for version in range(SUPPORTED_VERSIONS[0][0], SUPPORTED_VERSIONS[0][1] + 1):
        conn.receive_data(produce(version))
        event = conn.next_event()
        assert isinstance(event, Request) and event.body.topic_data[0].partition_data[0].records == b"x" * 70


def test_pipelined_requests_come_out_in_order() -> None:
    conn = KafkaConnection()
    conn.receive_data(b"".join(frame(MetadataRequest[9](topics=None), 9, correlation_id=i) for i in range(50)))
    ids = []
    while (event := conn.next_event()) is not NEED_DATA:
        assert isinstance(event, Request)
        ids.append(event.correlation_id)
    assert ids == list(range(50))


def test_unknown_key_or_version_is_unsupported_and_the_connection_goes_on() -> None:
    conn = KafkaConnection()
    conn.receive_data(struct.pack(">ihhi", 8, 999, 0, 42))
    event = conn.next_event()
    assert event == Unsupported(999, 0, 42)
    assert struct.unpack(">iih", encode_unsupported(event)) == (6, 42, ErrorCode.UNSUPPORTED_VERSION.code)
    conn.receive_data(frame(FetchRequest[13](max_wait_ms=0, min_bytes=1, topics=[]), 13))  # above our max 12
    assert isinstance(conn.next_event(), Unsupported)
    conn.receive_data(metadata(1))
    assert isinstance(conn.next_event(), Request)


def test_a_newer_api_versions_is_answered_at_v0_with_unsupported_version() -> None:
    conn = KafkaConnection()
    data = bytearray(frame(ApiVersionsRequest[3](client_software_name="x", client_software_version="1"), 3, 9))
    struct.pack_into(">h", data, 6, 77)  # version 77 of ApiVersions
    conn.receive_data(bytes(data))
    event = conn.next_event()
    assert isinstance(event, Request) and event.api_version == 77
    out = encode_response(event, api_versions_response(ErrorCode.UNSUPPORTED_VERSION))
    decoded = ApiVersionsResponse.decode(out, version=0, header=True, framed=True)
    assert decoded.error_code == ErrorCode.UNSUPPORTED_VERSION.code and decoded.header.correlation_id == 9
    assert {k.api_key for k in decoded.api_keys} == set(SUPPORTED_VERSIONS)


def test_oversized_negative_trailing_and_garbage_frames_close_the_connection() -> None:
    for data in (struct.pack(">i", 2 ** 31 - 1) + b"x" * 10, struct.pack(">i", -5), struct.pack(">i", 3) + b"abc",
                 struct.pack(">ihhi", 12, 3, 9, 1) + b"\xff\xff\xff\xff"):
        conn = KafkaConnection(max_request_bytes=1 << 20)
        conn.receive_data(data)
        assert isinstance(conn.next_event(), Violation), data
        conn.receive_data(metadata(9))
        assert isinstance(conn.next_event(), Violation)  # closed for good


def test_bytes_after_a_decoded_request_are_tolerated_and_counted_as_kafka_does() -> None:
    valid = metadata(12)
    conn = KafkaConnection()
    conn.receive_data(struct.pack(">i", len(valid) - 4 + 3) + valid[4:] + b"\x00\x00\x00")
    event = conn.next_event()
    assert isinstance(event, Request) and event.trailing_bytes == 3
    conn.receive_data(metadata(9))
    assert isinstance(conn.next_event(), Request)


def _mutations(rng: random.Random, seeds: list[bytes]) -> bytes:
    base = bytearray(rng.choice(seeds))
    kind = rng.randrange(7)
    if kind == 0:  # truncated (with a consistent length prefix)
        cut = rng.randrange(4, len(base))
        body = base[4:cut]
        return struct.pack(">i", len(body)) + bytes(body)
    if kind == 1:  # wrong size prefix
        struct.pack_into(">i", base, 0, rng.choice([0, 1, 7, len(base), 2 ** 31 - 1, -1, rng.randrange(1 << 20)]))
        return bytes(base)
    if kind == 2:  # unknown key or version
        struct.pack_into(">hh", base, 4, rng.randrange(-5, 200), rng.randrange(-3, 40))
        return bytes(base)
    if kind == 3:  # random bytes flipped
        for _ in range(rng.randrange(1, 8)):
            base[rng.randrange(4, len(base))] = rng.randrange(256)
        return bytes(base)
    if kind == 4:  # garbage after a valid header
        garbage = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 64)))
        body = bytes(base[4:14]) + garbage
        return struct.pack(">i", len(body)) + body
    if kind == 5:  # trailing bytes inside the frame
        body = bytes(base[4:]) + bytes(rng.randrange(256) for _ in range(rng.randrange(1, 9)))
        return struct.pack(">i", len(body)) + body
    return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 40)))


def test_ten_thousand_seeded_hostile_frames_never_raise_or_hang() -> None:
    rng = random.Random(20261124)
    seeds = [metadata(v) for v in (0, 4, 9, 12)] + [produce(v) for v in (3, 8, 9, 11)] + \
        [frame(FetchRequest[v](max_wait_ms=10, min_bytes=1, max_bytes=100, topics=[]), v) for v in (4, 11, 12)]
    outcomes = {"request": 0, "unsupported": 0, "violation": 0, "need_data": 0}
    for _ in range(10_000):
        conn = KafkaConnection(max_request_bytes=1 << 20)
        conn.receive_data(_mutations(rng, seeds))
        event = conn.next_event()
        key = {Request: "request", Unsupported: "unsupported", Violation: "violation"}.get(type(event), "need_data")
        outcomes[key] += 1
        if isinstance(event, Request):  # whatever decoded must round-trip through its own class
            cls = request_class(event.api_key)
            assert isinstance(event.body, cls)
    assert all(outcomes.values()), outcomes


def test_a_null_where_the_version_allows_none_closes_the_connection() -> None:
    T = ProduceRequest.TopicProduceData
    ok = frame(ProduceRequest[9](transactional_id=None, acks=-1, timeout_ms=1000, topic_data=[
        T(name="t", partition_data=[T.PartitionProduceData(index=0, records=b"x")])]), 9)
    # the compact array of partitions (length+1 = 2) rewritten as null (0): the decoder yields None
    marker = b"\x02t\x02\x00\x00\x00\x00"
    at = ok.index(marker) + 2
    bad = ok[:at] + b"\x00" + ok[at + 1 + 4 + 2 + 1:]  # drop the partition entry (index, records, tags)
    bad = struct.pack(">i", len(bad) - 4) + bad[4:]
    conn = KafkaConnection()
    conn.receive_data(bad)
    event = conn.next_event()
    assert isinstance(event, Violation) and "partition_data is null" in event.reason


def _reference_decode(event: Request, data: bytes) -> object:
    """kafka-python's own entry point (header through its reference parser, then the body)."""
    return request_class(event.api_key).decode(data[4:], version=event.api_version, header=True)


def test_requests_decode_as_kafka_pythons_reference_decoder_does() -> None:
    """The listener decodes header and body with the generated decoders in one pass; whatever it
    accepts, valid or mutated, must equal what kafka-python's reference path makes of the bytes."""
    rng = random.Random(7)
    seeds = [metadata(v) for v in (0, 4, 9, 12)] + [produce(v) for v in (3, 8, 9, 11)] + \
        [frame(FetchRequest[v](max_wait_ms=10, min_bytes=1, max_bytes=100, topics=[]), v, client_id=None)
         for v in (4, 11, 12)] + \
        [frame(ApiVersionsRequest[v](client_software_name="x", client_software_version="1"), v) for v in (0, 3)]
    compared = 0
    for data in seeds + [_mutations(rng, seeds) for _ in range(3000)]:
        conn = KafkaConnection(max_request_bytes=1 << 20)
        conn.receive_data(data)
        event = conn.next_event()
        if not isinstance(event, Request) or event.api_version > SUPPORTED_VERSIONS[event.api_key][1]:
            continue
        reference = _reference_decode(event, data)
        assert reference == event.body, data
        assert (reference.header.correlation_id, reference.header.client_id) == \
            (event.correlation_id, event.client_id), data
        compared += 1
    assert compared > len(seeds)


def test_a_frame_cut_inside_its_last_field_closes_the_connection() -> None:
    """Produce v3-v8 end with the records bytes: a frame whose size prefix cuts them short must not
    decode as a request holding fewer bytes than its length field says."""
    whole = produce(8, records=b"r" * 100)
    cut = struct.pack(">i", len(whole) - 4 - 10) + whole[4:-10]
    conn = KafkaConnection()
    conn.receive_data(cut)
    event = conn.next_event()
    assert isinstance(event, Violation) and "frame ends 10 bytes before" in event.reason


def test_reads_that_fill_their_space_get_more_up_to_the_cap_and_others_the_minimum() -> None:
    assert next_read_bytes(MIN_READ_BYTES, MIN_READ_BYTES) == 2 * MIN_READ_BYTES  # filled: a streaming producer
    assert next_read_bytes(2 * MIN_READ_BYTES, 2 * MIN_READ_BYTES) == min(MAX_READ_BYTES, 4 * MIN_READ_BYTES)
    assert next_read_bytes(MAX_READ_BYTES, MAX_READ_BYTES) == MAX_READ_BYTES
    assert next_read_bytes(8 * MAX_READ_BYTES, 8 * MAX_READ_BYTES) == MAX_READ_BYTES  # a grown buffer's free tail
    assert next_read_bytes(MAX_READ_BYTES, 100) == MIN_READ_BYTES  # a small request: back to the minimum
    assert next_read_bytes(0, 0) == MIN_READ_BYTES
