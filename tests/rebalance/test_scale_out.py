"""A scale-out's plan (tools/rebalance/scale_out.py): add-only moves, then a balancing pass when
they leave the load outside the band. Pure: no Spark, sockets or clock."""
from __future__ import annotations

import random

import numpy as np

from tools.rebalance.model import make_cluster_load
from tools.rebalance.planner import PlannerConfig, plan
from tools.rebalance.scale_out import needs_balance_pass, plan_scale_out, swap_hottest


def ratio(loads: np.ndarray, owners: np.ndarray, brokers: list[int]) -> float:
    per = {b: 0.0 for b in brokers}
    for load, owner in zip(loads, owners, strict=True):
        per[int(owner)] += float(load)
    return max(per.values()) * len(per) / sum(per.values())


def zipf_cluster(seed: int):
    """24 Zipf-skewed partitions (s = 0.6, as the shipped scenarios) round-robin over 4 brokers."""
    rng = random.Random(seed)
    weights = [1 / (k + 1) ** 0.6 for k in range(24)]
    rng.shuffle(weights)
    loads = [w * 1e6 * (1 + rng.uniform(-0.1, 0.1)) for w in weights]
    return make_cluster_load(["load"] * 24, list(range(24)), [1 + i % 4 for i in range(24)], loads, [0.0] * 24,
                             brokers=[1, 2, 3, 4])


def test_an_add_only_plan_that_misses_the_band_is_followed_by_a_balancing_pass():
    cluster = zipf_cluster(9)
    cfg = PlannerConfig(balance_band=0.05, add_brokers=(5,))
    add_only = plan(cluster, cfg)
    assert needs_balance_pass(cfg, add_only)
    assert ratio(cluster.loads[:, 0], add_only.owners_after, [1, 2, 3, 4, 5]) > 1.1  # the old brokers stay uneven
    both = plan_scale_out(cluster, cfg)
    assert ratio(cluster.loads[:, 0], both.owners_after, [1, 2, 3, 4, 5]) <= 1.05
    assert "net_in" not in both.unmet_goals
    # net moves from the current owners, each partition at most once, the new broker given load
    assert all(m.from_broker == int(cluster.owners[m.partition]) != m.to_broker for m in both.moves)
    assert len({m.partition for m in both.moves}) == len(both.moves)
    assert any(m.to_broker == 5 for m in both.moves)
    assert len(both.moves) <= len(add_only.moves) + 2


def test_no_balancing_pass_when_the_add_only_plan_meets_the_band_or_no_broker_is_added():
    cfg = PlannerConfig(balance_band=0.05, add_brokers=(5,))
    met = next(c for c in map(zipf_cluster, range(40)) if not plan(c, cfg).unmet_goals)
    assert [m for m in plan_scale_out(met, cfg).moves] == plan(met, cfg).moves
    skewed = zipf_cluster(9)
    plain = PlannerConfig(balance_band=0.05)
    assert not needs_balance_pass(plain, plan(skewed, plain))
    assert plan_scale_out(skewed, plain).moves == plan(skewed, plain).moves


def test_swaps_lower_the_hottest_broker_where_single_moves_cannot():
    # 2 brokers: a 9 and a 5 on broker 1 (14), a 7 and a 3 on broker 2 (10); no single move helps
    # (each leaves a broker at 14 or more), one swap brings both to 12
    loads = np.array([[9.0, 1.0], [5.0, 1.0], [7.0, 1.0], [3.0, 1.0]])
    owners, swaps = swap_hottest(loads, np.array([1, 1, 2, 2]), (1, 2), band=0.05)
    assert swaps == 1 and sorted(owners.tolist()) == [1, 1, 2, 2]
    assert {b: float(loads[owners == b, 0].sum()) for b in (1, 2)} == {1: 12.0, 2: 12.0}
    # already within the band: nothing is swapped
    same, none = swap_hottest(loads, owners, (1, 2), band=0.05)
    assert none == 0 and same.tolist() == owners.tolist()


def test_scale_outs_of_zipf_clusters_end_within_the_verdicts_band():
    over_add_only = over = 0
    for seed in range(20):
        cluster = zipf_cluster(seed)
        cfg = PlannerConfig(balance_band=0.05, add_brokers=(5,))
        over_add_only += ratio(cluster.loads[:, 0], plan(cluster, cfg).owners_after, [1, 2, 3, 4, 5]) > 1.1
        over += ratio(cluster.loads[:, 0], plan_scale_out(cluster, cfg).owners_after, [1, 2, 3, 4, 5]) > 1.1
    assert over_add_only >= 5 and over == 0, (over_add_only, over)
