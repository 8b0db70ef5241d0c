"""`ferry consume`: Kafka's console consumer — prints record values (optionally keys, offsets).

Without `--max-messages` it reads until no record arrives for `--timeout-ms`; it then prints
Kafka's "Processed a total of N messages" to stderr.
"""
from __future__ import annotations

import argparse
import asyncio
import sys
import time

from metadata_quorum.errors import FerryError
from tools.client import Consumer, TopicPartition
from tools.console_producer import parse_properties


async def consume(args: argparse.Namespace) -> int:
    props = parse_properties(args.property)
    show = {k: props.get(f"print.{k}", "false").lower() == "true" for k in ("key", "offset", "partition", "timestamp")}
    separator = props.get("key.separator", "\t")
    count = 0
    async with Consumer(args.bootstrap_server, max_wait_ms=min(args.timeout_ms, 500)) as consumer:
        tps = await _partitions(consumer, args.topic, args.partition)
        consumer.assign(tps)
        if args.offset not in ("earliest", "latest"):
            for tp in tps:
                consumer.seek(tp, int(args.offset))
        elif args.from_beginning or args.offset == "earliest":
            await consumer.seek_to_beginning()
        else:
            await consumer.seek_to_end()
        idle_since = time.monotonic()
        while args.max_messages is None or count < args.max_messages:
            records = await consumer.poll()
            if not records:
                if time.monotonic() - idle_since > args.timeout_ms / 1000:
                    break
                continue
            idle_since = time.monotonic()
            for r in records:
                parts = []
                if show["timestamp"]:
                    parts.append(f"CreateTime:{r.timestamp_ms}")
                if show["partition"]:
                    parts.append(f"Partition:{r.partition}")
                if show["offset"]:
                    parts.append(f"Offset:{r.offset}")
                if show["key"]:
                    parts.append("null" if r.key is None else r.key.decode(errors="replace"))
                parts.append("null" if r.value is None else r.value.decode(errors="replace"))
                print(separator.join(parts))
                count += 1
                if args.max_messages is not None and count >= args.max_messages:
                    break
    print(f"Processed a total of {count} messages", file=sys.stderr)
    return 0


async def _partitions(consumer: Consumer, topic: str, partition: int | None) -> list[TopicPartition]:
    assert consumer.metadata is not None
    tps = (await consumer.metadata.refresh()).topic_partitions(topic)
    if not tps:
        raise FerryError.from_json({"error": "UNKNOWN_TOPIC_OR_PARTITION", "message": f"topic {topic!r} does not exist"})
    if partition is not None:
        tps = [tp for tp in tps if tp.partition == partition]
        if not tps:
            raise FerryError.from_json({"error": "UNKNOWN_TOPIC_OR_PARTITION",
                                        "message": f"partition {partition} of topic {topic!r} does not exist"})
    return tps


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="ferry consume", description="consume records to stdout")
    p.add_argument("--bootstrap-server", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--partition", type=int)
    p.add_argument("--from-beginning", action="store_true")
    p.add_argument("--offset", default="latest", help="earliest, latest or an offset (needs --partition)")
    p.add_argument("--max-messages", type=int)
    p.add_argument("--timeout-ms", type=int, default=5000)
    p.add_argument("--property", action="append", default=[])
    args = p.parse_args(argv)
    if args.offset not in ("earliest", "latest"):
        if args.partition is None:
            print("Error: --offset N needs --partition", file=sys.stderr)
            return 1
        try:
            int(args.offset)
        except ValueError:
            print(f"Error: --offset must be earliest, latest or a number, got {args.offset!r}", file=sys.stderr)
            return 1
    try:
        return asyncio.run(consume(args))
    except FerryError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
