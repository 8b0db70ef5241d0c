"""An HTTP proxy in front of any S3 endpoint that makes it behave like a remote S3 (the shell).

Each request gets a :class:`~stream_storage.s3_profile.RequestFate` drawn from a seeded
:class:`~stream_storage.s3_profile.FateDrawer`: it waits the drawn latency, then is forwarded
unchanged (method, path, query, headers including ``Host``, body — so SigV4 signatures stay valid),
or answered with an injected ``SlowDown`` (503, not forwarded) or ``InternalError`` (500, after
forwarding: the request took effect, its reply is lost). The proxy decides nothing itself.

``GET /_ferry_proxy/stats`` (an invalid bucket name, so it never shadows S3) answers the requests
and injected errors counted by kind.
"""
from __future__ import annotations

import asyncio
import json
import logging
from collections import Counter
from typing import Any

import aiohttp
from aiohttp import web
from yarl import URL

from stream_storage.s3_profile import INTERNAL_ERROR, SLOWDOWN, FateDrawer, S3Profile, error_body, request_kind

log = logging.getLogger("ferry.s3.proxy")
STATS_PATH = "/_ferry_proxy/stats"
DELAY_HEADER = "X-Ferry-Proxy-Delay-Ms"  # the latency this request was given (clients ignore it)
# hop-by-hop headers (RFC 9110 §7.6.1) and those aiohttp recomputes for the forwarded message
_DROP_REQUEST = frozenset({"connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding",
                           "upgrade", "expect", "content-length"})
_DROP_RESPONSE = frozenset({"connection", "keep-alive", "transfer-encoding", "content-length", "date", "server"})


class S3LatencyProxy:
    def __init__(self, upstream_url: str, profile: S3Profile, seed: int) -> None:
        self.upstream_url = upstream_url.rstrip("/")
        self.profile = profile
        self.drawer = FateDrawer(profile, seed)
        self.requests: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()
        self._session: aiohttp.ClientSession | None = None

    def app(self) -> web.Application:
        app = web.Application(client_max_size=1 << 31)
        app.router.add_get(STATS_PATH, self.stats)
        app.router.add_route("*", "/{tail:.*}", self.forward)
        app.on_startup.append(self._open)
        app.on_cleanup.append(self._close)
        return app

    async def _open(self, _app: web.Application) -> None:
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=256), auto_decompress=False,
            timeout=aiohttp.ClientTimeout(total=300), skip_auto_headers=("User-Agent", "Content-Type"))

    async def _close(self, _app: web.Application) -> None:
        if self._session is not None:
            await self._session.close()

    async def stats(self, _request: web.Request) -> web.Response:
        return web.json_response({"profile": self.profile.name, "requests": dict(self.requests),
                                  "errors": dict(self.errors)})

    async def forward(self, request: web.Request) -> web.StreamResponse:
        kind = request_kind(request.method, request.path, request.query_string)
        fate = self.drawer.draw(kind)
        self.requests[kind] += 1
        body = await request.read()
        if fate.delay_ms > 0:
            await asyncio.sleep(fate.delay_ms / 1000)
        if fate.error == SLOWDOWN:
            self.errors[f"{kind} {SLOWDOWN}"] += 1
            return _error(SLOWDOWN, request.path)
        assert self._session is not None
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _DROP_REQUEST}
        url = URL(self.upstream_url + request.raw_path, encoded=True)  # raw: the signature covers the encoding
        async with self._session.request(request.method, url, headers=headers,
                                         data=body if body else None, allow_redirects=False) as upstream:
            payload = await upstream.read()
            if fate.error == INTERNAL_ERROR:
                self.errors[f"{kind} {INTERNAL_ERROR}"] += 1
                return _error(INTERNAL_ERROR, request.path)
            out_headers = [(k, v) for k, v in upstream.headers.items() if k.lower() not in _DROP_RESPONSE]
            out_headers.append((DELAY_HEADER, f"{fate.delay_ms:.3f}"))
            if request.method == "HEAD":
                response = web.Response(status=upstream.status, headers=out_headers)
                if "Content-Length" in upstream.headers:
                    response.headers["Content-Length"] = upstream.headers["Content-Length"]
                return response
            return web.Response(status=upstream.status, body=payload, headers=out_headers)


def _error(code: str, resource: str) -> web.Response:
    status, body = error_body(code, resource)
    return web.Response(status=status, body=body, content_type="application/xml")


async def run_proxy(upstream_url: str, profile: S3Profile, seed: int, host: str, port: int,
                    on_ready: Any = None) -> None:
    """Serve until cancelled; ``on_ready(port)`` is called once the socket listens."""
    proxy = S3LatencyProxy(upstream_url, profile, seed)
    runner = web.AppRunner(proxy.app(), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port, reuse_address=True)
    await site.start()
    server = getattr(site, "_server", None)
    actual = port
    if server is not None and server.sockets:
        actual = int(server.sockets[0].getsockname()[1])
    if on_ready is not None:
        on_ready(actual)
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()


def ready_line(endpoint_url: str, bucket: str, port: int, profile: S3Profile, seed: int) -> str:
    return json.dumps({"endpoint_url": endpoint_url, "bucket": bucket, "port": port, "s3_profile": profile.name,
                       "seed": seed})
