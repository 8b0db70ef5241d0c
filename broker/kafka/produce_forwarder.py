"""A small broker-to-broker Kafka client: the old owner's forwarded produce (``broker/produce_forward.py``).

One connection per target broker, opened on first use and kept. :meth:`ProduceForwarder.send`
queues the request on it without awaiting, so requests leave in the order ``send`` is called;
the target serves a connection's requests in arrival order, so one partition's forwarded batches
are appended in the order the client sent them. Requests are kafka-python's generated
``ProduceRequest`` and answers its ``ProduceResponse``: the partition's record batches go out
unchanged (the same producer id, epoch and sequence numbers, the same ``acks``), so the owner's
idempotent sequence checks apply to them as to a direct send. A broken connection fails every
request waiting on it (the caller answers the client with today's refusal) and the next ``send``
opens a new one; a forwarded request is never sent twice.
"""
from __future__ import annotations

import asyncio
import collections
import logging
import struct
from dataclasses import dataclass
from typing import Any, Callable

from kafka.protocol.producer.produce import ProduceRequest, ProduceResponse

from broker.kafka.apis import SUPPORTED_VERSIONS
from broker.produce_forward import MIN_FORWARD_VERSION, forwarded_client_id

log = logging.getLogger("ferry.kafka.forward")

_FRAME = struct.Struct(">i")
CONNECT_TIMEOUT_S = 2.0
MAX_ANSWER_BYTES = 16 * 1024 * 1024  # a produce answer is small; a larger frame is a broken peer


class ForwardFailed(Exception):
    """The forwarded request got no answer from the owner (connection refused or lost, a bad frame)."""


@dataclass(frozen=True)
class ForwardTarget:
    broker_id: int
    host: str
    port: int


@dataclass(frozen=True)
class _Waiting:
    correlation_id: int
    api_version: int
    topic: str
    partition: int
    answer: asyncio.Future[Any]


class _Link:
    """One connection to one broker: writes in call order, reads the answers in the same order."""

    def __init__(self, target: ForwardTarget, on_dead: Callable[["_Link"], None]) -> None:
        self.target = target
        self._on_dead = on_dead
        self._writer: asyncio.StreamWriter | None = None
        self._backlog: list[bytes] = []  # frames queued while the connection opens
        self._waiting: collections.deque[_Waiting] = collections.deque()
        self._dead = False
        self._task = asyncio.ensure_future(self._run())

    def send(self, frame: bytes, waiting: _Waiting | None) -> None:
        if self._dead:
            raise ForwardFailed(f"the connection to broker {self.target.broker_id} is closed")
        if waiting is not None:
            self._waiting.append(waiting)
        if self._writer is not None:
            self._writer.write(frame)
        else:
            self._backlog.append(frame)

    async def _run(self) -> None:
        reason = "closed"
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(self.target.host, self.target.port), CONNECT_TIMEOUT_S)
            self._writer = writer
            for frame in self._backlog:
                writer.write(frame)
            self._backlog.clear()
            while True:
                (size,) = _FRAME.unpack(await reader.readexactly(_FRAME.size))
                if not 0 < size <= MAX_ANSWER_BYTES:
                    raise ForwardFailed(f"an answer frame of {size} bytes")
                self._answer(await reader.readexactly(size))
        except asyncio.CancelledError:
            reason = "closed"
            raise
        except (OSError, EOFError, asyncio.IncompleteReadError, asyncio.TimeoutError, ForwardFailed) as exc:
            reason = f"{type(exc).__name__}: {exc}"
        except Exception as exc:  # noqa: BLE001 - a frame that does not decode is the peer's
            reason = f"{type(exc).__name__}: {exc}"
            log.warning("forwarding to broker %d: %s", self.target.broker_id, reason)
        finally:
            self._die(reason)

    def _answer(self, frame: bytes) -> None:
        if not self._waiting:
            raise ForwardFailed("an answer to no request")
        head = self._waiting.popleft()
        answer = ProduceResponse.decode(frame, version=head.api_version, header=True)
        if answer.header.correlation_id != head.correlation_id:
            raise ForwardFailed(f"answer to correlation id {answer.header.correlation_id}, "
                                f"expected {head.correlation_id}")
        found = [p for t in answer.responses if t.name == head.topic for p in t.partition_responses
                 if p.index == head.partition]
        if len(found) != 1:
            raise ForwardFailed(f"the answer does not hold {head.topic}-{head.partition} once")
        if not head.answer.done():
            head.answer.set_result(found[0])

    def _die(self, reason: str) -> None:
        if self._dead:
            return
        self._dead = True
        while self._waiting:
            w = self._waiting.popleft()
            if not w.answer.done():
                w.answer.set_exception(ForwardFailed(f"broker {self.target.broker_id}: {reason}"))
        self._backlog.clear()
        if self._writer is not None:
            self._writer.close()
        self._on_dead(self)

    async def close(self) -> None:
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)


class ProduceForwarder:
    """Forwards one partition's record batches to the broker that owns it now."""

    def __init__(self, broker_id: int) -> None:
        self.client_id = forwarded_client_id(broker_id)
        self._links: dict[ForwardTarget, _Link] = {}
        self._correlation_id = 0
        _warm_codecs()

    def send(self, target: ForwardTarget, topic: str, partition: int, records: bytes, acks: int, timeout_ms: int,
             api_version: int) -> asyncio.Future[Any] | None:
        """Queue the produce on ``target``'s connection now (no await: call order is send order).
        The future holds the owner's ``PartitionProduceResponse`` (or ``ForwardFailed``); None for
        acks=0, which the owner does not answer."""
        link = self._links.get(target)
        if link is None:
            link = self._links[target] = _Link(target, self._forget)
        self._correlation_id = (self._correlation_id + 1) & 0x7FFF_FFFF
        frame = produce_frame(topic, partition, records, acks, timeout_ms, api_version, self._correlation_id,
                              self.client_id)
        waiting = None
        if acks != 0:
            waiting = _Waiting(self._correlation_id, api_version, topic, partition,
                               asyncio.get_running_loop().create_future())
        link.send(frame, waiting)
        return waiting.answer if waiting is not None else None

    def _forget(self, link: _Link) -> None:
        if self._links.get(link.target) is link:
            del self._links[link.target]

    async def close(self) -> None:
        links = list(self._links.values())
        self._links.clear()
        await asyncio.gather(*(link.close() for link in links), return_exceptions=True)


def produce_frame(topic: str, partition: int, records: bytes, acks: int, timeout_ms: int, api_version: int,
                  correlation_id: int, client_id: str) -> bytes:
    """A framed ProduceRequest of one partition's record batches, as they came."""
    PT = ProduceRequest.TopicProduceData
    request = ProduceRequest(transactional_id=None, acks=acks, timeout_ms=timeout_ms, topic_data=[
        PT(name=topic, partition_data=[PT.PartitionProduceData(index=partition, records=records)])])
    request.API_VERSION = api_version
    request.with_header(correlation_id=correlation_id, client_id=client_id)
    return bytes(request.encode(header=True, framed=True))


def _warm_codecs() -> None:
    """kafka-python compiles a message's encoder and decoder on first use (~15 ms each, more on a
    busy machine): done at start-up, not inside a move's first forwarded request."""
    PR = ProduceResponse.TopicProduceResponse
    for version in range(MIN_FORWARD_VERSION, SUPPORTED_VERSIONS[ProduceRequest.API_KEY][1] + 1):
        produce_frame("t", 0, b"", 1, 1, version, 0, "warm")
        answer = ProduceResponse(responses=[PR(name="t", partition_responses=[PR.PartitionProduceResponse(
            index=0, error_code=0, base_offset=0, log_append_time_ms=-1, log_start_offset=0, record_errors=[],
            error_message=None)])], throttle_time_ms=0, node_endpoints=[])
        answer.API_VERSION = version
        answer.with_header(correlation_id=0)
        ProduceResponse.decode(bytes(answer.encode(header=True, framed=False)), version=version, header=True)
