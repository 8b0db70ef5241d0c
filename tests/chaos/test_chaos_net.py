"""`ferry chaos run --net`: one seed of 30 s with every node in its own network namespace and the
network faults among the others (partitions, one-way cuts, S3 unreachable, flapping links, clock
steps).

`make soak-net` runs 20 seeds of 300 s. Skipped, with the reason, only where network namespaces
cannot be made (no `ip`, or not permitted).
"""
from __future__ import annotations

import glob
import subprocess
from typing import Any

import pytest

from tools.chaos.cli import summary
from tools.chaos.net import netns_permitted
from tools.chaos.runner import ChaosOptions, run_chaos
from tools.chaos.schedule import ALL_FAULTS, NET_FAULTS

pytestmark = [pytest.mark.integration, pytest.mark.chaos]

SEED = 66  # its 30 s: b2 cut from S3, c2 unable to send to b2, the active controller's wall clock stepped
# back 5 min and forwards again, the active controller cut from its followers; S3 errors and moves throughout
DURATION_S = 30.0


def test_a_seeded_network_chaos_run_passes(tmp_path: Any) -> None:
    reason = netns_permitted()
    if reason is not None:
        pytest.skip(f"network namespaces cannot be made here: {reason}")
    r = run_chaos(ChaosOptions(seed=SEED, duration_s=DURATION_S, out_dir=str(tmp_path), net=True,
                               faults=frozenset(ALL_FAULTS + NET_FAULTS)))
    assert r["verdict"] == "PASS", summary(r)
    stats = r["stats"]
    net_applied = [a for a in r["applied"] if a["kind"] in NET_FAULTS]
    assert len(net_applied) >= 3 and all(a["error"] is None for a in net_applied), r["applied"]
    assert stats["acked_http"] > 1000 and stats["acked_kafka"] > 1000, stats
    # every heal measured (or interrupted by the next fault), each within the session timeout + 2 s
    waits = stats["net_serve_again_s"]
    assert len(waits) + stats["net_heals_interrupted"] == len(net_applied) and waits and max(waits) <= 6.0, stats
    # the step reached the process (it logs each offset it takes) and changed nothing by itself
    assert stats["clock_steps"] == 1 and stats["clock_steps_judged"] == 1, stats
    logs = "".join(open(p, encoding="utf-8", errors="replace").read()
                   for p in glob.glob(f"{r['out_dir']}/cluster/**/*.log", recursive=True))
    assert "wall clock offset now -300000 ms" in logs and "wall clock offset now 0 ms" in logs
    assert r["replay"] == f"ferry chaos run --seed {SEED} --duration 30 --net"
    # the run's network is gone: no namespace, no bridge left behind
    subnet = next(n for n in r["notes"] if n.startswith("network fbr")).split()[1].rstrip(":")
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    spaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert f" {subnet}:" not in links and f"ferry{subnet[3:]}-" not in spaces
