"""`ferry produce`: Kafka's console producer — one record per line of stdin.

`--property parse.key=true --property key.separator=:` splits each line into key and value. The
tool waits for every acknowledgement before exiting and fails (exit 1) if any record was not
acknowledged within `--delivery-timeout-ms`.
"""
from __future__ import annotations

import argparse
import asyncio
import sys
from typing import AsyncIterator

from metadata_quorum.kernel.errors import ErrorCode, FerryError
from tools.client import Producer


def parse_properties(items: list[str]) -> dict[str, str]:
    props: dict[str, str] = {}
    for item in items:
        if "=" not in item:
            raise SystemExit(f"Error: invalid property {item!r}: expected KEY=VALUE (INVALID_CONFIG)")
        k, v = item.split("=", 1)
        props[k.strip()] = v
    return props


async def stdin_lines() -> AsyncIterator[str]:
    """Lines of stdin as they are typed (Kafka's console producer sends each line at once)."""
    loop = asyncio.get_running_loop()
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line:
            return
        yield line.rstrip("\n")


async def produce(args: argparse.Namespace, lines: AsyncIterator[str]) -> int:
    props = parse_properties(args.property)
    parse_key = props.get("parse.key", "false").lower() == "true"
    separator = props.get("key.separator", "\t")
    failed = 0
    async with Producer(args.bootstrap_server, acks=args.acks, delivery_timeout_ms=args.delivery_timeout_ms,
                        linger_ms=args.linger_ms) as producer:
        futures = []
        if args.partition is not None:  # fail now, not after the delivery timeout, as Kafka does at send
            count = len(await producer.partitions_for(args.topic))
            if not 0 <= args.partition < count:
                raise FerryError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                 f"Partition {args.partition} of topic {args.topic} with partition count {count} "
                                 f"is not present in metadata")
        line_number = 0
        async for line in lines:
            line_number += 1
            key: bytes | None = None
            value = line
            if parse_key:
                if separator not in line:
                    print(f"Error: No key separator found on line number {line_number}: {line!r} (INVALID_RECORD)",
                          file=sys.stderr)
                    failed += 1
                    continue
                k, value = line.split(separator, 1)
                key = k.encode()
            futures.append(await producer.send(args.topic, value.encode(), key=key, partition=args.partition))
        for fut in futures:
            try:
                meta = await fut
                if args.print_offsets:
                    print(f"{meta.topic}-{meta.partition}@{meta.offset}")
            except FerryError as exc:
                failed += 1
                print(f"Error: {exc.message} ({exc.error.name})", file=sys.stderr)
    return 1 if failed else 0


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="ferry produce", description=(
        "Kafka's console producer: each line of stdin is one record. Exits 1 if a record was not acknowledged."))
    p.add_argument("--bootstrap-server", required=True, help="broker address(es) HOST:PORT[,HOST:PORT]")
    p.add_argument("--topic", required=True, help="the topic to produce to")
    p.add_argument("--partition", type=int, help="always this partition (default: by key, else at random)")
    p.add_argument("--acks", type=int, default=-1, choices=[-1, 0, 1],
                   help="-1/1: acknowledged once the broker's WAL is fsynced; 0: not waited for (default -1)")
    p.add_argument("--linger-ms", type=int, default=5, help="how long a batch waits for more records (default 5)")
    p.add_argument("--delivery-timeout-ms", type=int, default=30_000,
                   help="give up on a record not acknowledged within this time (default 30000)")
    p.add_argument("--property", action="append", default=[], metavar="KEY=VALUE",
                   help="parse.key=true and key.separator=SEP (default tab) read 'key SEP value' lines")
    p.add_argument("--print-offsets", action="store_true", help="print topic-partition@offset per record")
    args = p.parse_args(argv)
    try:
        return asyncio.run(produce(args, stdin_lines()))
    except FerryError as exc:
        print(f"Error: {exc.message} ({exc.error.name})", file=sys.stderr)
        return 1
