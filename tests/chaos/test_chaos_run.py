"""`ferry chaos run` end to end: seed 1 for 30 s against a real local cluster, passing.

One seed here (about 40 s; tests/chaos/test_chaos_net.py runs another with network faults); `make soak`
runs 20 seeds of 120 s. A failure prints each violation and the command that replays the seed.
"""
from __future__ import annotations

import os
from typing import Any

import pytest

from tools.chaos.cli import summary
from tools.chaos.runner import ChaosOptions, run_chaos

pytestmark = [pytest.mark.integration, pytest.mark.chaos]

SEEDS = (1,)
DURATION_S = 30.0


def test_two_seeded_chaos_runs_pass(tmp_path: Any) -> None:
    results = [run_chaos(ChaosOptions(seed=seed, duration_s=DURATION_S, out_dir=str(tmp_path))) for seed in SEEDS]
    failures = [summary(r) for r in results if r["verdict"] != "PASS"]
    assert not failures, "\n\n".join(failures)
    for r in results:
        stats = r["stats"]
        # The run did what it claims: load was acknowledged, faults were applied, the log was checked.
        assert stats["acked_http"] > 1000 and stats["acked_kafka"] > 1000, stats
        assert stats["txn_committed"] > 50 and stats["txn_aborted"] > 10 and stats["txn_live_lso_checks"] > 500, stats
        assert stats["faults_applied"] >= 5 and stats["faults_failed_to_apply"] == 0, r["applied"]
        assert stats["metadata_records"] > 100 and stats["metadata_checked_from_offset"] == 0
        assert os.path.getsize(r["timeline_png"]) > 10_000
        assert r["replay"] == f"ferry chaos run --seed {r['seed']} --duration 30"
