"""`ferry balancer run` as a process beside a local cluster (`ferry cluster up`, on by default).

Started as every tool beside a cluster is (``tools.proc.spawn_tool``: its own session, its log in
the cluster's state dir, the admin token through ``FERRY_TOKEN_FILE``); it returns once the
balancer's metrics endpoint answers.
"""
from __future__ import annotations

import subprocess

from tools.proc import LOOPBACK, free_ports, spawn_tool


def spawn_balancer(controller_bootstrap: list[str], s3_endpoint: str, bucket: str, log_path: str,
                   events_path: str, token_file: str | None = None, dry_run: bool = False,
                   extra_args: list[str] | None = None,
                   timeout_s: float = 30.0) -> tuple[subprocess.Popen[bytes], str]:
    """Start the balancer; (process, metrics URL)."""
    port = free_ports(1)[0]
    args = ["balancer", "run",
            "--bootstrap-controller", ",".join(u.removeprefix("http://") for u in controller_bootstrap),
            "--s3-endpoint", s3_endpoint, "--bucket", bucket, "--metrics-port", str(port),
            "--events", events_path] + (["--dry-run"] if dry_run else []) + list(extra_args or [])
    url = f"http://{LOOPBACK}:{port}/metrics"
    return spawn_tool(args, log_path, url, "balancer", token_file, timeout_s), url
