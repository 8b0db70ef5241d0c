"""The network of a ``--net`` chaos run, its faults and the availability check, pure (no ``ip``)."""
from __future__ import annotations

import hashlib

import pytest

from tools.chaos.checker import AckTiming, LeaseCut, check_leases, check_serve_again, serve_again_s
from tools.chaos.net import CLIENTS, NetPlan, pairs_between
from tools.chaos.net_faults import heal_windows, leaseless_brokers, links_for, touched
from tools.chaos.schedule import (ALL_FAULTS, LINK_FAULTS, NET_FAULTS, PROCESS_FAULTS, FaultEvent, ScheduleSpec, make_schedule,
                                  overlapping, parse_faults)


def test_a_plan_names_everything_per_run_and_tears_down_what_it_builds() -> None:
    plan = NetPlan(7)
    assert plan.bridge == "fbr7" and plan.gateway == "10.200.7.1"
    assert [plan.ip(n) for n in plan.nodes] == [f"10.200.7.{i}" for i in range(2, 9)]
    assert plan.ip(CLIENTS) == plan.gateway
    assert plan.netns("b2") == "ferry7-b2" and plan.veth("b2") == "fv7b2"
    assert all(len(plan.veth(n)) <= 15 for n in NetPlan(250).nodes)  # Linux's interface name limit
    assert plan.placement("c1").prefix == ("ip", "netns", "exec", "ferry7-c1")
    setup, teardown = plan.setup(), plan.teardown()
    assert setup[0] == ["ip", "link", "add", "fbr7", "type", "bridge"]  # the bridge claims the subnet
    made = {c[3] for c in setup if c[:3] == ["ip", "netns", "add"]}
    gone = {c[3] for c in teardown if c[:3] == ["ip", "netns", "del"]}
    assert made == gone == {plan.netns(n) for n in plan.nodes}
    assert teardown[-1] == ["ip", "link", "del", "fbr7"]
    assert NetPlan(8).bridge != plan.bridge and not set(NetPlan(8).nodes) - set(plan.nodes)
    with pytest.raises(ValueError):
        NetPlan(0)


def test_a_cut_is_a_blackhole_route_on_the_sending_side() -> None:
    plan = NetPlan(3)
    assert plan.cut("b1", "c2") == [["ip", "netns", "exec", "ferry3-b1", "ip", "route", "add", "blackhole",
                                     "10.200.3.3/32"]]
    assert plan.heal("b1", "c2")[0][6] == "del"
    assert plan.cut(CLIENTS, "b1") == [["ip", "route", "add", "blackhole", "10.200.3.5/32"]]  # the root namespace
    with pytest.raises(ValueError):
        plan.cut("b1", "b1")
    assert pairs_between(["b1"], ["c1", "c2"]) == [("b1", "c1"), ("b1", "c2"), ("c1", "b1"), ("c2", "b1")]
    assert pairs_between(["b1"], ["s3"], both_ways=False) == [("b1", "s3")]


def test_each_network_fault_cuts_what_it_says() -> None:
    def cut(kind: str, **kw: object) -> set[tuple[str, str]]:
        return set(links_for(FaultEvent(1.0, 2.0, kind, **kw), leader=2).links)  # type: ignore[arg-type]

    assert cut("net_broker_controllers", target=3) == {(a, b) for c in ("c1", "c2", "c3")
                                                       for a, b in (("b3", c), (c, "b3"))}
    assert cut("net_broker_s3", target=1) == {("b1", "s3"), ("s3", "b1")}
    assert cut("net_clients_broker", target=2) == {("clients", "b2"), ("b2", "clients")}
    # the active controller (2) loses its followers, nobody else: brokers still reach it
    assert cut("net_leader_followers") == {("c2", "c1"), ("c1", "c2"), ("c2", "c3"), ("c3", "c2")}
    assert cut("net_one_way", node="leader", peer="b1") == {("c2", "b1")}
    isolate = links_for(FaultEvent(1.0, 2.0, "net_isolate", node="leader"), leader=1)
    assert isolate.down == ("c1",) and not isolate.links and touched(isolate) == {"c1"}
    flap = links_for(FaultEvent(1.0, 2.0, "net_flap", node="b2", period_ms=300), leader=1)
    assert flap.down == ("b2",) and flap.flap_ms == 300


def test_schedules_without_network_faults_are_what_they_were() -> None:
    digest = hashlib.sha256()
    for seed in range(1, 21):
        for e in make_schedule(ScheduleSpec(seed, 300.0)):
            digest.update(e.describe().encode())
    # the schedules of seeds 1-20 x 300 s before network faults existed
    assert digest.hexdigest() == "c68b4f85fa8a93d06350d4b73d4b1e0fa1fd9c5d2ba5f98652bef5b1302c2db8"
    assert parse_faults(None) == frozenset(ALL_FAULTS) and not parse_faults(None) & set(NET_FAULTS)


@pytest.mark.parametrize("seed", range(30))
def test_network_faults_join_the_process_track_one_at_a_time(seed: int) -> None:
    spec = ScheduleSpec(seed=seed, duration_s=300.0, faults=frozenset(ALL_FAULTS + NET_FAULTS))
    events = make_schedule(spec)
    assert events == make_schedule(spec)
    assert not overlapping(events, PROCESS_FAULTS + NET_FAULTS)
    for e in (e for e in events if e.kind in LINK_FAULTS):
        cut = links_for(e, leader=1)
        assert touched(cut) and all(a != b for a, b in cut.links), e
        assert e.describe()


def test_every_network_fault_shows_up_over_seeds() -> None:
    kinds = {e.kind for seed in range(10) for e in make_schedule(
        ScheduleSpec(seed, 120.0, faults=frozenset(ALL_FAULTS + NET_FAULTS)))}
    assert set(NET_FAULTS) <= kinds


def test_serving_again_after_a_heal() -> None:
    acks = {"p0": [1.0, 2.0, 10.5], "p1": [1.5, 12.0]}
    assert serve_again_s(10.0, acks) == pytest.approx(2.0)
    assert serve_again_s(11.0, acks) is None  # p0 never acknowledged again
    violations, waits, interrupted = check_serve_again([("isolate b1", 10.0, 99.0), ("cut b2 from S3", 1.2, 9.0)],
                                                        acks, 6.0)
    assert waits == [2.0, 0.8] and not violations and interrupted == 0
    violations, _, _ = check_serve_again([("isolate b1", 10.0, 99.0)], acks, 1.0)
    assert len(violations) == 1 and violations[0].check == "availability" and "isolate b1" in violations[0].message
    # another fault began before the limit: not judged, counted
    violations, waits, interrupted = check_serve_again([("isolate b1", 11.0, 13.0)], acks, 6.0)
    assert not violations and not waits and interrupted == 1


def test_brokers_without_a_lease_are_those_cut_from_every_controller() -> None:
    def leaseless(kind: str, **kw: object) -> list[int]:
        return leaseless_brokers(links_for(FaultEvent(1.0, 2.0, kind, **kw), leader=2))  # type: ignore[arg-type]

    assert leaseless("net_broker_controllers", target=3) == [3]
    assert leaseless("net_isolate", node="b1") == [1]
    assert leaseless("net_isolate", node="leader") == []
    assert leaseless("net_broker_s3", target=1) == []
    assert leaseless("net_flap", node="b2", period_ms=300) == []  # up half the time: it may renew
    assert leaseless("net_one_way", node="b1", peer="leader") == []  # another leader may be reachable


def test_an_acknowledgement_after_the_lease_ran_out_is_a_violation() -> None:
    cut = LeaseCut(2, start_s=100.0, end_s=110.0, what="cut b2 from the controllers")
    fine = [AckTiming("t-0", 2, 103.0, 103.5),  # sent within the lease
            AckTiming("t-0", 1, 106.0, 106.1),  # another broker
            AckTiming("t-0", 2, 109.0, 110.5)]  # answered after the heal
    assert check_leases([cut], fine, session_s=4.0) == []
    late = fine + [AckTiming("t-1", 2, 105.0, 105.2)]
    violations = check_leases([cut], late, session_s=4.0)
    assert len(violations) == 1 and violations[0].check == "leases" and "t-1" in violations[0].message


def test_a_heal_is_judged_until_the_next_fault_or_the_end_of_the_load() -> None:
    applied = [("net_isolate", "isolate b1", 5.0, 8.0, True), ("s3_errors", "S3 errors", 8.5, 12.0, True),
               ("reassign", "move", 9.0, 9.0, True), ("broker_kill", "kill -9 broker 2", 11.0, 13.0, True),
               ("net_one_way", "b1 cannot send to c1", 14.0, 16.0, False),
               ("net_broker_s3", "cut b3 from S3", 17.0, 19.0, True)]
    # S3 faults and moves overlap the process track and do not end a heal's window; a fault that
    # could not be applied is not judged; the last heal is judged until the load stopped (the
    # seed 1 x 300 s soak's last heal was judged against a producer already stopped)
    assert heal_windows(applied, 21.0) == [("isolate b1", 8.0, 11.0), ("cut b3 from S3", 19.0, 21.0)]
