"""`ferry leader-election`: Kafka's LeaderElectionCommand flags and output lines.

Preferred elections move leadership back to the first live replica; unclean elections pick any
live replica of a partition that has no leader. `ELECTION_NOT_NEEDED` is not a failure: it is
reported as "Valid replica already elected".
"""
from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections import Counter

from metadata_quorum.kernel.errors import ErrorCode, FerryError
from tools.admin import Admin
from tools.client import TopicPartition
from tools.reassign_cmd import CommandError


def parse_election_json(text: str) -> list[TopicPartition]:
    try:
        js = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CommandError(f"The input string is not a valid JSON: {exc}") from None
    if not js:
        raise CommandError("Replica election data is empty")
    if not isinstance(js, dict) or "partitions" not in js:
        raise CommandError('Replica election data is missing "partitions" field')
    out: list[TopicPartition] = []
    for item in js["partitions"] if isinstance(js["partitions"], list) else []:
        if not isinstance(item, dict) or not isinstance(item.get("topic"), str) or \
                isinstance(item.get("partition"), bool) or not isinstance(item.get("partition"), int):
            raise CommandError(f"Each partition needs a string `topic` and an integer `partition`: {json.dumps(item)}")
        out.append(TopicPartition(item["topic"], item["partition"]))
    dups = sorted(tp for tp, n in Counter(out).items() if n > 1)
    if dups:
        raise CommandError("Replica election data contains duplicate partitions: " + ",".join(str(d) for d in dups))
    return out


def result_lines(election_type: str, results: dict[TopicPartition, FerryError | None]) -> tuple[list[str], int]:
    """Kafka's three groups: succeeded, no-op (ELECTION_NOT_NEEDED), failed. Returns (lines, failed count)."""
    kind = election_type.upper()
    ok = sorted(tp for tp, e in results.items() if e is None)
    noop = sorted(tp for tp, e in results.items() if e is not None and e.error == ErrorCode.ELECTION_NOT_NEEDED)
    failed = sorted(tp for tp, e in results.items() if e is not None and e.error != ErrorCode.ELECTION_NOT_NEEDED)
    lines: list[str] = []
    if ok:
        lines.append(f"Successfully completed leader election ({kind}) for partitions {', '.join(map(str, ok))}")
    if noop:
        lines.append(f"Valid replica already elected for partitions {', '.join(map(str, noop))}")
    for tp in failed:
        err = results[tp]
        assert err is not None
        lines.append(f"Error completing leader election ({kind}) for partition: {tp}: "
                     f"{err.error.name}: {err.message}")
    return lines, len(failed)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ferry leader-election", description=(
        "This tool attempts to elect a new leader for a set of topic partitions. "
        "The type of elections supported are preferred replicas and unclean replicas."))
    p.add_argument("--bootstrap-server", help="broker address(es) HOST:PORT[,HOST:PORT] (they name the controllers)")
    p.add_argument("--bootstrap-controller", help="controller address(es) HOST:PORT[,HOST:PORT]")
    p.add_argument("--election-type", type=str.lower, choices=["preferred", "unclean"],
                   help="preferred: the first live replica leads; unclean: any live replica of a leaderless partition")
    p.add_argument("--topic", help="the topic of the partition to elect for (with --partition)")
    p.add_argument("--partition", type=int, help="the partition to elect for (with --topic)")
    p.add_argument("--all-topic-partitions", action="store_true", help="elect for every partition that needs it")
    p.add_argument("--path-to-json-file",
                   help='a JSON file {"partitions": [{"topic": "t", "partition": 0}, ...]}')
    return p


async def run(args: argparse.Namespace, out: list[str]) -> int:
    missing = [n for n, v in (("bootstrap-server", args.bootstrap_server or args.bootstrap_controller),
                              ("election-type", args.election_type)) if not v]
    if missing:
        raise CommandError("Missing required option(s): " + ", ".join(missing))
    chosen = sum(1 for v in (args.topic, args.all_topic_partitions, args.path_to_json_file) if v)
    if chosen != 1:
        raise CommandError("One and only one of the following options is required: topic, all-topic-partitions, "
                           "path-to-json-file")
    if args.topic and args.partition is None:
        raise CommandError("Missing required option(s): partition")
    if args.partition is not None and not args.topic:
        raise CommandError("Option partition is only allowed if topic is used")
    partitions: list[TopicPartition] | None
    if args.path_to_json_file:
        try:
            # a command's input file, read before any request
            with open(args.path_to_json_file, encoding="utf-8") as f:  # noqa: ASYNC230
                partitions = parse_election_json(f.read())
        except OSError as exc:
            raise CommandError(f"Cannot read {args.path_to_json_file}: {exc.strerror}") from None
    elif args.topic:
        partitions = [TopicPartition(args.topic, args.partition)]
    else:
        partitions = None
    async with Admin(args.bootstrap_server, args.bootstrap_controller) as admin:
        results = await admin.elect_leaders(args.election_type, partitions)
    lines, failed = result_lines(args.election_type, results)
    out.extend(lines)
    if failed:
        first = next(e for e in results.values() if e is not None and e.error != ErrorCode.ELECTION_NOT_NEEDED)
        raise CommandError(f"{failed} replica(s) could not be elected", first.error)
    return 0


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    out: list[str] = []
    try:
        asyncio.run(run(args, out))
    except (CommandError, FerryError) as exc:
        if out:
            print("\n".join(out), flush=True)
        message = exc.message if isinstance(exc, FerryError) else str(exc)
        print(f"Error: {message} ({exc.error.name})", file=sys.stderr)
        return 1
    if out:
        print("\n".join(out))
    return 0
