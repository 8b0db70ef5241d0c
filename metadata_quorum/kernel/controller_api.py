"""The typed controller facade: one method per operation, a typed request in, a typed reply out.

Kafka's clients call generated request and response classes; Ferry's components call these
methods instead of naming an operation by string with a ``dict`` of arguments. The facade runs
over any transport with ``write(op, args)`` / ``read(op, args)`` coroutines: the HTTP
``ControllerClient``, the broker's write batcher, the Kafka listener's forwarder, or an
in-process ``LocalController`` through ``metadata_quorum.local_controller.LocalTransport``.

``ControllerWrites`` holds the write operations and needs only a :class:`WriteTransport`
(a batcher, the heartbeat thread's connection); ``ControllerApi`` adds the reads. Replies are
typed as the operation's reply type; their checking stays where it was (callers that must not
trust a key use ``.get``), since the wire is JSON.
"""
from __future__ import annotations

from typing import Any, Awaitable, Callable, Mapping, Protocol, cast

from metadata_quorum.kernel import messages as m
from metadata_quorum.kernel.messages import Operation, ReplyT, RequestT
from metadata_quorum.kernel.messages import cluster, configs, replication, security, streams, topics


class WriteTransport(Protocol):
    async def write(self, op: str, args: Mapping[str, Any], timeout_ms: int | None = None) -> Mapping[str, Any]:
        """Run write operation ``op`` on the active controller; its reply. ``timeout_ms`` None:
        the transport's own budget."""
        ...


class ControllerTransport(WriteTransport, Protocol):
    async def read(self, op: str, args: Mapping[str, Any], timeout_ms: int | None = None) -> Mapping[str, Any]:
        """Run read operation ``op`` on a committed image; its reply."""
        ...


class WriteFunction:
    """A write transport from a plain ``write(op, args)`` coroutine function (a connection made on
    another thread, a scripted controller in a test); per-call timeouts do not apply to it."""

    def __init__(self, write: Callable[[str, Mapping[str, Any]], Awaitable[Mapping[str, Any]]]) -> None:
        self._write_fn = write

    async def write(self, op: str, args: Mapping[str, Any], timeout_ms: int | None = None) -> Mapping[str, Any]:
        return await self._write_fn(op, args)


class SplitTransport:
    """Writes through one transport (the broker's batcher), reads through another (its client)."""

    def __init__(self, writes: WriteTransport, reads: ControllerTransport) -> None:
        self.writes = writes
        self.reads = reads

    async def write(self, op: str, args: Mapping[str, Any], timeout_ms: int | None = None) -> Mapping[str, Any]:
        return await self.writes.write(op, args, timeout_ms)

    async def read(self, op: str, args: Mapping[str, Any], timeout_ms: int | None = None) -> Mapping[str, Any]:
        return await self.reads.read(op, args, timeout_ms)


class ControllerWrites:
    """The controller's write operations over a :class:`WriteTransport`."""

    def __init__(self, transport: WriteTransport) -> None:
        self.transport = transport

    async def _write(self, op: Operation[RequestT, ReplyT], request: RequestT, timeout_ms: int | None) -> ReplyT:
        # without a timeout of its own the call is ``write(op, args)``, as a transport's plain form
        reply = await (self.transport.write(op.name, request) if timeout_ms is None
                       else self.transport.write(op.name, request, timeout_ms))
        return cast(ReplyT, reply)

    async def register_broker(self, request: cluster.RegisterBrokerRequest,
                              timeout_ms: int | None = None) -> cluster.RegisterBrokerReply:
        return await self._write(m.REGISTER_BROKER, request, timeout_ms)

    async def unregister_broker(self, request: cluster.UnregisterBrokerRequest,
                                timeout_ms: int | None = None) -> cluster.UnregisterBrokerReply:
        return await self._write(m.UNREGISTER_BROKER, request, timeout_ms)

    async def broker_heartbeat(self, request: cluster.BrokerHeartbeatRequest,
                               timeout_ms: int | None = None) -> cluster.BrokerHeartbeatReply:
        return await self._write(m.BROKER_HEARTBEAT, request, timeout_ms)

    async def tick(self, request: cluster.TickRequest, timeout_ms: int | None = None) -> cluster.TickReply:
        return await self._write(m.TICK, request, timeout_ms)

    async def report_broker_dead(self, request: cluster.ReportBrokerDeadRequest,
                                 timeout_ms: int | None = None) -> cluster.ReportBrokerDeadReply:
        return await self._write(m.REPORT_BROKER_DEAD, request, timeout_ms)

    async def create_topics(self, request: topics.CreateTopicsRequest,
                            timeout_ms: int | None = None) -> topics.CreateTopicsReply:
        return await self._write(m.CREATE_TOPICS, request, timeout_ms)

    async def delete_topics(self, request: topics.DeleteTopicsRequest,
                            timeout_ms: int | None = None) -> topics.DeleteTopicsReply:
        return await self._write(m.DELETE_TOPICS, request, timeout_ms)

    async def create_partitions(self, request: topics.CreatePartitionsRequest,
                                timeout_ms: int | None = None) -> topics.CreatePartitionsReply:
        return await self._write(m.CREATE_PARTITIONS, request, timeout_ms)

    async def alter_partition_reassignments(self, request: replication.AlterPartitionReassignmentsRequest,
                                            timeout_ms: int | None = None) -> replication.AlterPartitionReassignmentsReply:
        return await self._write(m.ALTER_PARTITION_REASSIGNMENTS, request, timeout_ms)

    async def elect_leaders(self, request: replication.ElectLeadersRequest,
                            timeout_ms: int | None = None) -> replication.ElectLeadersReply:
        return await self._write(m.ELECT_LEADERS, request, timeout_ms)

    async def alter_partition(self, request: replication.AlterPartitionRequest,
                              timeout_ms: int | None = None) -> replication.AlterPartitionReply:
        return await self._write(m.ALTER_PARTITION, request, timeout_ms)

    async def create_stream(self, request: streams.CreateStreamRequest,
                            timeout_ms: int | None = None) -> streams.CreateStreamReply:
        return await self._write(m.CREATE_STREAM, request, timeout_ms)

    async def open_stream(self, request: streams.OpenStreamRequest,
                          timeout_ms: int | None = None) -> streams.OpenStreamReply:
        return await self._write(m.OPEN_STREAM, request, timeout_ms)

    async def close_stream(self, request: streams.CloseStreamRequest,
                           timeout_ms: int | None = None) -> streams.CloseStreamReply:
        return await self._write(m.CLOSE_STREAM, request, timeout_ms)

    async def commit_object(self, request: streams.CommitObjectRequest,
                            timeout_ms: int | None = None) -> streams.CommitObjectReply:
        return await self._write(m.COMMIT_OBJECT, request, timeout_ms)

    async def trim_stream(self, request: streams.TrimStreamRequest,
                          timeout_ms: int | None = None) -> streams.TrimStreamReply:
        return await self._write(m.TRIM_STREAM, request, timeout_ms)

    async def collect_garbage(self, request: streams.CollectGarbageRequest,
                              timeout_ms: int | None = None) -> streams.CollectGarbageReply:
        return await self._write(m.COLLECT_GARBAGE, request, timeout_ms)

    async def compact_objects(self, request: streams.CompactObjectsRequest,
                              timeout_ms: int | None = None) -> streams.CompactObjectsReply:
        return await self._write(m.COMPACT_OBJECTS, request, timeout_ms)

    async def stream_recovered(self, request: streams.StreamRecoveredRequest,
                               timeout_ms: int | None = None) -> streams.StreamRecoveredReply:
        return await self._write(m.STREAM_RECOVERED, request, timeout_ms)

    async def alter_configs(self, request: configs.AlterConfigsRequest,
                            timeout_ms: int | None = None) -> configs.AlterConfigsReply:
        return await self._write(m.ALTER_CONFIGS, request, timeout_ms)

    async def put_kv(self, request: configs.PutKvRequest, timeout_ms: int | None = None) -> configs.PutKvReply:
        return await self._write(m.PUT_KV, request, timeout_ms)

    async def allocate_producer_ids(self, request: cluster.AllocateProducerIdsRequest,
                                    timeout_ms: int | None = None) -> cluster.AllocateProducerIdsReply:
        return await self._write(m.ALLOCATE_PRODUCER_IDS, request, timeout_ms)

    async def create_acls(self, request: security.CreateAclsRequest,
                          timeout_ms: int | None = None) -> security.CreateAclsReply:
        return await self._write(m.CREATE_ACLS, request, timeout_ms)

    async def delete_acls(self, request: security.DeleteAclsRequest,
                          timeout_ms: int | None = None) -> security.DeleteAclsReply:
        return await self._write(m.DELETE_ACLS, request, timeout_ms)

    async def alter_user_scram_credentials(self, request: security.AlterUserScramCredentialsRequest,
                                           timeout_ms: int | None = None
                                           ) -> security.AlterUserScramCredentialsReply:
        return await self._write(m.ALTER_USER_SCRAM_CREDENTIALS, request, timeout_ms)


class ControllerApi(ControllerWrites):
    """Every controller operation, reads too, over a :class:`ControllerTransport`."""

    transport: ControllerTransport

    def __init__(self, transport: ControllerTransport) -> None:
        super().__init__(transport)
        self.transport = transport

    async def _read(self, op: Operation[RequestT, ReplyT], request: RequestT, timeout_ms: int | None) -> ReplyT:
        reply = await (self.transport.read(op.name, request) if timeout_ms is None
                       else self.transport.read(op.name, request, timeout_ms))
        return cast(ReplyT, reply)

    async def describe_cluster(self, request: cluster.DescribeClusterRequest,
                               timeout_ms: int | None = None) -> cluster.DescribeClusterReply:
        return await self._read(m.DESCRIBE_CLUSTER, request, timeout_ms)

    async def describe_topics(self, request: topics.DescribeTopicsRequest,
                              timeout_ms: int | None = None) -> topics.DescribeTopicsReply:
        return await self._read(m.DESCRIBE_TOPICS, request, timeout_ms)

    async def list_partition_reassignments(self, request: replication.ListPartitionReassignmentsRequest,
                                           timeout_ms: int | None = None) -> replication.ListPartitionReassignmentsReply:
        return await self._read(m.LIST_PARTITION_REASSIGNMENTS, request, timeout_ms)

    async def describe_stream(self, request: streams.DescribeStreamRequest,
                              timeout_ms: int | None = None) -> streams.DescribeStreamReply:
        return await self._read(m.DESCRIBE_STREAM, request, timeout_ms)

    async def describe_configs(self, request: configs.DescribeConfigsRequest,
                               timeout_ms: int | None = None) -> configs.DescribeConfigsReply:
        return await self._read(m.DESCRIBE_CONFIGS, request, timeout_ms)

    async def get_kv(self, request: configs.GetKvRequest, timeout_ms: int | None = None) -> configs.GetKvReply:
        return await self._read(m.GET_KV, request, timeout_ms)

    async def describe_acls(self, request: security.DescribeAclsRequest,
                            timeout_ms: int | None = None) -> security.DescribeAclsReply:
        return await self._read(m.DESCRIBE_ACLS, request, timeout_ms)

    async def describe_user_scram_credentials(self, request: security.DescribeUserScramCredentialsRequest,
                                              timeout_ms: int | None = None
                                              ) -> security.DescribeUserScramCredentialsReply:
        return await self._read(m.DESCRIBE_USER_SCRAM_CREDENTIALS, request, timeout_ms)
