"""`ferry console` as a process beside a local cluster (`ferry cluster up --console`, `ferry demo`).

Started as every tool beside a cluster is (``tools.proc.spawn_tool``: its own session, its log in
the cluster's state dir, so `ferry cluster down` stops it with the cluster; on a secure cluster the
admin token through ``FERRY_TOKEN_FILE``, never on its command line, where ``ps`` would show it).
"""
from __future__ import annotations

import subprocess

from tools.proc import LOOPBACK, free_ports, spawn_tool


def spawn_console(controller_bootstrap: list[str], log_path: str, token_file: str | None = None,
                  port: int | None = None, timeout_s: float = 20.0,
                  run_dir: str | None = None) -> tuple[subprocess.Popen[bytes], str]:
    """Start the console and return once its page answers: (process, URL)."""
    port = port or free_ports(1)[0]
    args = ["console", "--bootstrap-controller", ",".join(controller_bootstrap), "--host", LOOPBACK, "--port", str(port)]
    if run_dir:
        args += ["--run-dir", run_dir]
    if token_file:
        args.append("--secure")
    url = f"http://{LOOPBACK}:{port}/"
    return spawn_tool(args, log_path, url + "api/snapshot", "console", token_file, timeout_s), url
