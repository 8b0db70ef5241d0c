"""A Cruise-Control-like proposal summary: per resource before/after stats, floor, moves, load moved."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from tools.rebalance.model import RESOURCES, ClusterLoad


def resource_stats(per_broker: np.ndarray) -> dict[str, float]:
    """avg, max, min, stddev (population) and max/mean of one resource over brokers."""
    values = np.asarray(per_broker, dtype=np.float64)
    if values.size == 0:
        return {"avg": 0.0, "max": 0.0, "min": 0.0, "stddev": 0.0, "max_over_mean": 1.0}
    avg = float(values.mean())
    return {"avg": avg, "max": float(values.max()), "min": float(values.min()), "stddev": float(values.std()),
            "max_over_mean": float(values.max() / avg) if avg > 0 else 1.0}


def broker_totals(cluster: ClusterLoad, owners: np.ndarray, brokers: Sequence[int]) -> dict[str, np.ndarray]:
    """Per broker (in ``brokers`` order): each resource's load, the partition count and bytes stored."""
    index = {int(b): k for k, b in enumerate(brokers)}
    pos = np.array([index[int(b)] for b in owners], dtype=np.int64)
    out: dict[str, np.ndarray] = {}
    for r, name in enumerate(RESOURCES):
        out[name] = np.bincount(pos, weights=cluster.loads[:, r], minlength=len(brokers))
    out["partition_count"] = np.bincount(pos, minlength=len(brokers)).astype(np.float64)
    out["size_bytes"] = np.bincount(pos, weights=cluster.size_bytes.astype(np.float64), minlength=len(brokers))
    return out


def feasibility_floor(cluster: ClusterLoad, n_brokers: int) -> dict[str, float]:
    """max(1, largest partition ÷ mean broker load): the best max/mean any plan can reach."""
    floors = {}
    for r, name in enumerate(RESOURCES):
        total = float(cluster.loads[:, r].sum())
        largest = float(cluster.loads[:, r].max(initial=0.0))
        floors[name] = max(1.0, largest / (total / n_brokers)) if total > 0 else 1.0
    return floors


def summarize(cluster: ClusterLoad, owners_after: np.ndarray, brokers_before: Sequence[int],
              brokers_after: Sequence[int]) -> dict[str, Any]:
    before = broker_totals(cluster, cluster.owners, brokers_before)
    after = broker_totals(cluster, owners_after, brokers_after)
    moved = cluster.owners != owners_after
    floors = feasibility_floor(cluster, len(brokers_after))
    resources: dict[str, Any] = {}
    for name in (*RESOURCES, "partition_count", "size_bytes"):
        resources[name] = {"before": resource_stats(before[name]), "after": resource_stats(after[name])}
        if name in floors:
            resources[name]["floor"] = floors[name]
    moved_share = {}
    for r, name in enumerate(RESOURCES):
        total = float(cluster.loads[:, r].sum())
        moved_share[name] = float(cluster.loads[moved, r].sum() / total) if total > 0 else 0.0
    total_size = float(cluster.size_bytes.sum())
    moved_share["size_bytes"] = float(cluster.size_bytes[moved].sum() / total_size) if total_size > 0 else 0.0
    return {
        "partitions": cluster.n_partitions,
        "brokers_before": [int(b) for b in brokers_before],
        "brokers_after": [int(b) for b in brokers_after],
        "moves": int(moved.sum()),
        "moved_share": moved_share,
        "resources": resources,
    }


def rack_violations(cluster: ClusterLoad, owners: np.ndarray, racks: dict[int, str],
                    usable_brokers: Sequence[int]) -> int:
    """Partitions above their topic's per-rack cap ceil(P_t / racks), summed (0 without racks)."""
    if not racks:
        return 0
    usable = sorted({racks[b] for b in usable_brokers if b in racks})
    counts: dict[tuple[str, str], int] = {}
    per_topic: dict[str, int] = {}
    for topic, owner in zip(cluster.topics.tolist(), owners.tolist(), strict=True):
        rack = racks.get(int(owner), "")
        counts[(topic, rack)] = counts.get((topic, rack), 0) + 1
        per_topic[topic] = per_topic.get(topic, 0) + 1
    return sum(max(0, n - -(-per_topic[t] // max(1, len(usable)))) for (t, _r), n in counts.items())


def capacity_violations(cluster: ClusterLoad, owners: np.ndarray, brokers: Sequence[int],
                        capacity: Sequence[float | None], max_request_rate: float | None) -> dict[str, int]:
    """Brokers above each configured capacity (network in/out, request rate)."""
    totals = broker_totals(cluster, owners, brokers)
    out = {}
    for r, name in enumerate(RESOURCES):
        limit = capacity[r]
        if limit is not None:
            out[name] = int((totals[name] > float(limit) * (1 + 1e-9)).sum())
    if max_request_rate is not None:
        index = {int(b): k for k, b in enumerate(brokers)}
        pos = np.array([index[int(b)] for b in owners], dtype=np.int64)
        per = np.bincount(pos, weights=cluster.request_rates, minlength=len(brokers))
        out["request_rate"] = int((per > max_request_rate * (1 + 1e-9)).sum())
    return out


def goals_report(cluster: ClusterLoad, owners_after: np.ndarray, brokers_before: Sequence[int],
                 brokers_after: Sequence[int], racks: dict[int, str], capacity: Sequence[float | None],
                 max_request_rate: float | None, log_dirs: Any | None) -> dict[str, dict[str, Any]]:
    """Each goal before and after the plan, in priority order (violations, or max/mean)."""
    before = broker_totals(cluster, cluster.owners, brokers_before)
    after = broker_totals(cluster, owners_after, brokers_after)
    goals: dict[str, dict[str, Any]] = {}
    if racks:
        goals["rack"] = {"measure": "partitions above their topic's per-rack cap",
                         "before": rack_violations(cluster, cluster.owners, racks, brokers_after),
                         "after": rack_violations(cluster, owners_after, racks, brokers_after)}
    if any(c is not None for c in capacity) or max_request_rate is not None:
        goals["capacity"] = {"measure": "brokers above a capacity",
                             "before": capacity_violations(cluster, cluster.owners, brokers_before, capacity,
                                                           max_request_rate),
                             "after": capacity_violations(cluster, owners_after, brokers_after, capacity,
                                                          max_request_rate)}
    for name in (*RESOURCES, "partition_count"):
        goals[name] = {"measure": "max/mean over brokers",
                       "before": resource_stats(before[name])["max_over_mean"],
                       "after": resource_stats(after[name])["max_over_mean"]}
    requests_before = np.bincount([list(brokers_before).index(int(b)) for b in cluster.owners.tolist()],
                                  weights=cluster.request_rates, minlength=len(brokers_before))
    requests_after = np.bincount([list(brokers_after).index(int(b)) for b in owners_after.tolist()],
                                 weights=cluster.request_rates, minlength=len(brokers_after))
    goals["request_rate"] = {"measure": "max/mean over brokers (records in + out per second)",
                             "before": resource_stats(requests_before)["max_over_mean"],
                             "after": resource_stats(requests_after)["max_over_mean"]}
    if log_dirs is not None:
        goals["log_dirs"] = {"measure": "worst max/mean of network-in over a broker's log dirs",
                             "before": log_dirs.before["max_over_mean"], "after": log_dirs.after["max_over_mean"],
                             "dirs_over_band_before": int(log_dirs.before["dirs_over_band"]),
                             "dirs_over_band_after": int(log_dirs.after["dirs_over_band"]),
                             "intra_broker_moves": len(log_dirs.intra_moves)}
    return goals


def render_summary(summary: dict[str, Any]) -> str:
    """The summary as a plain-text table (what `ferry rebalance` prints)."""
    lines = [f"partitions {summary['partitions']}, brokers {len(summary['brokers_before'])} -> "
             f"{len(summary['brokers_after'])}, moves {summary['moves']} "
             f"({summary['moves'] / max(1, summary['partitions']):.1%} of partitions)"]
    header = f"{'resource':<16}{'':>7}{'avg':>14}{'max':>14}{'min':>14}{'stddev':>14}{'max/mean':>10}{'floor':>8}"
    lines.append(header)
    for name, res in summary["resources"].items():
        for when in ("before", "after"):
            st = res[when]
            floor = f"{res['floor']:.3f}" if "floor" in res and when == "after" else ""
            lines.append(f"{name if when == 'before' else '':<16}{when:>7}{st['avg']:>14.1f}{st['max']:>14.1f}"
                         f"{st['min']:>14.1f}{st['stddev']:>14.1f}{st['max_over_mean']:>10.3f}{floor:>8}")
    if summary.get("goals"):
        lines.append(f"{'goal':<16}{'before':>12}{'after':>12}  measure")
        for name, goal in summary["goals"].items():
            def fmt(v: Any) -> str:
                if isinstance(v, dict):
                    return str(sum(v.values()))
                return f"{v:.3f}" if isinstance(v, float) else str(v)
            lines.append(f"{name:<16}{fmt(goal['before']):>12}{fmt(goal['after']):>12}  {goal['measure']}")
    share = ", ".join(f"{k} {v:.1%}" for k, v in summary["moved_share"].items())
    lines.append(f"load moved: {share}")
    if summary.get("unmet_goals"):
        lines.append(f"goals not fully met: {', '.join(summary['unmet_goals'])}")
    if "timings_s" in summary:
        lines.append("plan time: " + ", ".join(f"{k} {v:.2f} s" for k, v in summary["timings_s"].items()))
    return "\n".join(lines)
