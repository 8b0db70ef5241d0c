"""`ferry console`: the live web console, an aiohttp app on loopback.

The shell around the pure view model (tools/console/model.py): a poll loop asks the source every
``poll_interval_ms``, builds the view, and pushes what changed to every open page as server-sent
events (``GET /api/events``: first the whole view, then diffs). ``GET /`` is one static page of
plain JavaScript and CSS (tools/console/static/). ``POST /api/move`` starts a reassignment through
the controllers' API and ``POST /api/reassign`` runs Kafka's reassignment JSON as `ferry
reassign-partitions --execute` does; both answer the Kafka error (name and message) for bad input.
When the console holds an admin token (a secure cluster), both must carry the same token as
``Authorization: Bearer`` or they are refused with ``SASL_AUTHENTICATION_FAILED``.
"""
from __future__ import annotations

import argparse
import asyncio
import hmac
import json
import logging
import os
import time
import aiohttp
from aiohttp import web

from metadata_quorum.kernel.errors import ErrorCode, FerryError
from metadata_quorum.kernel.http_parsing import errors_middleware
from tools.client import TopicPartition
from tools.credentials import TOKEN_ENV, TOKEN_FILE_ENV, resolve_token
from tools.console.model import History, JsonDict, build_view, diff_view, parse_move_form
from tools.console.source import ConsoleSource

log = logging.getLogger("ferry.console")
STATIC_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "static")
DEFAULT_PORT = 9099
#: a page that reads slower than this many queued updates gets the whole view again instead
QUEUE_MAX = 64
MOVE_BODY_MAX_BYTES = 4096
PLAN_BODY_MAX_BYTES = 4 * 1024 * 1024  # a plan of every partition of a large cluster


class Console:
    """The poll loop, the current view, and the open pages' queues."""

    def __init__(self, source: ConsoleSource, poll_interval_ms: int = 200, token: str | None = None) -> None:
        self.source = source
        self.poll_interval_ms = poll_interval_ms
        self.token = token
        self.history = History()
        self.view: JsonDict | None = None
        self.last_error: str | None = None
        self._queues: set[asyncio.Queue[str]] = set()
        self._task: asyncio.Task[None] | None = None
        self._changed = asyncio.Event()

    # -- the loop
    async def poll_once(self) -> None:
        try:
            obs = await self.source.observe()
        except (FerryError, OSError, asyncio.TimeoutError, aiohttp.ClientError) as exc:
            self.last_error = str(exc)
            self._publish({"error": self.last_error})
            return
        view = build_view(obs, self.history)
        update = diff_view(self.view, view)
        self.view = view
        if self.last_error is not None:
            self.last_error = None
            self._publish({"error": None})
        if update is not None:
            self._publish(update)

    async def run(self) -> None:
        while True:
            started = time.monotonic()
            await self.poll_once()
            self._changed.clear()
            wait_s = self.poll_interval_ms / 1000 - (time.monotonic() - started)
            try:  # a move just made: poll again at once rather than at the next tick
                await asyncio.wait_for(self._changed.wait(), max(wait_s, 0.01))
            except asyncio.TimeoutError:
                pass

    def _publish(self, update: JsonDict) -> None:
        data = json.dumps(update, separators=(",", ":"))
        for q in list(self._queues):
            if q.qsize() >= QUEUE_MAX:  # a stalled page: drop its backlog, send it everything anew
                while not q.empty():
                    q.get_nowait()
                q.put_nowait(json.dumps({"full": self.view}, separators=(",", ":")))
            else:
                q.put_nowait(data)

    async def start(self, app: web.Application) -> None:
        self._task = asyncio.create_task(self.run())

    async def stop(self, app: web.Application) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass

    # -- handlers
    async def index(self, request: web.Request) -> web.StreamResponse:
        return web.FileResponse(os.path.join(STATIC_DIR, "index.html"),
                                headers={"Cache-Control": "no-cache"})

    async def snapshot(self, request: web.Request) -> web.Response:
        return web.json_response({"view": self.view, "secure": self.token is not None, "error": self.last_error})

    async def events(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache",
                                               "X-Accel-Buffering": "no"})
        await response.prepare(request)
        queue: asyncio.Queue[str] = asyncio.Queue()
        self._queues.add(queue)
        try:
            hello = {"secure": self.token is not None, "error": self.last_error}
            await response.write(f"event: hello\ndata: {json.dumps(hello)}\n\n".encode())
            if self.view is not None:
                await response.write(f"data: {json.dumps({'full': self.view}, separators=(',', ':'))}\n\n".encode())
            while True:
                try:
                    data = await asyncio.wait_for(queue.get(), 15.0)
                except asyncio.TimeoutError:
                    await response.write(b": keep-alive\n\n")
                    continue
                await response.write(f"data: {data}\n\n".encode())
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            self._queues.discard(queue)
        return response

    def _check_token(self, request: web.Request) -> None:
        if self.token is None:
            return
        given = request.headers.get("Authorization", "")
        if not given.startswith("Bearer ") or not hmac.compare_digest(given[7:].strip().encode(), self.token.encode()):
            raise FerryError(ErrorCode.SASL_AUTHENTICATION_FAILED,
                             "this console is on a secure cluster: a move needs the admin token")

    async def _body(self, request: web.Request, max_bytes: int) -> object:
        raw = await request.read()
        if len(raw) > max_bytes:
            raise FerryError(ErrorCode.INVALID_REQUEST, f"the body is larger than {max_bytes} bytes")
        try:
            return json.loads(raw)
        except ValueError:
            raise FerryError(ErrorCode.INVALID_REQUEST, "the body is not JSON") from None

    async def move(self, request: web.Request) -> web.Response:
        self._check_token(request)
        topic, partition, replicas = parse_move_form(await self._body(request, MOVE_BODY_MAX_BYTES))
        await self.source.move(TopicPartition(topic, partition), replicas)
        self._changed.set()
        return web.json_response({"topic": topic, "partition": partition, "replicas": replicas, "error": "NONE"})

    async def reassign(self, request: web.Request) -> web.Response:
        """``{"plan": "<Kafka's reassignment JSON>"}``: run as `ferry reassign-partitions --execute`."""
        self._check_token(request)
        body = await self._body(request, PLAN_BODY_MAX_BYTES)
        plan = body.get("plan") if isinstance(body, dict) else None
        if not isinstance(plan, str) or not plan.strip():
            raise FerryError(ErrorCode.INVALID_REQUEST, "plan must be Kafka's reassignment JSON, as a string")
        lines = await self.source.execute_plan(plan)
        self._changed.set()
        return web.json_response({"error": "NONE", "lines": lines})

    def app(self) -> web.Application:
        app = web.Application(middlewares=[errors_middleware("docs/console.md")],
                              client_max_size=PLAN_BODY_MAX_BYTES * 2)
        app.router.add_get("/", self.index)
        app.router.add_get("/api/snapshot", self.snapshot)
        app.router.add_get("/api/events", self.events)
        app.router.add_post("/api/move", self.move)
        app.router.add_post("/api/reassign", self.reassign)
        app.router.add_static("/static/", STATIC_DIR)
        app.on_startup.append(self.start)
        app.on_cleanup.append(self.stop)
        return app


async def serve(console: Console, host: str, port: int) -> web.AppRunner:
    """Start the console's app; the caller keeps the runner and cleans it up."""
    runner = web.AppRunner(console.app(), handle_signals=False, shutdown_timeout=0.5)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner


def bound_port(runner: web.AppRunner) -> int:
    for site in runner.sites:
        server = getattr(site, "_server", None)
        sockets = getattr(server, "sockets", None) or []
        for s in sockets:
            return int(s.getsockname()[1])
    raise RuntimeError("the console is not listening")


async def _main(args: argparse.Namespace, token: str | None) -> int:
    from tools.admin import Admin
    from tools.console.source import LiveSource

    token = resolve_token(token)
    admin = Admin(bootstrap_servers=args.bootstrap_server, bootstrap_controllers=args.bootstrap_controller,
                  timeout_ms=5000, token=token)
    if args.secure and token is None:
        raise FerryError(ErrorCode.INVALID_CONFIG, "--secure: no admin token; export FERRY_TOKEN_FILE=<state dir>/admin.token")
    async with admin:
        source = LiveSource(admin, run_dir=args.run_dir)
        console = Console(source, poll_interval_ms=args.poll_interval_ms, token=token)
        runner = await serve(console, args.host, args.port)
        print(f"Ferry console: http://{args.host}:{bound_port(runner)}/", flush=True)
        try:
            await asyncio.Event().wait()
        finally:
            await runner.cleanup()
            await source.close()
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="ferry console", description=(
        "Serve the live web console on loopback: brokers, the partition map, moves' six-step timelines, "
        "throughput, the metadata quorum; a form to move a partition."))
    parser.add_argument("--bootstrap-controller", help="controllers, HOST:PORT[,...]")
    parser.add_argument("--bootstrap-server", help="brokers' HTTP APIs, HOST:PORT[,...] (they name the controllers)")
    parser.add_argument("--state-dir", default=os.path.join(os.getcwd(), ".ferry", "cluster"),
                        help="a `ferry cluster up` state dir to read the controllers from when no bootstrap is given")
    parser.add_argument("--host", default="127.0.0.1", help="listen address (default 127.0.0.1: loopback only)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"listen port (default {DEFAULT_PORT}; 0: any)")
    parser.add_argument("--poll-interval-ms", type=int, default=200, help="how often the cluster is read (default 200)")
    parser.add_argument("--run-dir", help="an autoscaling experiment's output directory: draw its panels live")
    parser.add_argument("--secure", action="store_true",
                        help="the cluster is secure: read the admin token (FERRY_TOKEN_FILE) and require it on moves")
    args = parser.parse_args(argv)
    if not 10 <= args.poll_interval_ms <= 60_000:
        raise FerryError(ErrorCode.INVALID_REQUEST, "--poll-interval-ms must be from 10 to 60000")
    token: str | None = None
    if not args.bootstrap_controller and not args.bootstrap_server:
        from tools.cluster_procs import load_state

        state = load_state(os.path.abspath(args.state_dir))
        if not state or not state.get("bootstrap_controller"):
            raise FerryError(ErrorCode.INVALID_REQUEST, "give --bootstrap-controller or --bootstrap-server, "
                             f"or start a cluster with `ferry cluster up` (no cluster in {args.state_dir})")
        args.bootstrap_controller = str(state["bootstrap_controller"])
        token_file = state.get("admin_token_file")
        if state.get("secure") and token_file and not os.environ.get(TOKEN_FILE_ENV) and not os.environ.get(TOKEN_ENV):
            with open(str(token_file), encoding="utf-8") as f:
                token = f.read().strip() or None
        args.secure = args.secure or bool(state.get("secure"))
    return asyncio.run(_main(args, token))
