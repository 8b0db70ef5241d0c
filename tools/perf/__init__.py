"""`ferry perf NAME [--json]`: benchmarks, each beside a raw baseline measured in the same run.

Each benchmark is a module ``tools/perf/<name>.py`` with ``main(argv) -> int``; it prints a table,
or one JSON object with ``--json``.
"""
from __future__ import annotations

import importlib
import sys

BENCHMARKS: dict[str, str] = {
    "quorum": "commit latency, throughput and failover of the 3-controller metadata quorum",
    "streams": "stream storage: append, upload and read throughput against the S3 endpoint",
    "lifecycle": "an hour of steady produce, time compressed: objects per partition, GETs per 8 MiB read, PUTs per GiB",
    "s3-put": "the CPU one S3 PUT costs the uploading process: the brokers' boto3 client vs raw boto3",
    "move": "the six-step partition move, step by step",
    "rebalance": "the PySpark rebalancing planner",
    "kafka": "real Kafka clients: librdkafka produce vs HTTP vs raw TCP, end-to-end latency, move unavailability",
    "spark-read": "Spark reading a topic from S3 through the ferry data source vs a raw parallel S3 GET",
    "spark-stream": "a Structured Streaming query's freshness through moves: the ferry source vs Spark's Kafka source",
    "scale": "every partition of 1,000 to 10,000 moved at once: time, elections, fencings, records per move",
    "txn": "transactions: produce MB/s against idempotence, commit latency, moves with a transaction open; beside Apache Kafka",
    "console": "the web console in headless Chromium: first paint and per-update time with 10,000 partitions, 100 moves/s",
    "peer": "Apache Kafka (KRaft, from `make kafka-jars`) and Ferry side by side: moves by size, produce, CPU, e2e, kill -9",
}


def usage() -> str:
    width = max(len(n) for n in BENCHMARKS)
    lines = ["usage: ferry perf NAME [--json]", "", "benchmarks:"]
    lines += [f"  {name.ljust(width)}  {desc}" for name, desc in BENCHMARKS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print(usage())
        return 0 if args else 2
    name, rest = args[0], args[1:]
    if name not in BENCHMARKS:
        print(f"ferry perf: unknown benchmark {name!r}\n\n{usage()}", file=sys.stderr)
        return 2
    try:
        module = importlib.import_module(f"tools.perf.{name.replace('-', '_')}")
    except ModuleNotFoundError as e:
        if e.name == f"tools.perf.{name.replace('-', '_')}":
            print(f"ferry perf: benchmark {name!r} is not available in this build", file=sys.stderr)
            return 2
        raise
    return int(module.main(rest) or 0)
