"""Which handler answers which Kafka API key (the listener's dispatch table)."""
from __future__ import annotations

from typing import Protocol

from kafka.protocol.api_key import ApiKey

from broker.kafka.acl_apis import AclApis
from broker.kafka.admin_apis import AdminApis, AdminCore
from broker.kafka.apis import SUPPORTED_VERSIONS
from broker.kafka.authorization import Authorization
from broker.kafka.auto_create import AutoTopicCreator, TopicDefaults
from broker.kafka.consumer_group_apis import ConsumerGroupApis
from broker.kafka.consumer_group_messages import ConsumerGroupDescribeRequest, ConsumerGroupHeartbeatRequest
from broker.kafka.data_apis import DataApis
from broker.kafka.forwarding import ControllerCalls
from broker.kafka.group_apis import GroupApis, GroupsCore
from broker.kafka.listener import Handler
from broker.kafka.produce_forwarding import ProduceForwarding
from broker.kafka.quorum_apis import QuorumApis, QuorumState
from broker.kafka.quota_apis import describe_client_quotas
from broker.kafka.scram_apis import ScramApis
from broker.kafka.txn_apis import TxnApis
from broker.kafka.txn_marker_apis import TxnMarkerApis, TxnMarkerCore
from broker.kafka.txn_marker_sender import MarkerSender
from broker.kafka.txn_offsets import TxnOffsets
from broker.producer_ids import ProducerIdSource
from metadata_quorum.authorizer import OFF, AuthorizerSettings


class KafkaCore(GroupsCore, AdminCore, TxnMarkerCore, Protocol):
    """A broker that serves the data path, consumer groups and the admin APIs."""


def kafka_handlers(core: KafkaCore, controller: ControllerCalls, producer_ids: ProducerIdSource,
                   topic_defaults: TopicDefaults = TopicDefaults(),
                   quorum: QuorumState | None = None,
                   authorizer: AuthorizerSettings = OFF,
                   forwarding: ProduceForwarding | None = None) -> dict[int, Handler]:
    auth = Authorization(authorizer, lambda: core.image)
    data = DataApis(core, producer_ids, auto_create=AutoTopicCreator(controller, topic_defaults), auth=auth,
                    forwarding=forwarding)
    groups = GroupApis(core, auth=auth)
    transactions = TxnApis(core, producer_ids, MarkerSender(lambda: core.image, f"ferry-broker-{core.broker_id}"),
                           groups.offsets_partition_count, auth=auth)
    txn_offsets = TxnOffsets(groups)
    groups.find_transaction_coordinator = transactions.find
    groups.unstable = txn_offsets.unstable
    admin = AdminApis(core, controller, topic_defaults, auth=auth)
    consumer_groups = ConsumerGroupApis(groups)
    quorum_apis = QuorumApis(quorum)
    scram = ScramApis(core, controller)
    acls = AclApis(auth, controller)
    # a marker on __consumer_offsets commits (or drops) the transaction's pending offsets
    txn_markers = TxnMarkerApis(core, auth, txn_offsets.on_txn_marker)
    table: dict[int, Handler] = {
        ApiKey.ApiVersions: data.api_versions,
        ApiKey.Metadata: data.metadata,
        ApiKey.Produce: data.produce,
        ApiKey.Fetch: data.fetch,
        ApiKey.ListOffsets: data.list_offsets,
        ApiKey.InitProducerId: lambda req: transactions.init_producer_id(req, data.init_producer_id),
        ApiKey.AddPartitionsToTxn: transactions.add_partitions_to_txn,
        ApiKey.AddOffsetsToTxn: transactions.add_offsets_to_txn,
        ApiKey.EndTxn: transactions.end_txn,
        ApiKey.TxnOffsetCommit: txn_offsets.txn_offset_commit,
        ApiKey.DescribeTransactions: transactions.describe_transactions,
        ApiKey.ListTransactions: transactions.list_transactions,
        ApiKey.OffsetForLeaderEpoch: data.offset_for_leader_epoch,
        ApiKey.DeleteRecords: data.delete_records,
        ApiKey.WriteTxnMarkers: txn_markers.write_txn_markers,
        ApiKey.FindCoordinator: groups.find_coordinator,
        ApiKey.JoinGroup: groups.join_group,
        ApiKey.SyncGroup: groups.sync_group,
        ApiKey.Heartbeat: groups.heartbeat,
        ApiKey.LeaveGroup: groups.leave_group,
        ApiKey.OffsetCommit: groups.offset_commit,
        ApiKey.OffsetFetch: groups.offset_fetch,
        ApiKey.OffsetDelete: groups.offset_delete,
        ApiKey.DescribeGroups: groups.describe_groups,
        ApiKey.ListGroups: groups.list_groups,
        ApiKey.DeleteGroups: groups.delete_groups,
        ConsumerGroupHeartbeatRequest.API_KEY: consumer_groups.heartbeat,
        ConsumerGroupDescribeRequest.API_KEY: consumer_groups.describe,
        ApiKey.CreateTopics: admin.create_topics,
        ApiKey.DeleteTopics: admin.delete_topics,
        ApiKey.CreatePartitions: admin.create_partitions,
        ApiKey.DescribeConfigs: admin.describe_configs,
        ApiKey.AlterConfigs: admin.alter_configs,
        ApiKey.IncrementalAlterConfigs: admin.incremental_alter_configs,
        ApiKey.DescribeCluster: admin.describe_cluster,
        ApiKey.AlterPartitionReassignments: admin.alter_partition_reassignments,
        ApiKey.ListPartitionReassignments: admin.list_partition_reassignments,
        ApiKey.ElectLeaders: admin.elect_leaders,
        ApiKey.DescribeLogDirs: admin.describe_log_dirs,
        ApiKey.AlterReplicaLogDirs: admin.alter_replica_log_dirs,
        ApiKey.DescribeQuorum: quorum_apis.describe_quorum,
        ApiKey.DescribeUserScramCredentials: scram.describe_user_scram_credentials,
        ApiKey.AlterUserScramCredentials: scram.alter_user_scram_credentials,
        ApiKey.DescribeClientQuotas: describe_client_quotas,
        ApiKey.CreateAcls: acls.create_acls,
        ApiKey.DescribeAcls: acls.describe_acls,
        ApiKey.DeleteAcls: acls.delete_acls,
    }
    missing = set(SUPPORTED_VERSIONS) - set(table) - {ApiKey.SaslHandshake, ApiKey.SaslAuthenticate}
    if missing:
        raise RuntimeError(f"advertised Kafka APIs without a handler: {sorted(missing)}")
    return table
