"""The framed produce answer from a template is byte for byte what kafka-python encodes in full."""
from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.producer.produce import ProduceRequest

from broker.kafka.apis import SUPPORTED_VERSIONS
from broker.kafka.produce_answer import (_APPEND_TIME_MARKER, _BASE_OFFSET_MARKER, _CORRELATION_MARKER, _INT32,
                                         _INT64, _LOG_START_MARKER, _PARTITION_MARKER, full_response, success_answer)
from broker.kafka.wire import Request, encode_response

LOW, HIGH = SUPPORTED_VERSIONS[ProduceRequest.API_KEY]
INT32 = st.integers(-2 ** 31, 2 ** 31 - 1)
INT64 = st.integers(-2 ** 63, 2 ** 63 - 1)
MARKERS = [(_INT32, _CORRELATION_MARKER), (_INT32, _PARTITION_MARKER), (_INT64, _BASE_OFFSET_MARKER),
           (_INT64, _APPEND_TIME_MARKER), (_INT64, _LOG_START_MARKER)]


def request(version: int, correlation_id: int) -> Request:
    return Request(ProduceRequest.API_KEY, version, correlation_id, "client", ProduceRequest[version](), 100)


@settings(max_examples=300, deadline=None)
@given(version=st.integers(LOW, HIGH), topic=st.text(min_size=1, max_size=40), correlation_id=INT32,
       partition=st.integers(0, 2 ** 31 - 1), base_offset=INT64, append_time=INT64, log_start=INT64)
def test_the_template_answer_is_the_full_encoding(version: int, topic: str, correlation_id: int, partition: int,
                                                  base_offset: int, append_time: int, log_start: int) -> None:
    req = request(version, correlation_id)
    answer = success_answer(req, topic, partition, base_offset, append_time, log_start)
    assert answer is not None
    assert answer == encode_response(req, full_response(topic, partition, base_offset, append_time, log_start))


def test_every_advertised_version_reads_back_its_numbers() -> None:
    for version in range(LOW, HIGH + 1):
        answer = success_answer(request(version, 77), "orders", 5, 1234, -1, 1000)
        assert answer is not None
        (size, correlation_id) = struct.unpack_from(">ii", answer)
        assert size == len(answer) - 4 and correlation_id == 77
        assert struct.pack(">q", 1234) in answer
        assert (struct.pack(">q", 1000) in answer) == (version >= 5)  # log_start_offset is v5+


def test_no_topic_name_can_hold_a_marker() -> None:
    """A marker inside the name would be found twice and the template refused: none can be, as each
    holds a byte sequence that is invalid UTF-8 whatever comes before or after it."""
    for packer, marker in MARKERS:
        needle = packer.pack(marker)
        first_lead = next(i for i, b in enumerate(needle) if not 0x80 <= b <= 0xBF)  # before: maybe a char's tail
        try:
            needle[first_lead:].decode("utf-8")
        except UnicodeDecodeError as exc:
            assert exc.reason != "unexpected end of data", f"marker {marker:#x} may continue as valid UTF-8"
        else:
            raise AssertionError(f"marker {marker:#x} is valid UTF-8")
