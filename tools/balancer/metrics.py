"""The balancer's Prometheus metrics: every decision it takes is visible from outside."""
from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest


class BalancerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.imbalance = Gauge("ferry_balancer_imbalance", "max/mean network-in over the live brokers, last sample",
                               registry=r)
        self.imbalance_after = Gauge("ferry_balancer_planned_imbalance",
                                     "max/mean network-in the last plan leaves", registry=r)
        self.live_brokers = Gauge("ferry_balancer_live_brokers", "live brokers, last sample", registry=r)
        self.decisions = Counter("ferry_balancer_decisions_total", "re-plan decisions by reason",
                                 ["reason"], registry=r)
        self.plans = Counter("ferry_balancer_plans_total", "plans made", ["mode"], registry=r)
        self.moves = Counter("ferry_balancer_moves_total", "partition moves proposed or submitted",
                             ["mode"], registry=r)
        self.moves_completed = Counter("ferry_balancer_moves_completed_total", "submitted moves that completed",
                                       registry=r)
        self.errors = Counter("ferry_balancer_errors_total", "ticks that failed (the loop goes on)", registry=r)
        self.plan_seconds = Histogram("ferry_balancer_plan_seconds", "refresh + aggregate + plan, warm",
                                      buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30), registry=r)
        self.execute_seconds = Histogram("ferry_balancer_execute_seconds", "submit until every move completed",
                                         buckets=(0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60), registry=r)

    def render(self) -> bytes:
        return bytes(generate_latest(self.registry))
