"""The planner's goals beyond load balance: rack spread, request-rate capacity, log dirs within a
broker, each reported before and after; plans stay deterministic and idempotent."""
from __future__ import annotations

import numpy as np
import pytest

from metadata_quorum.kernel.errors import FerryError
from tools.rebalance.log_dirs import parse_kafka_log_dirs, plan_log_dirs
from tools.rebalance.model import make_cluster_load, reassignment_json
from tools.rebalance.planner import PlannerConfig, plan
from tools.rebalance.summary import goals_report, rack_violations
from tools.rebalance.synthetic import SyntheticSpec, synthetic_cluster

SPEC = SyntheticSpec(1_200, 9, partitions_per_topic=10, seed=5)  # 10 per topic: a rack may hold 4
RACKS = {b: "abc"[b % 3] for b in range(9)}


def requests_per_broker(cluster, owners):
    return np.bincount(owners, weights=cluster.request_rates, minlength=len(cluster.brokers))


def test_rack_goal_spreads_every_topic_over_the_racks_and_keeps_the_load_goals():
    cluster = synthetic_cluster(SPEC)
    config = PlannerConfig(racks=tuple(sorted(RACKS.items())))
    assert rack_violations(cluster, cluster.owners, RACKS, cluster.brokers) > 100  # hot topics sit on 2 brokers
    result = plan(cluster, config)
    assert rack_violations(cluster, result.owners_after, RACKS, cluster.brokers) == 0
    assert "rack" not in result.unmet_goals and result.moves_by_goal.get("rack", 0) > 0
    goals = goals_report(cluster, result.owners_after, cluster.brokers, cluster.brokers, RACKS, (None, None), None, None)
    assert goals["rack"]["after"] == 0 < goals["rack"]["before"]
    assert goals["net_in"]["after"] <= 1.10 + 1e-9 and goals["net_out"]["after"] <= 1.10 + 1e-9
    again = plan(cluster.with_owners(result.owners_after), config)
    assert again.moves == []  # a fixed point
    assert [m for m in plan(cluster, config).moves] == result.moves  # deterministic


def test_rack_goal_wins_over_load_when_they_conflict_and_says_so():
    # 12 partitions per topic on 3 racks: every rack must hold exactly 4 of each topic, so no
    # partition may cross racks once spread and the racks' loads cannot be evened
    cluster = synthetic_cluster(SyntheticSpec(1_200, 9, partitions_per_topic=12, seed=5))
    result = plan(cluster, PlannerConfig(racks=tuple(sorted(RACKS.items()))))
    assert rack_violations(cluster, result.owners_after, RACKS, cluster.brokers) == 0
    assert "rack" not in result.unmet_goals and "net_in" in result.unmet_goals


def test_request_rate_capacity_moves_load_off_brokers_above_it():
    cluster = synthetic_cluster(SPEC)
    per = requests_per_broker(cluster, cluster.owners)
    cap = float(per.mean() * 1.2)
    assert (per > cap).any()
    result = plan(cluster, PlannerConfig(max_request_rate=cap))
    assert (requests_per_broker(cluster, result.owners_after) <= cap * (1 + 1e-9)).all()
    assert "capacity" not in result.unmet_goals and result.moves_by_goal.get("capacity", 0) > 0
    assert plan(cluster.with_owners(result.owners_after), PlannerConfig(max_request_rate=cap)).moves == []
    goals = goals_report(cluster, result.owners_after, cluster.brokers, cluster.brokers, {}, (None, None), cap, None)
    assert goals["capacity"]["before"]["request_rate"] > 0 and goals["capacity"]["after"]["request_rate"] == 0
    with pytest.raises(FerryError):
        plan(cluster, PlannerConfig(max_request_rate=-1.0))


def test_every_broker_needs_a_rack():
    cluster = synthetic_cluster(SPEC)
    with pytest.raises(FerryError) as err:
        plan(cluster, PlannerConfig(racks=((0, "a"), (1, "b"))))
    assert "have no rack" in err.value.message


def log_dirs_json(where: dict[tuple[str, int], str], dirs: dict[int, list[str]]) -> dict:
    return {"version": 1, "brokers": [
        {"broker": b, "logDirs": [{"logDir": d, "error": None, "partitions": [
            {"partition": f"{t}-{p}", "size": 1, "offsetLag": 0, "isFuture": False}
            for (t, p), dd in sorted(where.items()) if dd == d]} for d in ds]} for b, ds in sorted(dirs.items())]}


def test_log_dirs_are_balanced_within_each_broker_and_moved_partitions_pick_the_lightest_dir():
    loads = [50.0, 40.0, 30.0, 20.0, 10.0, 5.0, 30.0, 30.0]
    cluster = make_cluster_load(["t"] * 8, range(8), [1, 1, 1, 1, 1, 1, 2, 2], loads, [1.0] * 8, brokers=[1, 2])
    dirs = {1: ["/d1", "/d2"], 2: ["/e1", "/e2"]}
    where = {("t", p): "/d1" for p in range(6)} | {("t", 6): "/e1", ("t", 7): "/e2"}
    parsed_dirs, current = parse_kafka_log_dirs(log_dirs_json(where, dirs))
    assert parsed_dirs == dirs and current == where
    owners_after = cluster.owners.copy()
    owners_after[0] = 2  # t-0 (50) moves to broker 2
    result = plan_log_dirs(cluster, owners_after, parsed_dirs, current, band=0.10)
    assert result.before["max_over_mean"] == pytest.approx(2.0)  # broker 1: everything on /d1
    per = {d: 0.0 for ds in dirs.values() for d in ds}
    for i, d in enumerate(result.dirs):
        per[d] += loads[i]
    assert per["/d1"] == pytest.approx(per["/d2"], rel=0.25) and result.after["max_over_mean"] < 1.2
    assert result.dirs[0] in ("/e1", "/e2") and 0 not in result.intra_moves  # arrivals are not intra moves
    assert all(int(owners_after[i]) == int(cluster.owners[i]) for i in result.intra_moves)
    plan_json = reassignment_json([], cluster, result)
    intra = {r["partition"]: (r["replicas"], r["log_dirs"]) for r in plan_json["partitions"]}
    assert sorted(intra) == result.intra_moves  # partition p is row p here
    for p, (replicas, dirs_) in intra.items():
        assert replicas == [int(cluster.owners[p])] and dirs_ == [result.dirs[p]] != [current[("t", p)]]
    # balanced input: no intra-broker move
    settled = {(str(cluster.topics[i]), int(cluster.partitions[i])): d for i, d in enumerate(result.dirs)}
    again = plan_log_dirs(cluster.with_owners(owners_after), owners_after, parsed_dirs, settled, band=0.10)
    assert again.intra_moves == [] and again.dirs == result.dirs
