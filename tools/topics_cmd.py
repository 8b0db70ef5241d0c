"""`ferry topics --bootstrap-server HOST:PORT --create/--delete/--list/--describe` (Kafka's kafka-topics).

Flags and output follow `kafka-topics.sh`: `Created topic T.`, one name per line for `--list`, and
the `Topic: … TopicId: … PartitionCount: …` / per-partition lines for `--describe`. `--storage`
(s3 or local) is Ferry's own. `--bootstrap-server` reaches the controllers through a broker (its
`/v1/metadata` names them); `--bootstrap-controller` talks to them directly. A failure prints one
line, `Error while executing topic command : ERROR ERROR_NAME: MESSAGE`, exits 1 and changes nothing.
"""
from __future__ import annotations

import argparse
import asyncio
import re
import sys

from metadata_quorum.kernel.errors import ErrorCode, FerryError
from metadata_quorum.kernel.messages.topics import NewTopic, TopicDescription
from tools.admin import Admin


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ferry topics", description="Create, delete, list and describe topics.")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--bootstrap-server", help="comma-separated broker addresses HOST:PORT")
    where.add_argument("--bootstrap-controller", help="comma-separated controller addresses HOST:PORT")
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--create", action="store_true", help="create a new topic")
    action.add_argument("--delete", action="store_true", help="delete the topics --topic matches")
    action.add_argument("--list", action="store_true", help="list topic names")
    action.add_argument("--describe", action="store_true", help="describe topics and their partitions")
    action.add_argument("--alter", action="store_true",
                        help="change a topic's partition count (not supported: Ferry cannot add partitions)")
    p.add_argument("--topic", help="the topic (create: a name; other actions: a regular expression)")
    p.add_argument("--partitions", type=int, help="number of partitions (create; default 1)")
    p.add_argument("--replication-factor", type=int, help="replicas per partition (create; default 1)")
    p.add_argument("--replica-assignment", help="manual assignment: broker lists per partition, e.g. 1:2,2:3")
    p.add_argument("--config", action="append", default=[], metavar="KEY=VALUE", help="a topic config (repeatable)")
    p.add_argument("--storage", choices=["s3", "local"], default="s3", help="where partition data lives (default s3)")
    p.add_argument("--if-exists", action="store_true", help="delete/describe: no error if the topic is missing")
    p.add_argument("--if-not-exists", action="store_true", help="create: no error if the topic exists")
    p.add_argument("--exclude-internal", action="store_true", help="accepted for compatibility")
    p.add_argument("--timeout-ms", type=int, default=15_000, help="how long to wait for the controllers (ms)")
    return p


class TopicCommandError(Exception):
    def __init__(self, error: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error = error
        self.message = message


def parse_configs(items: list[str]) -> dict[str, str]:
    configs: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise TopicCommandError(ErrorCode.INVALID_CONFIG, f"Invalid config {item!r}: expected KEY=VALUE")
        configs[key.strip()] = value.strip()
    return configs


def parse_replica_assignment(text: str) -> dict[str, list[int]]:
    assignment: dict[str, list[int]] = {}
    for partition, part in enumerate(text.split(",")):
        try:
            assignment[str(partition)] = [int(b) for b in part.split(":") if b.strip() != ""]
        except ValueError:
            raise TopicCommandError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                    f"Invalid replica assignment {text!r}: broker ids must be integers") from None
    return assignment


def _matcher(pattern: str | None) -> re.Pattern[str] | None:
    if pattern is None:
        return None
    try:
        return re.compile(pattern)
    except re.error as e:
        raise TopicCommandError(ErrorCode.INVALID_REQUEST,
                                f"--topic {pattern!r} is not a valid regular expression: {e}") from e


async def _topic_names(client: Admin, pattern: str | None) -> list[str]:
    reply = await client.api.describe_topics({})
    names = sorted(t["name"] for t in reply.get("topics", []) if "error" not in t)
    regex = _matcher(pattern)
    return [n for n in names if regex is None or regex.fullmatch(n)]


def format_describe(topic: TopicDescription) -> list[str]:
    parts = topic.get("partitions", [])
    rf = max((len(p.get("reported_replicas", p.get("replicas", []))) for p in parts), default=0)
    configs = ",".join(f"{k}={v}" for k, v in sorted(topic.get("configs", {}).items()))
    lines = [f"Topic: {topic['name']}\tTopicId: {topic['topic_id']}\tPartitionCount: {len(parts)}\t"
             f"ReplicationFactor: {rf}\tConfigs: {configs}\tStorage: {topic.get('storage', 's3')}"]
    for p in parts:
        leader = "none" if p.get("leader", -1) < 0 else str(p["leader"])
        line = (f"\tTopic: {topic['name']}\tPartition: {p['partition']}\tLeader: {leader}\t"
                f"Replicas: {','.join(map(str, p.get('reported_replicas', p.get('replicas', []))))}\t"
                f"Isr: {','.join(map(str, p.get('reported_isr', p.get('isr', []))))}")
        if p.get("adding_replicas"):
            line += f"\tAdding Replicas: {','.join(map(str, p['adding_replicas']))}"
        if p.get("removing_replicas"):
            line += f"\tRemoving Replicas: {','.join(map(str, p['removing_replicas']))}"
        lines.append(line)
    return lines


async def _run(args: argparse.Namespace) -> list[str]:
    if args.alter:
        raise TopicCommandError(ErrorCode.INVALID_REQUEST,
                                "--alter is not supported: a topic's partition count is fixed when it is created")
    async with Admin(args.bootstrap_server, args.bootstrap_controller, timeout_ms=args.timeout_ms) as client:
        if args.create:
            return await _create(client, args)
        if args.list:
            return await _topic_names(client, args.topic)
        if args.delete:
            return await _delete(client, args)
        return await _describe(client, args)


async def _create(client: Admin, args: argparse.Namespace) -> list[str]:
    if not args.topic:
        raise TopicCommandError(ErrorCode.INVALID_REQUEST, "--topic is required to create a topic")
    item: NewTopic = {"name": args.topic, "storage": args.storage, "configs": parse_configs(args.config)}
    if args.replica_assignment:
        if args.partitions is not None or args.replication_factor is not None:
            raise TopicCommandError(ErrorCode.INVALID_REQUEST,
                                    "Option --replica-assignment can't be used with --partitions or --replication-factor")
        item["assignments"] = parse_replica_assignment(args.replica_assignment)
    else:
        item["num_partitions"] = 1 if args.partitions is None else args.partitions
        item["replication_factor"] = 1 if args.replication_factor is None else args.replication_factor
    reply = await client.api.create_topics({"topics": [item]})
    result = reply["topics"][0]
    if "error" in result:
        if result["error"] == ErrorCode.TOPIC_ALREADY_EXISTS.name and args.if_not_exists:
            return []
        raise TopicCommandError(ErrorCode.from_name(result["error"]), result.get("message", result["error"]))
    return [f"Created topic {args.topic}."]


async def _delete(client: Admin, args: argparse.Namespace) -> list[str]:
    if not args.topic:
        raise TopicCommandError(ErrorCode.INVALID_REQUEST, "--topic is required to delete topics")
    names = await _topic_names(client, args.topic)
    if not names:
        if args.if_exists:
            return []
        raise TopicCommandError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                f"Topic '{args.topic}' does not exist as expected")
    reply = await client.api.delete_topics({"names": names})
    errors = [t for t in reply.get("topics", []) if "error" in t]
    if errors:
        first = errors[0]
        raise TopicCommandError(ErrorCode.from_name(first["error"]), first.get("message", first["error"]))
    return []


async def _describe(client: Admin, args: argparse.Namespace) -> list[str]:
    names = await _topic_names(client, args.topic)
    if args.topic and not names and not args.if_exists:
        raise TopicCommandError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                f"Topic '{args.topic}' does not exist as expected")
    if not names:
        return []
    reply = await client.api.describe_topics({"names": names})
    lines: list[str] = []
    for topic in reply.get("topics", []):
        if "error" not in topic:
            lines += format_describe(topic)
    return lines


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        lines = asyncio.run(_run(args))
    except (TopicCommandError, FerryError) as e:
        print(f"Error while executing topic command : ERROR {e.error.name}: {e.message}", file=sys.stderr)
        return 1
    for line in lines:
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
