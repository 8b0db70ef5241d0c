"""The balancer's loop with a fake cluster view and samples in a local directory (no processes, no Spark)."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from tools.balancer.loop import Balancer, BalancerConfig
from tools.rebalance.model import Move
from tools.rebalance.replan import ReplanPolicy
from tools.rebalance.samples import PartitionSample, encode_samples, write_samples_dir
from tools.rebalance.warm import LocalObjects, WarmPlanner

END_MS = 1_700_000_000_000


class FakeView:
    def __init__(self, live: list[int], leaders: dict[tuple[str, int], int]) -> None:
        self.live, self.leader_map, self.executed = live, leaders, []  # type: list[Move]

    async def live_brokers(self) -> list[int]:
        return list(self.live)

    async def leaders(self, topics: Sequence[str]) -> dict[tuple[str, int], int]:
        return dict(self.leader_map)

    async def execute(self, moves: Sequence[Move], timeout_ms: int) -> tuple[int, int, dict[str, str]]:
        self.executed += list(moves)
        for m in moves:
            self.leader_map[(m.topic, m.partition)] = m.to_broker
        return len(moves), len(moves), {}


def publish(root: Path, owners: dict[int, int], ts_ms: int, bytes_per_s: int = 1_000_000) -> None:
    """One interval: partition p on broker owners[p], each taking bytes_per_s."""
    for broker in set(owners.values()):
        rows = [PartitionSample(ts_ms, 1_000, broker, "hot", p, bytes_per_s, 0, 100, 0, 0)
                for p, b in owners.items() if b == broker]
        write_samples_dir(root, broker, ts_ms, encode_samples(rows))


def make(tmp_path: Path, dry_run: bool) -> tuple[Balancer, FakeView, list[str]]:
    owners = {p: 1 for p in range(12)}
    for k in range(3):
        publish(tmp_path, owners, END_MS + k * 1_000)
    view = FakeView([1, 2, 3], {("hot", p): b for p, b in owners.items()})
    lines: list[str] = []
    balancer = Balancer(view, WarmPlanner(LocalObjects(tmp_path), window_ms=3_000),
                        BalancerConfig(dry_run=dry_run, policy=ReplanPolicy(cooldown_s=10.0)), log=lines.append)
    return balancer, view, lines


async def test_dry_run_proposes_once_and_moves_nothing(tmp_path):
    balancer, view, lines = make(tmp_path, dry_run=True)
    event = await balancer.tick(now_s=0.0)
    assert event is not None and event["reason"] == "first" and event["imbalance_before"] == 3.0
    assert event["moves"] and event["imbalance_after"] < 1.1 and not view.executed
    assert "dry-run (nothing submitted)" in lines[0] and any("proposal: hot-" in line for line in lines)
    # the same load is not proposed again: nothing moved, nothing changed
    assert await balancer.tick(now_s=20.0) is None
    assert balancer.metrics.decisions.labels("unchanged")._value.get() == 1


async def test_balances_then_waits_and_reacts_to_a_new_broker(tmp_path):
    balancer, view, lines = make(tmp_path, dry_run=False)
    event = await balancer.tick(now_s=0.0)
    assert event is not None and event["completed"] == event["submitted"] == len(view.executed) > 0
    after = {b: sum(1 for owner in view.leader_map.values() if owner == b) for b in (1, 2, 3)}
    assert after == {1: 4, 2: 4, 3: 4}
    assert "imbalance 3.000 -> 1.000" in lines[0] and "moves completed" in lines[1]
    # owners come from the controllers, not the lagging samples: balanced now, nothing to do
    assert await balancer.tick(now_s=20.0) is None
    assert balancer.metrics.decisions.labels("balanced")._value.get() == 1
    view.live.append(4)  # a new broker: planned at once, within the cool-down
    event = await balancer.tick(now_s=21.0)
    assert event is not None and event["reason"] == "brokers_changed" and {m["to"] for m in event["moves"]} == {4}
    assert len(event["moves"]) == 3 and event["imbalance_after"] == 1.0
