"""Scale without collapse: every partition of a 2,000-partition topic moved at once, on real
processes (3 controllers, 3 brokers, a moto server), through Kafka's reassignment API.

The promise: all partitions end at their requested brokers, the controller quorum keeps its
leader (no election), no broker is fenced although sessions are 1.5 s and heartbeats 250 ms, a
bounded number of metadata records per moved partition, no event holds a controller's loop
anywhere near a session, and every acknowledged record is read back exactly once, at its offset.
Then one broker is restarted with a controlled shutdown (SIGTERM, started again with its id):
every partition ends served by a live broker, and nothing acknowledged before or after the
restart is lost or read twice (`ferry perf scale` also crashes a broker: `--restarts`).
The full curve (1,000 to 100,000 partitions) is `ferry perf scale` (`make perf`).
"""
from __future__ import annotations

import aiohttp
import pytest
from rich.console import Console

from tools.admin import Admin
from tools.cluster import LocalCluster
from tools.perf.scale import ClusterProbe, one_size

pytestmark = pytest.mark.integration

PARTITIONS = 2000
SESSION_TIMEOUT_MS = 1500
HEARTBEAT_INTERVAL_MS = 250


async def test_two_thousand_partitions_move_at_once_without_election_or_fencing(tmp_path) -> None:
    sessions = {"session_timeout_ms": SESSION_TIMEOUT_MS}
    cluster = LocalCluster(str(tmp_path / "cluster"), controller_overrides=sessions,
                           broker_overrides={**sessions, "heartbeat_interval_ms": HEARTBEAT_INTERVAL_MS}).start()
    try:
        async with Admin(bootstrap_controllers=cluster.controller_bootstrap, timeout_ms=120_000) as admin, \
                aiohttp.ClientSession() as session:
            probe = ClusterProbe(session, cluster.controller_bootstrap,
                                 [cluster.broker_url(b) for b in sorted(cluster.broker_ports)])
            r = await one_size(cluster, admin, probe, PARTITIONS, 2, Console(quiet=True),
                               restarts=["graceful"])
    finally:
        cluster.stop()
    assert r["not_led_by_target"] == 0
    assert r["elections"] == 0, r
    assert r["fenced"] == 0, r
    assert r["acknowledged"] == PARTITIONS * 3
    assert (r["missing"], r["duplicated"], r["misplaced"]) == (0, 0, 0), r
    assert r["records_per_move"] <= 8.0, r["records_by_type"]
    assert r["all_serving_s"] < 120, r
    # the longest hold of a controller's loop: below the session, so no hold fences a broker
    # (`ferry perf scale` reports the figure against its 100 ms target)
    assert 0 < r["loop_lag_max_ms"] < SESSION_TIMEOUT_MS, r
    assert r["controller_kib_per_partition"] > 0 and r["broker_kib_per_partition"] > 0, r
    # the restart stopped a broker that held partitions, which all serve elsewhere (the restarted
    # broker comes back empty); then a record more to every partition, and everything read back
    assert r["phase"] == "done", r
    assert r["restart_held"] > 0, r
    assert sum(r["restart_led_by"].values()) == PARTITIONS, r
    assert r["restart_led_by"][str(r["restart_broker"])] == 0, r
    assert r["restart_exit_code"] == 0, r
    assert r["restart_elections"] == 0, r
    assert r["restart_acknowledged"] == PARTITIONS * 4
    assert (r["restart_missing"], r["restart_duplicated"], r["restart_misplaced"]) == (0, 0, 0), r
