"""`ferry perf move`'s crash failover on real processes: after kill -9 of a broker, every
partition it led is acknowledged by another broker, no later than the session timeout allows
(detection) and not absurdly later (one batch of elections, the WAL tail recovered)."""
from __future__ import annotations

import pytest
from rich.console import Console

from tools.admin import Admin
from tools.cluster import LocalCluster
from tools.perf.move import crash_failover

pytestmark = pytest.mark.integration

SESSION_TIMEOUT_MS = 1500


async def test_every_partition_of_a_killed_broker_serves_elsewhere_after_its_session(tmp_path) -> None:
    cluster = LocalCluster(str(tmp_path / "cluster"), broker_overrides={"heartbeat_interval_ms": 250,
                                                                         "session_timeout_ms": SESSION_TIMEOUT_MS},
                           controller_overrides={"session_timeout_ms": SESSION_TIMEOUT_MS}).start()
    try:
        async with Admin(bootstrap_controllers=cluster.controller_bootstrap, timeout_ms=60_000) as admin:
            r = await crash_failover(cluster, admin, trials=1, partitions=4, console=Console(quiet=True))
            topic = await admin.describe_topics(["perf-crash-0"])
    finally:
        cluster.stop()
    (trial,) = r["trials"]
    # The lease rule: nothing may be led elsewhere before the dead broker's session can expire.
    assert SESSION_TIMEOUT_MS / 1000 - 0.25 <= trial["first_serving_s"] <= trial["all_serving_s"] < 10, r
    parts = topic["perf-crash-0"]
    assert not isinstance(parts, Exception)
    assert all(p.leader not in (-1, trial["broker"]) for p in parts), parts
