"""The replicas a storage=s3 partition is reported with (Kafka's replication factor over shared data).

A storage=s3 partition has one owner, the only broker that opens its streams and writes: in the
metadata log its ``replicas`` is that owner (the target during a hand-over), and every move,
election and placement rule works on it. Its data lives in object storage, which every broker
reads, so any broker can take it over with no copy. Kafka clients and tools still expect a
replication factor: a topic created with RF N (or an explicit assignment of N brokers) keeps the
N brokers it was assigned under ``replicas/<topic id>/<partition>`` (only when N > 1), and is
reported with them:

- replicas: the assigned brokers, in their order, when the owner is one of them; otherwise (the
  partition was moved elsewhere) the owner followed by the first N-1 assigned brokers;
- ISR: the reported replicas that are active (the data is shared, so none lags);
- leader: the owner, as before.

Pure functions of the image, shared by the controller (CreateTopics, CreatePartitions,
reassignments) and the brokers' Metadata answers.
"""
from __future__ import annotations

from typing import Callable, Mapping

from metadata_quorum.image import PartitionRegistration
from metadata_quorum.records import STORAGE_S3


def assigned_replicas_key(topic_id: str, partition: int) -> str:
    """KV key of an s3 partition's assigned brokers (comma-separated ids), present when RF > 1."""
    return f"replicas/{topic_id}/{partition}"


def encode_replicas(replicas: tuple[int, ...]) -> str:
    return ",".join(str(r) for r in replicas)


def assigned_replicas(kv: Mapping[str, str], part: PartitionRegistration) -> tuple[int, ...]:
    """The brokers an s3 partition was assigned (its owner alone when none were stored)."""
    raw = kv.get(assigned_replicas_key(part.topic_id, part.partition))
    if not raw:
        return part.replicas
    try:
        return tuple(int(r) for r in raw.split(","))
    except ValueError:  # written only by the controller's operations; never expected
        return part.replicas


def reported_replicas(kv: Mapping[str, str], part: PartitionRegistration) -> tuple[int, ...]:
    """The replicas Kafka clients are told about (see the module's docstring); a storage=local
    partition's own replicas."""
    if part.storage != STORAGE_S3 or not part.replicas:
        return part.replicas
    assigned = assigned_replicas(kv, part)
    owner = part.replicas[0]
    if owner in assigned:
        return assigned
    return (owner,) + tuple(r for r in assigned if r != owner)[:max(0, len(assigned) - 1)]


def reported_isr(kv: Mapping[str, str], part: PartitionRegistration,
                 is_active: Callable[[int], bool], reported: tuple[int, ...] | None = None) -> tuple[int, ...]:
    """An s3 partition's reported replicas that are active (its owner at least); a storage=local
    partition's own ISR. ``reported``: the partition's `reported_replicas`, when the caller has them."""
    if part.storage != STORAGE_S3:
        return part.isr
    replicas = reported_replicas(kv, part) if reported is None else reported
    return tuple(r for r in replicas if is_active(r)) or part.replicas[:1]


def replication_factor(kv: Mapping[str, str], part: PartitionRegistration) -> int:
    """The replica count Kafka sees for the partition."""
    return len(reported_replicas(kv, part))
