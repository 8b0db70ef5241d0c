"""Skewed synthetic clusters, for tests and the scale benchmark (no live cluster needed).

Partition rates follow an exponential or a Zipf law; a share of the topics is hot (its rates are
multiplied) and was placed on a minority of the brokers, as happens when hot topics were created
while few brokers existed. Counts start even-ish, loads start skewed (max/mean well above 2).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from tools.rebalance.model import ClusterLoad, make_cluster_load
from tools.rebalance.samples import SAMPLE_COLUMNS


@dataclass(frozen=True)
class SyntheticSpec:
    partitions: int
    brokers: int
    distribution: str = "exponential"  # or "zipf"
    partitions_per_topic: int = 100
    hot_topic_share: float = 0.1
    hot_broker_share: float = 0.2
    hot_factor: float = 6.0
    zipf_exponent: float = 1.0
    mean_in_bytes_per_s: float = 100_000.0
    seed: int = 0


def synthetic_cluster(spec: SyntheticSpec) -> ClusterLoad:
    rng = np.random.default_rng(spec.seed)
    n, n_brokers = spec.partitions, spec.brokers
    per_topic = max(1, min(spec.partitions_per_topic, n))
    n_topics = -(-n // per_topic)
    topic_of = np.arange(n) // per_topic
    partition_of = np.arange(n) % per_topic
    if spec.distribution == "exponential":
        base = rng.exponential(1.0, n)
    elif spec.distribution == "zipf":
        ranks = rng.permutation(n) + 1
        base = 1.0 / ranks.astype(np.float64) ** spec.zipf_exponent
        base = base / base.mean()
    else:
        raise ValueError(f"unknown distribution {spec.distribution!r} (exponential or zipf)")
    hot_topic = rng.random(n_topics) < spec.hot_topic_share
    hot = hot_topic[topic_of]
    net_in = base * np.where(hot, spec.hot_factor, 1.0)
    net_in = net_in / net_in.mean() * spec.mean_in_bytes_per_s
    net_out = net_in * rng.uniform(0.5, 3.0, n)  # consumer fan-out per partition
    owners = _skewed_owners(rng, hot, topic_of, partition_of, n_brokers, spec.hot_broker_share)
    topics = np.array([f"t{t:05d}" for t in range(n_topics)], dtype=object)[topic_of]
    size_bytes = (net_in * rng.uniform(600, 3600, n)).astype(np.int64)  # ~10 min to 1 h retained
    return make_cluster_load(topics, partition_of, owners, net_in, net_out, size_bytes,
                             brokers=range(n_brokers), requests=(net_in + net_out) / 1024.0)


def _skewed_owners(rng: np.random.Generator, hot: np.ndarray, topic_of: np.ndarray, partition_of: np.ndarray,
                   n_brokers: int, hot_broker_share: float) -> np.ndarray:
    """Hot topics round-robin over the first few brokers; cold partitions fill every broker up to an
    even partition count (as a count-balancing placement would), so only the load is skewed."""
    n = hot.shape[0]
    n_hot_brokers = max(1, int(round(n_brokers * hot_broker_share)))
    start = rng.integers(0, n_hot_brokers, int(topic_of.max()) + 1)
    owners = np.full(n, -1, dtype=np.int64)
    owners[hot] = (start[topic_of[hot]] + partition_of[hot]) % n_hot_brokers
    target = np.full(n_brokers, n // n_brokers) + (np.arange(n_brokers) < n % n_brokers)
    free = np.maximum(target - np.bincount(owners[hot], minlength=n_brokers), 0)
    slots = np.repeat(np.arange(n_brokers), free)
    cold = np.nonzero(~hot)[0]
    if slots.size < cold.size:  # hot partitions overfilled their brokers: spread the rest evenly
        slots = np.concatenate([slots, np.arange(cold.size - slots.size) % n_brokers])
    owners[cold] = rng.permutation(slots)[: cold.size]
    return owners


def synthetic_samples(cluster: ClusterLoad, intervals: int = 3, interval_ms: int = 10_000,
                      end_ms: int = 1_700_000_000_000, record_bytes: int = 1024, seed: int = 0) -> pd.DataFrame:
    """Sample rows (the load-sample format) whose mean rates over the window are the cluster's loads (to the byte)."""
    rng = np.random.default_rng(seed)
    n = cluster.n_partitions
    frames = []
    jitter = rng.uniform(-0.2, 0.2, (intervals, n))
    jitter -= jitter.mean(axis=0)  # rates vary per interval, the window's mean is exact
    seconds = interval_ms / 1000.0
    for k in range(intervals):
        ts_ms = end_ms - (intervals - 1 - k) * interval_ms
        bytes_in = np.rint(cluster.loads[:, 0] * seconds * (1 + jitter[k])).astype(np.int64)
        bytes_out = np.rint(cluster.loads[:, 1] * seconds * (1 + jitter[k])).astype(np.int64)
        frames.append(pd.DataFrame({
            "ts_ms": np.full(n, ts_ms, dtype=np.int64),
            "interval_ms": np.full(n, interval_ms, dtype=np.int64),
            "broker_id": cluster.owners,
            "topic": cluster.topics.astype(str),
            "partition": cluster.partitions,
            "bytes_in": bytes_in,
            "bytes_out": bytes_out,
            "records_in": bytes_in // record_bytes,
            "records_out": bytes_out // record_bytes,
            "size_bytes": cluster.size_bytes,
        }))
    frame = pd.concat(frames, ignore_index=True)
    return frame[list(SAMPLE_COLUMNS)]
