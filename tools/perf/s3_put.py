"""`ferry perf s3-put [--json]`: the CPU one S3 PUT costs the process that sends it.

A broker uploads from its own process, on the cores it serves produce requests with, so every
millisecond of a PUT's client-side CPU is taken from appends. This measures the thread CPU per
PUT (``time.thread_time``: botocore runs on the calling thread) of the client brokers use
(``stream_storage.s3_store.make_s3_client``: payload unsigned, checksums only where required,
bodies sent whole) beside a raw boto3 client with its defaults, PUTting the same bytes to the same
endpoint in interleaved rounds (medians), at 64 KiB, 1 MiB and 8 MiB (the uploader's default
object size). The endpoint is a ``ferry s3 serve`` process started here unless ``--endpoint`` is
given. Wall time per PUT is reported too; it includes the server's work.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Any, Callable

import boto3

from stream_storage.config import S3Config
from stream_storage.s3_server import S3Server
from stream_storage.s3_store import DUMMY_ACCESS_KEY, DUMMY_SECRET_KEY, make_s3_client

KiB = 1024
MiB = 1024 * KiB
SIZES = (64 * KiB, 1 * MiB, 8 * MiB)


def raw_client(endpoint_url: str, region: str) -> Any:
    """boto3 as a user gets it: defaults but for the endpoint, region and (dummy) credentials."""
    return boto3.client("s3", endpoint_url=endpoint_url, region_name=region,
                        aws_access_key_id=DUMMY_ACCESS_KEY, aws_secret_access_key=DUMMY_SECRET_KEY)


def cpu_per_put_ms(put: Callable[[str], Any], count: int, label: str) -> tuple[float, float]:
    """(thread CPU ms, wall ms) per call of ``put`` over ``count`` calls."""
    cpu0, wall0 = time.thread_time(), time.perf_counter()
    for i in range(count):
        put(f"perf-s3-put/{os.getpid()}/{label}/{i}")
    return ((time.thread_time() - cpu0) * 1000 / count, (time.perf_counter() - wall0) * 1000 / count)


def _putter(client: Any, bucket: str, body: bytes) -> Callable[[str], Any]:
    def put(key: str) -> Any:
        return client.put_object(Bucket=bucket, Key=key, Body=body)
    return put


def measure(endpoint_url: str, bucket: str, region: str, rounds: int) -> dict[str, Any]:
    ferry = make_s3_client(S3Config(endpoint_url=endpoint_url, bucket=bucket, region=region))
    raw = raw_client(endpoint_url, region)
    out: dict[str, Any] = {"sizes": {}}
    for size in SIZES:
        body = os.urandom(size)
        count = max(4, min(40, (64 * MiB) // size))
        samples: dict[str, list[tuple[float, float]]] = {"ferry": [], "raw": []}
        for _name, client in (("ferry", ferry), ("raw", raw)):
            client.put_object(Bucket=bucket, Key="perf-s3-put/warm", Body=body)
        for r in range(rounds):  # interleaved: the machine is shared and its speed drifts
            for name, client in (("ferry", ferry), ("raw", raw)):
                samples[name].append(cpu_per_put_ms(_putter(client, bucket, body), count, f"{name}-{r}"))
        ferry_cpu = statistics.median(s[0] for s in samples["ferry"])
        raw_cpu = statistics.median(s[0] for s in samples["raw"])
        out["sizes"][str(size)] = {
            "ferry_cpu_ms_per_put": round(ferry_cpu, 3), "raw_cpu_ms_per_put": round(raw_cpu, 3),
            "ferry_vs_raw_cpu": round(ferry_cpu / raw_cpu, 3) if raw_cpu else None,
            "ferry_wall_ms_per_put": round(statistics.median(s[1] for s in samples["ferry"]), 2),
            "raw_wall_ms_per_put": round(statistics.median(s[1] for s in samples["raw"]), 2),
            "puts_per_round": count}
    largest = out["sizes"][str(SIZES[-1])]
    out["ferry_cpu_ms_per_mib"] = round(largest["ferry_cpu_ms_per_put"] * MiB / SIZES[-1], 3)
    out["raw_cpu_ms_per_mib"] = round(largest["raw_cpu_ms_per_put"] * MiB / SIZES[-1], 3)
    out["rounds"] = rounds
    out["load_average_1m"] = os.getloadavg()[0]
    return out


def print_table(out: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="ferry perf s3-put: thread CPU per PUT (ms)")
    for col in ("size", "ferry client", "raw boto3", "ferry / raw", "wall ferry / raw (ms)"):
        table.add_column(col)
    for size, row in out["sizes"].items():
        n = int(size)
        label = f"{n // MiB} MiB" if n >= MiB else f"{n // KiB} KiB"
        table.add_row(label, f"{row['ferry_cpu_ms_per_put']:.2f}", f"{row['raw_cpu_ms_per_put']:.2f}",
                      f"{row['ferry_vs_raw_cpu']:.2f}", f"{row['ferry_wall_ms_per_put']:.1f} / {row['raw_wall_ms_per_put']:.1f}")
    console = Console()
    console.print(table)
    console.print(f"at 8 MiB: ferry {out['ferry_cpu_ms_per_mib']:.2f} ms, raw boto3 {out['raw_cpu_ms_per_mib']:.2f} ms "
                  f"of CPU per MiB uploaded; load average {out['load_average_1m']:.1f}")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="ferry perf s3-put", description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--endpoint", default=None, help="S3 endpoint URL (default: start a moto server)")
    parser.add_argument("--bucket", default="ferry", help="an existing bucket at --endpoint")
    parser.add_argument("--region", default="us-east-1")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (median), 1..15")
    args = parser.parse_args(argv)
    if not 1 <= args.rounds <= 15:
        print(f"Error: --rounds must be within 1..15, got {args.rounds} (INVALID_REQUEST)", file=sys.stderr)
        return 2
    if args.endpoint is None:
        with S3Server(bucket=args.bucket) as server:
            out = measure(server.endpoint_url, server.bucket, args.region, args.rounds)
    else:
        out = measure(args.endpoint, args.bucket, args.region, args.rounds)
    if args.json:
        print(json.dumps(out, sort_keys=True))
    else:
        print_table(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
