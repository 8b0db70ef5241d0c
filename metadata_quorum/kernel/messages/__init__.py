"""The controller operations' messages: a request and a reply type per operation, and the registry.

As Kafka generates a request and a response data class per API, every controller operation has
a ``TypedDict`` for its request and one for its reply, in modules by area mirroring
``metadata_quorum/ops/``. The wire stays JSON; the types let mypy check every key an operation
writes into its reply and every key a caller reads from it, across the process boundary.
Operations still parse their requests strictly (the wire is untrusted): a request type says what
a well-behaved caller sends, not what the controller accepts without checking.

:data:`OPERATIONS` names each operation once, with its kind and its two types; the typed facade
(``kernel/controller_api.py``) and the controller's registries (``metadata_quorum/operations.py``)
are checked against it (tests/quorum/test_messages.py). This package sits in the kernel floor,
importing nothing but ``typing``, so that stream storage and the broker share the contract.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, Literal, Mapping, TypeVar

from metadata_quorum.kernel.messages import cluster, configs, replication, security, streams, topics

RequestT = TypeVar("RequestT", bound=Mapping[str, Any])
ReplyT = TypeVar("ReplyT", bound=Mapping[str, Any])
Kind = Literal["write", "read"]


@dataclass(frozen=True)
class Operation(Generic[RequestT, ReplyT]):
    """One controller operation: its name on the wire, whether it writes, and its message types."""

    name: str
    kind: Kind
    request: type[RequestT]
    reply: type[ReplyT]


# -- broker lifecycle -------------------------------------------------------------------------------
REGISTER_BROKER = Operation("register_broker", "write", cluster.RegisterBrokerRequest, cluster.RegisterBrokerReply)
UNREGISTER_BROKER = Operation("unregister_broker", "write", cluster.UnregisterBrokerRequest,
                              cluster.UnregisterBrokerReply)
BROKER_HEARTBEAT = Operation("broker_heartbeat", "write", cluster.BrokerHeartbeatRequest, cluster.BrokerHeartbeatReply)
TICK = Operation("tick", "write", cluster.TickRequest, cluster.TickReply)
REPORT_BROKER_DEAD = Operation("report_broker_dead", "write", cluster.ReportBrokerDeadRequest,
                               cluster.ReportBrokerDeadReply)
ALLOCATE_PRODUCER_IDS = Operation("allocate_producer_ids", "write", cluster.AllocateProducerIdsRequest,
                                  cluster.AllocateProducerIdsReply)
DESCRIBE_CLUSTER = Operation("describe_cluster", "read", cluster.DescribeClusterRequest, cluster.DescribeClusterReply)
# -- topics -----------------------------------------------------------------------------------------
CREATE_TOPICS = Operation("create_topics", "write", topics.CreateTopicsRequest, topics.CreateTopicsReply)
DELETE_TOPICS = Operation("delete_topics", "write", topics.DeleteTopicsRequest, topics.DeleteTopicsReply)
CREATE_PARTITIONS = Operation("create_partitions", "write", topics.CreatePartitionsRequest,
                              topics.CreatePartitionsReply)
DESCRIBE_TOPICS = Operation("describe_topics", "read", topics.DescribeTopicsRequest, topics.DescribeTopicsReply)
# -- replication ------------------------------------------------------------------------------------
ALTER_PARTITION_REASSIGNMENTS = Operation("alter_partition_reassignments", "write",
                                          replication.AlterPartitionReassignmentsRequest,
                                          replication.AlterPartitionReassignmentsReply)
LIST_PARTITION_REASSIGNMENTS = Operation("list_partition_reassignments", "read",
                                         replication.ListPartitionReassignmentsRequest,
                                         replication.ListPartitionReassignmentsReply)
ELECT_LEADERS = Operation("elect_leaders", "write", replication.ElectLeadersRequest, replication.ElectLeadersReply)
ALTER_PARTITION = Operation("alter_partition", "write", replication.AlterPartitionRequest,
                            replication.AlterPartitionReply)
# -- streams ----------------------------------------------------------------------------------------
CREATE_STREAM = Operation("create_stream", "write", streams.CreateStreamRequest, streams.CreateStreamReply)
OPEN_STREAM = Operation("open_stream", "write", streams.OpenStreamRequest, streams.OpenStreamReply)
CLOSE_STREAM = Operation("close_stream", "write", streams.CloseStreamRequest, streams.CloseStreamReply)
COMMIT_OBJECT = Operation("commit_object", "write", streams.CommitObjectRequest, streams.CommitObjectReply)
TRIM_STREAM = Operation("trim_stream", "write", streams.TrimStreamRequest, streams.TrimStreamReply)
COLLECT_GARBAGE = Operation("collect_garbage", "write", streams.CollectGarbageRequest, streams.CollectGarbageReply)
COMPACT_OBJECTS = Operation("compact_objects", "write", streams.CompactObjectsRequest, streams.CompactObjectsReply)
STREAM_RECOVERED = Operation("stream_recovered", "write", streams.StreamRecoveredRequest,
                             streams.StreamRecoveredReply)
DESCRIBE_STREAM = Operation("describe_stream", "read", streams.DescribeStreamRequest, streams.DescribeStreamReply)
# -- configs and key/value --------------------------------------------------------------------------
ALTER_CONFIGS = Operation("alter_configs", "write", configs.AlterConfigsRequest, configs.AlterConfigsReply)
PUT_KV = Operation("put_kv", "write", configs.PutKvRequest, configs.PutKvReply)
DESCRIBE_CONFIGS = Operation("describe_configs", "read", configs.DescribeConfigsRequest, configs.DescribeConfigsReply)
GET_KV = Operation("get_kv", "read", configs.GetKvRequest, configs.GetKvReply)
# -- ACLs and SCRAM credentials ---------------------------------------------------------------------
CREATE_ACLS = Operation("create_acls", "write", security.CreateAclsRequest, security.CreateAclsReply)
DELETE_ACLS = Operation("delete_acls", "write", security.DeleteAclsRequest, security.DeleteAclsReply)
DESCRIBE_ACLS = Operation("describe_acls", "read", security.DescribeAclsRequest, security.DescribeAclsReply)
ALTER_USER_SCRAM_CREDENTIALS = Operation("alter_user_scram_credentials", "write",
                                         security.AlterUserScramCredentialsRequest,
                                         security.AlterUserScramCredentialsReply)
DESCRIBE_USER_SCRAM_CREDENTIALS = Operation("describe_user_scram_credentials", "read",
                                            security.DescribeUserScramCredentialsRequest,
                                            security.DescribeUserScramCredentialsReply)

#: every controller operation by name
OPERATIONS: dict[str, Operation[Any, Any]] = {op.name: op for op in (
    REGISTER_BROKER, UNREGISTER_BROKER, BROKER_HEARTBEAT, TICK, REPORT_BROKER_DEAD, ALLOCATE_PRODUCER_IDS,
    DESCRIBE_CLUSTER,
    CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS, DESCRIBE_TOPICS,
    ALTER_PARTITION_REASSIGNMENTS, LIST_PARTITION_REASSIGNMENTS, ELECT_LEADERS, ALTER_PARTITION,
    CREATE_STREAM, OPEN_STREAM, CLOSE_STREAM, COMMIT_OBJECT, TRIM_STREAM, COLLECT_GARBAGE, COMPACT_OBJECTS,
    STREAM_RECOVERED, DESCRIBE_STREAM,
    ALTER_CONFIGS, PUT_KV, DESCRIBE_CONFIGS, GET_KV,
    CREATE_ACLS, DELETE_ACLS, DESCRIBE_ACLS, ALTER_USER_SCRAM_CREDENTIALS, DESCRIBE_USER_SCRAM_CREDENTIALS,
)}
WRITE_NAMES = frozenset(name for name, op in OPERATIONS.items() if op.kind == "write")
READ_NAMES = frozenset(name for name, op in OPERATIONS.items() if op.kind == "read")
