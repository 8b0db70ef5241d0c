"""The framed answer to a produce request that wrote one partition: encoded by kafka-python once
per (version, topic), then copied and completed for each request.

Building a ``ProduceResponse`` of kafka-python objects and encoding it cost ~20 us a request,
about as much as decoding the 64 KiB request; a producer sends thousands a second, each answer
the same bytes but for five fixed-width numbers: the correlation id (int32), the partition index
(int32), and the base offset, log append time and log start offset (int64). So kafka-python
encodes the answer once per shape with a distinct marker in each of those fields, the markers'
positions are found in its bytes, and each answer is that template with the request's numbers
written over the markers. A field the version does not have has no marker in the bytes and is
not written. Each marker holds bytes that are invalid UTF-8 in any context, so no topic name can
contain one; a template whose markers are not each found exactly once is still refused (the
answer is then encoded in full, as before). Only the successful
single-partition answer takes this path: errors, and requests for several partitions, are
encoded in full.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from functools import lru_cache

from kafka.protocol.producer.produce import ProduceRequest, ProduceResponse

from broker.kafka.wire import Request, encode_response

_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
# markers: values no real answer carries in the template, with bytes unlike a topic name's
_CORRELATION_MARKER = -0x5A3C_2E1F
_PARTITION_MARKER = -0x3B1D_4F27
_BASE_OFFSET_MARKER = -0x1F2E_3D4C_5B6A_7988
_APPEND_TIME_MARKER = -0x2E3D_4C5B_6A79_8897
_LOG_START_MARKER = -0x3D4C_5B6A_7988_97A6
TEMPLATES_KEPT = 1024  # (version, topic) shapes


@dataclass(frozen=True)
class _Template:
    frame: bytes
    correlation_at: int
    partition_at: int
    base_offset_at: int
    append_time_at: int | None  # None: the version has no such field
    log_start_at: int | None


def success_answer(request: Request, topic: str, partition: int, base_offset: int, log_append_time_ms: int,
                   log_start_offset: int) -> bytes | None:
    """The framed answer to ``request`` (a produce request that wrote only ``topic-partition``),
    or None when this shape has no usable template (encode the response in full instead)."""
    template = _template(request.api_version, topic)
    if template is None:
        return None
    out = bytearray(template.frame)
    _INT32.pack_into(out, template.correlation_at, request.correlation_id)
    _INT32.pack_into(out, template.partition_at, partition)
    _INT64.pack_into(out, template.base_offset_at, base_offset)
    if template.append_time_at is not None:
        _INT64.pack_into(out, template.append_time_at, log_append_time_ms)
    if template.log_start_at is not None:
        _INT64.pack_into(out, template.log_start_at, log_start_offset)
    return bytes(out)


def full_response(topic: str, partition: int, base_offset: int, log_append_time_ms: int,
                  log_start_offset: int) -> ProduceResponse:
    """The same answer as kafka-python objects (what the template is made from)."""
    PR = ProduceResponse.TopicProduceResponse
    PP = PR.PartitionProduceResponse
    return ProduceResponse(responses=[PR(name=topic, partition_responses=[PP(
        index=partition, error_code=0, base_offset=base_offset, log_append_time_ms=log_append_time_ms,
        log_start_offset=log_start_offset, record_errors=[], error_message=None)])],
        throttle_time_ms=0, node_endpoints=[])


@lru_cache(maxsize=TEMPLATES_KEPT)
def _template(version: int, topic: str) -> _Template | None:
    probe = Request(ProduceRequest.API_KEY, version, _CORRELATION_MARKER, None, ProduceRequest[version](), 0)
    frame = encode_response(probe, full_response(topic, _PARTITION_MARKER, _BASE_OFFSET_MARKER,
                                                 _APPEND_TIME_MARKER, _LOG_START_MARKER))
    positions: list[int | None] = []
    for packer, marker in ((_INT32, _CORRELATION_MARKER), (_INT32, _PARTITION_MARKER),
                           (_INT64, _BASE_OFFSET_MARKER), (_INT64, _APPEND_TIME_MARKER),
                           (_INT64, _LOG_START_MARKER)):
        needle = packer.pack(marker)
        found = frame.count(needle)
        if found > 1:
            return None
        positions.append(frame.find(needle) if found else None)
    correlation_at, partition_at, base_offset_at, append_time_at, log_start_at = positions
    if correlation_at is None or partition_at is None or base_offset_at is None:
        return None
    return _Template(frame, correlation_at, partition_at, base_offset_at, append_time_at, log_start_at)
