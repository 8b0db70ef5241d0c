"""The registries of controller operations: name -> pure function.

A write operation is ``op(image, args, ctx) -> ControllerResult`` and runs on the active
controller; a read operation is ``op(image, args) -> reply`` and runs on any controller's
committed image. Both raise ``FerryError`` for bad input and change nothing. The names come from
the messages registry (``metadata_quorum/kernel/messages``), which gives each operation its
request and reply types.
"""
from __future__ import annotations

from typing import Any, Mapping

from metadata_quorum.controller_result import ControllerResult, OpContext, ReadOperation, WriteOperation
from metadata_quorum.kernel import messages as m
from metadata_quorum.kernel.errors import ErrorCode, FerryError
from metadata_quorum.image import MetadataImage
from metadata_quorum.ops import acls, cluster, configs, producer_ids, replication, scram, streams, topics

WRITE_OPERATIONS: dict[str, WriteOperation] = {
    m.REGISTER_BROKER.name: cluster.register_broker,
    m.UNREGISTER_BROKER.name: cluster.unregister_broker,
    m.BROKER_HEARTBEAT.name: cluster.broker_heartbeat,
    m.TICK.name: cluster.tick,
    m.REPORT_BROKER_DEAD.name: cluster.report_broker_dead,
    m.ALLOCATE_PRODUCER_IDS.name: producer_ids.allocate_producer_ids,
    m.CREATE_TOPICS.name: topics.create_topics,
    m.DELETE_TOPICS.name: topics.delete_topics,
    m.CREATE_PARTITIONS.name: topics.create_partitions,
    m.ALTER_PARTITION_REASSIGNMENTS.name: replication.alter_partition_reassignments,
    m.ELECT_LEADERS.name: replication.elect_leaders,
    m.ALTER_PARTITION.name: replication.alter_partition,
    m.CREATE_STREAM.name: streams.create_stream,
    m.OPEN_STREAM.name: streams.open_stream,
    m.CLOSE_STREAM.name: streams.close_stream,
    m.COMMIT_OBJECT.name: streams.commit_object,
    m.TRIM_STREAM.name: streams.trim_stream,
    m.COLLECT_GARBAGE.name: streams.collect_garbage,
    m.COMPACT_OBJECTS.name: streams.compact_objects,
    m.STREAM_RECOVERED.name: streams.stream_recovered,
    m.ALTER_CONFIGS.name: configs.alter_configs,
    m.PUT_KV.name: configs.put_kv,
    m.ALTER_USER_SCRAM_CREDENTIALS.name: scram.alter_user_scram_credentials,
    m.CREATE_ACLS.name: acls.create_acls,
    m.DELETE_ACLS.name: acls.delete_acls,
}

READ_OPERATIONS: dict[str, ReadOperation] = {
    m.DESCRIBE_CLUSTER.name: cluster.describe_cluster,
    m.DESCRIBE_TOPICS.name: topics.describe_topics,
    m.LIST_PARTITION_REASSIGNMENTS.name: replication.list_partition_reassignments,
    m.DESCRIBE_STREAM.name: streams.describe_stream,
    m.DESCRIBE_CONFIGS.name: configs.describe_configs,
    m.GET_KV.name: configs.get_kv,
    m.DESCRIBE_USER_SCRAM_CREDENTIALS.name: scram.describe_user_scram_credentials,
    m.DESCRIBE_ACLS.name: acls.describe_acls,
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
