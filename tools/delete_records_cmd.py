"""`ferry delete-records --bootstrap-server URL --offset-json-file FILE`: Kafka's DeleteRecordsCommand.

The file is Kafka's: ``{"partitions": [{"topic": "t", "partition": 0, "offset": 10}], "version": 1}``
(offset -1 = the high watermark). Each partition's records below its offset are deleted: the
leader moves the log start offset through the stream's trim. The output is Kafka's:

    Executing records delete operation
    Records delete operation completed:
    partition: t-0	low_watermark: 10
    partition: t-1	error: OFFSET_OUT_OF_RANGE: ...

A malformed file is refused before anything is sent (nothing changes).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

from metadata_quorum.kernel.errors import ErrorCode, FerryError
from metadata_quorum.kernel.validation import INT32_MAX, as_int, as_list, as_mapping, as_str
from tools.admin import Admin
from tools.client import TopicPartition
from tools.reassign_cmd import CommandError

MAX_ATTEMPTS = 3  # a leader that moved answers NOT_LEADER_OR_FOLLOWER: ask the new one


def parse_offset_json(text: str) -> list[tuple[TopicPartition, int]]:
    """Kafka's offset JSON file, strictly: a partition named twice is an error, as in Kafka."""
    try:
        body = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CommandError(f"the offset JSON file is not JSON: {exc}") from None
    try:
        top = as_mapping(body, "the offset JSON file")
        version = top.get("version", 1)
        if version != 1:
            raise CommandError(f"unsupported offset JSON version {version!r}; expected 1")
        out: list[tuple[TopicPartition, int]] = []
        for raw in as_list(top.get("partitions"), "partitions", 1_000_000):
            entry = as_mapping(raw, "partitions[]")
            tp = TopicPartition(as_str(entry.get("topic"), "partitions[].topic", 249),
                                as_int(entry.get("partition"), "partitions[].partition", 0, INT32_MAX))
            out.append((tp, as_int(entry.get("offset"), "partitions[].offset", -1)))
    except FerryError as exc:
        raise CommandError(exc.message) from None
    seen = [tp for tp, _ in out]
    duplicates = sorted({f"{tp.topic}-{tp.partition}" for tp in seen if seen.count(tp) > 1})
    if duplicates:
        raise CommandError(f"Offset json file contains duplicate topic partitions: {','.join(duplicates)}")
    if not out:
        raise CommandError("the offset JSON file names no partition")
    return out


async def delete_records(admin: Admin, wanted: list[tuple[TopicPartition, int]]) -> dict[TopicPartition, Any]:
    """Low watermark (int) or FerryError per partition, each sent to its leader."""
    results: dict[TopicPartition, Any] = {}
    pending = dict(wanted)
    for attempt in range(MAX_ATTEMPTS):
        meta = await admin.broker_metadata()
        by_leader: dict[str, list[tuple[TopicPartition, int]]] = {}
        for tp, offset in pending.items():
            info = meta.partitions.get(tp)
            if info is None:
                results[tp] = FerryError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{tp.topic}-{tp.partition} does not exist")
            elif info.leader < 0 or info.leader not in meta.brokers:
                results[tp] = FerryError(ErrorCode.LEADER_NOT_AVAILABLE, f"{tp.topic}-{tp.partition} has no leader")
            else:
                by_leader.setdefault(meta.brokers[info.leader], []).append((tp, offset))
        retry: dict[TopicPartition, int] = {}
        for url, items in by_leader.items():
            body = {"partitions": [{"topic": tp.topic, "partition": tp.partition, "offset": o} for tp, o in items]}
            reply = await admin.http_post(f"{url}/v1/delete-records", body)
            for (tp, offset), res in zip(items, reply["partitions"], strict=True):
                if res.get("error") is None:
                    results[tp] = int(res["low_watermark"])
                    continue
                error = FerryError(ErrorCode[res["error"]], str(res.get("message", "")))
                results[tp] = error
                if error.error is ErrorCode.NOT_LEADER_OR_FOLLOWER and attempt + 1 < MAX_ATTEMPTS:
                    retry[tp] = offset
        if not retry:
            break
        pending = retry
        await asyncio.sleep(0.2 * (attempt + 1))
    return results


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ferry delete-records",
                                description="Delete the records of partitions below the given offsets.")
    p.add_argument("--bootstrap-server", required=True, help="broker address(es) HOST:PORT[,HOST:PORT]")
    p.add_argument("--offset-json-file", required=True,
                   help='Kafka\'s format: {"partitions": [{"topic": "t", "partition": 0, "offset": 10}], "version": 1}')
    return p


async def run(args: argparse.Namespace, out: list[str]) -> bool:
    try:
        # a command's input file, read before any request
        with open(args.offset_json_file, encoding="utf-8") as f:  # noqa: ASYNC230
            wanted = parse_offset_json(f.read())
    except OSError as exc:
        raise CommandError(f"cannot read {args.offset_json_file}: {exc.strerror}") from None
    async with Admin(args.bootstrap_server) as admin:
        out.append("Executing records delete operation")
        results = await delete_records(admin, wanted)
    out.append("Records delete operation completed:")
    ok = True
    for tp, _offset in wanted:
        res = results[tp]
        if isinstance(res, FerryError):
            ok = False
            out.append(f"partition: {tp.topic}-{tp.partition}\terror: {res.error.name}: {res.message}")
        else:
            out.append(f"partition: {tp.topic}-{tp.partition}\tlow_watermark: {res}")
    return ok


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    out: list[str] = []
    try:
        ok = asyncio.run(run(args, out))
    except (CommandError, FerryError) as exc:
        if out:
            print("\n".join(out), flush=True)
        print(f"Error: {exc.message if isinstance(exc, FerryError) else exc} ({exc.error.name})", file=sys.stderr)
        return 1
    print("\n".join(out))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
