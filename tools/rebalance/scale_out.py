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
"""
from __future__ import annotations

from collections import Counter
from dataclasses import replace

from tools.rebalance.model import RESOURCES, ClusterLoad, Plan, moves_between
from tools.rebalance.planner import PlannerConfig, plan


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
    return Plan(moves=moves_between(cluster, second.owners_after), owners_after=second.owners_after,
                passes=first.passes + second.passes, moves_by_goal=dict(by_goal), unmet_goals=second.unmet_goals)
