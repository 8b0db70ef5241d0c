"""The raw baseline for Kafka produce throughput: a bare asyncio TCP server on loopback that
reads length-prefixed frames and answers each with a small fixed reply, as a broker's produce
does, minus everything a broker does (decoding, validation, the WAL, S3).

`python -m tools.perf.raw_tcp_sink` prints `{"port": P}` once it listens on 127.0.0.1.
"""
from __future__ import annotations

import asyncio
import json
import signal
import struct

REPLY = struct.pack(">ii", 4, 0)


async def _serve_one(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            (size,) = struct.unpack(">i", await reader.readexactly(4))
            await reader.readexactly(size)
            writer.write(REPLY)
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


async def serve() -> None:
    server = await asyncio.start_server(_serve_one, "127.0.0.1", 0, limit=1 << 20)
    print(json.dumps({"port": server.sockets[0].getsockname()[1]}), flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    server.close()


async def send_frames(port: int, frame: bytes, frames: int, connections: int, pipeline: int) -> float:
    """MB/s of ``frames`` frames sent over ``connections`` connections, ``pipeline`` unanswered
    at a time on each (as a producer keeps several requests in flight)."""
    import time
    payload = struct.pack(">i", len(frame)) + frame
    counter = iter(range(frames))

    async def one() -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        outstanding = 0
        try:
            for _ in counter:
                writer.write(payload)
                outstanding += 1
                if outstanding >= pipeline:
                    await reader.readexactly(len(REPLY))
                    outstanding -= 1
                await writer.drain()
            for _ in range(outstanding):
                await reader.readexactly(len(REPLY))
        finally:
            writer.close()

    started = time.monotonic()
    await asyncio.gather(*(one() for _ in range(connections)))
    return frames * len(frame) / (1024 * 1024) / (time.monotonic() - started)


if __name__ == "__main__":
    asyncio.run(serve())
