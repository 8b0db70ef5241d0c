"""A scale-out's plan: the new brokers take their share first, and the rest is balanced when
that alone cannot bring the load within the band (pure, as the planner).

The planner's add-broker mode moves partitions only onto the new brokers (as Cruise Control's
``add_broker``: the fewest moves for a new broker to take load). When the load was already uneven
among the old brokers — the hottest of them is hot for the partitions it holds, not for lack of
brokers — moves onto the new broker alone cannot even it out: a partition's load is granular
(with 24 Zipf-skewed partitions over 5 brokers a partition is a fifth to two thirds of a broker's
mean), so the plan stops with a broker out of the band and the cluster stays out of balance until
the next scale action. An autoscaler that adds brokers because a broker is overloaded wants the
cluster balanced after it, so when the add-only plan leaves a load goal unmet, a second pass
plans over every broker (any move) from where the first left off; the moves executed are the net
moves from the current owners to the second pass's (a partition moved twice moves once).

The planner moves one partition at a time, and with a few partitions per broker it can stop with
the hottest broker above the band although no single move helps: every partition it could give
away would put its receiver above the band. Swapping two partitions can (the hottest gives a
larger one and takes a smaller one back), so when the pass leaves network-in above the band, up
to ``MAX_SWAPS`` swaps follow, each the one that lowers the hottest broker's load most, none
raising another broker to or above it and none putting a broker's network-out above both the
band and the hottest network-out before; partition counts do not change.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import replace

import numpy as np

from tools.rebalance.model import RESOURCES, ClusterLoad, Plan, moves_between
from tools.rebalance.planner import PlannerConfig, plan

MAX_SWAPS = 3  # each is two moves


def needs_balance_pass(config: PlannerConfig, first: Plan) -> bool:
    """An add-broker plan that left a load goal (or a capacity) unmet."""
    return bool(config.add_brokers) and any(g in first.unmet_goals for g in (*RESOURCES, "capacity"))


def plan_scale_out(cluster: ClusterLoad, config: PlannerConfig) -> Plan:
    """The add-broker plan, followed by a balancing pass over all brokers when it falls short.
    ``cluster`` holds the brokers before the scale-out (the new ones are ``config.add_brokers``)."""
    first = plan(cluster, config)
    if not needs_balance_pass(config, first):
        return first
    after = cluster.with_owners(first.owners_after).with_brokers([*cluster.brokers, *config.add_brokers])
    second = plan(after, replace(config, add_brokers=()))
    by_goal = Counter(first.moves_by_goal)
    by_goal.update({f"{goal}_balance_pass": n for goal, n in second.moves_by_goal.items()})
    owners, unmet = second.owners_after, list(second.unmet_goals)
    if "net_in" in unmet:
        owners, swaps = swap_hottest(after.loads, owners, after.brokers, config.balance_band)
        if swaps:
            by_goal["net_in_swap"] = 2 * swaps
            in_band = _totals(after.loads[:, 0], owners, after.brokers).max() <= \
                (1 + config.balance_band) * float(after.loads[:, 0].sum()) / len(after.brokers) * (1 + 1e-9)
            unmet = [g for g in unmet if g != "net_in" or not in_band]
    return Plan(moves=moves_between(cluster, owners), owners_after=owners,
                passes=first.passes + second.passes, moves_by_goal=dict(by_goal), unmet_goals=unmet)


def _totals(load: np.ndarray, owners: np.ndarray, brokers: tuple[int, ...]) -> np.ndarray:
    index = {b: k for k, b in enumerate(brokers)}
    out = np.zeros(len(brokers))
    np.add.at(out, np.array([index[int(o)] for o in owners], dtype=np.int64), load)
    return out


def swap_hottest(loads: np.ndarray, owners: np.ndarray, brokers: tuple[int, ...], band: float,
                 max_swaps: int = MAX_SWAPS) -> tuple[np.ndarray, int]:
    """Up to ``max_swaps`` swaps of a partition of the hottest broker (network-in, ``loads[:, 0]``)
    with a smaller one of another broker, each lowering the hottest broker's load the most (see
    the module doc); returns the owners after them and how many were made."""
    owners = np.asarray(owners, dtype=np.int64).copy()
    x_in, x_out = loads[:, 0], loads[:, 1]
    upper_in = (1 + band) * float(x_in.sum()) / len(brokers)
    upper_out = (1 + band) * float(x_out.sum()) / len(brokers)
    made = 0
    for _ in range(max_swaps):
        t_in, t_out = _totals(x_in, owners, brokers), _totals(x_out, owners, brokers)
        h = int(np.argmax(t_in))
        top = float(t_in[h])
        if top <= upper_in:
            break
        out_cap = max(upper_out, float(t_out.max()))
        hot = np.nonzero(owners == brokers[h])[0]
        best: tuple[float, int, int] | None = None  # (new max of the pair, i, j)
        for d, b in enumerate(brokers):
            if d == h:
                continue
            for j in np.nonzero(owners == b)[0].tolist():
                for i in hot.tolist():
                    delta = float(x_in[i] - x_in[j])
                    if delta <= 0:
                        continue
                    pair_max = max(top - delta, float(t_in[d]) + delta)
                    d_out = float(x_out[i] - x_out[j])
                    if pair_max >= top * (1 - 1e-9) or t_out[h] - d_out > out_cap or t_out[d] + d_out > out_cap:
                        continue
                    if best is None or pair_max < best[0]:
                        best = (pair_max, i, j)
        if best is None:
            break
        _pm, i, j = best
        owners[i], owners[j] = owners[j], owners[i]
        made += 1
    return owners, made
