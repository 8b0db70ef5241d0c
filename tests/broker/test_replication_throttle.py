"""KIP-73 throttles: the debt arithmetic, the throttled-replica lists, and the configs that
``ferry reassign-partitions --throttle`` writes and ``--verify`` removes (pure, no cluster)."""
from __future__ import annotations

from broker import replication_throttle as thr
from tools.client import TopicPartition
from tools.reassign_cmd import clear_throttle_resources, throttle_resources, throttle_set_lines


def test_debt_is_paid_back_at_the_rate_with_at_most_one_chunk_of_credit() -> None:
    rate = 100_000
    debt, delay = thr.charge(thr.Debt(0, 0), rate, 10_000, now_ms=0)
    assert delay == 100.0
    assert thr.wait_ms(debt, rate, now_ms=50) == 50.0
    assert thr.wait_ms(debt, rate, now_ms=100) == 0.0
    idle = thr.repaid(debt, rate, now_ms=10_000)
    assert idle.bytes_owed == -thr.chunk_bytes(rate, 1 << 62), "a long idle time earns one chunk, not more"
    _d, delay = thr.charge(idle, rate, 10_000, now_ms=10_000)
    assert delay == 0.0


def test_sending_a_stream_of_chunks_averages_the_rate() -> None:
    rate, now, sent, debt = 400_000, 0.0, 0, thr.Debt()
    chunk = thr.chunk_bytes(rate, 1 << 20)
    while sent < 4_000_000:
        debt, delay = thr.charge(debt, rate, chunk, int(now))
        sent += chunk
        now += delay + 7  # a 7 ms round trip each time
    assert abs(sent / (now / 1000) - rate) / rate < 0.05


def test_throttled_replica_lists() -> None:
    assert thr.throttled("0:1,1:2", 0, 1) and thr.throttled("0:1,1:2", 1, 2)
    assert not thr.throttled("0:1,1:2", 0, 2) and not thr.throttled("", 0, 1) and not thr.throttled(None, 0, 1)
    assert thr.throttled("*", 5, 9)
    assert thr.rate_of({"leader.replication.throttled.rate": "500"}, {}, thr.LEADER_RATE) == 500
    assert thr.rate_of({}, {"leader.replication.throttled.rate": "7"}, thr.LEADER_RATE) == 7
    assert thr.rate_of({}, {}, thr.LEADER_RATE) is None
    assert thr.rate_of({thr.LEADER_RATE: "x"}, {}, thr.LEADER_RATE) is None


def test_reassign_throttle_configs_are_kafkas() -> None:
    moves = {TopicPartition("t", 0): ([1, 2], [2, 3]), TopicPartition("t", 1): ([3], [1])}
    resources = throttle_resources(moves, 1000)
    brokers = [r for r in resources if r["type"] == "broker"]
    assert [b["name"] for b in brokers] == ["1", "2", "3"]
    assert brokers[0]["configs"] == {"leader.replication.throttled.rate": "1000",
                                     "follower.replication.throttled.rate": "1000"}
    (topic,) = [r for r in resources if r["type"] == "topic"]
    assert topic["ops"] == [{"op": "append", "key": "leader.replication.throttled.replicas", "value": "0:1,0:2,1:3"},
                            {"op": "append", "key": "follower.replication.throttled.replicas", "value": "0:3,1:1"}]
    cleared = clear_throttle_resources(["t"], [1, 2])
    assert cleared[-1] == {"type": "topic", "name": "t", "configs": {
        "leader.replication.throttled.replicas": None, "follower.replication.throttled.replicas": None}}
    assert throttle_set_lines(1000)[1] == "The inter-broker throttle limit was set to 1000 B/s"
