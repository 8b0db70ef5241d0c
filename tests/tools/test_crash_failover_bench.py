"""`ferry perf move`'s crash failover on real processes: after kill -9 of a broker, every
partition it led is acknowledged by another broker: on a peer's proof that the process is gone
(its WAL lock was free) or, with that probe off, no earlier than the session timeout allows; and
not absurdly later (one batch of elections, the WAL tail recovered)."""
from __future__ import annotations

from typing import Any

import pytest
from rich.console import Console

from metadata_quorum.client import ControllerClient
from tools.admin import Admin
from tools.cluster import LocalCluster
from tools.perf.move import crash_failover

pytestmark = pytest.mark.integration

SESSION_TIMEOUT_MS = 1500


async def committed_records(cluster: LocalCluster) -> list[dict[str, Any]]:
    """Every record of the metadata log, in order (nothing is trimmed in a run this short)."""
    records: list[dict[str, Any]] = []
    async with ControllerClient(cluster.controller_bootstrap) as client:
        while True:
            piece = await client.fetch_log(len(records), 0, 10_000)
            assert "snapshot" not in piece
            records += [e["record"] for e in piece["records"]]
            if len(records) >= piece["high_watermark"]:
                return records


@pytest.mark.parametrize("probe_ms", [250, 0], ids=["lock-proof", "session-only"])
async def test_every_partition_of_a_killed_broker_serves_elsewhere(tmp_path, probe_ms: int) -> None:
    cluster = LocalCluster(str(tmp_path / "cluster"), broker_overrides={"heartbeat_interval_ms": 250,
                                                                         "session_timeout_ms": SESSION_TIMEOUT_MS,
                                                                         "peer_probe_interval_ms": probe_ms},
                           controller_overrides={"session_timeout_ms": SESSION_TIMEOUT_MS}).start()
    try:
        async with Admin(bootstrap_controllers=cluster.controller_bootstrap, timeout_ms=60_000) as admin:
            r = await crash_failover(cluster, admin, trials=1, partitions=4, console=Console(quiet=True))
            topic = await admin.describe_topics(["perf-crash-0"])
            (trial,) = r["trials"]
            # the victim is restarted after the trial (its new registration clears the key): read the log
            reported = [rec for rec in await committed_records(cluster)
                        if rec.get("type") == "KV" and rec["fields"]["key"] == f"broker/{trial['broker']}/dead_epoch"]
    finally:
        cluster.stop()
    assert trial["first_serving_s"] <= trial["all_serving_s"] < 10, r
    if probe_ms:
        # a peer took the killed broker's WAL lock: fenced on that proof, not after its session
        assert reported and reported[0]["fields"]["value"] is not None, r
    else:
        # The lease rule: nothing may be led elsewhere before the dead broker's session can expire.
        assert not reported and SESSION_TIMEOUT_MS / 1000 - 0.25 <= trial["first_serving_s"], r
    parts = topic["perf-crash-0"]
    assert not isinstance(parts, Exception)
    assert all(p.leader not in (-1, trial["broker"]) for p in parts), parts
