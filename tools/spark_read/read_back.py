"""Reading a topic back through the data source, for checks that every acknowledged record is
stored: wait until the acknowledged offsets are committed (the freshness bound), then collect
``(partition, offset, value)`` through Spark straight from S3."""
from __future__ import annotations

import asyncio
import time
from typing import Any, Mapping

from tools.spark_read.source import ReadOptions, describe_streams


async def wait_committed(options: Mapping[str, str], ends: Mapping[tuple[str, int], int],
                         timeout_s: float = 30.0, poll_s: float = 0.05) -> tuple[float, dict[tuple[str, int], int]]:
    """Seconds until every partition's committed end reaches ``ends`` (or ``timeout_s``), and the
    committed ends then. A partition that never gets there is left to the caller's check."""
    parsed = ReadOptions.parse(options)
    started = time.monotonic()
    while True:
        streams = await describe_streams(parsed)
        committed = {(s.topic, s.partition): s.end_offset for s in streams}
        if all(committed.get(tp, 0) >= end for tp, end in ends.items()) or time.monotonic() - started > timeout_s:
            return time.monotonic() - started, committed
        await asyncio.sleep(poll_s)


def read_records(spark: Any, options: Mapping[str, str], value_prefix_bytes: int | None = None
                 ) -> dict[int, list[tuple[int, bytes | None]]]:
    """Per partition, ``(offset, value)`` in offset order, read by the executors from S3 (Arrow to
    the driver: tens of thousands of records collect in a second). ``value_prefix_bytes``: only
    that many leading bytes of each value travel to the driver (a check that identifies records by
    a header needs no more; a 2-minute run of 8 KiB records otherwise fills the driver's heap)."""
    from pyspark.sql import functions as F

    from tools.spark_read import FORMAT_NAME, register

    register(spark)
    frame = spark.read.format(FORMAT_NAME).options(**dict(options)).load()
    value = F.col("value") if value_prefix_bytes is None else F.substring("value", 1, value_prefix_bytes).alias("value")
    frame = frame.select("partition", "offset", value)
    table = frame.toArrow()  # Spark 4: Arrow batches straight to the driver
    out: dict[int, list[tuple[int, bytes | None]]] = {}
    for partition, offset, value in zip(table.column("partition").to_pylist(), table.column("offset").to_pylist(),
                                        table.column("value").to_pylist(), strict=True):
        out.setdefault(int(partition), []).append((int(offset), value))
    for records in out.values():
        records.sort(key=lambda r: r[0])
    return out
