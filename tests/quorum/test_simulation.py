"""The seeded simulation: invariants hold on many seeds, the runs are reproducible, and the
checks do catch a broken rule."""
from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest

from metadata_quorum import simulation
from metadata_quorum.image import PartitionRegistration
from metadata_quorum.ops import streams
from metadata_quorum.simulation import InvariantViolation, Simulation, run_seed

SEEDS = range(50)
STEPS = 200


def test_invariants_hold_on_many_seeds() -> None:
    errors: Counter[str] = Counter()
    ops: Counter[str] = Counter()
    moves = 0
    for seed in SEEDS:
        result = run_seed(seed, STEPS)
        errors.update(result.errors)
        ops.update(result.ops)
        moves += result.moves_completed
    # The runs must have exercised the interesting paths, or the invariants prove little.
    assert moves > 50
    for outcome in ["open_stream:STREAM_NOT_CLOSED", "open_stream:STREAM_FENCED", "commit_object:STREAM_FENCED",
                    "commit_object:OFFSET_NOT_MATCHED", "close_stream:STREAM_FENCED",
                    "register_broker:DUPLICATE_BROKER_REGISTRATION"]:
        assert errors[outcome] > 0, outcome
    assert ops["commit_object"] > 500 and ops["tick"] > 100
    assert ops["shutdown_completed"] > 10 and ops["log_dir_state_change"] > 50


@pytest.mark.parametrize("seed", [146, 464])
def test_regression_seeds(seed: int) -> None:
    """Seeds that once failed: the only live broker had every log dir full or offline, so no
    partition could be placed (KIP-928) and the liveness check must let dirs recover first."""
    result = run_seed(seed, STEPS)
    assert result.ops["log_dir_state_change"] > 0


def test_a_seed_is_reproducible() -> None:
    a, b = Simulation(7, 120), Simulation(7, 120)
    a.run()
    b.run()
    assert a.controller.log == b.controller.log


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
