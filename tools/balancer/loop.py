"""The balancer's loop: sample, decide, plan warm, apply (or propose), and say what it did.

Every ``interval_s`` it refreshes the warm planner's window (tools/rebalance/warm.py: only the
new sample objects are read), takes the partitions' owners from the controllers (the samples'
latest owner lags a move by up to a metrics interval), and asks the pure re-plan decision
(tools/rebalance/replan.py). When that says plan, the planner's goals are those of
``ferry rebalance`` (docs/rebalance.md). Each plan is one log line with the imbalance before and
after, and one JSON event with every move's timeline (submitted, completed); the metrics
(tools/balancer/metrics.py) count every decision by reason. ``dry_run`` prints the proposals
and changes nothing.
"""
from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, Sequence

import numpy as np

from tools.balancer.metrics import BalancerMetrics
from tools.rebalance.model import ClusterLoad, Move
from tools.rebalance.planner import PlannerConfig, plan
from tools.rebalance.replan import LastPlan, ReplanPolicy, imbalance, should_replan
from tools.rebalance.warm import WarmPlanner


class ClusterView(Protocol):
    """What the balancer needs of a cluster (tools/balancer/cluster_view.py over the admin client)."""

    async def live_brokers(self) -> list[int]: ...

    async def leaders(self, topics: Sequence[str]) -> dict[tuple[str, int], int]: ...

    async def execute(self, moves: Sequence[Move], timeout_ms: int) -> tuple[int, int, dict[str, str]]: ...


@dataclass
class BalancerConfig:
    interval_s: float = 5.0
    balance_band: float = 0.10
    dry_run: bool = False
    timeout_ms: int = 60_000
    min_mean_load_bytes_per_s: float = 256 * 1024  # below this mean per broker, load is not worth a move
    policy: ReplanPolicy = field(default_factory=ReplanPolicy)


def broker_loads(cluster: ClusterLoad, owners: np.ndarray, brokers: Sequence[int]) -> dict[int, float]:
    """Network-in per broker (bytes/s) with the partitions owned as given; every broker listed."""
    out = {int(b): 0.0 for b in brokers}
    for owner, load in zip(owners.tolist(), cluster.loads[:, 0].tolist(), strict=True):
        if int(owner) in out:
            out[int(owner)] += float(load)
    return out


def plan_line(n: int, reason: str, before: float, after: float, moves: int, brokers: Sequence[int],
              plan_s: float, dry_run: bool) -> str:
    """The one log line per plan."""
    return (f"balancer plan {n}: reason={reason} brokers={','.join(map(str, brokers))} "
            f"imbalance {before:.3f} -> {after:.3f} moves={moves} plan_ms={plan_s * 1000:.0f}"
            + (" dry-run (nothing submitted)" if dry_run else ""))


class Balancer:
    def __init__(self, view: ClusterView, planner: WarmPlanner, config: BalancerConfig,
                 metrics: BalancerMetrics | None = None, log: Callable[[str], None] = print,
                 events: Callable[[dict[str, Any]], None] | None = None) -> None:
        self.view, self.planner, self.config = view, planner, config
        self.metrics = metrics or BalancerMetrics()
        self.log, self.events = log, events
        self.last: LastPlan | None = None
        self.plans = 0

    async def tick(self, now_s: float | None = None) -> dict[str, Any] | None:
        """One sample and decision; returns the plan's event when it planned."""
        now = time.monotonic() if now_s is None else now_s
        live = await self.view.live_brokers()
        started = time.perf_counter()
        await asyncio.to_thread(self.planner.refresh)
        if self.planner.window_objects == 0:
            self.metrics.decisions.labels("no_samples").inc()
            return None
        cluster = self.planner.cluster(live)
        leaders = await self.view.leaders(sorted({str(t) for t in cluster.topics}))
        owners = np.array([leaders.get((str(t), int(p)), int(o))
                           for t, p, o in zip(cluster.topics, cluster.partitions, cluster.owners, strict=True)], dtype=np.int64)
        keep = np.isin(owners, live)  # partitions with no live leader cannot be moved by a plan
        cluster = ClusterLoad(cluster.topics[keep], cluster.partitions[keep], owners[keep], cluster.loads[keep],
                              cluster.size_bytes[keep], tuple(sorted(live)),
                              None if cluster.requests is None else cluster.requests[keep])
        loads = broker_loads(cluster, cluster.owners, live)
        ratio = imbalance(loads)
        self.metrics.imbalance.set(ratio)
        self.metrics.live_brokers.set(len(live))
        mean = sum(loads.values()) / max(1, len(loads))
        if mean < self.config.min_mean_load_bytes_per_s:
            self.metrics.decisions.labels("low_load").inc()
            return None
        decision = should_replan(self.config.policy, self.last, now, loads)
        self.metrics.decisions.labels(decision.reason).inc()
        if not decision.replan or cluster.n_partitions == 0:
            return None
        result = plan(cluster, PlannerConfig(balance_band=self.config.balance_band))
        plan_s = time.perf_counter() - started
        after = broker_loads(cluster, result.owners_after, live)
        self.plans += 1
        mode = "dry_run" if self.config.dry_run else "execute"
        self.metrics.plans.labels(mode).inc()
        self.metrics.moves.labels(mode).inc(len(result.moves))
        self.metrics.plan_seconds.observe(plan_s)
        self.metrics.imbalance_after.set(imbalance(after))
        self.log(plan_line(self.plans, decision.reason, ratio, imbalance(after), len(result.moves), live, plan_s,
                           self.config.dry_run))
        event: dict[str, Any] = {
            "plan": self.plans, "t": time.time(), "reason": decision.reason, "brokers": live,
            "imbalance_before": round(ratio, 4), "imbalance_after": round(imbalance(after), 4),
            "loads_before": {str(b): round(v, 1) for b, v in loads.items()},
            "loads_after": {str(b): round(v, 1) for b, v in after.items()},
            "plan_s": round(plan_s, 4), "dry_run": self.config.dry_run,
            "moves": [{"topic": m.topic, "partition": m.partition, "from": m.from_broker, "to": m.to_broker}
                      for m in result.moves]}
        if self.config.dry_run:
            for m in result.moves:
                self.log(f"  proposal: {m.topic}-{m.partition} broker {m.from_broker} -> {m.to_broker}")
            left = loads  # nothing moved: the same load must not be proposed again on every tick
        elif result.moves:
            submitted_t = time.time()
            t0 = time.perf_counter()
            submitted, completed, rejected = await self.view.execute(result.moves, self.config.timeout_ms)
            elapsed = time.perf_counter() - t0
            self.metrics.execute_seconds.observe(elapsed)
            self.metrics.moves_completed.inc(completed)
            event.update(submitted_t=submitted_t, completed_t=submitted_t + elapsed, submitted=submitted,
                         completed=completed, rejected=rejected)
            self.log(f"balancer plan {self.plans}: {completed} of {submitted} moves completed in {elapsed:.2f} s"
                     + (f"; rejected {rejected}" if rejected else ""))
            left = after
        else:
            left = after
        finished = time.monotonic() if now_s is None else now_s
        self.last = LastPlan(finished, frozenset(live), left)
        if self.events is not None:
            self.events(event)
        return event

    async def run(self, duration_s: float | None = None) -> None:
        deadline = None if duration_s is None else time.monotonic() + duration_s
        while deadline is None or time.monotonic() < deadline:
            try:
                await self.tick()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - one bad tick (a controller election) must not stop balancing
                self.metrics.errors.inc()
                self.log(f"balancer: tick failed: {type(exc).__name__}: {exc}")
            await asyncio.sleep(self.config.interval_s)


def jsonl_writer(path: str) -> Callable[[dict[str, Any]], None]:
    def write(event: dict[str, Any]) -> None:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(event) + "\n")
    return write
