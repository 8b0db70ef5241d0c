"""`ferry consume`: Kafka's console consumer — prints record values (optionally keys, offsets).

Without `--max-messages` it reads until no record arrives for `--timeout-ms`; it then prints
Kafka's "Processed a total of N messages" to stderr.
"""
from __future__ import annotations

import argparse
import asyncio
import sys
import time

from metadata_quorum.kernel.errors import FerryError
from tools.client import Consumer, TopicPartition
from tools.console_producer import parse_properties


async def consume(args: argparse.Namespace) -> int:
    props = parse_properties(args.property)
    show = {k: props.get(f"print.{k}", "false").lower() == "true" for k in ("key", "offset", "partition", "timestamp")}
    separator = props.get("key.separator", "\t")
    count = 0
    async with Consumer(args.bootstrap_server, max_wait_ms=min(args.timeout_ms, 500),
                        skip_corrupt=args.skip_corrupt) as consumer:
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
            try:
                records = await consumer.poll()
            finally:
                _report_skips(consumer)
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
                args.count = count
                if args.max_messages is not None and count >= args.max_messages:
                    break
    print(f"Processed a total of {count} messages", file=sys.stderr)
    return 0


def _report_skips(consumer: Consumer) -> None:
    for skip in consumer.skipped:
        print(f"Skipped a corrupt batch of {skip.tp} at offsets {skip.base_offset}..{skip.next_offset - 1} "
              f"(CORRUPT_MESSAGE): {skip.reason}", file=sys.stderr)
    consumer.skipped.clear()


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
    p = argparse.ArgumentParser(prog="ferry consume", description=(
        "Kafka's console consumer: prints each record's value (and, with --property print.X=true, more)."))
    p.add_argument("--bootstrap-server", required=True, help="broker address(es) HOST:PORT[,HOST:PORT]")
    p.add_argument("--topic", required=True, help="the topic to read")
    p.add_argument("--partition", type=int, help="only this partition (default: all)")
    p.add_argument("--from-beginning", action="store_true", help="start at the earliest offset, not the latest")
    p.add_argument("--offset", default="latest", help="earliest, latest or an offset (needs --partition)")
    p.add_argument("--max-messages", type=int, help="exit after this many records")
    p.add_argument("--timeout-ms", type=int, default=5000,
                   help="exit when no record arrives for this long (default 5000)")
    p.add_argument("--skip-corrupt", action="store_true",
                   help="skip a corrupt stored batch (reported on stderr) instead of stopping at it")
    p.add_argument("--property", action="append", default=[], metavar="KEY=VALUE",
                   help="print.key, print.offset, print.partition, print.timestamp (=true); key.separator")
    args = p.parse_args(argv)
    if args.offset not in ("earliest", "latest"):
        if args.partition is None:
            print("Error: The partition is required when offset is specified. (INVALID_REQUEST)", file=sys.stderr)
            return 1
        try:
            int(args.offset)
        except ValueError:
            print(f"Error: --offset must be earliest, latest or a number, got {args.offset!r} (INVALID_REQUEST)",
                  file=sys.stderr)
            return 1
    args.count = 0
    try:
        return asyncio.run(consume(args))
    except FerryError as exc:
        corrupt = exc.error.name == "CORRUPT_MESSAGE"
        print(f"Error: {exc.message} ({exc.error.name}){' (--skip-corrupt reads past it)' if corrupt else ''}",
              file=sys.stderr)
        if corrupt:  # the records before the bad batch were printed
            print(f"Processed a total of {args.count} messages", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # Ctrl-C ends a console consumer; Kafka's still says how many it printed
        print(f"Processed a total of {args.count} messages", file=sys.stderr)
        return 130
