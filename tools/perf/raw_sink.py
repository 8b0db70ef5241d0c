"""The raw baseline for produce throughput: a bare aiohttp server on loopback that reads each
request body and answers a small JSON, as a broker's produce does, minus everything a broker does.

`python -m tools.perf.raw_sink` prints `{"port": P}` once it listens on 127.0.0.1.
"""
from __future__ import annotations

import asyncio
import json
import signal

from aiohttp import web


async def produce(req: web.Request) -> web.Response:
    body = await req.read()
    return web.json_response({"base_offset": 0, "last_offset": len(body), "leader_epoch": 0, "log_append_time_ms": -1})


async def serve() -> None:
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_post("/v1/produce/{topic}/{partition}", produce)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    print(json.dumps({"port": port}), flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await runner.cleanup()


if __name__ == "__main__":
    asyncio.run(serve())
