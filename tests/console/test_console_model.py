"""The console's view model, without sockets or clocks: states, rates, moves merged from both
sides, the quorum's lag, diffs, and the move form's strict parsing."""
from __future__ import annotations

import json

import pytest

from metadata_quorum.kernel.errors import ErrorCode, FerryError
from tools.console.model import (
    History,
    MetricsSample,
    Observation,
    broker_state,
    build_view,
    diff_view,
    merge_moves,
    parse_metrics,
    parse_move_form,
    quorum_view,
    rates,
)
from tools.console.synthetic import SyntheticSource

METRICS = """# TYPE ferry_broker_produce_records_total counter
ferry_broker_produce_records_total{topic="t",partition="0"} 30.0
ferry_broker_produce_records_total{topic="t",partition="1"} 70.0
# TYPE ferry_broker_produce_bytes_total counter
ferry_broker_produce_bytes_total 5000.0
# TYPE ferry_broker_produce_latency_seconds histogram
ferry_broker_produce_latency_seconds_bucket{le="+Inf"} 10.0
ferry_broker_produce_latency_seconds_count 10.0
ferry_broker_produce_latency_seconds_sum 0.05
"""


def move(topic: str, p: int, move_id: int, src: int, dst: int, steps: dict[str, int | None], complete: bool) -> dict:
    t = {"t0": 1000, "t1": 1002, "t2": 1003, "t3": 1005, "t4": 1020, "t5": 1022, "t6": 1030 if complete else None}
    return {"topic": topic, "partition": p, "move_id": move_id, "from_broker": src, "to_broker": dst,
            "complete": complete, "clean": True, "t_ms": t, "steps_ms": steps, "total_ms": 30 if complete else None}


def obs(at_ms: int, leaders: dict[str, list[int]], **kw: object) -> Observation:
    return Observation(at_ms=at_ms, brokers={1: {"fenced": False}, 2: {"fenced": False}},
                       broker_health={1: {"state": "RUNNING"}, 2: {"state": "RUNNING"}},
                       partitions={t: [(p, ld, [ld]) for p, ld in enumerate(ls)] for t, ls in leaders.items()},
                       **kw)  # type: ignore[arg-type]


def test_metrics_are_summed_over_labels_and_rates_come_from_two_samples() -> None:
    a = parse_metrics(METRICS, 1000)
    assert (a.produce_records, a.produce_bytes, a.latency_count, a.latency_sum_s) == (100.0, 5000.0, 10.0, 0.05)
    b = MetricsSample(3000, produce_records=300.0, produce_bytes=9000.0, latency_sum_s=0.15, latency_count=30.0)
    assert rates(a, b) == [3000.0, 100.0, 2000.0, 5.0]
    restarted = MetricsSample(4000, produce_records=50.0, latency_count=0.0)
    assert rates(b, restarted)[1] == 50.0 and rates(b, restarted)[3] == 0.0


def test_broker_states() -> None:
    assert broker_state({"fenced": False}, None) == "dead"
    assert broker_state({"fenced": True}, {"state": "RUNNING"}) == "fenced"
    assert broker_state({}, {"state": "RUNNING", "fenced": True}) == "fenced"
    assert broker_state({}, {"state": "SHUTTING_DOWN"}) == "draining"
    assert broker_state({}, {"state": "RUNNING"}) == "alive"
    assert broker_state({}, {"state": "STARTING"}) == "starting"


def test_moves_from_both_sides_are_merged_the_complete_one_kept_newest_first() -> None:
    h = History()
    half = move("t", 0, 7, 1, 2, {"1": 2, "2": 1, "3": 2, "4": 15, "5": 2, "6": None}, complete=False)
    full = move("t", 0, 7, 1, 2, {"1": 2, "2": 1, "3": 2, "4": 15, "5": 2, "6": 8}, complete=True)
    older = move("t", 1, 5, 2, 1, {"1": 1, "2": 1, "3": 1, "4": 1, "5": 1, "6": 1}, complete=True)
    views = merge_moves(h, {1: [half, older], 2: [full]})
    assert [v["key"] for v in views] == ["t/0/7", "t/1/5"]
    assert views[0]["complete"] and views[0]["steps_ms"] == [2, 1, 2, 15, 2, 8] and views[0]["gap_ms"] == 27
    assert views[0]["done_ms"] == 1030
    # the complete answer is kept when a later poll has only the half
    assert merge_moves(h, {1: [half]})[0]["complete"]
    # only the newest `kept` stay
    assert [v["key"] for v in merge_moves(h, {}, kept=1)] == ["t/0/7"] and list(h.moves) == ["t/0/7"]


def test_quorum_lag_is_committed_records_not_applied() -> None:
    q = quorum_view({1: {"node_id": 1, "is_leader": True, "term": 4, "high_watermark": 100, "image_offset": 99},
                     2: {"node_id": 2, "is_leader": False, "term": 4, "high_watermark": 100, "image_offset": 90},
                     3: None})
    assert (q["leader_id"], q["term"], q["high_watermark"]) == (1, 4, 100)
    assert [(n["id"], n["up"], n.get("lag")) for n in q["nodes"]] == [(1, True, 0), (2, True, 9), (3, False, None)]
    assert quorum_view({1: None})["leader_id"] is None


def test_a_moved_partition_is_one_pair_in_the_diff() -> None:
    h = History()
    first = build_view(obs(1000, {"t": [1, 2, 1], "u": [2]}), h)
    assert diff_view(None, first) == {"full": first}
    assert [(b["id"], b["leads"]) for b in first["brokers"]] == [(1, 2), (2, 2)]
    assert diff_view(first, build_view(obs(1200, {"t": [1, 2, 1], "u": [2]}), h)) is None
    second = build_view(obs(1400, {"t": [2, 2, 1], "u": [2]}), h)
    d = diff_view(first, second)
    assert d is not None and d["leaders"] == {"t": [[0, 2]]} and "topics_set" not in d
    assert d["brokers"] == second["brokers"] and "partitions" not in d
    third = build_view(obs(1600, {"t": [2, 2, 1, 1], "v": [1]}), h)
    d = diff_view(second, third)
    assert d is not None and d["topics_set"] == {"t": [2, 2, 1, 1], "v": [1]} and d["topics_gone"] == ["u"]


def test_the_series_grow_with_each_metrics_sample() -> None:
    h = History()
    build_view(obs(1000, {}, metrics={1: MetricsSample(1000, produce_records=0)}), h)
    v = build_view(obs(2000, {}, metrics={1: MetricsSample(2000, produce_records=500)}), h)
    assert v["series"] == {"1": [[2000.0, 500.0, 0.0, 0.0]]} and v["brokers"][0]["records_per_s"] == 500.0


@pytest.mark.parametrize("body, replicas", [
    ({"topic": "t", "partition": 3, "replicas": [2, 3]}, [2, 3]),
    ({"topic": " t ", "partition": "3", "replicas": "2, 3"}, [2, 3]),
    ({"topic": "t", "partition": "3", "replicas": "-1"}, [-1]),  # the controller answers for a bad id
])
def test_the_move_form_parses(body: dict, replicas: list[int]) -> None:
    assert parse_move_form(body) == ("t", 3, replicas)


@pytest.mark.parametrize("body", [
    [], {"partition": 0, "replicas": [1]}, {"topic": "", "partition": 0, "replicas": [1]},
    {"topic": "t", "partition": -1, "replicas": [1]}, {"topic": "t", "partition": 1.0, "replicas": [1]},
    {"topic": "t", "partition": True, "replicas": [1]}, {"topic": "t", "partition": "٣", "replicas": [1]},
    {"topic": "t", "partition": 2**31, "replicas": [1]}, {"topic": "t", "partition": 0, "replicas": []},
    {"topic": "t", "partition": 0, "replicas": "1,,2"}, {"topic": "t", "partition": 0, "replicas": "one"},
    {"topic": "t", "partition": 0, "replicas": [True]}, {"topic": "t", "partition": 0, "replicas": [2**31]},
])
def test_bad_move_forms_are_invalid_request(body: object) -> None:
    with pytest.raises(FerryError) as e:
        parse_move_form(body)
    assert e.value.error is ErrorCode.INVALID_REQUEST


async def test_the_synthetic_cluster_moves_at_its_rate_and_the_view_stays_small_to_update() -> None:
    clock = [0]
    source = SyntheticSource(10_000, moves_per_s=100, now_ms=lambda: clock[0])
    h = History()
    first = build_view(await source.observe(), h)
    assert sum(len(ls) for ls in first["partitions"].values()) == 10_000
    clock[0] = 200
    second = build_view(await source.observe(), h)
    d = diff_view(first, second)
    assert d is not None
    changed = sum(len(pairs) for pairs in d["leaders"].values())
    assert 1 <= changed <= 20 and len(second["moves"]) == 20
    assert all(0 < m["done_ms"] <= 200 for m in second["moves"])
    assert len(json.dumps(d)) < len(json.dumps(first)) / 4


def test_a_move_completed_after_the_topics_were_read_moves_its_cell() -> None:
    h = History()
    done = move("t", 1, 9, 1, 2, {"1": 1, "2": 1, "3": 1, "4": 1, "5": 1, "6": 1}, complete=True)  # t6 = 1030
    before = move("t", 0, 8, 2, 1, {"1": 1, "2": 1, "3": 1, "4": 1, "5": 1, "6": 1}, complete=True)
    before["t_ms"] = dict(before["t_ms"], t6=900)
    half = move("t", 2, 10, 1, 2, {"1": 1, "2": None, "3": None, "4": None, "5": None, "6": None}, complete=False)
    v = build_view(obs(1100, {"t": [2, 1, 1]}, moves={1: [done, before, half]}, partitions_at_ms=1000), h)
    # the map read at 1000 still had t/1 on broker 1; its move completed at 1030: broker 2. The move
    # of t/0 completed before the read (the read is right), the one of t/2 is not complete.
    assert v["partitions"]["t"] == [2, 2, 1]
    assert [(b["id"], b["leads"]) for b in v["brokers"]] == [(1, 1), (2, 2)]
    later = build_view(obs(1300, {"t": [2, 2, 1]}, moves={}, partitions_at_ms=1200), h)
    assert later["partitions"]["t"] == [2, 2, 1]
