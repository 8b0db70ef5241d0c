"""Kafka's ``--generate`` baseline: round-robin from a random broker, blind to load.

As kafka-reassign-partitions --generate does for one replica, each topic's partition p goes to
broker[(start + p) mod B] with a random start per topic. It ignores where partitions are and how
hot they are: the baseline a load-aware plan has to beat.
"""
from __future__ import annotations

import numpy as np

from tools.rebalance.model import ClusterLoad


def round_robin_owners(cluster: ClusterLoad, brokers: list[int] | None = None, seed: int = 0) -> np.ndarray:
    targets = np.asarray(sorted(cluster.brokers if brokers is None else brokers), dtype=np.int64)
    rng = np.random.default_rng(seed)
    topics, first = np.unique(cluster.topics.astype(str), return_inverse=True)
    start = rng.integers(0, targets.size, topics.size)
    owners: np.ndarray = targets[(start[first] + cluster.partitions) % targets.size]
    return owners
