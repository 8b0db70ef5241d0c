"""The embedded S3 endpoint: a moto server in its own process, bound to 127.0.0.1.

``ferry s3 serve [--port P] [--bucket B]`` serves S3 over HTTP, creates the bucket, and prints
one JSON line ``{"endpoint_url": ..., "bucket": ..., "port": ...}`` once it is ready (port 0 =
any free port). :class:`S3Server` starts and stops one for tests and the cluster launcher.
Everything lives in memory: nothing survives a restart.
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
from typing import Any

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
        except Exception:  # the server thread may not accept yet
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


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="ferry s3", description="the embedded S3 endpoint (moto server)")
    sub = parser.add_subparsers(dest="command", required=True)
    serve_cmd = sub.add_parser("serve", help="serve S3 on 127.0.0.1 and create the bucket")
    serve_cmd.add_argument("--port", type=int, default=9000, help="port to bind (0 = any free port)")
    serve_cmd.add_argument("--bucket", default=DEFAULT_BUCKET, help="bucket to create (3-63 characters)")
    args = parser.parse_args(argv)
    if not 3 <= len(args.bucket) <= 63:
        print(f"ferry s3 serve: bucket name {args.bucket!r} must have 3 to 63 characters", file=sys.stderr)
        return 2
    return serve(args.port, args.bucket)


class S3Server:
    """A ``ferry s3 serve`` child process (own session, killed as a group on stop)."""

    def __init__(self, bucket: str = DEFAULT_BUCKET, port: int = 0, log_path: str | None = None) -> None:
        self.bucket = bucket
        self.requested_port = port
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None
        self.endpoint_url = ""
        self.port = 0

    def start(self, timeout_s: float = 20.0) -> "S3Server":
        cwd = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        stderr: Any = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "tools.cli", "s3", "serve", "--port", str(self.requested_port),
                 "--bucket", self.bucket],
                stdout=subprocess.PIPE, stderr=stderr, stdin=subprocess.DEVNULL, cwd=cwd, start_new_session=True)
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
            try:
                os.killpg(self.process.pid, signal.SIGTERM)
                self.process.wait(timeout=5)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                try:
                    os.killpg(self.process.pid, signal.SIGKILL)
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
