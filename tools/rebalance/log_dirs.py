"""Balance within a broker: which log dir each partition should live in (KIP-113's intra-broker
moves). Pure.

A broker with several log dirs writes each partition's WAL data to one of them; a dir that takes
most of the produce bytes saturates its disk first. After the broker moves are planned, each
broker's partitions are spread over its dirs so that every dir's network-in is within
mean × (1 ± band) of the broker's per-dir mean where partition sizes allow: partitions arriving
from another broker go to the dir with the least load; then the most loaded dir gives the
partition that best evens it with the least loaded one, until both are inside the band or no
move helps. A partition not moving between brokers keeps its dir unless its dir is over the band
(an intra-broker move copies its unuploaded WAL data: it has a cost). Ties break on dir name
and partition order, so the plan is deterministic, and a balanced input gives no moves.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from metadata_quorum.kernel.errors import ErrorCode, FerryError
from tools.rebalance.model import ClusterLoad


@dataclass(frozen=True)
class LogDirPlan:
    dirs: list[str | None]  # per partition (canonical order): its dir after the plan (None: broker has no dirs known)
    intra_moves: list[int]  # partitions that stay on their broker but change dir
    before: dict[str, float]  # worst per-broker max/mean of dir network-in, and dirs over the band
    after: dict[str, float]


def parse_kafka_log_dirs(body: Mapping[str, Any]) -> tuple[dict[int, list[str]], dict[tuple[str, int], str]]:
    """Kafka's ``kafka-log-dirs --describe`` JSON (what ``ferry log-dirs --describe`` prints):
    each broker's dirs, and each partition's current dir."""
    dirs: dict[int, list[str]] = {}
    where: dict[tuple[str, int], str] = {}
    brokers = body.get("brokers")
    if not isinstance(brokers, list):
        raise FerryError(ErrorCode.INVALID_REQUEST, "log dirs JSON needs {\"brokers\": [{\"broker\", \"logDirs\"}]}")
    for entry in brokers:
        bid = int(entry["broker"])
        for d in entry.get("logDirs", []):
            if d.get("error"):
                continue
            path = str(d["logDir"])
            dirs.setdefault(bid, []).append(path)
            for p in d.get("partitions", []):
                if p.get("isFuture"):
                    continue
                topic, _, index = str(p["partition"]).rpartition("-")
                where[(topic, int(index))] = path
    return {b: sorted(ds) for b, ds in dirs.items()}, where


def _stats(load: np.ndarray, owner: np.ndarray, dir_of: list[str | None], dirs: Mapping[int, Sequence[str]],
           band: float) -> dict[str, float]:
    worst, over = 1.0, 0
    for b, names in dirs.items():
        if len(names) < 2:
            continue
        per = {d: 0.0 for d in names}
        for i in np.nonzero(owner == b)[0].tolist():
            d = dir_of[i]
            if d is not None and d in per:
                per[d] += float(load[i])
        mean = sum(per.values()) / len(per)
        if mean > 0:
            worst = max(worst, max(per.values()) / mean)
            over += sum(1 for v in per.values() if v > mean * (1 + band) + 1e-9)
    return {"max_over_mean": worst, "dirs_over_band": float(over)}


def plan_log_dirs(cluster: ClusterLoad, owners_after: np.ndarray, dirs: Mapping[int, Sequence[str]],
                  current: Mapping[tuple[str, int], str], band: float = 0.10) -> LogDirPlan:
    """Each partition's dir after the broker moves, balancing network-in across a broker's dirs."""
    load = cluster.loads[:, 0]
    n = cluster.n_partitions
    before_dir: list[str | None] = [current.get((str(cluster.topics[i]), int(cluster.partitions[i]))) for i in range(n)]
    before = _stats(load, cluster.owners, before_dir, dirs, band)
    after_dir: list[str | None] = list(before_dir)
    intra: list[int] = []
    for b in sorted(set(int(x) for x in np.unique(owners_after))):
        names = sorted(dirs.get(b, []))
        mine = np.nonzero(owners_after == b)[0].tolist()
        if not names:
            for i in mine:
                after_dir[i] = None
            continue
        per = {d: 0.0 for d in names}
        arriving = []
        for i in mine:
            stays = int(cluster.owners[i]) == b and before_dir[i] in per
            if stays:
                per[before_dir[i]] += float(load[i])  # type: ignore[index]
            else:
                arriving.append(i)
        for i in sorted(arriving, key=lambda i: (-float(load[i]), i)):  # hottest first, each to the lightest dir
            d = min(names, key=lambda name: (per[name], name))
            after_dir[i] = d
            per[d] += float(load[i])
        if len(names) < 2:
            continue
        mean = sum(per.values()) / len(names)
        members = {d: sorted((i for i in mine if after_dir[i] == d), key=lambda i: (float(load[i]), i)) for d in names}
        for _ in range(len(mine)):
            hi = max(names, key=lambda name: (per[name], name))
            lo = min(names, key=lambda name: (per[name], name))
            if per[hi] <= mean * (1 + band) + 1e-9 and per[lo] >= mean * (1 - band) - 1e-9:
                break
            gap = per[hi] - per[lo]
            target = gap / 2
            # the partition nearest the transfer that evens the pair, and that narrows the gap
            best = min((i for i in members[hi] if 0 < float(load[i]) < gap),
                       key=lambda i: (abs(float(load[i]) - target), i), default=None)
            if best is None:
                break
            members[hi].remove(best)
            members[lo].append(best)
            after_dir[best] = lo
            per[hi] -= float(load[best])
            per[lo] += float(load[best])
            if int(cluster.owners[best]) == b and best not in intra:
                intra.append(best)
    intra = sorted(i for i in set(intra) if after_dir[i] != before_dir[i])
    after = _stats(load, owners_after, after_dir, dirs, band)
    return LogDirPlan(after_dir, intra, before, after)
