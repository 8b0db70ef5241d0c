"""Three real controller processes on loopback: crashes, restarts and readers."""
from __future__ import annotations

import asyncio
import json
import os
import time
import urllib.request
from typing import Any

import pytest

from metadata_quorum.client import ControllerClient, MetadataLogFollower
from metadata_quorum.kernel.errors import ErrorCode, FerryError
from metadata_quorum.records import KVRecord, decode_record
from tools.proc import Quorum, http_get_json, start_quorum

pytestmark = pytest.mark.integration


def full_log(quorum: Quorum, node_id: int) -> list[dict[str, Any]]:
    """Every record of a controller's committed log (it keeps all of them at these sizes)."""
    out: list[dict[str, Any]] = []
    while True:
        body = http_get_json(f"{quorum.url(node_id)}/v1/log?offset={len(out)}&max_records=100000", 10)
        assert "snapshot" not in body
        if not body["records"]:
            return out
        assert body["records"][0]["offset"] == len(out)
        out += body["records"]


def snapshot_kv(quorum: Quorum, node_id: int) -> dict[str, str]:
    body = http_get_json(f"{quorum.url(node_id)}/v1/snapshot", 10)
    return {r["fields"]["key"]: r["fields"]["value"] for r in body["records"] if r["type"] == "KV"}


async def write_keys(client: ControllerClient, prefix: str, count: int) -> dict[int, KVRecord]:
    acked: dict[int, KVRecord] = {}
    for i in range(count):
        body = await client.write_with_offset("put_kv", {"key": f"{prefix}{i}", "value": str(i)})
        acked[body["offset"]] = KVRecord(key=f"{prefix}{i}", value=str(i))
    return acked


def assert_acked_in_log(log: list[dict[str, Any]], acked: dict[int, KVRecord]) -> None:
    for offset, record in acked.items():
        assert log[offset]["offset"] == offset
        assert decode_record(log[offset]["record"]) == record, offset


async def test_leader_crash_loses_no_committed_record(quorum: Quorum) -> None:
    async with ControllerClient(quorum.bootstrap, timeout_ms=20_000) as client:
        acked = await write_keys(client, "before-", 100)
        old_leader = quorum.wait_leader()
        old_term = quorum.health(old_leader)["term"]  # type: ignore[index]
        quorum.kill(old_leader)
        acked.update(await write_keys(client, "after-", 50))
    new_leader = quorum.wait_leader(exclude={old_leader})
    assert new_leader != old_leader
    assert quorum.health(new_leader)["term"] > old_term  # type: ignore[index]
    survivors = quorum.running()
    hw = max(acked) + 1
    for nid in survivors:
        quorum.wait_ready(nid, min_high_watermark=hw)
    logs = [full_log(quorum, nid) for nid in survivors]
    for log in logs:
        assert_acked_in_log(log, acked)
    shortest = min(len(log) for log in logs)
    assert logs[0][:shortest] == logs[1][:shortest]  # offsets identical on every node


async def test_killed_follower_restarts_and_catches_up(quorum: Quorum) -> None:
    leader = quorum.wait_leader()
    follower = next(n for n in quorum.running() if n != leader)
    async with ControllerClient(quorum.bootstrap, timeout_ms=20_000) as client:
        acked = await write_keys(client, "a-", 30)
        quorum.kill(follower)
        acked.update(await write_keys(client, "b-", 60))
        quorum.start(follower)
        acked.update(await write_keys(client, "c-", 10))
    hw = max(acked) + 1
    quorum.wait_ready(follower, min_high_watermark=hw)
    leader_log = full_log(quorum, leader)
    follower_log = full_log(quorum, follower)
    assert follower_log[:hw] == leader_log[:hw]
    assert_acked_in_log(follower_log, acked)
    assert snapshot_kv(quorum, follower) == snapshot_kv(quorum, leader)


@pytest.fixture
def compacting_quorum(tmp_path: Any) -> Any:
    """A quorum whose Raft logs are compacted into full dumps every few dozen entries."""
    q = start_quorum(str(tmp_path / "compacting"), raft={"log_compaction_min_entries": 30})
    try:
        yield q
    finally:
        q.stop_all()


async def test_all_three_killed_come_back_with_the_same_log_and_image(compacting_quorum: Quorum) -> None:
    quorum = compacting_quorum
    async with ControllerClient(quorum.bootstrap, timeout_ms=20_000) as client:
        acked = await write_keys(client, "k-", 80)
        reg = await client.write_with_offset("register_broker", {
            "broker_id": 3, "incarnation_id": "inc-3", "endpoints": ["http://127.0.0.1:1"],
            "log_dirs": [{"dir_id": "d", "path": "/tmp/ferry-test-d"}]})
        stream = await client.write("create_stream", {})
    hw = reg["offset"] + 2
    for nid in quorum.running():
        quorum.wait_ready(nid, min_high_watermark=hw)
    before_logs = {nid: full_log(quorum, nid) for nid in quorum.running()}
    before_snaps = {nid: http_get_json(f"{quorum.url(nid)}/v1/snapshot")["records"] for nid in quorum.running()}
    dumps = [os.path.join(quorum.directory, "data", f"controller-{nid}", "raft.dump") for nid in quorum.peers]
    assert all(os.path.exists(d) for d in dumps)  # recovery below reads a full dump plus the journal
    for nid in list(quorum.running()):
        quorum.kill(nid)
    quorum.start_all()
    leader = quorum.wait_leader(timeout_s=30)
    for nid in quorum.running():
        quorum.wait_ready(nid, min_high_watermark=hw)
    for nid, before in before_logs.items():
        after = full_log(quorum, nid)
        assert after[: len(before)] == before
        assert_acked_in_log(after, acked)
    snaps = {nid: http_get_json(f"{quorum.url(nid)}/v1/snapshot")["records"] for nid in quorum.running()}
    for nid in snaps:
        assert snaps[nid] == snaps[leader]
        assert before_snaps[nid] == [r for r in snaps[nid]]  # nothing but NoOps was added
    async with ControllerClient(quorum.bootstrap) as client:
        assert (await client.read("get_kv", {"key": "k-79"}))["value"] == "79"
        assert (await client.read("describe_stream", {"stream_id": stream["stream_id"]}))["stream_id"] == \
            stream["stream_id"]


async def test_long_polling_reader_sees_every_record_once_in_order_across_a_failover(quorum: Quorum) -> None:
    seen: list[tuple[int, Any]] = []
    async with ControllerClient(quorum.bootstrap, timeout_ms=20_000) as client:
        follower = MetadataLogFollower(client, lambda recs, delta, image: seen.extend(recs),
                                       max_wait_ms=500).start()
        try:
            writers = [write_keys(client, f"w{w}-", 40) for w in range(3)]
            first = await asyncio.gather(*writers)
            quorum.kill(quorum.wait_leader())
            second = await asyncio.gather(*(write_keys(client, f"x{w}-", 20) for w in range(3)))
            acked = {o: r for part in first + second for o, r in part.items()}
            await follower.wait_for_offset(max(acked), timeout_s=30)
        finally:
            await follower.stop()
    offsets = [o for o, _ in seen]
    assert offsets == list(range(len(offsets)))  # once each, in order, no gap
    by_offset = dict(seen)
    for offset, record in acked.items():
        assert by_offset[offset] == record
    assert sum(1 for r in by_offset.values() if isinstance(r, KVRecord)) >= len(acked)


def post(url: str, path: str, data: bytes) -> tuple[int, dict[str, Any]]:
    req = urllib.request.Request(url + path, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


async def test_bad_input_over_http_is_4xx_and_changes_nothing(quorum: Quorum) -> None:
    leader = quorum.wait_leader()
    follower = next(n for n in quorum.running() if n != leader)
    before = quorum.health(leader)["high_watermark"]  # type: ignore[index]
    url = quorum.url(leader)
    cases = {
        "malformed JSON": post(url, "/v1/write/put_kv", b"{"),
        "unknown operation": post(url, "/v1/write/make_coffee", b"{}"),
        "missing argument": post(url, "/v1/write/put_kv", b'{"value": "v"}'),
        "bad election type": post(url, "/v1/write/elect_leaders", b'{"election_type": "sideways"}'),
        "bad log offset": (lambda b: (400 if b.get("error") else 200, b))(
            http_get_json(f"{url}/v1/log?offset=-5")),
    }
    for name, (status, body) in cases.items():
        assert 400 <= status < 500, (name, status, body)
        assert ErrorCode.from_name(body["error"]) is not ErrorCode.UNKNOWN_SERVER_ERROR, (name, body)
        assert body["message"], name
    # a follower names the leader once Raft told it (its first append from this term): under
    # load that may come after the leader is active
    deadline = time.monotonic() + 10
    while (quorum.health(follower) or {}).get("leader_id") != leader and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    status, body = post(quorum.url(follower), "/v1/write/put_kv", b'{"key": "k", "value": "v"}')
    assert status == 421 and body["error"] == "NOT_CONTROLLER"
    assert body["details"] == {"leader_id": leader, "leader_url": url}
    status, body = post(quorum.url(follower), "/v1/read/get_kv?consistency=leader", b'{"key": "k"}')
    assert status == 421 and body["details"]["leader_id"] == leader
    status, body = post(quorum.url(follower), "/v1/read/get_kv", b'{"key": "k"}')
    assert status == 200
    assert quorum.health(leader)["high_watermark"] == before  # type: ignore[index]
    async with ControllerClient([quorum.peers[follower].http]) as client:
        with pytest.raises(FerryError) as err:
            await client.write("put_kv", {"key": ""})
        assert err.value.error is ErrorCode.INVALID_REQUEST
    assert quorum.health(leader)["high_watermark"] == before  # type: ignore[index]


async def test_a_long_poll_on_a_follower_wakes_when_a_record_commits(quorum: Quorum) -> None:
    leader = quorum.wait_leader()
    follower = next(n for n in quorum.running() if n != leader)
    async with ControllerClient(quorum.bootstrap, timeout_ms=20_000) as client:
        await client.write("put_kv", {"key": "first", "value": "1"})
        hw = quorum.wait_ready(follower, min_high_watermark=quorum.health(leader)["high_watermark"])[  # type: ignore[index]
            "high_watermark"]
        poll = asyncio.ensure_future(client.fetch_log(hw, max_wait_ms=20_000, url=quorum.url(follower)))
        await asyncio.sleep(0.2)
        assert not poll.done()
        body = await client.write_with_offset("put_kv", {"key": "second", "value": "2"})
        answer = await asyncio.wait_for(poll, 20)
    assert [r["offset"] for r in answer["records"]] == [body["offset"]] == [hw]
    assert decode_record(answer["records"][0]["record"]) == KVRecord(key="second", value="2")
