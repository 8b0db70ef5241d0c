"""The listener over loopback with handlers of its own: answers in request order whatever order the
handlers finish in, the in-flight limit, a violation after good requests, a client's half-close."""
from __future__ import annotations

import asyncio
import struct
from collections import deque

from kafka.protocol.metadata.metadata import MetadataRequest, MetadataResponse

from broker.kafka.listener import COALESCE_MAX_BYTES, KafkaListener, coalesce_frames, take_ready
from broker.kafka.wire import Request
from tests.kafka.test_wire import frame

METADATA = 3


def metadata_request(correlation_id: int) -> bytes:
    return frame(MetadataRequest[9](topics=None, allow_auto_topic_creation=False), 9, correlation_id)


async def read_correlation_ids(reader: asyncio.StreamReader) -> list[int]:
    """Correlation ids of every answer until the listener closes the connection."""
    ids = []
    while True:
        head = await asyncio.wait_for(reader.read(4), 10)
        if not head:
            return ids
        (size,) = struct.unpack(">i", head + await reader.readexactly(4 - len(head)))
        body = await reader.readexactly(size)
        ids.append(struct.unpack_from(">i", body)[0])


class SlowFirst:
    """A Metadata handler that finishes later requests first and records how many run at once."""

    def __init__(self) -> None:
        self.running = 0
        self.most_running = 0

    async def __call__(self, request: Request) -> MetadataResponse:
        self.running += 1
        self.most_running = max(self.most_running, self.running)
        try:
            await asyncio.sleep(0.002 * (30 - request.correlation_id % 30))
        finally:
            self.running -= 1
        return MetadataResponse(throttle_time_ms=0, brokers=[], cluster_id="c", controller_id=1, topics=[])


async def serve(handler: SlowFirst, max_inflight: int = 64) -> KafkaListener:
    listener = KafkaListener({METADATA: handler}, "127.0.0.1", 0, max_inflight=max_inflight)
    await listener.start()
    return listener


async def test_answers_come_back_in_request_order_and_in_flight_requests_are_capped() -> None:
    handler = SlowFirst()
    listener = await serve(handler, max_inflight=4)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", listener.port)
        writer.write(b"".join(metadata_request(i) for i in range(60)))  # pipelined in one write
        writer.write_eof()
        assert await read_correlation_ids(reader) == list(range(60))
        writer.close()
        assert handler.most_running == 4  # the rest waited in the buffer until answers went out
        assert listener.requests_handled == 60
    finally:
        await listener.stop()


async def test_a_listener_bound_but_not_serving_answers_nothing_until_it_serves() -> None:
    """A broker binds its Kafka port before it registers and serves only once its image holds its
    registration: a client that connects in between waits, and is answered from then on."""
    handler = SlowFirst()
    listener = KafkaListener({METADATA: handler}, "127.0.0.1", 0)
    await listener.start(serve=False)
    try:
        assert listener.port > 0 and not listener.serving
        reader, writer = await asyncio.open_connection("127.0.0.1", listener.port)  # the backlog takes it
        writer.write(metadata_request(7))
        writer.write_eof()
        read = asyncio.ensure_future(read_correlation_ids(reader))
        await asyncio.sleep(0.3)
        assert not read.done() and listener.requests_handled == 0
        await listener.serve()
        assert listener.serving
        assert await read == [7]
        writer.close()
    finally:
        await listener.stop()


async def test_a_bad_frame_after_good_requests_answers_them_then_closes_only_that_connection() -> None:
    listener = await serve(SlowFirst())
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", listener.port)
        other_reader, other_writer = await asyncio.open_connection("127.0.0.1", listener.port)
        writer.write(metadata_request(1) + metadata_request(2) + struct.pack(">i", -5))
        assert await read_correlation_ids(reader) == [1, 2]  # then the listener closed it
        assert listener.connections_closed_for_violation == 1
        other_writer.write(metadata_request(7))
        other_writer.write_eof()
        assert await read_correlation_ids(other_reader) == [7]
        writer.close()
        other_writer.close()
    finally:
        await listener.stop()


async def test_a_request_split_across_many_writes_and_a_large_frame_are_decoded() -> None:
    listener = await serve(SlowFirst())
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", listener.port)
        data = metadata_request(3)
        for i in range(len(data)):  # one byte at a time
            writer.write(data[i:i + 1])
            await writer.drain()
            await asyncio.sleep(0)
        # a frame far larger than the connection's first buffer (40 topic names of 30,000 bytes)
        topics = [MetadataRequest[9].MetadataRequestTopic(name=f"{i:02d}" + "x" * 29_998) for i in range(40)]
        big = frame(MetadataRequest[9](topics=topics, allow_auto_topic_creation=False), 9, 4)
        assert len(big) > 1_000_000
        writer.write(big + metadata_request(5))
        writer.write_eof()
        assert await read_correlation_ids(reader) == [3, 4, 5]
        writer.close()
    finally:
        await listener.stop()


def _done(loop: asyncio.AbstractEventLoop, answer: object = None, error: BaseException | None = None,
          cancelled: bool = False) -> asyncio.Future[object]:
    fut: asyncio.Future[object] = loop.create_future()
    if cancelled:
        fut.cancel()
    elif error is not None:
        fut.set_exception(error)
        fut.exception()  # retrieved: the test looks at it through take_ready
    elif answer is not None:
        fut.set_result(answer)
    return fut


async def test_take_ready_takes_the_finished_head_of_the_line_in_order_and_stops_at_a_running_request() -> None:
    loop = asyncio.get_running_loop()
    running = loop.create_future()
    pending: deque = deque([_done(loop, (b"a", "Produce", 1.0, 2.0)), b"unsupported",
                            _done(loop, (None, "Produce", 1.5, 2.5)),  # acks=0: nothing to write
                            _done(loop, cancelled=True), _done(loop, (b"b", "Fetch", 2.0, 3.0)),
                            running, _done(loop, (b"after", "Produce", 0.0, 0.1))])
    ready = take_ready(pending)
    assert ready.payloads == [b"a", b"unsupported", b"b"]
    assert ready.handled == [("Produce", 1.0, 2.0), ("Produce", 1.5, 2.5), ("Fetch", 2.0, 3.0)]
    assert ready.taken == 5 and ready.failure is None
    assert list(pending)[0] is running and len(pending) == 2  # the answer behind it waits its turn
    running.cancel()


async def test_take_ready_stops_at_a_failed_request_and_drops_the_rest_of_the_line() -> None:
    loop = asyncio.get_running_loop()
    boom = RuntimeError("handler bug")
    pending: deque = deque([_done(loop, (b"a", "Produce", 1.0, 2.0)), _done(loop, error=boom),
                            _done(loop, (b"never", "Produce", 1.0, 2.0))])
    ready = take_ready(pending)
    assert ready.payloads == [b"a"] and ready.failure is boom and not pending


def test_coalesce_frames_joins_small_answers_and_leaves_large_ones_alone() -> None:
    big = b"F" * (COALESCE_MAX_BYTES + 1)
    assert coalesce_frames([]) == []
    assert coalesce_frames([b"a"]) == [b"a"]
    assert coalesce_frames([b"a", b"b", b"c"]) == [b"abc"]
    assert coalesce_frames([b"a", big, b"b", b"c"]) == [b"a", big, b"bc"]
    half = b"h" * (COALESCE_MAX_BYTES // 2)
    out = coalesce_frames([half, half, b"x"])
    assert out == [half + half, b"x"] and b"".join(out) == half + half + b"x"


async def test_answers_finishing_together_go_out_in_one_write() -> None:
    """Requests acknowledged together (one WAL sync) are answered with one write to the socket."""
    release = asyncio.Event()

    async def together(request: Request) -> MetadataResponse:
        await release.wait()
        return MetadataResponse(throttle_time_ms=0, brokers=[], cluster_id="c", controller_id=1, topics=[])

    listener = KafkaListener({METADATA: together}, "127.0.0.1", 0)
    await listener.start()
    writes: list[int] = []
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", listener.port)
        writer.write(b"".join(metadata_request(i) for i in range(1, 6)))
        await writer.drain()
        for _ in range(200):
            if len(next(iter(listener._connections)).pending) == 5:
                break
            await asyncio.sleep(0.005)
        (conn,) = listener._connections
        transport = conn.transport
        assert transport is not None
        real_write = transport.write

        def counting_write(data: bytes | bytearray | memoryview) -> None:
            writes.append(len(data))
            real_write(data)

        transport.write = counting_write  # type: ignore[method-assign]
        release.set()
        ids: list[int] = []
        while len(ids) < 5:
            (size,) = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), 10))
            ids.append(struct.unpack_from(">i", await reader.readexactly(size))[0])
        assert ids == [1, 2, 3, 4, 5]
        assert len(writes) == 1
        writer.close()
    finally:
        await listener.stop()
