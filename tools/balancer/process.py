"""`ferry balancer run` as a process beside a local cluster (`ferry cluster up`, on by default).

Like the console it runs in its own session with its log in the cluster's state dir, so `ferry
cluster down` finds and stops it; on a secure cluster it reads the admin token through
``FERRY_TOKEN_FILE``. It returns once the balancer's metrics endpoint answers.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.error
import urllib.request

from tools.credentials import TOKEN_FILE_ENV
from tools.proc import LOOPBACK, free_ports

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def spawn_balancer(controller_bootstrap: list[str], s3_endpoint: str, bucket: str, log_path: str,
                   events_path: str, token_file: str | None = None, dry_run: bool = False,
                   extra_args: list[str] | None = None,
                   timeout_s: float = 30.0) -> tuple[subprocess.Popen[bytes], str]:
    """Start the balancer; (process, metrics URL)."""
    port = free_ports(1)[0]
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    args = [sys.executable, "-m", "tools.cli", "balancer", "run",
            "--bootstrap-controller", ",".join(u.removeprefix("http://") for u in controller_bootstrap),
            "--s3-endpoint", s3_endpoint, "--bucket", bucket, "--metrics-port", str(port),
            "--events", events_path] + (["--dry-run"] if dry_run else []) + list(extra_args or [])
    if token_file:
        env[TOKEN_FILE_ENV] = token_file
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(args, stdout=log, stderr=log, stdin=subprocess.DEVNULL, cwd=ROOT, env=env,
                                start_new_session=True)
    url = f"http://{LOOPBACK}:{port}/metrics"
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(url, timeout=1.0) as r:
                if r.status == 200:
                    return proc, url
        except (OSError, urllib.error.URLError):
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            if proc.poll() is None:
                proc.kill()
                proc.wait(5)
            raise RuntimeError(f"the balancer did not start (see {log_path})")
        time.sleep(0.1)
