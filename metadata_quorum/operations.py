"""The registries of controller operations: name -> pure function.

A write operation is ``op(image, args, ctx) -> ControllerResult`` and runs on the active
controller; a read operation is ``op(image, args) -> dict`` and runs on any controller's
committed image. Both raise ``FerryError`` for bad input and change nothing.
"""
from __future__ import annotations

from typing import Any, Mapping

from metadata_quorum.controller_result import ControllerResult, OpContext, ReadOperation, WriteOperation
from metadata_quorum.kernel.errors import ErrorCode, FerryError
from metadata_quorum.image import MetadataImage
from metadata_quorum.ops import cluster, configs, replication, streams, topics

WRITE_OPERATIONS: dict[str, WriteOperation] = {
    "register_broker": cluster.register_broker,
    "unregister_broker": cluster.unregister_broker,
    "broker_heartbeat": cluster.broker_heartbeat,
    "tick": cluster.tick,
    "report_broker_dead": cluster.report_broker_dead,
    "create_topics": topics.create_topics,
    "delete_topics": topics.delete_topics,
    "create_partitions": topics.create_partitions,
    "alter_partition_reassignments": replication.alter_partition_reassignments,
    "elect_leaders": replication.elect_leaders,
    "alter_partition": replication.alter_partition,
    "create_stream": streams.create_stream,
    "open_stream": streams.open_stream,
    "close_stream": streams.close_stream,
    "commit_object": streams.commit_object,
    "trim_stream": streams.trim_stream,
    "collect_garbage": streams.collect_garbage,
    "compact_objects": streams.compact_objects,
    "stream_recovered": streams.stream_recovered,
    "alter_configs": configs.alter_configs,
    "put_kv": configs.put_kv,
}

READ_OPERATIONS: dict[str, ReadOperation] = {
    "describe_cluster": cluster.describe_cluster,
    "describe_topics": topics.describe_topics,
    "list_partition_reassignments": replication.list_partition_reassignments,
    "describe_stream": streams.describe_stream,
    "describe_configs": configs.describe_configs,
    "get_kv": configs.get_kv,
}


def run_write(image: MetadataImage, op: str, args: Any, ctx: OpContext) -> ControllerResult:
    """Look up and run a write operation; unknown names and non-object args are INVALID_REQUEST."""
    fn = WRITE_OPERATIONS.get(op)
    if fn is None:
        raise FerryError(ErrorCode.INVALID_REQUEST, f"unknown write operation {op!r}")
    if args is None:
        args = {}
    if not isinstance(args, dict):
        raise FerryError(ErrorCode.INVALID_REQUEST, f"arguments of {op} must be a JSON object")
    return fn(image, args, ctx)


def run_read(image: MetadataImage, op: str, args: Any) -> Mapping[str, Any]:
    fn = READ_OPERATIONS.get(op)
    if fn is None:
        raise FerryError(ErrorCode.INVALID_REQUEST, f"unknown read operation {op!r}")
    if args is None:
        args = {}
    if not isinstance(args, dict):
        raise FerryError(ErrorCode.INVALID_REQUEST, f"arguments of {op} must be a JSON object")
    return fn(image, args)
