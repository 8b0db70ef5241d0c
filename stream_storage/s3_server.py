"""The embedded S3 endpoint: a moto server in its own process, bound to 127.0.0.1.

``ferry s3 serve [--port P] [--bucket B]`` serves S3 over HTTP, creates the bucket, and prints
one JSON line ``{"endpoint_url": ..., "bucket": ..., "port": ...}`` once it is ready (port 0 =
any free port). :class:`S3Server` starts and stops one for tests and the cluster launcher.
Everything lives in memory: nothing survives a restart.

With ``--s3-profile aws-standard|fixed:MS`` or ``--latency-ms P50,P99 [--error-rate R]``, the
process starts moto as its child on a free port and serves, on ``--port``, the latency proxy
(``s3_proxy.py``) in front of it: seeded heavy-tailed latency and SlowDown/InternalError replies.
``ferry s3 proxy --upstream URL`` puts the same proxy in front of any endpoint.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import select
import signal
import subprocess
import sys
import threading
import time
from types import TracebackType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from stream_storage.s3_profile import S3Profile

DEFAULT_BUCKET = "ferry"
HOST = "127.0.0.1"


def _create_bucket_when_up(endpoint_url: str, bucket: str, port: int) -> None:
    from stream_storage.config import S3Config
    from stream_storage.s3_store import make_s3_client

    client = make_s3_client(S3Config(endpoint_url=endpoint_url, bucket=bucket))
    deadline = time.monotonic() + 30
    while True:
        try:
            client.create_bucket(Bucket=bucket)
            break
        except client.exceptions.BucketAlreadyOwnedByYou:
            break
        except Exception:  # noqa: BLE001 - the server thread may not accept yet
            if time.monotonic() > deadline:
                os._exit(3)
            time.sleep(0.02)
    print(json.dumps({"endpoint_url": endpoint_url, "bucket": bucket, "port": port}), flush=True)


def serve(port: int, bucket: str) -> int:
    """Run moto's S3 (and only what it needs) on 127.0.0.1 until SIGTERM/SIGINT."""
    from moto.server import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
    from werkzeug.serving import make_server

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "ferry")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "ferry-secret")
    app = DomainDispatcherApplication(create_backend_app)
    server = make_server(HOST, port, app, threaded=True, request_handler=MotoRequestHandler)
    actual_port = int(server.server_port)
    os.environ["MOTO_PORT"] = str(actual_port)

    def stop(_signum: int, _frame: Any) -> None:
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    endpoint_url = f"http://{HOST}:{actual_port}"
    threading.Thread(target=_create_bucket_when_up, args=(endpoint_url, bucket, actual_port), daemon=True).start()
    server.serve_forever()
    return 0


def _profile_args(cmd: argparse.ArgumentParser) -> None:
    cmd.add_argument("--s3-profile", default=None,
                     help="local (nothing added), aws-standard, fixed:MS or latency:P50,P99[,RATE]")
    cmd.add_argument("--latency-ms", default=None, help="P50,P99 of the added per-request latency (log-normal)")
    cmd.add_argument("--error-rate", type=float, default=None, help="share of requests answered 503 SlowDown "
                     "(half, not applied) or 500 InternalError (half, applied)")
    cmd.add_argument("--seed", type=int, default=1, help="seed of the latency and error draws")


def profile_from_args(args: argparse.Namespace) -> "S3Profile":
    """The profile the flags name (ValueError on bad input)."""
    from stream_storage.s3_profile import LOCAL, latency_profile, parse_profile

    if args.latency_ms is not None:
        if args.s3_profile is not None:
            raise ValueError("give either --s3-profile or --latency-ms, not both")
        parts = args.latency_ms.split(",")
        if len(parts) != 2:
            raise ValueError(f"--latency-ms {args.latency_ms!r}: expected P50,P99")
        try:
            p50, p99 = float(parts[0]), float(parts[1])
        except ValueError:
            raise ValueError(f"--latency-ms {args.latency_ms!r}: expected two numbers") from None
        return latency_profile(p50, p99, args.error_rate or 0.0)
    profile = parse_profile(args.s3_profile) if args.s3_profile else LOCAL
    if args.error_rate is not None:
        from dataclasses import replace

        profile = replace(profile, error_rate=args.error_rate, name=f"{profile.name},errors:{args.error_rate:g}")
    return profile


def serve_with_proxy(port: int, bucket: str, upstream: str | None, profile: "S3Profile", seed: int) -> int:
    """Serve the latency proxy on ``port`` in front of ``upstream`` (None: a moto child of ours)."""
    import asyncio

    from stream_storage.s3_proxy import ready_line, run_proxy

    moto: S3Server | None = None
    if upstream is None:
        moto = S3Server(bucket=bucket, new_session=False).start()
        upstream = moto.endpoint_url
    loop = asyncio.new_event_loop()
    task = loop.create_task(run_proxy(upstream, profile, seed, HOST, port, on_ready=lambda p: print(
        ready_line(f"http://{HOST}:{p}", bucket, p, profile, seed), flush=True)))

    def stop(_signum: int, _frame: Any) -> None:
        loop.call_soon_threadsafe(task.cancel)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        loop.run_until_complete(task)
    except BaseException:  # noqa: BLE001 - cancelled by a signal: stop quietly
        pass
    finally:
        loop.close()
        if moto is not None:
            moto.stop()
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="ferry s3", description="the embedded S3 endpoint (moto server); "
                                     "`ferry s3 check --endpoint URL` checks another S3 implementation")
    sub = parser.add_subparsers(dest="command", required=True)
    serve_cmd = sub.add_parser("serve", help="serve S3 on 127.0.0.1 and create the bucket")
    serve_cmd.add_argument("--port", type=int, default=9000, help="port to bind (0 = any free port)")
    serve_cmd.add_argument("--bucket", default=DEFAULT_BUCKET, help="bucket to create (3-63 characters)")
    _profile_args(serve_cmd)
    proxy_cmd = sub.add_parser("proxy", help="add latency and errors in front of any S3 endpoint")
    proxy_cmd.add_argument("--upstream", required=True, help="the S3 endpoint URL to forward to")
    proxy_cmd.add_argument("--port", type=int, default=9001, help="port to bind (0 = any free port)")
    proxy_cmd.add_argument("--bucket", default=DEFAULT_BUCKET, help="bucket name printed in the ready line")
    _profile_args(proxy_cmd)
    args = parser.parse_args(argv)
    if not 3 <= len(args.bucket) <= 63:
        print(f"ferry s3 {args.command}: bucket name {args.bucket!r} must have 3 to 63 characters", file=sys.stderr)
        return 2
    try:
        profile = profile_from_args(args)
    except ValueError as exc:
        print(f"ferry s3 {args.command}: {exc}", file=sys.stderr)
        return 2
    if args.command == "proxy":
        return serve_with_proxy(args.port, args.bucket, args.upstream, profile, args.seed)
    if profile.adds_nothing:
        return serve(args.port, args.bucket)
    return serve_with_proxy(args.port, args.bucket, None, profile, args.seed)


class S3Server:
    """A ``ferry s3 serve`` child process (own session, killed as a group on stop)."""

    def __init__(self, bucket: str = DEFAULT_BUCKET, port: int = 0, log_path: str | None = None,
                 s3_profile: str = "local", seed: int = 1, new_session: bool = True,
                 upstream: str | None = None, prefix: tuple[str, ...] = ()) -> None:
        """``s3_profile`` other than ``local`` puts the latency proxy in front (one process group:
        stopping this server stops both). With ``upstream``, only the proxy runs, in front of that
        endpoint. ``new_session=False`` keeps the child in our process group."""
        self.bucket = bucket
        self.upstream = upstream
        self.prefix = prefix  # starts the server elsewhere (a network namespace); it binds its loopback
        self.s3_profile = s3_profile
        self.seed = seed
        self.new_session = new_session
        self.requested_port = port
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None
        self.endpoint_url = ""
        self.port = 0

    def start(self, timeout_s: float = 20.0) -> "S3Server":
        cwd = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        stderr: Any = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL
        try:
            command = ["serve"] if self.upstream is None else ["proxy", "--upstream", self.upstream]
            self.process = subprocess.Popen(
                [*self.prefix, sys.executable, "-m", "tools.cli", "s3", *command, "--port", str(self.requested_port),
                 "--bucket", self.bucket, "--s3-profile", self.s3_profile, "--seed", str(self.seed)],
                stdout=subprocess.PIPE, stderr=stderr, stdin=subprocess.DEVNULL, cwd=cwd,
                start_new_session=self.new_session)
        finally:
            if self.log_path:
                stderr.close()
        assert self.process.stdout is not None
        deadline = time.monotonic() + timeout_s
        line = b""
        while not line.endswith(b"\n"):
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self.process.poll() is not None:
                self.stop()
                raise RuntimeError(f"ferry s3 serve did not become ready within {timeout_s} s")
            ready, _, _ = select.select([self.process.stdout], [], [], remaining)
            if ready:
                chunk = os.read(self.process.stdout.fileno(), 4096)
                if not chunk:
                    continue
                line += chunk
        info = json.loads(line.decode().splitlines()[0])
        self.endpoint_url, self.port = str(info["endpoint_url"]), int(info["port"])
        return self

    def stop(self) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            term: Any = os.killpg if self.new_session else os.kill
            try:
                term(self.process.pid, signal.SIGTERM)
                self.process.wait(timeout=5)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                try:
                    term(self.process.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.process.wait(timeout=5)
        if self.process.stdout is not None:
            self.process.stdout.close()
        self.process = None

    def __enter__(self) -> "S3Server":
        return self.start() if self.process is None else self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
