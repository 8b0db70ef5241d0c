"""``df.write.format("ferry")`` and ``writeStream.format("ferry")``: rows produced through the brokers.

Each Spark task produces its rows with Ferry's idempotent producer (acks=all, retried through
moves) and returns only when every row is acknowledged; a row that could not be written fails
the task with one error naming each failed partition, its Kafka error and how many rows it lost.
Columns are the Kafka sink's: ``value`` (binary or string, required), ``key`` (optional),
``topic`` (when the ``topic`` option is not set), ``partition`` (optional; else Kafka's
partitioner on the key).

Options: ``topic``, ``bootstrap.servers`` (brokers' HTTP addresses) or ``bootstrap.controller``.

A streaming query's micro-batch retried by Spark is produced again (at least once); an
aggregation written in ``complete`` mode is still exact as each key's last value. (Spark takes
``append`` and ``complete`` output modes from a Python sink, not ``update``.)
"""
from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Mapping, Sequence

from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage
from pyspark.sql.types import BinaryType, IntegerType, StringType, StructType

from metadata_quorum.kernel.errors import ErrorCode, FerryError


@dataclass(frozen=True)
class WriteOptions:
    topic: str | None
    bootstrap_servers: str | None
    bootstrap_controllers: str | None

    @classmethod
    def parse(cls, options: Mapping[str, str], schema: StructType) -> "WriteOptions":
        lower = {str(k).lower(): str(v) for k, v in options.items()}
        names = set(schema.fieldNames())
        out = cls(lower.get("topic") or None, lower.get("bootstrap.servers"), lower.get("bootstrap.controller"))
        if not (out.bootstrap_servers or out.bootstrap_controllers):
            raise FerryError(ErrorCode.INVALID_REQUEST, "option bootstrap.servers (or bootstrap.controller) is required")
        if "value" not in names:
            raise FerryError(ErrorCode.INVALID_REQUEST, "the rows need a value column (binary or string)")
        if out.topic is None and "topic" not in names:
            raise FerryError(ErrorCode.INVALID_REQUEST, "give the topic option or a topic column")
        allowed = {"value": (BinaryType, StringType), "key": (BinaryType, StringType), "topic": (StringType,),
                   "partition": (IntegerType,)}
        for field in schema.fields:
            kinds = allowed.get(field.name)
            if kinds is not None and not isinstance(field.dataType, kinds):
                raise FerryError(ErrorCode.INVALID_REQUEST, f"column {field.name} is {field.dataType.simpleString()}, "
                                 f"not {' or '.join(k().simpleString() for k in kinds)}")
        return out


@dataclass(frozen=True)
class Written(WriterCommitMessage):
    rows: int


def _bytes(value: Any) -> bytes | None:
    if value is None:
        return None
    return value.encode() if isinstance(value, str) else bytes(value)


def failed_partitions(failures: Iterable[tuple[str, int, FerryError]]) -> FerryError | None:
    """One error for a task's failed rows: per partition, its error and how many rows. Pure."""
    counted = Counter((topic, partition, exc.error) for topic, partition, exc in failures)
    if not counted:
        return None
    parts = "; ".join(f"{t}-{p}: {n} rows not written ({e.name})" for (t, p, e), n in sorted(
        counted.items(), key=lambda item: (item[0][0], item[0][1], item[0][2].name)))
    return FerryError(next(iter(counted))[2], parts)


async def produce_rows(options: WriteOptions, rows: Iterator[Any]) -> int:
    from kafka.partitioner.default import murmur2

    from tools.client import Producer

    brokers = options.bootstrap_servers
    if not brokers:
        from tools.admin import Admin

        async with Admin(None, options.bootstrap_controllers) as admin:
            brokers = ",".join(sorted((await admin.brokers()).values()))
    sent: list[tuple[str, int, asyncio.Future[Any]]] = []
    async with Producer(brokers, delivery_timeout_ms=120_000) as producer:
        for n, row in enumerate(rows):
            fields = row.asDict()
            topic = options.topic or fields.get("topic")
            if not topic:
                raise FerryError(ErrorCode.INVALID_REQUEST, "a row without a topic (and no topic option)")
            key, partition = _bytes(fields.get("key")), fields.get("partition")
            if partition is None:  # Kafka's partitioner: murmur2 of the key, else spread
                count = len(await producer.partitions_for(topic))
                partition = ((murmur2(key) & 0x7FFFFFFF) if key is not None else n) % count
            sent.append((topic, partition, await producer.send(topic, _bytes(fields.get("value")), key=key,
                                                               partition=partition)))
        await producer.flush()
    failures: list[tuple[str, int, FerryError]] = []
    for topic, partition, fut in sent:
        exc = fut.exception()
        if exc is not None:
            failures.append((topic, partition, exc if isinstance(exc, FerryError) else
                             FerryError(ErrorCode.UNKNOWN_SERVER_ERROR, str(exc))))
    failed = failed_partitions(failures)
    if failed is not None:
        raise failed
    return len(sent)


class FerryWriter(DataSourceWriter):
    def __init__(self, options: WriteOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        return Written(asyncio.run(produce_rows(self.options, iterator)))

    def commit(self, messages: Sequence[WriterCommitMessage | None]) -> None:
        """Every task's rows are acknowledged when it returns: nothing left to do."""

    def abort(self, messages: Sequence[WriterCommitMessage | None]) -> None:
        """Rows a failed job acknowledged stay written (no transaction spans a job's tasks)."""


class FerryStreamWriter(DataSourceStreamWriter):
    def __init__(self, options: WriteOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        return Written(asyncio.run(produce_rows(self.options, iterator)))

    def commit(self, messages: Sequence[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803 - Spark's name
        """The micro-batch's rows are acknowledged: nothing left to do."""

    def abort(self, messages: Sequence[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803 - Spark's name
        """Spark retries the micro-batch (at least once)."""


__all__ = ["FerryStreamWriter", "FerryWriter", "WriteOptions", "failed_partitions"]
