"""A seeded HTTP proxy in front of the S3 endpoint that fails or delays requests on command.

``python -m tools.chaos.fault_proxy --upstream URL [--port P] --seed N`` forwards every request to
``URL`` unchanged (method, path, query, headers and body: SigV4 and aws-chunked bodies pass
through as they are) and prints one JSON line ``{"endpoint_url", "port"}`` once it listens.
``POST /__ferry_fault__`` with ``{"error_rate", "after_fraction", "latency_ms"}`` sets the faults;
``GET /__ferry_fault__`` answers the counters. Under ``error_rate`` a request fails with
``503 SlowDown`` before it reaches S3, or — for ``after_fraction`` of those — with
``500 InternalError`` after S3 applied it (the caller cannot tell whether its PUT happened).

Which requests fail is drawn from ``random.Random(seed)`` in arrival order (``decide``, pure), so
a seed replays the same choices for the same sequence of requests.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import random
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import asdict, dataclass
from typing import Any

CONTROL_PATH = "/__ferry_fault__"
_HOP_BY_HOP = {"host", "content-length", "transfer-encoding", "connection", "keep-alive", "proxy-connection",
               "upgrade", "te", "trailer"}


@dataclass(frozen=True)
class FaultSettings:
    error_rate: float = 0.0
    after_fraction: float = 0.0
    latency_ms: int = 0

    @staticmethod
    def parse(body: Any) -> "FaultSettings":
        if not isinstance(body, dict) or set(body) - {"error_rate", "after_fraction", "latency_ms"}:
            raise ValueError("expected {error_rate, after_fraction, latency_ms}")
        settings = FaultSettings(float(body.get("error_rate", 0.0)), float(body.get("after_fraction", 0.0)),
                                 int(body.get("latency_ms", 0)))
        if not (0 <= settings.error_rate <= 1 and 0 <= settings.after_fraction <= 1 and settings.latency_ms >= 0):
            raise ValueError("error_rate and after_fraction lie in [0, 1], latency_ms >= 0")
        return settings


@dataclass(frozen=True)
class Action:
    fail_before: bool
    fail_after: bool
    delay_ms: int


def decide(rng: random.Random, settings: FaultSettings) -> Action:
    """What to do with the next request (two draws per request whatever the settings, so the
    sequence of choices depends on the seed and the request count only)."""
    fail, where = rng.random(), rng.random()
    failing = fail < settings.error_rate
    after = failing and where < settings.after_fraction
    return Action(fail_before=failing and not after, fail_after=after, delay_ms=settings.latency_ms)


def s3_error(status: int, code: str, message: str) -> tuple[int, bytes]:
    body = (f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code><Message>{message}</Message>'
            f"<RequestId>ferry-fault-proxy</RequestId></Error>").encode()
    return status, body


async def serve(upstream: str, port: int, seed: int, host: str = "127.0.0.1") -> None:
    import aiohttp
    from aiohttp import web

    rng = random.Random(seed)
    state = {"settings": FaultSettings()}
    counters = {"requests": 0, "failed_before": 0, "failed_after": 0, "delayed": 0, "upstream_errors": 0}
    session = aiohttp.ClientSession(auto_decompress=False, connector=aiohttp.TCPConnector(limit=0))

    async def control(request: web.Request) -> web.Response:
        if request.method == "POST":
            try:
                state["settings"] = FaultSettings.parse(await request.json())
            except (ValueError, TypeError, json.JSONDecodeError) as exc:
                return web.json_response({"error": str(exc)}, status=400)
        return web.json_response({"settings": asdict(state["settings"]), **counters})

    async def forward(request: web.Request) -> web.StreamResponse:
        if request.path == CONTROL_PATH:
            return await control(request)
        counters["requests"] += 1
        action = decide(rng, state["settings"])
        if action.delay_ms:
            counters["delayed"] += 1
            await asyncio.sleep(action.delay_ms / 1000)
        if action.fail_before:
            counters["failed_before"] += 1
            await request.read()
            status, body = s3_error(503, "SlowDown", "Please reduce your request rate (injected).")
            return web.Response(status=status, body=body, content_type="application/xml")
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_BY_HOP}
        data = await request.read()
        try:
            async with session.request(request.method, upstream + request.raw_path, headers=headers, data=data,
                                       allow_redirects=False, timeout=aiohttp.ClientTimeout(total=60)) as resp:
                payload = await resp.read()
                out_headers = {k: v for k, v in resp.headers.items() if k.lower() not in _HOP_BY_HOP}
                status = resp.status
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            counters["upstream_errors"] += 1
            status, body = s3_error(502, "InternalError", f"the upstream S3 failed: {type(exc).__name__}")
            return web.Response(status=status, body=body, content_type="application/xml")
        if action.fail_after:
            counters["failed_after"] += 1
            status, body = s3_error(500, "InternalError", "We encountered an internal error (injected after apply).")
            return web.Response(status=status, body=body, content_type="application/xml")
        return web.Response(status=status, body=payload, headers=out_headers)

    app = web.Application(client_max_size=1024 ** 3)
    app.router.add_route("*", "/{tail:.*}", forward)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    actual = runner.addresses[0][1]
    print(json.dumps({"endpoint_url": f"http://{host}:{actual}", "port": actual}), flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()
        await session.close()


class FaultProxy:
    """The proxy as a process, for the chaos runner (``start``, ``set_faults``, ``stats``, ``stop``)."""

    def __init__(self, upstream: str, seed: int, log_path: str, host: str = "127.0.0.1",
                 prefix: tuple[str, ...] = ()) -> None:
        """``host`` is the address it binds; ``prefix`` starts it elsewhere (a network namespace)."""
        self.host = host
        self.prefix = prefix
        self.upstream = upstream.rstrip("/")
        self.seed = seed
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None
        self.endpoint_url = ""

    def start(self, timeout_s: float = 20.0) -> "FaultProxy":
        log = open(self.log_path, "ab")  # the child keeps it
        self.process = subprocess.Popen([*self.prefix, sys.executable, "-m", "tools.chaos.fault_proxy",
                                         "--upstream", self.upstream, "--seed", str(self.seed), "--host", self.host], stdout=subprocess.PIPE, stderr=log,
                                        stdin=subprocess.DEVNULL, start_new_session=True)
        log.close()
        assert self.process.stdout is not None
        deadline = time.monotonic() + timeout_s
        line = self.process.stdout.readline()
        if not line or time.monotonic() > deadline:
            raise RuntimeError(f"the S3 fault proxy did not start; see {self.log_path}")
        self.endpoint_url = json.loads(line)["endpoint_url"]
        return self

    def _call(self, body: dict[str, Any] | None = None) -> dict[str, Any]:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.endpoint_url + CONTROL_PATH, data=data, method="POST" if data else "GET",
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=5) as resp:
            answer: dict[str, Any] = json.loads(resp.read())
            return answer

    def set_faults(self, settings: FaultSettings) -> None:
        self._call(asdict(settings))

    def stats(self) -> dict[str, Any]:
        return self._call()

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.chaos.fault_proxy", description=__doc__.split("\n\n")[0])
    parser.add_argument("--upstream", required=True, help="the S3 endpoint to forward to (http://host:port)")
    parser.add_argument("--port", type=int, default=0, help="port to bind (0: any free port)")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--seed", type=int, default=0, help="seeds which requests fail")
    args = parser.parse_args(argv)
    asyncio.run(serve(args.upstream.rstrip("/"), args.port, args.seed, args.host))
    return 0


if __name__ == "__main__":
    sys.exit(main())
