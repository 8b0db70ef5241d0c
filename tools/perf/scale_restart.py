"""The restart phase of a `ferry perf scale` round: one broker stopped and started again with the
same id while the round's topic has all its partitions, until every partition serves again.

What a restart is in Ferry (broker/server.py, metadata_quorum/ops/cluster.py):

- **controlled** (SIGTERM, what a rolling restart does): the broker's heartbeat asks to shut down;
  the controller reassigns each of its s3 partitions to the least-loaded active broker, with no
  leader and a re-election deadline, so that the stopping broker first closes its streams
  (force-uploading what its WAL buffers) and the new owner opens them; once it leads nothing and
  holds no stream open, the controller fences it and tells it to shut down, and it exits. Started
  again, it registers at once (a fenced incarnation needs no session expiry).
- **crash** (SIGKILL): its peers find its WAL lock free (broker/peer_liveness.py, every
  ``peer_probe_interval_ms``) and report it dead, or its session expires; the controller fences
  it and gives each of its partitions to a live broker, led there at once; the new owner re-appends
  the dead broker's WAL tail before serving.

Either way the partitions stay where the controller put them: the restarted broker comes back
empty (a reassignment or the balancer gives it partitions again), as KRaft's preferred-leader
election would only after its imbalance check. So "back serving" is every partition led by a live
broker and served there, not the placement before the restart.

The figures, each from the signal: the process gone (``exit_s``), every partition served by the
other brokers (``led_elsewhere_s``), the broker registered and running again (``back_s``), and
both at once — the restart over and every partition served (``serving_s``).
"""
from __future__ import annotations

import asyncio
import time
from typing import Any

from tools.admin import Admin
from tools.cluster import LocalCluster
from tools.perf.scale_checks import served_by, wait_served

KINDS = ("graceful", "crash")
#: key prefix of each kind's figures in a round's row
PREFIX = {"graceful": "restart", "crash": "crash_restart"}


async def restart_broker(cluster: LocalCluster, admin: Admin, topic: str, partitions: int, victim: int,
                         kind: str, timeout_s: float = 300) -> dict[str, Any]:
    """Stop ``victim`` (SIGTERM for "graceful", SIGKILL for "crash"), wait until the other brokers
    serve every partition, start it again, wait until every partition is served by a live broker
    with no broker opening or closing one; returns the figures under ``PREFIX[kind]``."""
    if kind not in KINDS:
        raise ValueError(f"restart kind must be one of {KINDS}, got {kind!r}")
    brokers = {bid: cluster.broker_url(bid) for bid in sorted(cluster.broker_ports)}
    others = {b: u for b, u in brokers.items() if b != victim}
    held = (await served_by(admin, {victim: brokers[victim]}, topic))[victim]
    out: dict[str, Any] = {"broker": victim, "held": len(held)}
    started = time.monotonic()
    if kind == "graceful":
        # the broker bounds its own controlled shutdown (shutdown_timeout_ms, 30 s by default)
        out["exit_code"] = await asyncio.to_thread(cluster.terminate_broker, victim, timeout_s)
    else:
        await asyncio.to_thread(cluster.kill_broker, victim)
    out["exit_s"] = round(time.monotonic() - started, 2)
    await wait_served(admin, others, topic, range(partitions), timeout_s)
    out["led_elsewhere_s"] = round(time.monotonic() - started, 2)
    await asyncio.to_thread(cluster.start_broker, victim, True, timeout_s)
    out["back_s"] = round(time.monotonic() - started, 2)
    placement = await wait_served(admin, brokers, topic, range(partitions), timeout_s)
    out["serving_s"] = round(time.monotonic() - started, 2)
    out["led_by"] = {str(b): sum(1 for leader in placement.values() if leader == b) for b in brokers}
    return {f"{PREFIX[kind]}_{k}": v for k, v in out.items()}


def victims(ids: list[int], kinds: list[str]) -> dict[str, int]:
    """The broker each restart stops: a different one each time, so that each stops a broker that
    holds partitions (a restarted broker comes back with none)."""
    return {kind: ids[i % len(ids)] for i, kind in enumerate(kinds)}
