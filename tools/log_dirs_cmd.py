"""`ferry log-dirs --describe`: Kafka's LogDirsCommand output (its JSON shape and key names)."""
from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

from metadata_quorum.kernel.errors import ErrorCode, FerryError
from tools.admin import Admin
from tools.reassign_cmd import CommandError


def kafka_log_dirs_json(answers: dict[int, Any], topics: list[str] | None) -> dict[str, Any]:
    """Brokers' `/v1/log-dirs` answers -> `{"version":1,"brokers":[{"broker","logDirs":[...]}]}`."""
    brokers = []
    for bid in sorted(answers):
        body = answers[bid]
        if isinstance(body, dict) and "brokers" in body:  # the broker answers in Kafka's shape already
            body = next((b for b in body["brokers"] if int(b.get("broker", bid)) == bid), {"logDirs": []})
        dirs = body.get("log_dirs", body.get("logDirs", [])) if isinstance(body, dict) else body
        out_dirs = []
        for d in dirs or []:
            parts = []
            for p in d.get("partitions", []):
                name = p.get("partition") if isinstance(p.get("partition"), str) else f"{p.get('topic')}-{p.get('partition')}"
                topic = p.get("topic") or str(name).rsplit("-", 1)[0]
                if topics and topic not in topics:
                    continue
                parts.append({"partition": name, "size": int(p.get("size", p.get("size_bytes", 0))),
                              "offsetLag": int(p.get("offset_lag", p.get("offsetLag", 0))),
                              "isFuture": bool(p.get("is_future", p.get("isFuture", False)))})
            out_dirs.append({"logDir": d.get("path", d.get("log_dir", d.get("logDir"))),
                             "error": d.get("error") if d.get("error") not in ("NONE", "") else None,
                             "partitions": parts})
        brokers.append({"broker": bid, "logDirs": out_dirs})
    return {"version": 1, "brokers": brokers}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ferry log-dirs", description="Query the brokers' log directories.")
    p.add_argument("--bootstrap-server", help="broker address(es) HOST:PORT[,HOST:PORT]")
    p.add_argument("--bootstrap-controller", help="controller address(es) HOST:PORT[,HOST:PORT]")
    p.add_argument("--describe", action="store_true", help="describe the brokers' log dirs and the replicas in them")
    p.add_argument("--broker-list", help="comma-separated broker ids (default: all)")
    p.add_argument("--topic-list", help="comma-separated topics (default: all)")
    return p


async def run(args: argparse.Namespace, out: list[str]) -> None:
    if not args.describe:
        raise CommandError("Exactly one action must be specified: --describe")
    if not args.bootstrap_server and not args.bootstrap_controller:
        raise CommandError("Missing required argument \"[bootstrap-server]\"")
    topics = [t for t in (args.topic_list or "").split(",") if t] or None
    try:
        wanted = [int(b) for b in args.broker_list.split(",") if b.strip()] if args.broker_list else None
    except ValueError:
        raise CommandError(f"Invalid --broker-list {args.broker_list!r}") from None
    async with Admin(args.bootstrap_server, args.bootstrap_controller) as admin:
        live = await admin.brokers()
        if wanted is not None:
            unknown = [b for b in wanted if b not in live]
            if unknown:
                raise CommandError(f"The given brokers do not exist from --broker-list: {','.join(map(str, unknown))}. "
                                   f"Current existent brokers: {','.join(map(str, sorted(live)))}",
                                   ErrorCode.BROKER_ID_NOT_REGISTERED)
        ids = sorted(wanted if wanted is not None else live)
        out.append("Querying brokers for log directories information")
        answers = await admin.describe_log_dirs(ids, topics)
    out.append(f"Received log directory information from brokers {','.join(map(str, sorted(answers)))}")
    out.append(json.dumps(kafka_log_dirs_json(answers, topics), separators=(",", ":")))


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    out: list[str] = []
    try:
        asyncio.run(run(args, out))
    except (CommandError, FerryError) as exc:
        if out:
            print("\n".join(out), flush=True)
        print(f"Error: {exc.message if isinstance(exc, FerryError) else exc} ({exc.error.name})", file=sys.stderr)
        return 1
    print("\n".join(out))
    return 0
