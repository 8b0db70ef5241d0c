"""The Kafka wire protocol of one connection, as a pure state machine beside its socket.

Bytes go in with :meth:`KafkaConnection.receive_data`, or without a copy through
:meth:`~KafkaConnection.get_buffer` / :meth:`~KafkaConnection.buffer_updated` (the socket reads
straight into the connection's buffer, as asyncio's ``BufferedProtocol`` does); :meth:`next_event` hands back whole
requests (decoded with kafka-python's generated message classes, header v1 or v2 as the API's
flexible versions say), an :class:`Unsupported` request to answer with ``UNSUPPORTED_VERSION``,
or a :class:`Violation` after which the connection must be closed (a malformed or oversized
frame: Kafka closes the connection and nothing else). :meth:`encode_response` frames a
response for a request. Nothing here touches a socket or a clock, so the fuzz tests drive it
with millions of bytes in a second.

Parsing is strict about what it decodes: every field of the version must be there and well
formed, or the connection closes. Bytes left in the frame after a fully decoded request are
tolerated and counted (``Request.trailing_bytes``), as Kafka's own broker does: librdkafka sends
Metadata v12 with a field of v8-10 still appended, and refusing it would lock out every
confluent-kafka admin client.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable, Mapping, Union

from kafka.protocol.api_header import RequestHeader, ResponseHeader
from kafka.protocol.api_message import ApiMessage
from kafka.protocol.schemas.fields.codecs.encode_buffer import EncodeBuffer, EncodeBufferPool
from kafka.protocol.metadata.api_versions import ApiVersionsRequest, ApiVersionsResponse

from broker.kafka.apis import SUPPORTED_VERSIONS, request_class
from metadata_quorum.kernel.errors import ErrorCode

DEFAULT_MAX_REQUEST_BYTES = 100 * 1024 * 1024  # Kafka's socket.request.max.bytes
_FRAME = struct.Struct(">i")
_HEADER_START = struct.Struct(">hhi")  # api key, api version, correlation id
_ERROR_ONLY = struct.Struct(">ih")  # correlation id, error code
INITIAL_BUFFER_BYTES = 64 * 1024  # a connection's receive buffer; it grows to fit the largest frame
MIN_READ_BYTES = 64 * 1024  # free space offered to a socket read
MAX_READ_BYTES = 256 * 1024  # ... and to a read of a connection whose reads fill what they are offered


def next_read_bytes(offered: int, received: int) -> int:
    """Free space to offer a connection's next socket read, given what the last read was offered
    and received. A read that filled its space (a producer pipelining 64 KiB requests: the socket
    holds more) earns a larger one, up to :data:`MAX_READ_BYTES`: one read then takes several
    requests, where reads of 64 KiB took one or two reads and wake-ups of the protocol per
    request; any other read goes back to :data:`MIN_READ_BYTES`, so an idle or chatty connection
    keeps a small buffer."""
    if received >= offered > 0:
        return min(MAX_READ_BYTES, max(MIN_READ_BYTES, 2 * offered))
    return MIN_READ_BYTES
MAX_IDLE_BUFFER_BYTES = 4 * 1024 * 1024  # a larger buffer is dropped once it holds nothing


@dataclass(frozen=True)
class Request:
    """A decoded request: ``body`` is the kafka-python message (its header is ``body.header``)."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body: ApiMessage
    size_bytes: int
    trailing_bytes: int = 0
    client_host: str = ""  # the peer's address as Kafka reports it ("/127.0.0.1"): JoinGroup records it
    principal: str = "User:ANONYMOUS"  # who sent it: "User:<name>" once SASL authenticated (the authorizer's)


@dataclass(frozen=True)
class Unsupported:
    """A well-framed request for an API key or version this broker does not advertise."""

    api_key: int
    api_version: int
    correlation_id: int


@dataclass(frozen=True)
class Violation:
    """The peer broke the framing or sent bytes no version of the API decodes: close."""

    reason: str


class NeedData:
    """Not a whole frame yet."""


NEED_DATA = NeedData()
Event = Union[Request, Unsupported, Violation, NeedData]


class KafkaConnection:
    """Frames and decodes the requests of one client connection, in arrival order.

    Received bytes live in one buffer that is never resized in place: it is reused from its start
    whenever every frame in it has been decoded, and replaced by a larger one only when a frame does
    not fit. Appending to a ``bytearray`` after deleting a frame from its front (what a stream
    reader does) allocates and copies the whole buffer on each read; with 64 KiB produce frames that
    cost more CPU than decoding them. Frames are decoded from a view of the buffer, not a copy: the
    generated decoders copy out every bytes and string field they return, so nothing decoded refers
    to the buffer afterwards."""

    def __init__(self, max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES, client_host: str = "") -> None:
        self.max_request_bytes = max_request_bytes
        self.client_host = client_host  # stamped on every request (Request.client_host)
        self.principal = "User:ANONYMOUS"  # likewise (Request.principal); set once SASL authenticates
        self._buf = bytearray(INITIAL_BUFFER_BYTES)
        self._start = 0  # first byte not yet decoded
        self._end = 0  # end of the bytes received
        self._closed_reason: str | None = None

    @property
    def closed(self) -> bool:
        return self._closed_reason is not None

    def get_buffer(self, min_free_bytes: int = MIN_READ_BYTES) -> memoryview:
        """Free space at the end of the buffer for the next read, at least ``min_free_bytes`` and at
        least what the frame in progress still lacks (so a large frame arrives in few reads)."""
        if self._closed_reason is not None:  # what arrives now is dropped
            return memoryview(bytearray(min_free_bytes or 1))
        wanted = max(min_free_bytes, self._missing_bytes())
        if len(self._buf) - self._end < wanted:
            self._make_room(wanted)
        return memoryview(self._buf)[self._end:]

    def buffer_updated(self, nbytes: int) -> None:
        """``nbytes`` were written at the start of the last :meth:`get_buffer` view."""
        if self._closed_reason is None:
            self._end += nbytes

    def receive_data(self, data: bytes) -> None:
        if self._closed_reason is None:
            with self.get_buffer(len(data)) as view:
                view[:len(data)] = data
            self._end += len(data)

    def _missing_bytes(self) -> int:
        """How many more bytes the frame in progress needs (0 when its size is not known yet or it
        is over the limit, which :meth:`next_event` refuses before anything more is read for it)."""
        have = self._end - self._start
        if have < _FRAME.size:
            return 0
        (size,) = _FRAME.unpack_from(self._buf, self._start)
        if size > self.max_request_bytes:
            return 0
        return max(0, _FRAME.size + int(size) - have)

    def _make_room(self, free_bytes: int) -> None:
        """Move the undecoded bytes to the front, into a larger buffer if they and ``free_bytes`` do
        not fit (a buffer still lent to a reader is never resized, only replaced)."""
        live = self._end - self._start
        size = len(self._buf)
        if live + free_bytes > size:
            size = max(live + free_bytes, 2 * size)
            buf = bytearray(size)
            buf[:live] = memoryview(self._buf)[self._start:self._end]
            self._buf = buf
        elif live:
            self._buf[:live] = self._buf[self._start:self._end]
        self._start, self._end = 0, live

    def next_event(self) -> Event:
        if self._closed_reason is not None:
            return Violation(self._closed_reason)
        start = self._start
        if self._end - start < _FRAME.size:
            return NEED_DATA
        (size,) = _FRAME.unpack_from(self._buf, start)
        if size < _HEADER_START.size or size > self.max_request_bytes:
            return self._violate(f"frame of {size} bytes (must be {_HEADER_START.size}..{self.max_request_bytes})")
        end = start + _FRAME.size + size
        if self._end < end:
            return NEED_DATA
        with memoryview(self._buf) as view, view[start + _FRAME.size:end] as frame:
            event = self._decode(frame)
        if self.closed:  # the decode may have found a violation and closed the stream
            return event
        self._start = end
        if end == self._end:  # everything decoded: the next read starts at the front again
            self._start = self._end = 0
            if len(self._buf) > MAX_IDLE_BUFFER_BYTES:  # give back what one large frame needed
                self._buf = bytearray(INITIAL_BUFFER_BYTES)
        return event

    def _violate(self, reason: str) -> Violation:
        self._closed_reason = reason
        self._buf = bytearray(0)
        self._start = self._end = 0
        return Violation(reason)

    def _decode(self, frame: memoryview) -> Event:
        api_key, api_version, correlation_id = _HEADER_START.unpack_from(frame, 0)
        supported = SUPPORTED_VERSIONS.get(api_key)
        if supported is None or not supported[0] <= api_version <= supported[1]:
            if api_key == ApiVersionsRequest.API_KEY and api_version > supported[1]:  # type: ignore[index]
                # Kafka answers a newer ApiVersions at v0 so the client can pick a version it shares
                return Request(api_key, api_version, correlation_id, None, ApiVersionsRequest[0](), len(frame))
            return Unsupported(api_key, api_version, correlation_id)
        codec = _codec(api_key, api_version)
        try:
            body, consumed = codec.decode(frame)
        except Exception as exc:  # noqa: BLE001 - any decode failure of peer bytes is the peer's
            return self._violate(f"{codec.name} v{api_version} does not decode: {type(exc).__name__}: {exc}")
        if consumed > len(frame):
            # the generated decoder slices strings and bytes without bounds checks: a frame cut
            # inside its last field would otherwise decode with that field shortened
            return self._violate(f"{codec.name} v{api_version}: the frame ends {consumed - len(frame)} bytes "
                                 "before the request does")
        null_field = _first_null(body, codec.null_checks)
        if null_field is not None:
            return self._violate(f"{codec.name} v{api_version}: {null_field} is null, which the version does not "
                                 "allow")
        header = body.header
        return Request(api_key, api_version, correlation_id, header.client_id, body, len(frame),
                       len(frame) - consumed, self.client_host, self.principal)


Decoder = Callable[[memoryview, int], "tuple[Any, int]"]
Encoder = Callable[[Any, EncodeBuffer], None]


@dataclass(frozen=True)
class _NullCheck:
    """One field a decoded request must be checked at: whether it may not be null at the version,
    and the checks inside each element (arrays of structs) or inside it (a struct)."""

    name: str
    not_nullable: bool
    elements: tuple[_NullCheck, ...] = ()
    inner: tuple[_NullCheck, ...] = ()


@dataclass(frozen=True)
class _Codec:
    """How one (api key, version) decodes, built once: the generated decoders of kafka-python for
    the request header and body, and the null checks the version's spec calls for."""

    name: str
    header: Decoder
    body: Decoder
    null_checks: tuple[_NullCheck, ...]

    def decode(self, frame: memoryview) -> tuple[ApiMessage, int]:
        """Header and body in one pass over the frame, returning how many bytes were used (the
        generated decoder's own entry point discards that)."""
        header, pos = self.header(frame, 0)
        body, pos = self.body(frame, pos)
        body._header = header
        return body, pos


@lru_cache(maxsize=None)
def _codec(api_key: int, version: int) -> _Codec:
    cls = request_class(api_key)
    flexible = cls.flexible_version_q(version)
    # RequestHeader v1, or v2 (tagged fields) for flexible versions; its client id is never compact
    header_version = RequestHeader._flexible_versions[0] if flexible else RequestHeader._valid_versions[0]
    header = RequestHeader._struct.compiled_decode_from(header_version, compact=False, tagged=flexible,
                                                        data_class=RequestHeader)
    body = cls._struct.compiled_decode_from(version, compact=flexible, tagged=flexible, data_class=cls[None])
    return _Codec(cls.name, header, body, _null_checks(cls._struct.fields, version))


def _in_range(versions: tuple[int, int] | None, version: int) -> bool:
    return versions is not None and versions[0] <= version <= versions[1]


def _null_checks(fields: Mapping[str, Any], version: int) -> tuple[_NullCheck, ...]:
    """The checks :func:`_first_null` makes at ``version``: only fields that are arrays, strings or
    bytes not nullable at that version, and the structs that hold such fields."""
    checks = []
    for name, field in fields.items():
        if not _in_range(field._versions, version) or field._tag is not None:
            continue
        # uuids decode the zero id as None; only arrays, strings and bytes have a null
        not_nullable = (field._type_str.startswith("[]") or field._type_str in ("string", "bytes")) and \
            not _in_range(field._nullable_versions, version)
        element = getattr(field, "array_of", None)
        element_fields = getattr(element, "fields", None) if element is not None else None
        elements = _null_checks(element_fields, version) if element_fields else ()
        inner_fields = getattr(field, "fields", None) if element is None else None
        inner = _null_checks(inner_fields, version) if inner_fields else ()
        if not_nullable or elements or inner:
            checks.append(_NullCheck(name, not_nullable, elements, inner))
    return tuple(checks)


def _first_null(obj: object, checks: tuple[_NullCheck, ...]) -> str | None:
    """The first field decoded as null where the spec does not make it nullable at the version.

    The generated decoder reads a compact array or string of length 0 as null whatever the
    field's ``nullableVersions`` say; a handler would then fail on it. Refusing it here keeps the
    contract strict: a request that passes holds only what its version allows."""
    for check in checks:
        value = getattr(obj, check.name, None)
        if value is None:
            if check.not_nullable:
                return check.name
            continue
        if check.elements:
            for i, item in enumerate(value):
                found = _first_null(item, check.elements)
                if found is not None:
                    return f"{check.name}[{i}].{found}"
        elif check.inner and not isinstance(value, (bytes, str, int, float, list)):
            found = _first_null(value, check.inner)
            if found is not None:
                return f"{check.name}.{found}"
    return None


def encode_response(request: Request, response: ApiMessage) -> bytes:
    """Frame ``response`` for ``request`` (response header v0, or v1 for flexible versions; always
    v0 for ApiVersions, as Kafka does so that any client can read it)."""
    version = 0 if isinstance(request.body, ApiVersionsRequest) and request.api_version > \
        SUPPORTED_VERSIONS[ApiVersionsRequest.API_KEY][1] else request.api_version
    response.API_VERSION = version
    response_class: type = type(response)
    encoders = _response_encoders(response_class, version)
    if encoders is None:  # a class with its own encoding (ApiVersions' header is always v0)
        response.with_header(correlation_id=request.correlation_id)
        return bytes(response.encode(header=True, framed=True))
    encode_header, encode_body = encoders
    with EncodeBufferPool.acquire() as out:
        out.ensure(_FRAME.size)
        out.pos = _FRAME.size
        encode_header(ResponseHeader(correlation_id=request.correlation_id), out)
        encode_body(response, out)
        _FRAME.pack_into(out.buf, 0, out.pos - _FRAME.size)
        with memoryview(out.buf) as view:
            return bytes(view[:out.pos])


@lru_cache(maxsize=None)
def _response_encoders(cls: type[ApiMessage], version: int) -> tuple[Encoder, Encoder] | None:
    """kafka-python's generated encoders of the response header and of ``cls`` at ``version``,
    the same ones ``ApiMessage.encode`` looks up on every call; None for a class that overrides
    how it encodes."""
    if cls.encode is not ApiMessage.encode or cls.encode_header is not ApiMessage.encode_header or \
            cls.encode_header_into is not ApiMessage.encode_header_into:
        return None
    flexible = cls.flexible_version_q(version)
    header_version = ResponseHeader._flexible_versions[0] if flexible else ResponseHeader._valid_versions[0]
    return (ResponseHeader._struct.compiled_encode_into(header_version, compact=False, tagged=flexible),
            cls._struct.compiled_encode_into(version, compact=flexible, tagged=flexible))


def encode_unsupported(event: Unsupported) -> bytes:
    """The answer to an API key or version not advertised: the correlation id and
    ``UNSUPPORTED_VERSION``, which is how every response body of the classic versions starts
    for ApiVersions; a conformant client never sends one, so this only has to be unambiguous."""
    return encode_error(event.correlation_id, ErrorCode.UNSUPPORTED_VERSION)


def encode_error(correlation_id: int, error: ErrorCode) -> bytes:
    """A bare error answer (correlation id, error code) sent before the listener closes a
    connection it will not serve, e.g. a request before SASL authentication."""
    payload = _ERROR_ONLY.pack(correlation_id, error.code)
    return _FRAME.pack(len(payload)) + payload


def api_versions_response(error: ErrorCode = ErrorCode.NONE) -> ApiVersionsResponse:
    keys = [ApiVersionsResponse.ApiVersion(api_key=k, min_version=lo, max_version=hi)
            for k, (lo, hi) in sorted(SUPPORTED_VERSIONS.items())]
    return ApiVersionsResponse(error_code=error.code, api_keys=keys, throttle_time_ms=0)
