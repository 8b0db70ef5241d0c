"""A power loss of all three controllers, simulated: every Raft file goes back to its last sync.

Three real controller processes record a copy of each Raft file whenever they sync it
(metadata_quorum/power_loss.py). Writes run until the controllers are killed with SIGKILL in the
middle of them; then each controller's files are put back to what was synced, which is all a
power loss promises to keep, and the quorum restarts. Every write acknowledged before the kill
must be there, at its acknowledged offset. The control run, with pysyncobj's unsynced journal
(``raft.unsafe_no_fsync``), loses acknowledged writes in the same scenario: the test can fail.
"""
from __future__ import annotations

import asyncio
import os
from typing import Any

import pytest

from metadata_quorum.client import ControllerClient
from metadata_quorum.records import KVRecord
from metadata_quorum.power_loss import RECORD_ENV, restore_synced_state
from tests.quorum.test_integration_quorum import assert_acked_in_log, full_log
from tools.proc import Quorum, http_get_json, start_quorum

pytestmark = pytest.mark.integration

KILL_AFTER_ACKS = 150


async def _write_until_killed(quorum: Quorum) -> dict[int, KVRecord]:
    """Write keys one after another from two writers; kill -9 every controller once enough are
    acknowledged, with writes still in flight. Returns the acknowledged ones by offset."""
    acked: dict[int, KVRecord] = {}
    killed = asyncio.Event()

    async def writer(client: ControllerClient, name: str) -> None:
        i = 0
        while not killed.is_set():
            try:
                body = await client.write_with_offset("put_kv", {"key": f"{name}-{i}", "value": str(i)})
            except Exception:  # noqa: BLE001 - the controllers are gone (below)
                return  # the controllers are gone: this write was never acknowledged
            acked[body["offset"]] = KVRecord(key=f"{name}-{i}", value=str(i))
            i += 1

    async def killer() -> None:
        while len(acked) < KILL_AFTER_ACKS:
            await asyncio.sleep(0.005)
        for nid in list(quorum.running()):
            quorum.kill(nid)
        killed.set()

    async with ControllerClient(quorum.bootstrap, timeout_ms=2_000) as client:
        await asyncio.wait_for(asyncio.gather(writer(client, "a"), writer(client, "b"), killer()), 60)
    return acked


def _power_loss_and_restart(quorum: Quorum) -> dict[int, dict[str, str]]:
    outcome = {nid: restore_synced_state(os.path.join(quorum.directory, "data", f"controller-{nid}"))
               for nid in quorum.peers}
    quorum.start_all()
    quorum.wait_leader(timeout_s=30)
    return outcome


def _kv(quorum: Quorum, node_id: int) -> dict[str, str]:
    body = http_get_json(f"{quorum.url(node_id)}/v1/snapshot", 10)
    return {r["fields"]["key"]: r["fields"]["value"] for r in body["records"] if r["type"] == "KV"}


@pytest.fixture
def recording(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(RECORD_ENV, "1")  # inherited by the controllers and their Raft processes


async def test_power_loss_of_every_controller_loses_no_acknowledged_write(recording: None, tmp_path: Any) -> None:
    # Compacting every few dozen entries: the dump and the journal trim are part of what is recovered.
    quorum = start_quorum(str(tmp_path / "q"), raft={"log_compaction_min_entries": 40})
    try:
        acked = await _write_until_killed(quorum)
        assert len(acked) >= KILL_AFTER_ACKS
        outcome = _power_loss_and_restart(quorum)
        assert all(o["raft.journal"] == "reverted to the last sync" for o in outcome.values()), outcome
        assert any("raft.dump" in o for o in outcome.values()), outcome  # a dump was written and kept
        hw = max(acked) + 1
        for nid in quorum.running():
            quorum.wait_ready(nid, timeout_s=30, min_high_watermark=hw)
            assert_acked_in_log(full_log(quorum, nid), acked)
            kv = _kv(quorum, nid)
            assert all(kv.get(r.key) == r.value for r in acked.values())
    finally:
        quorum.stop_all()


async def test_control_without_sync_the_same_power_loss_loses_acknowledged_writes(recording: None,
                                                                                  tmp_path: Any) -> None:
    quorum = start_quorum(str(tmp_path / "q"), raft={"log_compaction_min_entries": 40, "unsafe_no_fsync": True})
    try:
        acked = await _write_until_killed(quorum)
        assert len(acked) >= KILL_AFTER_ACKS
        _power_loss_and_restart(quorum)
        leader = quorum.wait_leader(timeout_s=30)
        quorum.wait_ready(leader, timeout_s=30)
        kv = _kv(quorum, leader)
        lost = [r.key for r in acked.values() if kv.get(r.key) != r.value]
        assert lost, "without syncing, a power loss should have lost acknowledged writes"
    finally:
        quorum.stop_all()
