"""`ferry balancer run` against a real cluster: a dry run proposes and changes nothing; the balancer
then balances a cluster whose hot partitions all sit on one broker, under load, losing nothing."""
from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tools.admin import Admin
from tools.client import TopicPartition
from tools.cluster import LocalCluster
from tools.move_workload import ProduceLoad, check_read_back

pytestmark = [pytest.mark.integration]

FAST = ["--interval-s", "1", "--window-ms", "3000", "--cooldown-s", "2", "--min-load", "1000"]


@pytest.fixture
def cluster(tmp_path):
    c = LocalCluster(str(tmp_path / "cluster"), brokers=3, broker_overrides={"metrics_interval_ms": 500})
    c.start()
    yield c
    c.stop(graceful=False)


def fetch_text(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as r:
        return str(r.read().decode())


async def leaders(cluster: LocalCluster) -> dict[int, int]:
    async with Admin(bootstrap_controllers=cluster.controller_bootstrap) as admin:
        parts = (await admin.describe_topics(["hot"]))["hot"]
    assert not isinstance(parts, Exception)
    return {p.partition: p.leader for p in parts}


async def wait_event(path: Path, want: Any, timeout_s: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        if path.exists():
            for line in path.read_text(encoding="utf-8").splitlines():
                event = json.loads(line)
                if want(event):
                    return event
        assert time.monotonic() < deadline, f"no balancer plan in {timeout_s} s"
        await asyncio.sleep(0.5)


async def test_balancer_dry_run_then_balances_under_load(cluster):
    hot = [TopicPartition("hot", p) for p in range(6)]
    async with Admin(bootstrap_controllers=cluster.controller_bootstrap) as admin:
        await admin.create_topic("hot", 6, assignments={p: [1] for p in range(6)})
        for tp in hot:
            await admin.wait_for_leader(tp, timeout_s=30)
    load = await ProduceLoad(cluster.bootstrap_servers, hot, rate_per_s=100.0, value_bytes=200).start()
    events = Path(cluster.state_dir) / "balancer-events.jsonl"
    try:
        metrics_url = await asyncio.to_thread(cluster.start_balancer, True, FAST)
        proposal = await wait_event(events, lambda e: e["dry_run"] and e["moves"], 60)
        assert proposal["imbalance_before"] > 2.0 and proposal["imbalance_after"] < proposal["imbalance_before"]
        assert {m["from"] for m in proposal["moves"]} == {1} and {m["to"] for m in proposal["moves"]} <= {2, 3}
        assert set((await leaders(cluster)).values()) == {1}  # a dry run changes nothing
        log = (Path(cluster.state_dir) / "balancer.log").read_text(encoding="utf-8")
        assert "dry-run (nothing submitted)" in log and "proposal: hot-" in log
        text = await asyncio.to_thread(fetch_text, metrics_url)
        assert 'ferry_balancer_plans_total{mode="dry_run"}' in text and "ferry_balancer_imbalance " in text

        assert cluster.balancer is not None
        cluster.balancer.terminate()
        cluster.balancer.wait(10)
        events.unlink()
        await asyncio.to_thread(cluster.start_balancer, False, FAST)
        done = await wait_event(events, lambda e: not e["dry_run"] and e.get("completed"), 60)
        assert done["completed"] == done["submitted"] == len(done["moves"]) > 0 and not done["rejected"]
        assert done["imbalance_before"] > 2.0 and done["imbalance_after"] < 1.5
        now = await leaders(cluster)
        assert all(now[m["partition"]] == m["to"] for m in done["moves"])
        assert len(set(now.values())) == 3
        log = (Path(cluster.state_dir) / "balancer.log").read_text(encoding="utf-8")
        assert f"moves={len(done['moves'])}" in log and "moves completed" in log
        await asyncio.sleep(0.5)
    finally:
        await load.stop()
    result = await check_read_back(cluster.bootstrap_servers, load)
    assert result.ok, result.summary()
    assert result.acknowledged > 0 and sum(load.failed.values()) == 0
