"""The planner's input and output: per-partition loads of a cluster, and moves.

A cluster's load is a set of columns (NumPy arrays), one row per partition, in a canonical
order (topic, partition), so that the same input gives the same plan whatever order the samples
arrived in. Loads are rates in bytes per second averaged over the sampling window.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

import numpy as np

from metadata_quorum.kernel.errors import ErrorCode, FerryError

RESOURCES: tuple[str, ...] = ("net_in", "net_out")
"""The load resources, in goal priority order (AutoMQ's network-in and network-out goals)."""


@dataclass(frozen=True)
class ClusterLoad:
    """Per-partition loads (rows in canonical order) and the brokers that may hold partitions."""

    topics: np.ndarray  # object array of str, shape (n,)
    partitions: np.ndarray  # int64, shape (n,)
    owners: np.ndarray  # int64 broker ids, shape (n,)
    loads: np.ndarray  # float64 bytes/s, shape (n, len(RESOURCES))
    size_bytes: np.ndarray  # int64, shape (n,)
    brokers: tuple[int, ...]  # sorted; may include brokers that hold no partition
    requests: np.ndarray | None = None  # records in + out per second (a CPU proxy), shape (n,)

    @property
    def request_rates(self) -> np.ndarray:
        return np.zeros(self.n_partitions) if self.requests is None else self.requests

    @property
    def n_partitions(self) -> int:
        return int(self.partitions.shape[0])

    def with_owners(self, owners: np.ndarray) -> "ClusterLoad":
        """The same loads owned as given (brokers that now own partitions join the broker list)."""
        owner_arr = np.asarray(owners, dtype=np.int64).copy()
        brokers = tuple(sorted(set(self.brokers) | {int(b) for b in np.unique(owner_arr)}))
        return ClusterLoad(self.topics, self.partitions, owner_arr, self.loads, self.size_bytes, brokers,
                           self.requests)

    def with_brokers(self, brokers: Iterable[int]) -> "ClusterLoad":
        return ClusterLoad(self.topics, self.partitions, self.owners, self.loads, self.size_bytes,
                           tuple(sorted(set(int(b) for b in brokers))), self.requests)


def make_cluster_load(
    topics: Sequence[str] | np.ndarray,
    partitions: Sequence[int] | np.ndarray,
    owners: Sequence[int] | np.ndarray,
    net_in: Sequence[float] | np.ndarray,
    net_out: Sequence[float] | np.ndarray,
    size_bytes: Sequence[int] | np.ndarray | None = None,
    brokers: Iterable[int] | None = None,
    requests: Sequence[float] | np.ndarray | None = None,
) -> ClusterLoad:
    """Validate the columns and put the rows in canonical (topic, partition) order.

    Raises INVALID_REQUEST for empty input, duplicated partitions, negative or non-finite
    loads, and owners outside ``brokers`` (when given).
    """
    topic_arr = np.asarray(list(topics), dtype=object)
    part_arr = np.asarray(partitions, dtype=np.int64)
    owner_arr = np.asarray(owners, dtype=np.int64)
    in_arr = np.asarray(net_in, dtype=np.float64)
    out_arr = np.asarray(net_out, dtype=np.float64)
    n = topic_arr.shape[0]
    size_arr = np.zeros(n, dtype=np.int64) if size_bytes is None else np.asarray(size_bytes, dtype=np.int64)
    if n == 0:
        raise FerryError(ErrorCode.INVALID_REQUEST, "no partition load samples in the window: nothing to plan")
    if not all(a.shape[0] == n for a in (part_arr, owner_arr, in_arr, out_arr, size_arr)):
        raise FerryError(ErrorCode.INVALID_REQUEST, "load columns have different lengths")
    loads = np.stack([in_arr, out_arr], axis=1)
    req_arr = None if requests is None else np.asarray(requests, dtype=np.float64)
    if req_arr is not None and req_arr.shape[0] != n:
        raise FerryError(ErrorCode.INVALID_REQUEST, "load columns have different lengths")
    if not np.all(np.isfinite(loads)) or np.any(loads < 0) or (
            req_arr is not None and (not np.all(np.isfinite(req_arr)) or np.any(req_arr < 0))):
        raise FerryError(ErrorCode.INVALID_REQUEST, "partition loads must be finite and non-negative")
    order = np.lexsort((part_arr, topic_arr.astype(str)))
    topic_arr, part_arr, owner_arr = topic_arr[order], part_arr[order], owner_arr[order]
    loads, size_arr = loads[order], size_arr[order]
    req_arr = None if req_arr is None else req_arr[order]
    same = (topic_arr[1:] == topic_arr[:-1]) & (part_arr[1:] == part_arr[:-1])
    if np.any(same):
        i = int(np.argmax(same))
        raise FerryError(ErrorCode.INVALID_REQUEST,
                         f"partition {topic_arr[i]}-{part_arr[i]} appears more than once in the load input")
    owner_set = set(int(b) for b in np.unique(owner_arr))
    if brokers is None:
        broker_set = owner_set
    else:
        broker_set = set(int(b) for b in brokers)
        unknown = sorted(owner_set - broker_set)
        if unknown:
            raise FerryError(ErrorCode.BROKER_ID_NOT_REGISTERED,
                             f"partitions are owned by brokers {unknown} that are not in the broker list "
                             f"{sorted(broker_set)}")
    return ClusterLoad(topic_arr, part_arr, owner_arr, loads, size_arr, tuple(sorted(broker_set)), req_arr)


@dataclass(frozen=True)
class Move:
    topic: str
    partition: int
    from_broker: int
    to_broker: int


@dataclass
class Plan:
    """The planner's answer: the moves, the owners after them, and how the search went."""

    moves: list[Move]
    owners_after: np.ndarray
    passes: int
    moves_by_goal: dict[str, int] = field(default_factory=dict)
    unmet_goals: list[str] = field(default_factory=list)


def moves_between(cluster: ClusterLoad, owners_after: np.ndarray) -> list[Move]:
    """The net moves from ``cluster.owners`` to ``owners_after`` (canonical order)."""
    changed = np.nonzero(cluster.owners != owners_after)[0]
    return [Move(str(cluster.topics[i]), int(cluster.partitions[i]), int(cluster.owners[i]), int(owners_after[i]))
            for i in changed]


def reassignment_json(moves: Sequence[Move], cluster: "ClusterLoad | None" = None,
                      log_dirs: Any | None = None) -> dict[str, Any]:
    """Kafka's reassignment file (kafka-reassign-partitions --execute input): one replica each.

    With a log-dir plan (tools/rebalance/log_dirs.py), a moved partition names the dir it goes to,
    and a partition that stays on its broker but changes dir is listed with the same replica and
    its new dir (an intra-broker move, as Kafka's tool reads it)."""
    where: dict[tuple[str, int], str] = {}
    rows = [(m.topic, m.partition, m.to_broker) for m in moves]
    if log_dirs is not None and cluster is not None:
        for i, d in enumerate(log_dirs.dirs):
            if d is not None:
                where[(str(cluster.topics[i]), int(cluster.partitions[i]))] = d
        rows += [(str(cluster.topics[i]), int(cluster.partitions[i]), int(cluster.owners[i]))
                 for i in log_dirs.intra_moves]
    return {"version": 1, "partitions": [
        {"topic": t, "partition": p, "replicas": [b], "log_dirs": [where.get((t, p), "any")]}
        for t, p, b in sorted(rows)
    ]}
