"""`ferry balancer run`: keep a cluster's partitions balanced, continuously (docs/rebalance.md).

Samples the brokers' load (the sample objects in the bucket), plans with a warm planner when the
re-plan decision says so, and submits the moves through the controllers; ``--dry-run`` prints
the proposals instead and changes nothing. One log line per plan (imbalance before and after),
one JSON line per plan in ``--events`` (every move's timeline), Prometheus metrics on
``--metrics-port``.
"""
from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from metadata_quorum.kernel.errors import ErrorCode, FerryError
from tools.rebalance.replan import ReplanPolicy


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ferry balancer", description=__doc__.splitlines()[0])
    p.add_argument("action", choices=["run"], help="run: balance until stopped (or for --duration-s)")
    p.add_argument("--bootstrap-controller", required=True, help="controller address(es), host:port[,host:port]")
    p.add_argument("--s3-endpoint", required=True, help="S3 endpoint holding the load samples")
    p.add_argument("--bucket", default="ferry", help="bucket holding metrics/broker=<id>/<ts>.jsonl")
    p.add_argument("--s3-region", default="us-east-1")
    p.add_argument("--dry-run", action="store_true", help="print the proposals; submit nothing")
    p.add_argument("--interval-s", type=float, default=5.0, help="seconds between samples (default 5)")
    p.add_argument("--window-ms", type=int, default=60_000, help="load samples averaged per decision (default 60000)")
    p.add_argument("--balance-band", type=float, default=0.10, help="network band around the mean (default 0.10)")
    p.add_argument("--threshold", type=float, default=1.10, help="plan when max/mean network-in is above (default 1.1)")
    p.add_argument("--load-change", type=float, default=0.10,
                   help="share of the load that must differ from what the last plan left (default 0.10)")
    p.add_argument("--cooldown-s", type=float, default=10.0, help="after a plan's moves finished (default 10)")
    p.add_argument("--min-load", type=float, default=256 * 1024,
                   help="mean network-in per broker (bytes/s) below which nothing moves (default 262144)")
    p.add_argument("--metrics-port", type=int, default=0, help="serve Prometheus metrics on 127.0.0.1:PORT")
    p.add_argument("--events", help="append one JSON line per plan to this file")
    p.add_argument("--duration-s", type=float, help="stop after this many seconds (default: run until stopped)")
    p.add_argument("--master", default="local[2]", help="Spark master for large reads (default local[2])")
    return p


def _check(args: argparse.Namespace) -> None:
    if args.interval_s <= 0 or args.window_ms <= 0 or args.cooldown_s < 0 or args.min_load < 0:
        raise FerryError(ErrorCode.INVALID_REQUEST, "--interval-s and --window-ms must be positive, --cooldown-s "
                                                    "and --min-load non-negative")
    if not 0 < args.balance_band < 1 or args.threshold < 1 or not 0 <= args.load_change <= 1:
        raise FerryError(ErrorCode.INVALID_REQUEST, "--balance-band in (0, 1), --threshold >= 1, --load-change in [0, 1]")


async def run(args: argparse.Namespace) -> None:
    from tools.balancer.metrics import BalancerMetrics

    metrics = BalancerMetrics()
    if args.metrics_port:  # first: `ferry cluster up` waits for it, not for the planner's imports
        from prometheus_client import start_http_server

        start_http_server(args.metrics_port, addr="127.0.0.1", registry=metrics.registry)
    from tools.admin import Admin
    from tools.balancer.cluster_view import AdminView
    from tools.balancer.loop import Balancer, BalancerConfig, jsonl_writer
    from tools.rebalance.warm import S3Objects, WarmPlanner
    planner = WarmPlanner(S3Objects(args.s3_endpoint, args.bucket, args.s3_region), window_ms=args.window_ms,
                          master=args.master)
    config = BalancerConfig(interval_s=args.interval_s, balance_band=args.balance_band, dry_run=args.dry_run,
                            min_mean_load_bytes_per_s=args.min_load,
                            policy=ReplanPolicy(args.threshold, args.load_change, args.cooldown_s))
    print(f"balancer: {'dry run, ' if args.dry_run else ''}every {args.interval_s:g} s over {args.window_ms} ms of "
          f"samples; plans when max/mean > {args.threshold:g}", flush=True)
    async with Admin(bootstrap_controllers=args.bootstrap_controller) as admin:
        events: Any = jsonl_writer(args.events) if args.events else None
        balancer = Balancer(AdminView(admin), planner, config, metrics,
                            log=lambda line: print(line, flush=True), events=events)
        await balancer.run(args.duration_s)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        _check(args)
        asyncio.run(run(args))
    except FerryError as exc:
        print(f"Error: {exc.error.name}: {exc.message}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
