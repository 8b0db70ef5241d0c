"""`ferry key-counts`: the example job of the ``ferry`` data source — records per key of a topic.

Spark reads the topic's committed records straight from S3 (no broker is involved) and counts
them per key; the busiest keys are printed, or all of them as JSON. The same job works on any
Spark master (see docs/spark-read.md for the executors' S3 settings).
"""
from __future__ import annotations

import argparse
import json
import sys
import warnings
from typing import Any


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ferry key-counts", description=__doc__.splitlines()[0])
    p.add_argument("--topic", required=True, help="topic(s) to read, comma-separated")
    p.add_argument("--bootstrap-controller", help="controller address(es), host:port[,host:port]")
    p.add_argument("--bootstrap-server", help="broker address(es), instead of the controllers'")
    p.add_argument("--s3-endpoint", help="S3 endpoint URL of the cluster's bucket (default: the cluster's)")
    p.add_argument("--bucket", help="bucket of the stream objects (default: the cluster's)")
    p.add_argument("--s3-region", help="region of the bucket (default: the cluster's)")
    p.add_argument("--starting-offsets", default="earliest", help="earliest, or JSON as Spark's Kafka source")
    p.add_argument("--ending-offsets", default="latest", help="latest, or JSON as Spark's Kafka source")
    p.add_argument("--top", type=int, default=20, help="print the N busiest keys (default 20)")
    p.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
    p.add_argument("--json", action="store_true", help="print every key's count as one JSON object")
    return p


def key_counts(spark: Any, options: dict[str, str]) -> tuple[list[tuple[str | None, int]], int]:
    """Per-key counts (keys decoded as UTF-8, undecodable bytes escaped), busiest first, and the total."""
    from pyspark.sql import functions as F

    from tools.spark_read import FORMAT_NAME, register

    register(spark)
    frame = spark.read.format(FORMAT_NAME).options(**options).load()
    counted = (frame.groupBy("key").agg(F.count(F.lit(1)).alias("records"))
               .orderBy(F.col("records").desc(), F.col("key").asc_nulls_first()).collect())
    rows = [(None if r["key"] is None else bytes(r["key"]).decode("utf-8", "backslashreplace"), int(r["records"]))
            for r in counted]
    return rows, sum(n for _k, n in rows)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if not (args.bootstrap_controller or args.bootstrap_server):
        print("Error: INVALID_REQUEST: give --bootstrap-controller or --bootstrap-server", file=sys.stderr)
        return 1
    warnings.filterwarnings("ignore", category=FutureWarning)
    options = {"topic": args.topic, "startingOffsets": args.starting_offsets, "endingOffsets": args.ending_offsets}
    for name, value in (("bootstrap.controller", args.bootstrap_controller),
                        ("bootstrap.servers", args.bootstrap_server), ("s3.endpoint", args.s3_endpoint),
                        ("s3.bucket", args.bucket), ("s3.region", args.s3_region)):
        if value:
            options[name] = value
    from tools.rebalance.spark_session import spark_session

    spark = spark_session(args.master, app_name="ferry-key-counts")
    try:
        rows, total = key_counts(spark, options)
    except Exception as exc:  # Spark wraps the data source's FerryError
        from tools.spark_read.source import unwrap_spark_error

        error = unwrap_spark_error(exc)
        if error is None:
            raise
        print(f"Error: {error.error.name}: {error.message}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps({"topic": args.topic, "records": total, "keys": len(rows),
                          "counts": [{"key": k, "records": n} for k, n in rows]}))
        return 0
    print(f"{total} records, {len(rows)} distinct keys in {args.topic}")
    width = max([len(str(k)) for k, _n in rows[:args.top]] + [3])
    print(f"{'key'.ljust(width)}  records")
    for key, n in rows[:args.top]:
        print(f"{('(null)' if key is None else key).ljust(width)}  {n}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
