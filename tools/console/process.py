"""`ferry console` as a process beside a local cluster (`ferry cluster up --console`, `ferry demo`).

It runs in its own session and logs to a file of the cluster's state dir, so `ferry cluster down`
finds and stops it with the cluster; on a secure cluster it gets the admin token through
``FERRY_TOKEN_FILE`` (never on its command line, where ``ps`` would show it).
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


def spawn_console(controller_bootstrap: list[str], log_path: str, token_file: str | None = None,
                  port: int | None = None, timeout_s: float = 20.0,
                  run_dir: str | None = None) -> tuple[subprocess.Popen[bytes], str]:
    """Start the console and return once its page answers: (process, URL)."""
    port = port or free_ports(1)[0]
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    args = [sys.executable, "-m", "tools.cli", "console", "--bootstrap-controller", ",".join(controller_bootstrap),
            "--host", LOOPBACK, "--port", str(port)]
    if run_dir:
        args += ["--run-dir", run_dir]
    if token_file:
        env[TOKEN_FILE_ENV] = token_file
        args.append("--secure")
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(args, stdout=log, stderr=log, stdin=subprocess.DEVNULL, cwd=ROOT, env=env,
                                start_new_session=True)
    url = f"http://{LOOPBACK}:{port}/"
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(url + "api/snapshot", timeout=1.0) as r:
                if r.status == 200:
                    return proc, url
        except (OSError, urllib.error.URLError):
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            if proc.poll() is None:
                proc.kill()
                proc.wait(5)
            raise RuntimeError(f"the console did not start (see {log_path})")
        time.sleep(0.1)
