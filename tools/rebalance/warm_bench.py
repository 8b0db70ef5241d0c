"""``plan_warm_s``: how long a re-plan takes on a warm planner after one new interval of samples.

A synthetic skewed cluster (tools/rebalance/synthetic.py) publishes ``intervals`` intervals of
samples into a local directory laid out like the bucket; the first plan reads them all (a Spark
job: the cold path); then one more interval arrives, with the load of a few partitions changed,
and the second plan — the one measured — reads only those objects, aggregates the window and
plans. The Spark session's start is reported apart (``spark_startup_s``), as in ``ferry perf
rebalance``.
"""
from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from tools.rebalance.model import ClusterLoad
from tools.rebalance.planner import PlannerConfig
from tools.rebalance.samples import write_samples_dir
from tools.rebalance.synthetic import SyntheticSpec, synthetic_cluster, synthetic_samples
from tools.rebalance.warm import LocalObjects, WarmPlanner

INTERVAL_MS = 1_000
END_MS = 1_700_000_000_000


def _publish(cluster: ClusterLoad, root: Path, intervals: int, end_ms: int, seed: int) -> None:
    frame = synthetic_samples(cluster, intervals=intervals, interval_ms=INTERVAL_MS, end_ms=end_ms, seed=seed)
    for (ts_ms, broker_id), rows in frame.groupby(["ts_ms", "broker_id"]):
        write_samples_dir(root, int(broker_id), int(ts_ms), rows.to_json(orient="records", lines=True).encode())


def measure_plan_warm(partitions: int = 1_000, brokers: int = 10, intervals: int = 30,
                      master: str = "local[2]", seed: int = 7) -> dict[str, Any]:
    from tools.rebalance.spark_session import timed_spark_session

    cluster = synthetic_cluster(SyntheticSpec(partitions, brokers, partitions_per_topic=20, seed=seed))
    _spark, startup_s = timed_spark_session(master)
    with tempfile.TemporaryDirectory(prefix="ferry-warm-plan-") as tmp:
        root = Path(tmp)
        _publish(cluster, root, intervals, END_MS, seed)
        planner = WarmPlanner(LocalObjects(root), window_ms=intervals * INTERVAL_MS, master=master)
        config = PlannerConfig(balance_band=0.10)
        cold = planner.plan(config)
        # one interval later the cluster is where the first plan left it, and a few partitions got hotter
        loads = cluster.loads.copy()
        rng = np.random.default_rng(seed + 1)
        loads[rng.choice(partitions, size=max(1, partitions // 50), replace=False)] *= 4.0
        moved = ClusterLoad(cluster.topics, cluster.partitions, cold.result.owners_after, loads,
                            cluster.size_bytes, cluster.brokers, cluster.requests)
        _publish(moved, root, 1, END_MS + INTERVAL_MS, seed + 2)
        started = time.perf_counter()
        warm = planner.plan(config)
        wall_s = time.perf_counter() - started
    return {"partitions": partitions, "brokers": brokers, "window_objects": warm.window_objects,
            "spark_startup_s": round(startup_s, 3),
            "cold": {"s": round(cold.total_s, 3), "read_s": round(cold.read_s, 3), "objects": cold.new_objects,
                     "spark_read": cold.spark_read, "moves": len(cold.result.moves)},
            "plan_warm_s": round(wall_s, 3),
            "warm": {"read_s": round(warm.read_s, 3), "aggregate_s": round(warm.aggregate_s, 3),
                     "plan_s": round(warm.plan_s, 3), "objects": warm.new_objects, "spark_read": warm.spark_read,
                     "moves": len(warm.result.moves)}}
