"""The Kafka listener: an asyncio TCP server that only moves bytes.

Each connection is a :class:`_KafkaProtocol` (asyncio's ``BufferedProtocol``: the socket reads
straight into the buffer of its :class:`~broker.kafka.wire.KafkaConnection`, with no stream
reader copying every chunk in between). Each decoded request runs as its own task, started in
arrival order (so a pipelining producer's appends reach the WAL in order), and responses are
written strictly in request order, as Kafka requires: a long-poll fetch does not hold up a
produce pipelined behind it on the same connection, yet the client still reads its answers in
order. At most ``max_inflight`` requests of one connection are in progress; past that, and while
the socket's send buffer is full, the listener stops reading the socket (TCP backpressure).

A malformed or oversized frame closes that connection only (after the answers to the requests
before it); an unexpected failure while handling a request is logged and closes its connection
(there is no well-formed answer to it).
"""
from __future__ import annotations

import asyncio
import socket
import logging
import time
from collections import deque
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Awaitable, Callable, Union

from kafka.protocol.api_key import ApiKey
from kafka.protocol.api_message import ApiMessage

from kafka.protocol.sasl import SaslAuthenticateResponse, SaslHandshakeResponse

from broker.kafka.sasl import MECHANISMS, Credentials, SaslSession, Step
from broker.kafka.wire import (DEFAULT_MAX_REQUEST_BYTES, MIN_READ_BYTES, KafkaConnection, NeedData, Request,
                               Unsupported, Violation, encode_error, encode_response, encode_unsupported,
                               next_read_bytes)
from metadata_quorum.kernel.errors import ErrorCode

log = logging.getLogger("ferry.kafka")

#: a handler answers with a message to encode, with an answer already framed (bytes), or None (acks=0)
Handler = Callable[[Request], Awaitable[ApiMessage | bytes | None]]
#: what a handled request's task returns: the framed answer (None for acks=0), the API's name,
#: and when handling started and ended (monotonic seconds)
Answer = tuple[Union[bytes, None], str, float, float]


LISTEN_BACKLOG = 100  # asyncio's default


class KafkaListener:
    def __init__(self, handlers: dict[int, Handler], host: str, port: int,
                 max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES, max_inflight: int = 64,
                 observe: Callable[[str, float, float], None] | None = None,
                 sasl_users: Credentials | None = None) -> None:
        """``observe(api name, handling seconds, queued seconds)`` is called for each answer;
        ``sasl_users`` makes this a SASL listener (see :mod:`broker.kafka.sasl`)."""
        self.handlers = handlers
        self.sasl_users = sasl_users
        self.observe = observe
        self.host, self.port = host, port
        self.max_request_bytes = max_request_bytes
        self.max_inflight = max_inflight
        self._server: asyncio.AbstractServer | None = None
        self._connections: set[_KafkaProtocol] = set()
        self.connections_closed_for_violation = 0
        self.requests_handled = 0
        self.requests_with_trailing_bytes = 0

    async def start(self, serve: bool = True) -> int:
        """Bind the port (its number is known from here on). With ``serve=False`` connections wait
        in the socket's backlog until :meth:`serve`: a broker binds first, since it registers its
        Kafka endpoint, and serves once its metadata image holds its own registration, so no
        client is answered from an image that does not know the cluster yet (Kafka's broker opens
        its listeners for requests only after it caught up with the metadata log)."""
        loop = asyncio.get_running_loop()
        if serve:
            self._server = await loop.create_server(lambda: _KafkaProtocol(self), self.host, self.port)
        else:  # listening already, so a client's connect waits in the backlog instead of being refused
            sock = socket.create_server((self.host, self.port), backlog=LISTEN_BACKLOG)
            sock.setblocking(False)
            self._server = await loop.create_server(lambda: _KafkaProtocol(self), sock=sock, start_serving=False,
                                                    backlog=LISTEN_BACKLOG)
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    @property
    def serving(self) -> bool:
        return self._server is not None and self._server.is_serving()

    async def serve(self) -> None:
        """Start accepting the connections :meth:`start` held back (a no-op when already serving)."""
        if self._server is not None and not self._server.is_serving():
            await self._server.start_serving()

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for conn in list(self._connections):
            conn.abort()
        if self._server is not None:
            await self._server.wait_closed()

    async def _handle(self, handler: Handler, request: Request) -> Answer:
        started = time.monotonic()
        response = await handler(request)
        self.requests_handled += 1
        payload = response if response is None or isinstance(response, bytes) else encode_response(request, response)
        return payload, api_name(request.api_key), started, time.monotonic()

    @staticmethod
    def _sasl_step(sasl: SaslSession | None, event: Request) -> Step:
        if sasl is None:
            return Step(ErrorCode.UNSUPPORTED_SASL_MECHANISM, message="this listener has no SASL", close=True)
        if event.api_key == ApiKey.SaslHandshake:
            return sasl.handshake(event.body.mechanism)
        return sasl.authenticate(bytes(event.body.auth_bytes))


class _KafkaProtocol(asyncio.BufferedProtocol):
    """One client connection: reads into its :class:`KafkaConnection`, starts a task per request,
    writes the answers in request order as they complete (a done callback, no sender task)."""

    def __init__(self, listener: KafkaListener) -> None:
        self.listener = listener
        self.conn = KafkaConnection(listener.max_request_bytes)
        self.sasl = SaslSession(listener.sasl_users) if listener.sasl_users is not None else None
        self.transport: asyncio.Transport | None = None
        self.peer: object = None
        # answers in request order: framed bytes ready to send, or the task that will make them
        self.pending: deque[bytes | asyncio.Future[Answer]] = deque()
        self.reading_paused = False
        self.writing_paused = False
        self.closing = False  # no more requests: close once the pending answers are written
        self.eof = False  # the client will send nothing more
        self.lost = False
        self.flush_scheduled = False  # a write of the answers ready is due at the end of this turn
        self.read_bytes = MIN_READ_BYTES  # free space the next socket read is offered (next_read_bytes)
        self.offered_bytes = 0  # what the last read was offered

    # -- asyncio.BufferedProtocol ---------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.peer = transport.get_extra_info("peername")
        self.conn.client_host = client_host(self.peer)
        self.listener._connections.add(self)

    def get_buffer(self, sizehint: int) -> memoryview:
        view = self.conn.get_buffer(self.read_bytes)
        self.offered_bytes = len(view)
        return view

    def buffer_updated(self, nbytes: int) -> None:
        self.read_bytes = next_read_bytes(self.offered_bytes, nbytes)
        self.conn.buffer_updated(nbytes)
        self._dispatch()

    def eof_received(self) -> bool:
        """The client sent everything it will: answer what was asked, then close."""
        self.eof = True
        self._dispatch()
        return True  # keep the transport open for the answers still to be written

    def pause_writing(self) -> None:
        self.writing_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self.writing_paused = False
        self._update_reading()
        self._dispatch()

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self.closing = True
        self.listener._connections.discard(self)
        # requests already started run to their end (an append is not cut half-way); their
        # answers have nowhere to go
        self.pending.clear()

    def abort(self) -> None:
        """The listener stops: cancel what runs and drop the connection."""
        for item in self.pending:
            if not isinstance(item, bytes):
                item.cancel()
        self.pending.clear()
        if self.transport is not None:
            self.transport.abort()

    # -- requests in ------------------------------------------------------------------------
    def _dispatch(self) -> None:
        """Start every whole request received, until the in-flight limit is reached."""
        listener = self.listener
        while not self.closing and len(self.pending) < listener.max_inflight and not self.writing_paused:
            event = self.conn.next_event()
            if isinstance(event, NeedData):
                if self.eof:
                    self._finish()
                break
            if isinstance(event, Violation):
                listener.connections_closed_for_violation += 1
                log.info("closing Kafka connection from %s: %s", self.peer, event.reason)
                self._finish()
                break
            if isinstance(event, Unsupported):
                self._answer_now(encode_unsupported(event))
                continue
            assert isinstance(event, Request)
            if event.trailing_bytes:
                listener.requests_with_trailing_bytes += 1
                log.debug("%s v%d from %s: %d bytes after the request (ignored, as Kafka does)",
                          api_name(event.api_key), event.api_version, self.peer, event.trailing_bytes)
            if event.api_key in (ApiKey.SaslHandshake, ApiKey.SaslAuthenticate):
                step = listener._sasl_step(self.sasl, event)
                if self.sasl is not None and self.sasl.authenticated and self.sasl.principal is not None:
                    self.conn.principal = f"User:{self.sasl.principal}"  # every later request's principal
                self._answer_now(encode_response(event, _sasl_response(event, step)))
                if step.close:
                    log.info("closing Kafka connection from %s: %s", self.peer, step.message)
                    self._finish()
                continue
            if self.sasl is not None and not self.sasl.allows(api_name(event.api_key)):
                self._answer_now(encode_error(event.correlation_id, ErrorCode.ILLEGAL_SASL_STATE))
                log.info("closing Kafka connection from %s: %s before authenticating", self.peer,
                         api_name(event.api_key))
                self._finish()
                continue
            handler = listener.handlers.get(event.api_key)
            if handler is None:  # advertised but not wired: a bug, answered as unsupported
                self._answer_now(encode_unsupported(Unsupported(event.api_key, event.api_version,
                                                                event.correlation_id)))
                continue
            task = asyncio.ensure_future(listener._handle(handler, event))
            self.pending.append(task)
            task.add_done_callback(self._on_done)
        self._update_reading()

    def _answer_now(self, payload: bytes) -> None:
        self.pending.append(payload)
        self._send_ready()

    def _finish(self) -> None:
        """Read nothing more; close once every answer before this point is written."""
        self.closing = True
        self._update_reading()
        self._send_ready()

    def _update_reading(self) -> None:
        transport = self.transport
        if transport is None or self.lost:
            return
        pause = self.closing or self.writing_paused or len(self.pending) >= self.listener.max_inflight
        if pause and not self.reading_paused:
            self.reading_paused = True
            if transport.is_reading():
                transport.pause_reading()
        elif not pause and self.reading_paused:
            self.reading_paused = False
            transport.resume_reading()

    # -- answers out ------------------------------------------------------------------------
    def _on_done(self, task: asyncio.Task[Answer]) -> None:
        if self.lost:  # nobody to answer; the failure, if any, is still reported
            if not task.cancelled() and task.exception() is not None:
                log.error("Kafka request failed after its connection closed", exc_info=task.exception())
            return
        # the answers of requests acknowledged together (one WAL sync) finish in the same turn of
        # the loop: they are written at the end of it, in one send, not one send each
        if not self.flush_scheduled:
            self.flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush_answers)

    def _flush_answers(self) -> None:
        self.flush_scheduled = False
        if self.lost:
            return
        freed = self._send_ready()
        if freed and not self.closing:
            self._dispatch()  # requests already received but held back by the in-flight limit

    def _send_ready(self) -> bool:
        """Write the answers at the head of the line that are ready; True if any was taken."""
        transport = self.transport
        if self.lost or transport is None:
            return False
        ready = take_ready(self.pending)
        for frame in coalesce_frames(ready.payloads):
            transport.write(frame)
        observe = self.listener.observe
        if observe is not None and ready.handled:
            now = time.monotonic()
            for api, started, done in ready.handled:
                observe(api, done - started, now - done)
        if ready.failure is not None:
            log.error("Kafka request failed; closing the connection", exc_info=ready.failure)
            self.closing = True
            transport.close()
            return True
        if self.closing and not self.pending and not transport.is_closing():
            transport.close()
        return ready.taken > 0


@dataclass
class ReadyAnswers:
    """What :func:`take_ready` took off the head of a connection's line of answers."""

    payloads: list[bytes] = field(default_factory=list)  # framed answers to write, in request order
    handled: list[tuple[str, float, float]] = field(default_factory=list)  # (api, started, done) to observe
    failure: BaseException | None = None  # a request failed: the connection closes after ``payloads``
    taken: int = 0  # entries removed from the line


def take_ready(pending: deque[bytes | asyncio.Future[Answer]]) -> ReadyAnswers:
    """Take the answers that are ready at the head of ``pending`` (answers go out strictly in
    request order: the first one still running holds back those behind it). A failed request
    ends the line: what follows it is dropped, since the connection closes."""
    out = ReadyAnswers()
    while pending:
        head = pending[0]
        if isinstance(head, bytes):
            pending.popleft()
            out.taken += 1
            out.payloads.append(head)
            continue
        if not head.done():
            break
        pending.popleft()
        out.taken += 1
        if head.cancelled():
            continue
        exc = head.exception()
        if exc is not None:
            out.failure = exc
            pending.clear()
            break
        payload, api, started, done = head.result()
        if payload is not None:
            out.payloads.append(payload)
        out.handled.append((api, started, done))
    return out


#: answers up to this size are joined into one write; a larger one (a fetch) is written alone, uncopied
COALESCE_MAX_BYTES = 64 * 1024


def coalesce_frames(payloads: list[bytes]) -> list[bytes]:
    """The writes for ``payloads``: consecutive small answers joined (one send for the answers of a
    group commit), each large one on its own (joining would copy it)."""
    out: list[bytes] = []
    run: list[bytes] = []
    run_bytes = 0
    for payload in payloads:
        if len(payload) > COALESCE_MAX_BYTES or run_bytes + len(payload) > COALESCE_MAX_BYTES:
            if run:
                out.append(run[0] if len(run) == 1 else b"".join(run))
                run, run_bytes = [], 0
            if len(payload) > COALESCE_MAX_BYTES:
                out.append(payload)
                continue
        run.append(payload)
        run_bytes += len(payload)
    if run:
        out.append(run[0] if len(run) == 1 else b"".join(run))
    return out


def _sasl_response(event: Request, step: Step) -> ApiMessage:
    if event.api_key == ApiKey.SaslHandshake:
        return SaslHandshakeResponse(error_code=step.error.code, mechanisms=list(MECHANISMS))
    return SaslAuthenticateResponse(error_code=step.error.code, error_message=step.message,
                                    auth_bytes=step.auth_bytes, session_lifetime_ms=0)


@lru_cache(maxsize=None)
def api_name(api_key: int) -> str:
    try:
        return str(ApiKey(api_key).name)
    except ValueError:
        return f"api {api_key}"


def client_host(peername: object) -> str:
    """A peer address as Kafka's broker reports a client's host (``InetAddress.toString()`` of an
    address without a resolved name: ``/127.0.0.1``); "" for a transport without one."""
    if isinstance(peername, tuple) and peername and isinstance(peername[0], str):
        return "/" + peername[0]
    return ""
