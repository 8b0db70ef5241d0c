"""When to plan again: a pure decision over the brokers' loads, with no Spark, sockets or clock.

A continuous balancer (and the autoscaler between its scale actions) samples the load every few
seconds; planning on every sample would move partitions on noise and keep partitions in flight.
It plans again when

- the set of live brokers changed (a broker came or went: the plan it had is for another cluster;
  this is not held back by the cool-down, since a new broker should take load within seconds);
- otherwise, only after ``cooldown_s`` since the last plan's moves finished, and only when the
  cluster is out of balance (max/mean network-in above ``imbalance_threshold``) and the load
  differs from what that plan left (its per-broker loads after its moves) by more than
  ``load_change`` (the share of the total that changed broker): the planner reaches a fixed point
  (docs/rebalance.md), so planning the load it left again would propose nothing — a cluster it
  could not bring inside the band (a giant partition) is not re-planned on every sample.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping


@dataclass(frozen=True)
class ReplanPolicy:
    imbalance_threshold: float = 1.10  # max/mean network-in above which the cluster is out of balance
    load_change: float = 0.10  # share of the total load that must differ from what the last plan left
    cooldown_s: float = 10.0  # after a plan's moves finished


@dataclass(frozen=True)
class LastPlan:
    """What the decision remembers of the previous plan."""

    finished_s: float  # when its moves finished (or when it was planned, with none)
    brokers: frozenset[int]
    loads: Mapping[int, float]  # per-broker network-in the plan left after its moves (bytes/s)


@dataclass(frozen=True)
class Decision:
    replan: bool
    reason: str  # first | brokers_changed | imbalanced | balanced | cooldown | unchanged | no_load
    imbalance: float  # max/mean network-in now (0 with no load)


def imbalance(loads: Mapping[int, float]) -> float:
    """max/mean over the brokers (a broker with no partition counts as 0); 0 when there is no load."""
    if not loads:
        return 0.0
    total = sum(loads.values())
    return 0.0 if total <= 0 else max(loads.values()) * len(loads) / total


def load_shift(before: Mapping[int, float], after: Mapping[int, float]) -> float:
    """Half the sum of the per-broker absolute changes over the larger total: the share of the load
    that changed broker or appeared/disappeared (0 = the same, 1 = all of it)."""
    brokers = set(before) | set(after)
    total = max(sum(before.values()), sum(after.values()))
    if total <= 0:
        return 0.0
    return sum(abs(after.get(b, 0.0) - before.get(b, 0.0)) for b in brokers) / (2.0 * total)


def should_replan(policy: ReplanPolicy, last: LastPlan | None, now_s: float,
                  loads: Mapping[int, float]) -> Decision:
    """``loads``: the live brokers' network-in now (every live broker, 0 for an empty one)."""
    ratio = imbalance(loads)
    if sum(loads.values()) <= 0:
        return Decision(False, "no_load", ratio)
    if last is None:
        return Decision(ratio > policy.imbalance_threshold, "first" if ratio > policy.imbalance_threshold
                        else "balanced", ratio)
    if frozenset(loads) != last.brokers:
        return Decision(True, "brokers_changed", ratio)
    if now_s - last.finished_s < policy.cooldown_s:
        return Decision(False, "cooldown", ratio)
    if ratio <= policy.imbalance_threshold:
        return Decision(False, "balanced", ratio)
    if load_shift(last.loads, loads) <= policy.load_change:
        return Decision(False, "unchanged", ratio)
    return Decision(True, "imbalanced", ratio)
