"""The single-process NumPy greedy baseline.

The textbook greedy: take the most loaded broker (by the larger of its normalized network-in and
network-out), and move to the least loaded broker the one partition that leaves the pair most
even; a broker no single move improves is left as it is; stop when every other broker is within
mean × (1 + band). No goals, no
priorities, no partition-count care: the yardstick for the planner's quality and number of moves.
"""
from __future__ import annotations

import numpy as np

from tools.rebalance.model import ClusterLoad
from tools.rebalance.planner import mean_without_giants


def greedy_owners(cluster: ClusterLoad, band: float = 0.10, max_moves: int | None = None) -> np.ndarray:
    """Owners (broker ids) after the greedy baseline's moves."""
    brokers = np.asarray(cluster.brokers, dtype=np.int64)
    index = {int(b): k for k, b in enumerate(brokers)}
    owner = np.array([index[int(b)] for b in cluster.owners], dtype=np.int64)
    X = cluster.loads
    L = np.zeros((brokers.size, X.shape[1]))
    np.add.at(L, owner, X)
    # the same target as the planner's: the band around the mean without giant partitions
    mean = np.array([mean_without_giants(X[:, r], brokers.size, band) for r in range(X.shape[1])])
    mean = np.where(mean > 0, mean, 1.0)
    budget = 4 * cluster.n_partitions if max_moves is None else max_moves
    done = np.zeros(brokers.size, dtype=bool)  # brokers no single move can improve
    for _ in range(budget):
        score = (L / mean).max(axis=1)
        over = (score > 1 + band) & ~done
        if not over.any():
            break
        s = int(np.argmax(np.where(over, score, -np.inf)))
        d = int(np.argmin(score))
        cand = np.nonzero(owner == s)[0]
        after_s = ((L[s] - X[cand]) / mean).max(axis=1)
        after_d = ((L[d] + X[cand]) / mean).max(axis=1)
        worst = np.maximum(after_s, after_d)
        k = int(np.argmin(worst))
        if d == s or worst[k] >= score[s] - 1e-12:
            done[s] = True
            continue
        i = int(cand[k])
        L[s] -= X[i]
        L[d] += X[i]
        owner[i] = d
    return brokers[owner]
