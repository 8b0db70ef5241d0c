"""The listener over loopback with handlers of its own: answers in request order whatever order the
handlers finish in, the in-flight limit, a violation after good requests, a client's half-close."""
from __future__ import annotations

import asyncio
import struct

from kafka.protocol.metadata.metadata import MetadataRequest, MetadataResponse

from broker.kafka.listener import KafkaListener
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
