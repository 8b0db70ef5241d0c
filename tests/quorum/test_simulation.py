"""The seeded simulation: three controller cores over a faulty simulated log, brokers running the
partition state machine (broker/sim_broker.py drives broker/partition.py); invariants hold on
many seeds, the runs are reproducible, the checks do catch a broken rule, and a failing seed is
printed with the command that replays it. (``make soak`` runs 10,000 seeds.)"""
from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest

from broker import simulation
from metadata_quorum.image import PartitionRegistration
from metadata_quorum.ops import placement, streams
from metadata_quorum.sim_quorum import Faults
from broker.simulation import SESSION_TIMEOUT_MS, InvariantViolation, Simulation, run_seed

SEEDS = range(50)
STEPS = 60
MANY_SEEDS = range(1000, 1200)  # 200 seeds in ``make test``
MANY_STEPS = 30


def test_invariants_hold_on_200_seeds() -> None:
    errors: Counter[str] = Counter()
    ops: Counter[str] = Counter()
    quorum: Counter[str] = Counter()
    moves = 0
    for seed in MANY_SEEDS:
        result = run_seed(seed, MANY_STEPS)
        errors.update(result.errors)
        ops.update(result.ops)
        quorum.update(result.quorum)
        moves += result.moves_completed
    # The runs must have exercised the interesting paths, or the invariants prove little.
    assert moves > 15  # a move counts once, when its old owner's election after its close found a leader
    # the brokers ran the production partition state machine (broker/partition.py), its failure
    # decisions included: open retried and fenced, close retried and fenced after releasing
    assert ops["partition_opened"] > 200 and ops["partition_closed"] > 20
    for decision in ["open_failed:RETRY", "open_failed:FENCED", "close_failed:RETRY", "close_failed:RELEASE_UNFENCED",
                     "close_failed:FENCED"]:
        assert ops[decision] > 0, decision
    for outcome in ["open_stream:STREAM_NOT_CLOSED", "commit_object:STREAM_FENCED",
                    "register_broker:DUPLICATE_BROKER_REGISTRATION", "broker_heartbeat:NOT_CONTROLLER"]:
        assert errors[outcome] > 0, outcome
    assert ops["commit_object"] > 100 and ops["tick"] > 100 and ops["failover"] > 40
    assert ops["unregistered_live"] > 20  # an operator removed brokers whose lease could still run
    # old leaders cut off from the quorum went on answering: brokers cut off with them, and others
    assert quorum["isolated"] > 20 and quorum["stale_client"] > 50
    # and the replicated log misbehaved: leaders deposed, uncommitted entries lost, messages dropped
    assert quorum["depose"] > 20 and quorum["lost_entries"] > 10
    assert quorum["drop"] > 500 and quorum["duplicate"] > 500


@pytest.mark.parametrize("seed", [146, 464])
def test_regression_seeds(seed: int) -> None:
    """Seeds that once failed: the only live broker had every log dir full or offline, so no
    partition could be placed (KIP-928) and the liveness check must let dirs recover first."""
    result = run_seed(seed, 200)
    assert result.ops["log_dir_state_change"] > 0


@pytest.mark.parametrize("seed", [
    1384,  # an open judged against a delete whose fate was unknown, committed during the call
    2130,  # a refusal read off an uncommitted fence (the controller answered before it committed)
    6041,  # a placement judged against a dir state from before a heartbeat in the same step
    3365,  # settling jumped the clock with no network events: every command in flight expired
    3671,  # a broker never learned that a close whose answer it lost had committed
    608,  # a leader cut off with a broker answered its heartbeat: fenced inside the lease it granted
    1211,  # an open refused STREAM_NOT_EXIST by a controller behind: given up, the partition stayed unserved
    5586,  # the same with BROKER_ID_NOT_REGISTERED
])
def test_soak_regression_seeds(seed: int) -> None:
    """Seeds of ``make soak`` (40 steps) that once failed."""
    run_seed(seed, 40)


def test_a_seed_is_reproducible() -> None:
    a, b = Simulation(7, 120), Simulation(7, 120)
    a.run()
    b.run()
    assert a.controller.log == b.controller.log
    assert a.controller.committed_ids == b.controller.committed_ids


def test_a_failing_seed_is_printed_with_the_command_replaying_it(monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(streams, "_check_owner", lambda *args, **kwargs: None)
    assert simulation.main(["--seed", "0", "--count", "30", "--steps", "60"]) == 1
    out = capsys.readouterr().out
    assert "FAILED seed" in out and "replay: python -m broker.simulation --seed " in out


def test_the_checks_catch_a_missing_owner_check(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(streams, "_check_owner", lambda *args, **kwargs: None)
    with pytest.raises(InvariantViolation):
        for seed in SEEDS:
            run_seed(seed, STEPS)


def test_the_checks_catch_a_missing_leader_epoch_bump(monkeypatch: pytest.MonkeyPatch) -> None:
    original = PartitionRegistration.merge

    def merge_without_bump(self: PartitionRegistration, change):  # type: ignore[no-untyped-def]
        return replace(original(self, change), leader_epoch=self.leader_epoch)

    monkeypatch.setattr(PartitionRegistration, "merge", merge_without_bump)
    with pytest.raises(InvariantViolation):
        for seed in SEEDS:
            run_seed(seed, STEPS)


def test_main_prints_a_summary(capsys: pytest.CaptureFixture[str]) -> None:
    assert simulation.main(["3", "2", "60"]) == 0
    assert "moves_completed" in capsys.readouterr().out


def test_the_checks_catch_a_placement_on_an_offline_dir(monkeypatch: pytest.MonkeyPatch) -> None:
    original = placement.Placement.pick_dir

    def pick_offline(self: placement.Placement, builder, broker_id: int) -> str:  # type: ignore[no-untyped-def]
        reg = builder.view.broker(broker_id)
        return sorted(reg.offline_log_dirs)[0] if reg is not None and reg.offline_log_dirs else \
            original(self, builder, broker_id)

    monkeypatch.setattr(placement.Placement, "pick_dir", pick_offline)
    with pytest.raises(InvariantViolation, match="offline dir"):
        for seed in SEEDS:
            run_seed(seed, STEPS)


def test_a_leader_cut_off_with_a_broker_grants_no_lease_the_new_leader_does_not_count() -> None:
    """A network cut leaves the old leader with broker 0 only: the old leader goes on believing it
    leads (pysyncobj's leader does until leaderFallbackTimeout), the others elect a new one. A
    heartbeat answered off the old leader's image would renew broker 0's lease past the session
    the new leader counts, and the new leader would fence it (and give its streams away) while it
    could still acknowledge; the answer must wait for a commit the old leader cannot get."""
    sim = Simulation(5, steps=0, faults=Faults(drop=0.0, duplicate=0.0, depose=0.0, stale_client=0.0, isolate=0.0))
    for _ in range(3):
        sim.register()
    q = sim.controller
    broker = next(b for b in sim.brokers.values() if b.alive)
    old = q.leader()
    assert old is not None and old.core.active
    now = sim.clock.now_ms
    q.isolated_until_ms[old.node_id] = now + 2500
    q.cut_off_brokers[broker.broker_id] = (old.node_id, now + 60_000)
    q.elect()
    assert q.run_until(lambda: any(n.core.active and n is not old for n in q.nodes))
    assert old.core.active  # it still believes it leads
    lease_before = broker.lease_until_ms.get(broker.broker_epoch, 0)
    for _ in range(3):
        sim.clock.now_ms += 400
        assert sim.beat(broker) is None and sim.indeterminate  # never answered
    assert broker.lease_until_ms.get(broker.broker_epoch, 0) == lease_before
    assert q.counts["stale_client"] >= 3
    # the new leader fences the silent broker one session after its activation, checked against
    # the broker's lease (``fenced_for_silence``): an answered heartbeat above would outlast it
    for _ in range(SESSION_TIMEOUT_MS // 100):
        if sim.image.cluster.brokers[broker.broker_id].fenced:
            break
        sim.clock.now_ms += 100
        sim.call("tick", {})
    assert sim.image.cluster.brokers[broker.broker_id].fenced
    assert sim.clock.now_ms < now + 1200 + SESSION_TIMEOUT_MS  # within the lease a stale answer would give
