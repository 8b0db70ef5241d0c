"""Writers keep writing while controllers are killed (-9) and restarted, leader and followers alike."""
from __future__ import annotations

import asyncio
from typing import Any

import pytest

from metadata_quorum.client import ControllerClient
from metadata_quorum.records import KVRecord, decode_record
from tools.proc import Quorum, http_get_json, start_quorum

pytestmark = pytest.mark.integration


@pytest.fixture
def chaos_quorum(tmp_path: Any) -> Any:
    q = start_quorum(str(tmp_path / "chaos"), raft={"log_compaction_min_entries": 200})
    try:
        yield q
    finally:
        q.stop_all()


def read_log(quorum: Quorum, node_id: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    while True:
        body = http_get_json(f"{quorum.url(node_id)}/v1/log?offset={len(out)}&max_records=100000", 30)
        assert "snapshot" not in body
        if not body["records"]:
            return out
        out += body["records"]


async def test_no_acknowledged_write_is_lost_through_repeated_crashes(chaos_quorum: Quorum) -> None:
    quorum = chaos_quorum
    acked: dict[int, tuple[str, str]] = {}
    stop = asyncio.Event()

    async def writer(w: int) -> None:
        n = 0
        async with ControllerClient(quorum.bootstrap, timeout_ms=20_000) as client:
            while not stop.is_set():
                if w % 2:  # batches of independent writes
                    ops = [("put_kv", {"key": f"w{w}-{n + i}", "value": str(n + i)}) for i in range(50)]
                    for (_op, args), answer in zip(ops, await client.write_many(ops), strict=True):
                        if "offset" in answer:
                            acked[answer["offset"]] = (args["key"], args["value"])
                    n += 50
                else:
                    body = await client.write_with_offset("put_kv", {"key": f"w{w}-{n}", "value": str(n)})
                    acked[body["offset"]] = (f"w{w}-{n}", str(n))
                    n += 1

    async def crashes() -> None:
        for cycle in range(4):
            await asyncio.sleep(0.7)
            leader = quorum.wait_leader(timeout_s=30)
            victim = leader if cycle % 2 == 0 else next(n for n in quorum.running() if n != leader)
            quorum.kill(victim)
            await asyncio.sleep(0.5)
            quorum.start(victim)
        await asyncio.sleep(0.7)
        stop.set()

    await asyncio.gather(crashes(), *(writer(w) for w in range(4)))
    assert len(acked) > 100
    high_watermark = max(acked) + 1
    for nid in quorum.running():
        quorum.wait_ready(nid, timeout_s=60, min_high_watermark=high_watermark)
    logs = {nid: read_log(quorum, nid) for nid in quorum.running()}
    shortest = min(len(log) for log in logs.values())
    reference = next(iter(logs.values()))
    for log in logs.values():
        assert log[:shortest] == reference[:shortest]
        for offset, (key, value) in acked.items():
            assert decode_record(log[offset]["record"]) == KVRecord(key=key, value=value)


async def test_a_paused_leader_is_deposed_and_its_late_write_never_forks_the_log(chaos_quorum: Quorum) -> None:
    """SIGSTOP the leader (as a long GC pause or a partition would), write through the new leader,
    then resume the old one: it must step down, and whatever it still had queued must not commit
    against a stale view."""
    import json
    import os
    import signal

    import aiohttp

    quorum = chaos_quorum
    old = quorum.wait_leader()
    async with ControllerClient(quorum.bootstrap, timeout_ms=20_000) as client:
        before = await client.write_with_offset("put_kv", {"key": "before", "value": "1"})
    paused_health = quorum.health(old)
    assert paused_health is not None
    paused_term = int(paused_health["term"])
    os.killpg(quorum.procs[old].pid, signal.SIGSTOP)
    try:
        async with aiohttp.ClientSession() as session:
            late = asyncio.ensure_future(session.post(
                f"{quorum.url(old)}/v1/write/put_kv", data=json.dumps({"key": "late", "value": "zombie"}),
                headers={"Content-Type": "application/json"}, timeout=aiohttp.ClientTimeout(total=60)))
            others = [quorum.peers[n].http for n in quorum.peers if n != old]
            async with ControllerClient(others, timeout_ms=20_000) as client:
                acked = {before["offset"]: KVRecord("before", "1")}
                for i in range(20):
                    body = await client.write_with_offset("put_kv", {"key": f"new-{i}", "value": str(i)})
                    acked[body["offset"]] = KVRecord(f"new-{i}", str(i))
            new = quorum.wait_leader(exclude={old})
            os.killpg(quorum.procs[old].pid, signal.SIGCONT)
            resp = await asyncio.wait_for(late, 60)
            answer = await resp.json()
    finally:
        os.killpg(quorum.procs[old].pid, signal.SIGCONT)
    if resp.status == 200:  # it may have been forwarded and committed by the new leader: then it is in the log
        acked[answer["offset"]] = KVRecord("late", "zombie")
    else:
        assert answer["error"] in ("NOT_CONTROLLER", "REQUEST_TIMED_OUT"), answer
    # deposed: a leader of a later term than the paused one's (on a loaded machine another election
    # may follow the resume, and the resumed node may even win it, in a later term)
    leader = quorum.wait_leader()
    health = quorum.health(leader)
    assert health is not None and int(health["term"]) > paused_term and new != old
    high_watermark = max(acked) + 1
    for nid in quorum.running():
        quorum.wait_ready(nid, timeout_s=60, min_high_watermark=high_watermark)
    logs = {nid: read_log(quorum, nid) for nid in quorum.running()}
    shortest = min(len(log) for log in logs.values())
    assert all(log[:shortest] == logs[new][:shortest] for log in logs.values())
    for log in logs.values():
        for offset, record in acked.items():
            assert decode_record(log[offset]["record"]) == record
    assert quorum.health(old)["is_leader"] is False  # type: ignore[index]
