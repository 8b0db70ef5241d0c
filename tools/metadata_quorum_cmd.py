"""`ferry metadata-quorum --bootstrap-server|--bootstrap-controller HOST:PORT describe --status | --replication`.

The output follows Kafka's `kafka-metadata-quorum.sh`: the same field names for `--status`, and
the same table (NodeId, DirectoryId, LogEndOffset, Lag, LastFetchTimestamp, LastCaughtUpTimestamp,
Status) for `--replication`, with `--human-readable` printing times as "N ms ago".
"""
from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from typing import Any

from metadata_quorum.client import ControllerClient
from tools.credentials import default_token
from metadata_quorum.kernel.errors import FerryError
from tools.admin import UNREACHABLE_CONTROLLERS_TIMEOUT_MS, Admin


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ferry metadata-quorum",
                                     description="Describe the metadata quorum (Kafka's kafka-metadata-quorum).")
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--bootstrap-server", help="comma-separated broker addresses HOST:PORT (they name the controllers)")
    where.add_argument("--bootstrap-controller", help="comma-separated controller addresses HOST:PORT")
    parser.add_argument("--timeout-ms", type=int, default=10_000, help="how long to wait for the controllers (ms)")
    sub = parser.add_subparsers(dest="command", required=True)
    describe = sub.add_parser("describe", help="describe the quorum")
    what = describe.add_mutually_exclusive_group(required=True)
    what.add_argument("--status", action="store_true", help="leader, epoch, high watermark, voters, observers")
    what.add_argument("--replication", action="store_true", help="per-replica log end offset and lag")
    describe.add_argument("--human-readable", action="store_true",
                          help="with --replication: print times as 'N ms ago'")
    return parser


def format_status(status: dict[str, Any]) -> str:
    voters = [{"id": v["id"], "directoryId": v.get("directory_id", ""), "endpoints": v.get("endpoints", [])}
              for v in status.get("current_voters", [])]
    observers = [{"id": o["id"], "directoryId": o.get("directory_id", "")} for o in status.get("current_observers", [])]
    fields = [
        ("ClusterId", status.get("cluster_id", "")),
        ("LeaderId", status.get("leader_id", -1)),
        ("LeaderEpoch", status.get("leader_epoch", -1)),
        ("HighWatermark", status.get("high_watermark", -1)),
        ("MaxFollowerLag", status.get("max_follower_lag", 0)),
        ("MaxFollowerLagTimeMs", status.get("max_follower_lag_time_ms", 0)),
        ("CurrentVoters", json.dumps(voters, separators=(", ", ": "))),
        ("CurrentObservers", json.dumps(observers, separators=(", ", ": "))),
    ]
    return "\n".join(f"{(name + ':').ljust(24)}{value}" for name, value in fields)


def _time_cell(ts_ms: int, human: bool, now_ms: int) -> str:
    if ts_ms is None or ts_ms < 0:
        return "-1" if not human else "unknown"
    if not human:
        return str(ts_ms)
    return f"{max(0, now_ms - ts_ms)} ms ago"


def format_replication(body: dict[str, Any], human: bool, now_ms: int | None = None) -> str:
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    header = ["NodeId", "DirectoryId", "LogEndOffset", "Lag", "LastFetchTimestamp", "LastCaughtUpTimestamp", "Status"]
    rows = [header]
    for r in body.get("replicas", []):
        rows.append([
            str(r["node_id"]), r.get("directory_id") or "-", str(r["log_end_offset"]), str(r["lag"]),
            _time_cell(r.get("last_fetch_timestamp", -1), human, now_ms),
            _time_cell(r.get("last_caught_up_timestamp", -1), human, now_ms),
            r["status"],
        ])
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in rows)


async def _controllers(args: argparse.Namespace) -> str | list[str]:
    if args.bootstrap_controller:
        return str(args.bootstrap_controller)
    async with Admin(bootstrap_servers=args.bootstrap_server, timeout_ms=args.timeout_ms) as admin:
        return admin.bootstrap_controllers


async def _run(args: argparse.Namespace) -> str:
    async with ControllerClient(await _controllers(args), timeout_ms=args.timeout_ms,
                                unreachable_timeout_ms=UNREACHABLE_CONTROLLERS_TIMEOUT_MS,
                                token=default_token()) as client:
        if args.status:
            return format_status(await client.quorum_status())
        return format_replication(await client.quorum_replication(), args.human_readable)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        print(asyncio.run(_run(args)))
    except FerryError as e:
        print(f"Error: {e.message} ({e.error.name})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
