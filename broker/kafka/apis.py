"""Which Kafka APIs, at which versions, the listener advertises — only what it implements.

The request classes come from kafka-python's generated messages (pinned in pyproject.toml), so a
version listed here decodes exactly as Kafka's JSON message spec of that version says.
Versions are chosen so current librdkafka, aiokafka and kafka-python clients negotiate one they
share, and stop before versions that need what Ferry lacks (topic ids in Produce v13 / Fetch v13,
transactions).
"""
from __future__ import annotations

import importlib
import pkgutil
from functools import lru_cache

from kafka.protocol.api_key import ApiKey
from kafka.protocol.api_message import ApiMessage

from broker.kafka.consumer_group_messages import (REQUEST_CLASSES, ConsumerGroupDescribeRequest,
                                                  ConsumerGroupHeartbeatRequest)

#: api key -> (min version, max version) advertised in ApiVersions
SUPPORTED_VERSIONS: dict[int, tuple[int, int]] = {
    ApiKey.Produce: (3, 11),
    ApiKey.Fetch: (4, 12),
    ApiKey.ListOffsets: (1, 9),  # v7-v9: timestamps -3, -4, -5 (data_apis.SPECIAL_TIMESTAMPS)
    ApiKey.Metadata: (0, 12),
    ApiKey.ApiVersions: (0, 4),
    ApiKey.InitProducerId: (0, 4),
    ApiKey.OffsetForLeaderEpoch: (2, 4),
    ApiKey.DeleteRecords: (0, 2),
    # inter-broker, from transaction coordinators (txn_marker_apis.py); v0 is not in the pinned
    # spec (Kafka 4 dropped it), v2 is KIP-890's epoch-bumping markers
    ApiKey.WriteTxnMarkers: (1, 1),
    ApiKey.FindCoordinator: (0, 4),
    # transactions (txn_apis.py, txn_offsets.py): the versions before KIP-890's transaction
    # version 2 (EndTxn v5, AddOffsetsToTxn v4, TxnOffsetCommit v5, AddPartitionsToTxn v4+)
    ApiKey.AddPartitionsToTxn: (0, 3),
    ApiKey.AddOffsetsToTxn: (0, 3),
    ApiKey.EndTxn: (0, 4),
    ApiKey.TxnOffsetCommit: (0, 4),
    ApiKey.DescribeTransactions: (0, 0),
    ApiKey.ListTransactions: (0, 1),
    ApiKey.JoinGroup: (0, 9),
    ApiKey.SyncGroup: (0, 5),
    ApiKey.Heartbeat: (0, 4),
    ApiKey.LeaveGroup: (0, 5),
    ApiKey.OffsetCommit: (2, 9),
    ApiKey.OffsetFetch: (1, 9),
    ApiKey.OffsetDelete: (0, 0),
    ApiKey.DescribeGroups: (0, 5),
    ApiKey.ListGroups: (0, 5),
    ApiKey.DeleteGroups: (0, 2),
    # the consumer group protocol (KIP-848; consumer_group_apis.py)
    ConsumerGroupHeartbeatRequest.API_KEY: (0, 1),
    ConsumerGroupDescribeRequest.API_KEY: (0, 1),
    # SASL (broker/kafka/sasl.py): v0 of SaslHandshake would switch to unframed tokens; not offered
    ApiKey.SaslHandshake: (1, 1),
    ApiKey.SaslAuthenticate: (0, 2),
    # admin APIs (admin_apis.py), forwarded to the controller quorum except where noted there
    ApiKey.CreateTopics: (2, 7),
    ApiKey.DeleteTopics: (1, 6),
    ApiKey.CreatePartitions: (0, 3),
    ApiKey.DescribeConfigs: (1, 4),
    ApiKey.AlterConfigs: (0, 2),
    ApiKey.IncrementalAlterConfigs: (0, 1),
    ApiKey.DescribeCluster: (0, 2),
    ApiKey.AlterPartitionReassignments: (0, 1),
    ApiKey.ListPartitionReassignments: (0, 0),
    ApiKey.ElectLeaders: (0, 2),
    ApiKey.DescribeLogDirs: (1, 4),
    ApiKey.AlterReplicaLogDirs: (1, 2),
    ApiKey.DescribeQuorum: (0, 2),  # quorum_apis.py: the metadata quorum, asked of the active controller
    ApiKey.DescribeUserScramCredentials: (0, 0),  # scram_apis.py
    ApiKey.AlterUserScramCredentials: (0, 0),
    ApiKey.DescribeClientQuotas: (0, 1),  # quota_apis.py: no quotas, none configured
    # ACLs (acl_apis.py): Kafka 4 dropped v0
    ApiKey.DescribeAcls: (1, 3),
    ApiKey.CreateAcls: (1, 3),
    ApiKey.DeleteAcls: (1, 3),
}


def _top_level_request(value: object) -> type[ApiMessage] | None:
    """``value`` when it is a generated request class of no fixed version, else None."""
    if not (isinstance(value, type) and issubclass(value, ApiMessage) and value is not ApiMessage):
        return None
    spec = getattr(value, "_json", None)
    if not spec or spec["type"] != "request" or getattr(value, "_class_version", None) is not None:
        return None
    return value


@lru_cache(maxsize=None)
def _request_classes() -> dict[int, type[ApiMessage]]:
    import kafka.protocol as root
    found: dict[int, type[ApiMessage]] = {}
    modules = []
    for pkg in ("admin", "consumer", "producer", "metadata"):
        package = importlib.import_module(f"{root.__name__}.{pkg}")
        modules += [importlib.import_module(f"{package.__name__}.{info.name}")
                    for info in pkgutil.iter_modules(package.__path__)]
    modules.append(importlib.import_module(f"{root.__name__}.sasl"))
    for extra in REQUEST_CLASSES:
        found[int(extra.API_KEY)] = extra
    for module in modules:
        for value in vars(module).values():
            cls = _top_level_request(value)
            if cls is not None:
                found[int(cls.API_KEY)] = cls
    return found


def request_class(api_key: int) -> type[ApiMessage]:
    return _request_classes()[api_key]


def spec_versions(cls: type[ApiMessage]) -> tuple[int, int]:
    """The versions the pinned JSON spec declares valid (Kafka drops old ones: CreateTopics is 2-7)."""
    valid = str(cls.json["validVersions"])
    lo, _, hi = valid.partition("-")
    return int(lo), int(hi or lo)


def check_table() -> None:
    """Every advertised version must exist in the pinned message specs (run by the tests)."""
    for key, (lo, hi) in SUPPORTED_VERSIONS.items():
        cls = request_class(key)
        spec_lo, spec_hi = spec_versions(cls)
        if hi > min(cls.max_version, spec_hi) or lo < spec_lo or lo > hi:
            raise ValueError(f"{cls.name}: advertised {lo}..{hi}, the spec has {spec_lo}..{spec_hi}")
