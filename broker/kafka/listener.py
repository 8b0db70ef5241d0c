"""The Kafka listener: an asyncio TCP server that only moves bytes.

Each connection feeds a :class:`~broker.kafka.wire.KafkaConnection`; each decoded request runs
as its own task, started in arrival order (so a pipelining producer's appends reach the WAL in
order), and responses are written strictly in request order, as Kafka requires. A long-poll
fetch therefore does not hold up a produce pipelined behind it on the same connection, yet the
client still reads its answers in order. At most ``max_inflight`` requests of one connection are
in progress; past that the listener stops reading the socket (TCP backpressure).

A malformed or oversized frame closes that connection only; an unexpected failure while
handling a request is logged and closes its connection (there is no well-formed answer to it).
"""
from __future__ import annotations

import asyncio
import logging
import time
from functools import lru_cache
from typing import Any, Awaitable, Callable

from kafka.protocol.api_key import ApiKey
from kafka.protocol.api_message import ApiMessage

from kafka.protocol.sasl import SaslAuthenticateResponse, SaslHandshakeResponse

from broker.kafka.sasl import MECHANISMS, SaslSession, Step, Users
from broker.kafka.wire import (DEFAULT_MAX_REQUEST_BYTES, KafkaConnection, NeedData, Request, Unsupported,
                               Violation, encode_error, encode_response, encode_unsupported)
from metadata_quorum.errors import ErrorCode

log = logging.getLogger("ferry.kafka")

Handler = Callable[[Request], Awaitable[ApiMessage | None]]
READ_CHUNK_BYTES = 256 * 1024


class KafkaListener:
    def __init__(self, handlers: dict[int, Handler], host: str, port: int,
                 max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES, max_inflight: int = 64,
                 observe: Callable[[str, float, float], None] | None = None, sasl_users: Users | None = None) -> None:
        """``observe(api name, handling seconds, queued seconds)`` is called for each answer;
        ``sasl_users`` makes this a SASL listener (see :mod:`broker.kafka.sasl`)."""
        self.handlers = handlers
        self.sasl_users = sasl_users
        self.observe = observe
        self.host, self.port = host, port
        self.max_request_bytes = max_request_bytes
        self.max_inflight = max_inflight
        self._server: asyncio.AbstractServer | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self.connections_closed_for_violation = 0
        self.requests_handled = 0
        self.requests_with_trailing_bytes = 0

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._serve, self.host, self.port, limit=READ_CHUNK_BYTES)
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.gather(*self._connections, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        conn = KafkaConnection(self.max_request_bytes)
        sasl = SaslSession(self.sasl_users) if self.sasl_users is not None else None
        answers: asyncio.Queue[asyncio.Future[Any] | None] = asyncio.Queue(self.max_inflight)
        sender = asyncio.ensure_future(self._send_in_order(answers, writer))
        peer = writer.get_extra_info("peername")
        try:
            while not sender.done():
                data = await reader.read(READ_CHUNK_BYTES)
                if not data:
                    break
                conn.receive_data(data)
                if not await self._dispatch(conn, answers, peer, sasl):
                    break
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            if not sender.done():
                try:
                    answers.put_nowait(None)
                except asyncio.QueueFull:
                    sender.cancel()
                await asyncio.gather(sender, return_exceptions=True)
            writer.close()
            self._connections.discard(task)

    @staticmethod
    async def _answer_now(answers: asyncio.Queue[asyncio.Future[Any] | None], payload: bytes) -> None:
        done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        done.set_result(payload)
        await answers.put(done)

    async def _dispatch(self, conn: KafkaConnection, answers: asyncio.Queue[asyncio.Future[Any] | None],
                        peer: object, sasl: SaslSession | None) -> bool:
        while True:
            event = conn.next_event()
            if isinstance(event, NeedData):
                return True
            if isinstance(event, Violation):
                self.connections_closed_for_violation += 1
                log.info("closing Kafka connection from %s: %s", peer, event.reason)
                return False
            if isinstance(event, Unsupported):
                done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
                done.set_result(encode_unsupported(event))
                await answers.put(done)
                continue
            assert isinstance(event, Request)
            if event.trailing_bytes:
                self.requests_with_trailing_bytes += 1
                log.debug("%s v%d from %s: %d bytes after the request (ignored, as Kafka does)",
                          api_name(event.api_key), event.api_version, peer, event.trailing_bytes)
            if event.api_key in (ApiKey.SaslHandshake, ApiKey.SaslAuthenticate):
                step = self._sasl_step(sasl, event)
                await self._answer_now(answers, encode_response(event, _sasl_response(event, step)))
                if step.close:
                    log.info("closing Kafka connection from %s: %s", peer, step.message)
                    return False
                continue
            if sasl is not None and not sasl.allows(api_name(event.api_key)):
                await self._answer_now(answers, encode_error(event.correlation_id, ErrorCode.ILLEGAL_SASL_STATE))
                log.info("closing Kafka connection from %s: %s before authenticating", peer, api_name(event.api_key))
                return False
            handler = self.handlers.get(event.api_key)
            if handler is None:  # advertised but not wired: a bug, answered as unsupported
                done = asyncio.get_running_loop().create_future()
                done.set_result(encode_unsupported(Unsupported(event.api_key, event.api_version, event.correlation_id)))
                await answers.put(done)
                continue
            answer = asyncio.ensure_future(self._handle(handler, event))
            if answers.full():  # max_inflight reached: stop reading until an answer is sent
                await answers.put(answer)
            else:
                answers.put_nowait(answer)

    @staticmethod
    def _sasl_step(sasl: SaslSession | None, event: Request) -> Step:
        if sasl is None:
            return Step(ErrorCode.UNSUPPORTED_SASL_MECHANISM, message="this listener has no SASL", close=True)
        if event.api_key == ApiKey.SaslHandshake:
            return sasl.handshake(event.body.mechanism)
        return sasl.authenticate(bytes(event.body.auth_bytes))

    async def _handle(self, handler: Handler, request: Request) -> tuple[bytes | None, str, float, float]:
        started = time.monotonic()
        response = await handler(request)
        self.requests_handled += 1
        payload = None if response is None else encode_response(request, response)
        return payload, api_name(request.api_key), started, time.monotonic()

    async def _send_in_order(self, answers: asyncio.Queue[asyncio.Future[Any] | None],
                             writer: asyncio.StreamWriter) -> None:
        while True:
            item = await answers.get()
            if item is None:
                return
            try:
                result = await item
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - no well-formed answer exists: close this connection
                log.exception("Kafka request failed; closing the connection")
                writer.close()
                return
            payload, api, started, done = result if isinstance(result, tuple) else (result, "", 0.0, 0.0)
            if payload is not None:
                writer.write(payload)
                await writer.drain()
            if self.observe is not None and api:
                self.observe(api, done - started, time.monotonic() - done)


def _sasl_response(event: Request, step: Step) -> ApiMessage:
    if event.api_key == ApiKey.SaslHandshake:
        return SaslHandshakeResponse(error_code=step.error.code, mechanisms=list(MECHANISMS))
    return SaslAuthenticateResponse(error_code=step.error.code, error_message=step.message,
                                    auth_bytes=step.auth_bytes, session_lifetime_ms=0)


@lru_cache(maxsize=None)
def api_name(api_key: int) -> str:
    try:
        return ApiKey(api_key).name
    except ValueError:
        return f"api {api_key}"
