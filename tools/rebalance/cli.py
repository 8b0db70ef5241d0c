"""`ferry rebalance`: plan a load-balanced reassignment with PySpark, and optionally execute it.

Reads the brokers' load samples of a time window (from the bucket, or from a local directory laid
out the same way), aggregates them per partition and per broker in Spark, plans moves on the
driver, prints a Cruise-Control-like summary and the plan in Kafka's reassignment JSON. Dry run
unless ``--execute`` is given.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
import warnings
from pathlib import Path
from typing import Any

from metadata_quorum.kernel.errors import ErrorCode, FerryError
from tools.rebalance.model import reassignment_json
from tools.rebalance.planner import PlannerConfig, plan, validate_modes
from stream_storage.config import S3Config
from tools.rebalance.samples import METRICS_PREFIX, S3SampleSource, keys_in_window, local_sample_files
from tools.rebalance.summary import goals_report, render_summary, summarize


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ferry rebalance", description=__doc__.splitlines()[0])
    src = p.add_argument_group("load samples")
    src.add_argument("--s3-endpoint", help="S3 endpoint URL holding the samples (moto, MinIO, AWS)")
    src.add_argument("--bucket", help="bucket holding metrics/broker=<id>/<ts>.jsonl")
    src.add_argument("--s3-region", default="us-east-1", help="S3 region (default us-east-1)")
    src.add_argument("--input", help="local directory laid out like the bucket (instead of S3)")
    src.add_argument("--window-ms", type=int, default=300_000, help="sampling window to average (default 300000)")
    src.add_argument("--end-ms", type=int, help="window end (default: the newest sample)")
    goals = p.add_argument_group("goals")
    goals.add_argument("--balance-band", type=float, default=0.10, help="network band around the mean (default 0.10)")
    goals.add_argument("--count-band", type=float, default=0.10,
                       help="partition-count cap above the mean (default 0.10)")
    goals.add_argument("--max-network-in", type=float, help="per-broker network-in capacity, bytes/s")
    goals.add_argument("--max-network-out", type=float, help="per-broker network-out capacity, bytes/s")
    goals.add_argument("--max-request-rate", type=float,
                       help="per-broker capacity in records in + out per second (a CPU proxy)")
    goals.add_argument("--racks", help="broker racks, BROKER:RACK[,BROKER:RACK] (default: the cluster's, when "
                                       "--bootstrap-* is given and every broker has one): spread each topic over them")
    goals.add_argument("--log-dirs", help="Kafka log-dirs JSON (ferry log-dirs --describe) to balance each broker's "
                                          "dirs (default: the cluster's, with --bootstrap-*)")
    mode = p.add_argument_group("modes")
    mode.add_argument("--add-broker", help="comma-separated new broker ids: moves only onto them")
    mode.add_argument("--remove-broker", help="comma-separated broker ids to drain: moves only off them")
    mode.add_argument("--brokers", help="comma-separated ids of every broker (default: those in the samples, "
                                        "or the cluster's when --bootstrap-* is given)")
    run = p.add_argument_group("execution")
    run.add_argument("--execute", action="store_true", help="submit the plan and follow it (default: dry run)")
    run.add_argument("--bootstrap-server", help="broker address(es), host:port[,host:port]")
    run.add_argument("--bootstrap-controller", help="controller address(es), host:port[,host:port]")
    run.add_argument("--timeout-ms", type=int, default=120_000, help="give up following the moves after this")
    p.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
    p.add_argument("--output", help="write the reassignment JSON to this file")
    p.add_argument("--json", action="store_true", help="print one JSON object (summary and plan)")
    return p


def parse_ids(text: str | None, flag: str) -> tuple[int, ...]:
    if not text:
        return ()
    try:
        ids = tuple(sorted({int(part) for part in text.split(",") if part.strip()}))
    except ValueError:
        raise FerryError(ErrorCode.INVALID_REQUEST, f"{flag} takes comma-separated broker ids, got {text!r}") from None
    if any(b < 0 for b in ids):
        raise FerryError(ErrorCode.INVALID_REQUEST, f"{flag}: broker ids are non-negative, got {text!r}")
    return ids


def parse_racks(text: str | None) -> dict[int, str]:
    if not text:
        return {}
    out: dict[int, str] = {}
    for part in text.split(","):
        broker, sep, rack = part.strip().partition(":")
        try:
            bid = int(broker)
        except ValueError:
            bid = -1
        if not sep or not rack or bid < 0:
            raise FerryError(ErrorCode.INVALID_REQUEST, f"--racks takes BROKER:RACK pairs, got {part!r}")
        out[bid] = rack
    return out


def _check_args(args: argparse.Namespace) -> None:
    if args.input and (args.s3_endpoint or args.bucket):
        raise FerryError(ErrorCode.INVALID_REQUEST, "use either --input or --s3-endpoint/--bucket, not both")
    if not args.input and not (args.s3_endpoint and args.bucket):
        raise FerryError(ErrorCode.INVALID_REQUEST, "say where the samples are: --s3-endpoint URL --bucket B, "
                                                    "or --input DIR")
    if args.execute and not (args.bootstrap_server or args.bootstrap_controller):
        raise FerryError(ErrorCode.INVALID_REQUEST, "--execute needs --bootstrap-server or --bootstrap-controller")
    if args.window_ms <= 0:
        raise FerryError(ErrorCode.INVALID_REQUEST, f"--window-ms must be positive, got {args.window_ms}")
    if not 0 < args.balance_band < 1 or not 0 <= args.count_band:
        raise FerryError(ErrorCode.INVALID_REQUEST, "--balance-band must be between 0 and 1 and --count-band >= 0")
    for flag, value in (("--max-network-in", args.max_network_in), ("--max-network-out", args.max_network_out),
                        ("--max-request-rate", args.max_request_rate)):
        if value is not None and value <= 0:
            raise FerryError(ErrorCode.INVALID_REQUEST, f"{flag} must be a positive rate in bytes/s, got {value}")


def _sample_keys(args: argparse.Namespace) -> tuple[list[str], int | None]:
    """The window's sample files or object keys and the window's end (from the keys: Spark need
    not scan for it). Listing runs on the driver; the objects are read by the executors."""
    if args.input:
        root = Path(args.input).resolve()
        keys, end_ms = keys_in_window(local_sample_files(root), args.window_ms, args.end_ms)
        return [str(root / k) for k in keys], end_ms
    return keys_in_window(S3SampleSource(args.s3_endpoint, args.bucket, args.s3_region).list(METRICS_PREFIX), args.window_ms,
                          args.end_ms)


def _read(spark: Any, args: argparse.Namespace, keys: list[str]) -> Any:
    from tools.rebalance.aggregate import read_samples, read_samples_s3

    if args.input:
        return read_samples(spark, keys)
    return read_samples_s3(spark, S3Config(endpoint_url=args.s3_endpoint, bucket=args.bucket,
                                           region=args.s3_region), keys)


async def _cluster_brokers(args: argparse.Namespace) -> tuple[list[int], dict[int, str]]:
    """The live brokers, and their racks when every one has a rack."""
    from tools.admin import Admin
    from tools.rebalance.execute import live_brokers

    async with Admin(args.bootstrap_server, args.bootstrap_controller) as admin:
        live = await live_brokers(admin)
        info = await admin.describe_cluster()
    racks = {b: str(info[b].rack) for b in live if b in info and info[b].rack}
    return live, racks if len(racks) == len(live) else {}


async def _cluster_log_dirs(args: argparse.Namespace) -> dict[str, Any]:
    from tools.admin import Admin
    from tools.log_dirs_cmd import kafka_log_dirs_json

    async with Admin(args.bootstrap_server, args.bootstrap_controller) as admin:
        return kafka_log_dirs_json(await admin.describe_log_dirs(), None)


def _log_dirs_input(args: argparse.Namespace) -> dict[str, Any] | None:
    if args.log_dirs:
        try:
            return dict(json.loads(Path(args.log_dirs).read_text(encoding="utf-8")))
        except (OSError, ValueError) as exc:
            raise FerryError(ErrorCode.INVALID_REQUEST, f"--log-dirs {args.log_dirs!r}: {exc}") from None
    if args.bootstrap_server or args.bootstrap_controller:
        return asyncio.run(_cluster_log_dirs(args))
    return None


async def _execute(args: argparse.Namespace, moves: list[Any], show_progress: bool,
                   dir_moves: dict[tuple[str, int, int], str] | None = None) -> dict[str, Any]:
    from tools.admin import Admin
    from tools.rebalance.execute import execute_plan, live_brokers

    async with Admin(args.bootstrap_server, args.bootstrap_controller) as admin:
        live = set(await live_brokers(admin))
        targets = sorted({m.to_broker for m in moves} - live)
        if targets:
            raise FerryError(ErrorCode.BROKER_ID_NOT_REGISTERED,
                             f"the plan moves partitions to brokers {targets} that are not live; live brokers are "
                             f"{sorted(live)}")
        result = await execute_plan(admin, moves, timeout_ms=args.timeout_ms, show_progress=show_progress)
        started_dirs: list[str] = []
        if dir_moves:
            from tools.client import TopicPartition
            from tools.reassign_cmd import execute_log_dir_moves

            await execute_log_dir_moves(admin, {(TopicPartition(t, p), b): d for (t, p, b), d in dir_moves.items()},
                                        args.timeout_ms, started_dirs)
    return {"submitted": result.submitted, "completed": result.completed, "rejected": result.rejected,
            "elapsed_s": result.elapsed_s, "log_dir_moves_started": len(started_dirs)}


def run(args: argparse.Namespace) -> dict[str, Any]:
    """The whole command; returns the report (summary, plan, timings, execution)."""
    _check_args(args)
    add, remove = parse_ids(args.add_broker, "--add-broker"), parse_ids(args.remove_broker, "--remove-broker")
    brokers = list(parse_ids(args.brokers, "--brokers")) or None
    racks = parse_racks(args.racks)
    if args.bootstrap_server or args.bootstrap_controller:
        live, cluster_racks = asyncio.run(_cluster_brokers(args))
        if brokers is None:
            brokers = [b for b in live if b not in add] or None
        racks = racks or cluster_racks
    config = PlannerConfig(balance_band=args.balance_band, count_band=args.count_band,
                           capacity_bytes_per_s=(args.max_network_in, args.max_network_out),
                           max_request_rate=args.max_request_rate, racks=tuple(sorted(racks.items())),
                           add_brokers=add, remove_brokers=remove)
    log_dirs_body = _log_dirs_input(args)
    from tools.rebalance.aggregate import aggregate_samples
    from tools.rebalance.spark_session import timed_spark_session

    keys, end_ms = _sample_keys(args)
    if not keys:
        raise FerryError(ErrorCode.INVALID_REQUEST, "no load samples found in the window: nothing to plan")
    spark, startup_s = timed_spark_session(args.master)
    started = time.perf_counter()
    agg = aggregate_samples(spark, _read(spark, args, keys), args.window_ms, end_ms, brokers=brokers)
    aggregated = time.perf_counter()
    cluster = agg.cluster
    if add:
        holding = sorted(set(add) & {int(b) for b in cluster.owners})
        if holding:
            raise FerryError(ErrorCode.INVALID_REQUEST,
                             f"brokers {holding} already lead partitions; --add-broker is for new, empty brokers")
        cluster = cluster.with_brokers([b for b in cluster.brokers if b not in add])
    validate_modes(cluster, config)
    result = plan(cluster, config)
    planned = time.perf_counter()
    brokers_before = sorted(set(cluster.brokers) | set(add))
    brokers_after = [b for b in brokers_before if b not in set(remove)]
    summary = summarize(cluster, result.owners_after, brokers_before, brokers_after)
    summary["mode"] = "remove_broker" if remove else ("add_broker" if add else "balance")
    dir_plan = None
    if log_dirs_body is not None:
        from tools.rebalance.log_dirs import parse_kafka_log_dirs, plan_log_dirs

        dirs, current = parse_kafka_log_dirs(log_dirs_body)
        dir_plan = plan_log_dirs(cluster, result.owners_after, dirs, current, band=args.balance_band)
    summary["goals"] = goals_report(cluster, result.owners_after, brokers_before, brokers_after, racks,
                                    (args.max_network_in, args.max_network_out), args.max_request_rate, dir_plan)
    summary["unmet_goals"] = result.unmet_goals
    summary["moves_by_goal"] = result.moves_by_goal
    summary["window"] = {"end_ms": agg.end_ms, "window_ms": args.window_ms, "sample_rows": agg.rows_in_window}
    summary["timings_s"] = {"spark_startup": startup_s, "aggregation": aggregated - started,
                            "planning": planned - aggregated}
    report: dict[str, Any] = {"summary": summary, "plan": reassignment_json(result.moves, cluster, dir_plan),
                              "executed": None}
    if args.output:
        Path(args.output).write_text(json.dumps(report["plan"], indent=2) + "\n", encoding="utf-8")
    intra = {} if dir_plan is None else {
        (str(cluster.topics[i]), int(cluster.partitions[i]), int(cluster.owners[i])): str(dir_plan.dirs[i])
        for i in dir_plan.intra_moves}
    if args.execute and (result.moves or intra):
        report["executed"] = asyncio.run(_execute(args, result.moves, show_progress=not args.json, dir_moves=intra))
    return report


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    warnings.filterwarnings("ignore", category=FutureWarning)
    try:
        report = run(args)
    except FerryError as exc:
        print(f"Error: {exc.error.name}: {exc.message}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(render_summary(report["summary"]))
    if args.output:
        print(f"Proposed partition reassignment configuration written to {args.output}")
    else:
        print("Proposed partition reassignment configuration")
        print(json.dumps(report["plan"]))
    executed = report["executed"]
    if executed is not None:
        print(f"Executed: {executed['completed']} of {executed['submitted']} moves completed in "
              f"{executed['elapsed_s']:.2f} s" + (f"; rejected: {executed['rejected']}" if executed["rejected"] else ""))
    elif not args.execute:
        print("Dry run: nothing changed (use --execute to submit the plan)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
