"""The planner core, baselines, summary and sample format, without Spark."""
from __future__ import annotations

import numpy as np
import pytest

from metadata_quorum.kernel.errors import ErrorCode, FerryError
from tools.rebalance.greedy import greedy_owners
from tools.rebalance.model import make_cluster_load, reassignment_json, Move
from tools.rebalance.planner import PlannerConfig, plan
from tools.rebalance.round_robin import round_robin_owners
from tools.rebalance.samples import (PartitionSample, decode_samples, encode_samples, keys_in_window,
                                     parse_sample_key, sample_key)
from tools.rebalance.summary import broker_totals, feasibility_floor, summarize
from tools.rebalance.synthetic import SyntheticSpec, synthetic_cluster


def max_over_mean(cluster, owners, brokers=None):
    totals = broker_totals(cluster, owners, brokers or cluster.brokers)
    return {r: float(totals[r].max() / totals[r].mean()) for r in ("net_in", "net_out")}


SPECS = [SyntheticSpec(2_000, 10, partitions_per_topic=20, seed=1),
         SyntheticSpec(3_000, 30, partitions_per_topic=20, seed=2),
         SyntheticSpec(1_500, 12, partitions_per_topic=20, distribution="zipf", zipf_exponent=0.9, seed=3)]


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: f"{s.partitions}x{s.brokers}-{s.distribution}")
def test_plan_reaches_the_band_or_the_floor_and_replanning_moves_nothing(spec):
    cluster = synthetic_cluster(spec)
    before = max_over_mean(cluster, cluster.owners)
    assert max(before.values()) >= 2.0
    result = plan(cluster)
    after = max_over_mean(cluster, result.owners_after)
    floor = feasibility_floor(cluster, len(cluster.brokers))
    for r in ("net_in", "net_out"):
        bound = 1.10 if floor[r] <= 1.10 else floor[r] + 0.02
        assert after[r] <= bound + 1e-9, (r, after[r], floor[r])
    assert result.moves and len(result.moves) < cluster.n_partitions // 4
    counts = np.bincount(result.owners_after, minlength=spec.brokers)
    if max(floor.values()) <= 1.10:
        assert counts.max() <= np.ceil(counts.mean() * 1.10)
        assert result.unmet_goals == []
    again = plan(cluster.with_owners(result.owners_after))
    assert again.moves == []


def test_moves_are_within_one_and_a_half_times_the_greedy_baseline():
    cluster = synthetic_cluster(SyntheticSpec(5_000, 25, partitions_per_topic=50, seed=4))
    ours = plan(cluster)
    greedy = greedy_owners(cluster)
    greedy_moves = int((greedy != cluster.owners).sum())
    assert max(max_over_mean(cluster, greedy).values()) <= 1.10 + 1e-9
    assert len(ours.moves) <= 1.5 * greedy_moves


def test_same_input_in_any_order_gives_the_same_plan():
    cluster = synthetic_cluster(SyntheticSpec(1_000, 8, partitions_per_topic=10, seed=5))
    perm = np.random.default_rng(0).permutation(cluster.n_partitions)
    shuffled = make_cluster_load(cluster.topics[perm], cluster.partitions[perm], cluster.owners[perm],
                                 cluster.loads[perm, 0], cluster.loads[perm, 1], cluster.size_bytes[perm])
    first, second, third = plan(cluster), plan(cluster), plan(shuffled)
    assert first.moves == second.moves == third.moves
    assert reassignment_json(first.moves) == reassignment_json(third.moves)


def test_equal_loads_tie_break_deterministically():
    # every partition has the same load: any choice is as good, the plan must still be the same
    n = 60
    cluster = make_cluster_load(["t"] * n, range(n), [0] * 40 + [1] * 20, [10.0] * n, [10.0] * n,
                                brokers=[0, 1, 2])
    plans = [plan(cluster).moves for _ in range(3)]
    assert plans[0] == plans[1] == plans[2]
    assert all(m.from_broker == 0 for m in plans[0])
    assert max(max_over_mean(cluster, plan(cluster).owners_after).values()) <= 1.10


def test_a_giant_partition_keeps_its_broker_to_itself():
    # one partition carries 40 % of the load over 4 brokers: the floor is 1.6
    loads = [400.0] + [10.0] * 60
    owners = [0] * 31 + [1] * 10 + [2] * 10 + [3] * 10
    cluster = make_cluster_load(["t"] * 61, range(61), owners, loads, loads, brokers=[0, 1, 2, 3])
    result = plan(cluster)
    floor = feasibility_floor(cluster, 4)["net_in"]
    assert floor == pytest.approx(1.6)
    assert max(max_over_mean(cluster, result.owners_after).values()) <= floor + 1e-9
    assert list(result.owners_after).count(0) == 1 and result.owners_after[0] == 0  # only the giant stays
    assert all(m.partition != 0 for m in result.moves)  # the giant itself does not move
    assert plan(cluster.with_owners(result.owners_after)).moves == []


def test_a_balanced_cluster_and_dust_need_no_moves():
    # within the band already; the only "imbalance" is dust below min_move_share of the mean
    loads = [100.0] * 30 + [0.001] * 10
    owners = [b for b in range(3) for _ in range(10)] + [0] * 10
    cluster = make_cluster_load(["t"] * 40, range(40), owners, loads, loads, brokers=[0, 1, 2])
    assert plan(cluster, PlannerConfig(count_band=10.0)).moves == []


def test_add_broker_moves_only_onto_the_new_brokers():
    cluster = synthetic_cluster(SyntheticSpec(1_200, 6, partitions_per_topic=20, seed=6))
    result = plan(cluster, PlannerConfig(add_brokers=(6, 7)))
    assert result.moves
    assert {m.to_broker for m in result.moves} <= {6, 7}
    totals = broker_totals(cluster, result.owners_after, list(range(8)))
    mean_in = totals["net_in"].mean()
    assert totals["net_in"][6] >= 0.9 * mean_in and totals["net_in"][7] >= 0.9 * mean_in


def test_remove_broker_moves_only_off_the_removed_brokers_and_empties_them():
    cluster = synthetic_cluster(SyntheticSpec(1_200, 6, partitions_per_topic=20, seed=7))
    result = plan(cluster, PlannerConfig(remove_brokers=(1, 4)))
    on_removed = int(np.isin(cluster.owners, [1, 4]).sum())
    assert len(result.moves) == on_removed
    assert {m.from_broker for m in result.moves} <= {1, 4}
    assert not set(result.owners_after.tolist()) & {1, 4}


def test_capacity_limit_comes_first():
    loads = [50.0] * 20
    cluster = make_cluster_load(["t"] * 20, range(20), [0] * 12 + [1] * 4 + [2] * 4, loads, loads, brokers=[0, 1, 2])
    result = plan(cluster, PlannerConfig(capacity_bytes_per_s=(360.0, None)))
    totals = broker_totals(cluster, result.owners_after, [0, 1, 2])
    assert totals["net_in"].max() <= 360.0
    assert result.moves_by_goal.get("capacity", 0) > 0


def test_bad_input_is_refused_with_kafka_error_names():
    with pytest.raises(FerryError) as empty:
        make_cluster_load([], [], [], [], [])
    assert empty.value.error is ErrorCode.INVALID_REQUEST and "nothing to plan" in empty.value.message
    with pytest.raises(FerryError) as dup:
        make_cluster_load(["t", "t"], [0, 0], [1, 2], [1.0, 1.0], [1.0, 1.0])
    assert dup.value.error is ErrorCode.INVALID_REQUEST and "t-0" in dup.value.message
    with pytest.raises(FerryError) as negative:
        make_cluster_load(["t"], [0], [1], [-1.0], [1.0])
    assert negative.value.error is ErrorCode.INVALID_REQUEST
    cluster = make_cluster_load(["t", "t"], [0, 1], [1, 2], [1.0, 1.0], [1.0, 1.0])
    with pytest.raises(FerryError) as unknown:
        plan(cluster, PlannerConfig(remove_brokers=(9,)))
    assert unknown.value.error is ErrorCode.BROKER_ID_NOT_REGISTERED and "[9]" in unknown.value.message
    with pytest.raises(FerryError) as everything:
        plan(cluster, PlannerConfig(remove_brokers=(1, 2)))
    assert "no broker would be left" in everything.value.message
    with pytest.raises(FerryError) as not_listed:
        make_cluster_load(["t"], [0], [5], [1.0], [1.0], brokers=[1, 2])
    assert not_listed.value.error is ErrorCode.BROKER_ID_NOT_REGISTERED
    from tools.rebalance.model import ClusterLoad
    stray = ClusterLoad(cluster.topics, cluster.partitions, np.array([1, 7]), cluster.loads, cluster.size_bytes, (1, 2))
    with pytest.raises(FerryError) as outside:
        plan(stray)
    assert outside.value.error is ErrorCode.BROKER_ID_NOT_REGISTERED and "[7]" in outside.value.message
    assert cluster.with_owners(np.array([1, 9])).brokers == (1, 2, 9)


def test_summary_numbers():
    # brokers 1, 2, 3 hold net_in 60, 30, 0; moving partition b (30) to broker 3 evens them at 30 each
    cluster = make_cluster_load(["a", "b", "c", "d"], [0, 0, 0, 0], [1, 1, 2, 2], [30.0, 30.0, 20.0, 10.0],
                                [10.0, 0.0, 0.0, 0.0], [100, 200, 300, 400], brokers=[1, 2, 3])
    after = np.array([1, 3, 2, 2])
    s = summarize(cluster, after, [1, 2, 3], [1, 2, 3])
    before_in = s["resources"]["net_in"]["before"]
    assert before_in["avg"] == pytest.approx(30.0) and before_in["max"] == 60.0 and before_in["min"] == 0.0
    assert before_in["stddev"] == pytest.approx(np.std([60.0, 30.0, 0.0]))
    assert before_in["max_over_mean"] == pytest.approx(2.0)
    after_in = s["resources"]["net_in"]["after"]
    assert (after_in["max"], after_in["min"], after_in["stddev"]) == (30.0, 30.0, 0.0)
    assert s["resources"]["net_in"]["floor"] == pytest.approx(1.0)  # 30 / 30
    assert s["resources"]["net_out"]["floor"] == pytest.approx(3.0)  # 10 / (10 / 3)
    assert s["moves"] == 1
    assert s["moved_share"]["net_in"] == pytest.approx(30.0 / 90.0)
    assert s["moved_share"]["size_bytes"] == pytest.approx(0.2)
    assert s["resources"]["partition_count"]["after"]["max"] == 2.0


def test_reassignment_json_is_kafkas_format():
    moves = [Move("b", 1, 0, 2), Move("a", 3, 1, 0)]
    assert reassignment_json(moves) == {"version": 1, "partitions": [
        {"topic": "a", "partition": 3, "replicas": [0], "log_dirs": ["any"]},
        {"topic": "b", "partition": 1, "replicas": [2], "log_dirs": ["any"]}]}


def test_baselines():
    cluster = synthetic_cluster(SyntheticSpec(2_000, 10, partitions_per_topic=20, seed=8))
    rr = round_robin_owners(cluster)
    assert np.bincount(rr, minlength=10).tolist() == [200] * 10  # 20 per topic over 10 brokers
    assert (rr != cluster.owners).sum() > 1_000  # blind to where partitions are
    greedy = greedy_owners(cluster)
    assert max(max_over_mean(cluster, greedy).values()) <= 1.10 + 1e-9


def test_sample_format_round_trips_and_windows_by_key():
    s = PartitionSample(1_700_000_000_000, 10_000, 3, "orders", 7, 100, 200, 1, 2, 4096)
    assert decode_samples(encode_samples([s, s])) == [s, s]
    key = sample_key(3, 1_700_000_000_000)
    assert key == "metrics/broker=3/1700000000000.jsonl" and parse_sample_key(key) == (3, 1_700_000_000_000)
    assert parse_sample_key("metrics/broker=x/1.jsonl") is None
    keys = [sample_key(b, ts) for b in (1, 2) for ts in (1_000, 11_000, 21_000)] + ["metrics/other"]
    chosen, end = keys_in_window(keys, 15_000)
    assert end == 21_000 and chosen == sorted(sample_key(b, ts) for b in (1, 2) for ts in (11_000, 21_000))
    with pytest.raises(FerryError) as bad:
        decode_samples(b'{"ts_ms": 1}\n')
    assert bad.value.error is ErrorCode.INVALID_RECORD and "line 1" in bad.value.message


def test_the_rebalancer_reads_the_format_the_broker_writes():
    """One format: the broker's module defines it, the rebalancer and Spark's schema follow it."""
    import broker.load_samples as broker_format
    from tools.rebalance import samples
    from tools.rebalance.aggregate import SAMPLE_SCHEMA_DDL

    assert samples.PartitionSample is broker_format.PartitionSample
    assert samples.encode_samples is broker_format.encode_samples and samples.sample_key is broker_format.sample_key
    spark_columns = tuple(part.split()[0] for part in SAMPLE_SCHEMA_DDL.split(","))
    assert spark_columns == broker_format.SAMPLE_COLUMNS == tuple(broker_format.PartitionSample.__dataclass_fields__)


from hypothesis import given, settings, strategies as st  # noqa: E402


@st.composite
def clusters(draw):
    n_brokers = draw(st.integers(2, 7))
    n = draw(st.integers(1, 120))
    owners = draw(st.lists(st.integers(0, n_brokers - 1), min_size=n, max_size=n))
    heavy = draw(st.sampled_from([1.0, 3.0, 30.0]))  # how heavy the tail of partition loads is
    seeds = draw(st.lists(st.floats(0.0, 1.0), min_size=2 * n, max_size=2 * n))
    net_in = [heavy ** (4 * s) - 1.0 for s in seeds[:n]]  # many small, a few large, some zero
    net_out = [x * (0.5 + s) for x, s in zip(net_in, seeds[n:], strict=True)]
    return make_cluster_load(["t"] * n, range(n), owners, net_in, net_out, brokers=range(n_brokers))


@settings(max_examples=150, deadline=None)
@given(clusters())
def test_any_cluster_plan_is_a_fixed_point_and_never_worse(cluster):
    result = plan(cluster)
    assert plan(cluster).moves == result.moves
    assert plan(cluster.with_owners(result.owners_after)).moves == []
    before = broker_totals(cluster, cluster.owners, cluster.brokers)
    after = broker_totals(cluster, result.owners_after, cluster.brokers)
    # the top load goal never ends worse than it started, unless it ends within the band (or at a giant)
    bound = max(before["net_in"].max(), 1.10 * before["net_in"].mean(), cluster.loads[:, 0].max())
    assert after["net_in"].max() <= bound * (1 + 1e-9) + 1e-9


@settings(max_examples=100, deadline=None)
@given(clusters(), st.data())
def test_any_cluster_modes_touch_only_their_brokers(cluster, data):
    new = max(cluster.brokers) + 1
    added = plan(cluster, PlannerConfig(add_brokers=(new,)))
    assert all(m.to_broker == new for m in added.moves)
    gone = data.draw(st.sampled_from(cluster.brokers))
    removed = plan(cluster, PlannerConfig(remove_brokers=(gone,)))
    assert all(m.from_broker == gone for m in removed.moves)
    assert gone not in set(removed.owners_after.tolist())


def test_fewer_partitions_than_brokers():
    # every partition is a giant: nothing can get better by moving, in any mode
    cluster = make_cluster_load(["t", "t"], [0, 1], [0, 0], [100.0, 50.0], [100.0, 50.0], brokers=[0, 1, 2])
    assert plan(cluster, PlannerConfig(add_brokers=(3,))).moves[0].to_broker == 3
    balanced = plan(cluster)
    assert len(balanced.moves) == 1 and balanced.moves[0].partition == 1  # the giants get a broker each
    assert plan(cluster.with_owners(balanced.owners_after)).moves == []
