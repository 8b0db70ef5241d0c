"""`ferry autoscale run [SCENARIO.yaml] [--s3-endpoint URL] [--wal local|s3] [--out DIR]`: run an autoscaling experiment;
`ferry autoscale compare A.yaml B.yaml [--seeds K] [--wal local|s3] [--out DIR]`: compare policies (compare.py).

Starts a local cluster (embedded moto by default, any S3 endpoint by flag), follows the scenario
(tools/scenarios/default.yaml when none is given) under open-loop load, and writes a 1 s time
series (CSV), PNG plots and a summary JSON with a verdict. Exit status 0 when the verdict is
pass, 1 when it is fail, 2 for a bad scenario or arguments.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
import warnings
from pathlib import Path

from metadata_quorum.kernel.errors import FerryError
from stream_storage.s3_profile import parse_profile
from tools.autoscale.scenario import load_scenario


def s3_profile_arg(text: str) -> str:
    """An S3 latency profile as ``ferry s3 serve --s3-profile`` takes it (stream_storage/s3_profile.py)."""
    try:
        parse_profile(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text.strip()


def add_storage_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--wal", choices=("local", "s3"), default="local",
                        help="the brokers' WAL: local files (default) or WAL objects in S3 (wal.mode = s3)")
    parser.add_argument("--s3-profile", type=s3_profile_arg, default="local",
                        help="S3 latencies the cluster's object store adds: local (default), aws-standard, "
                             "fixed:MS or latency:P50,P99[,ERROR_RATE]")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ferry autoscale", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run a scenario")
    run.add_argument("scenario", nargs="?", help="scenario YAML (default: the shipped default scenario)")
    run.add_argument("--s3-endpoint", help="use this S3 endpoint (e.g. MinIO) instead of an embedded moto server")
    run.add_argument("--bucket", default="ferry", help="bucket on the S3 endpoint (default ferry)")
    run.add_argument("--out", help="output directory (default .ferry/autoscale/<scenario>-<time>)")
    add_storage_arguments(run)
    run.add_argument("--no-progress", action="store_true", help="no progress bar")
    run.add_argument("--seed", type=int, help="the load's seed (default: the scenario's)")
    run.add_argument("--console", action="store_true",
                     help="serve the web console on the experiment's cluster, with this run's panels live")
    from tools.autoscale.compare import add_parser

    add_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    warnings.filterwarnings("ignore", category=FutureWarning)
    if args.command == "compare":
        from tools.autoscale.compare import main_compare

        return main_compare(args)
    try:
        scenario = load_scenario(args.scenario)
        if args.seed is not None:
            scenario = scenario.with_seed(args.seed)
    except FerryError as exc:
        print(f"Error: {exc.error.name}: {exc.message}", file=sys.stderr)
        return 2
    out_dir = Path(args.out or Path(".ferry") / "autoscale" / f"{scenario.name}-{time.strftime('%Y%m%d-%H%M%S')}")
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from tools.autoscale.runner import Experiment

    with Progress(TextColumn("[bold]{task.fields[phase]}"), BarColumn(), TextColumn("{task.completed:.0f}/"
                  "{task.total:.0f} s"), TimeElapsedColumn(), disable=args.no_progress) as progress:
        task = progress.add_task("run", total=scenario.duration_s, phase="starting")

        def on_progress(t_s: float, phase: str) -> None:
            progress.update(task, completed=min(t_s, scenario.duration_s), phase=phase)

        def on_console(url: str) -> None:
            progress.console.print(f"Web console: {url} (this run's panels live; it stops with the run)")

        experiment = Experiment(scenario, out_dir, s3_endpoint=args.s3_endpoint, bucket=args.bucket,
                                on_progress=on_progress, wal_mode=args.wal, s3_profile=args.s3_profile,
                                on_console=on_console if args.console else None)
        summary = asyncio.run(experiment.run())
    print(json.dumps({k: summary[k] for k in ("verdict", "checks", "time_to_balance_s", "moves",
                                               "stall_per_moved_partition_ms", "p99_steady", "p99_during_moves",
                                               "p99_during_moves_over_steady", "records", "wal_mode",
                                               "s3_profile")}, indent=2))
    print(f"time series, plots and summary in {out_dir}")
    return 0 if summary["verdict"] == "pass" else 1


if __name__ == "__main__":
    sys.exit(main())
