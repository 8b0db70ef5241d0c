"""ControllerClient and MetadataLogFollower against a real in-process controller."""
from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiohttp import web

from metadata_quorum.client import ControllerClient, MetadataLogFollower, snapshot_delta
from metadata_quorum.delta import MetadataDelta
from metadata_quorum.kernel.errors import ErrorCode, FerryError
from metadata_quorum.image import EMPTY_IMAGE
from metadata_quorum.records import KVRecord, PartitionRecord, Record, RegisterBrokerRecord, TopicRecord
from tools.proc import LOOPBACK, free_ports


async def test_write_and_read(controller: Any) -> None:
    async with ControllerClient([controller.address]) as client:
        body = await client.write_with_offset("put_kv", {"key": "a", "value": "1"})
        assert body["reply"] == {} and body["offset"] >= 1
        assert (await client.read("get_kv", {"key": "a"}))["value"] == "1"


async def test_dead_bootstrap_address_is_skipped(controller: Any) -> None:
    (dead,) = free_ports(1)
    async with ControllerClient([f"{LOOPBACK}:{dead}", controller.address], timeout_ms=10_000) as client:
        for i in range(3):
            await client.write("put_kv", {"key": f"k{i}", "value": "v"})
        assert (await client.read("get_kv", {"key": "k2"}))["value"] == "v"


async def test_not_controller_is_followed_to_the_named_leader(controller: Any) -> None:
    seen: list[str] = []

    async def not_me(request: web.Request) -> web.Response:
        seen.append(request.path)
        return web.json_response({"error": "NOT_CONTROLLER", "code": 41, "message": "not the active controller",
                                  "details": {"leader_id": 1, "leader_url": controller.url}}, status=421)

    app = web.Application()
    app.router.add_post("/v1/write/{op}", not_me)
    runner = web.AppRunner(app)
    await runner.setup()
    (port,) = free_ports(1)
    site = web.TCPSite(runner, LOOPBACK, port)
    await site.start()
    try:
        async with ControllerClient([f"{LOOPBACK}:{port}"]) as client:
            await client.write("put_kv", {"key": "followed", "value": "yes"})
            assert client.leader_url == controller.url
            await client.write("put_kv", {"key": "again", "value": "yes"})
        assert seen == ["/v1/write/put_kv"]  # the second write went straight to the leader
        async with ControllerClient([controller.address]) as check:
            assert (await check.read("get_kv", {"key": "followed"}))["value"] == "yes"
    finally:
        await runner.cleanup()


async def test_bad_input_is_raised_without_retrying(controller: Any) -> None:
    async with ControllerClient([controller.address]) as client:
        with pytest.raises(FerryError) as err:
            await client.write("put_kv", {"value": "no key"})
        assert err.value.error is ErrorCode.INVALID_REQUEST
        with pytest.raises(FerryError) as err:
            await client.write("no_such_op", {})
        assert err.value.error is ErrorCode.INVALID_REQUEST


async def test_gives_up_with_request_timed_out_when_nobody_answers() -> None:
    (dead,) = free_ports(1)
    async with ControllerClient([f"{LOOPBACK}:{dead}"], timeout_ms=300) as client:
        with pytest.raises(FerryError) as err:
            await client.write("put_kv", {"key": "k", "value": "v"})
    assert err.value.error is ErrorCode.REQUEST_TIMED_OUT
    assert "put_kv" in err.value.message


def test_empty_bootstrap_is_bad_input() -> None:
    with pytest.raises(FerryError) as err:
        ControllerClient([])
    assert err.value.error is ErrorCode.INVALID_REQUEST


async def test_follower_sees_every_record_once_in_order(controller: Any) -> None:
    batches: list[list[tuple[int, Any]]] = []

    def on_batch(records: list[tuple[int, Any]], delta: Any, image: Any) -> None:
        batches.append(records)
        assert image.offset == records[-1][0]

    async with ControllerClient([controller.address]) as client:
        follower = MetadataLogFollower(client, on_batch, max_wait_ms=200, max_records=7).start()
        try:
            acked = {}
            for i in range(30):
                body = await client.write_with_offset("put_kv", {"key": f"f{i}", "value": str(i)})
                acked[body["offset"]] = KVRecord(key=f"f{i}", value=str(i))
            await follower.wait_for_offset(max(acked), timeout_s=20)
        finally:
            await follower.stop()
    offsets = [o for batch in batches for o, _ in batch]
    assert offsets == list(range(len(offsets)))
    records = {o: r for batch in batches for o, r in batch}
    for offset, record in acked.items():
        assert records[offset] == record
    assert all(follower.image.kv[f"f{i}"] == str(i) for i in range(30))


async def test_follower_loads_a_snapshot_when_behind_retention(controller_factory: Any) -> None:
    ctl = await controller_factory(log_retention_records=10)
    async with ControllerClient([ctl.address]) as client:
        for i in range(40):
            await client.write("put_kv", {"key": f"s{i % 5}", "value": str(i)})
        calls: list[tuple[int, Any]] = []
        follower = MetadataLogFollower(client, lambda recs, delta, image: calls.append((len(recs), image)))
        await follower.poll_once()
        assert follower.snapshots_loaded == 1 and calls[0][0] == 0
        assert dict(follower.image.kv) == {f"s{k}": str(35 + k) for k in range(5)}
        await client.write("put_kv", {"key": "after", "value": "snap"})
        await follower.poll_once(max_wait_ms=2000)
        assert follower.image.kv["after"] == "snap"
        assert follower.offset == follower.high_watermark - 1


def test_snapshot_delta_removes_what_the_snapshot_lacks() -> None:
    old = MetadataDelta(EMPTY_IMAGE).replay_all([
        RegisterBrokerRecord(broker_id=1, incarnation_id="i", broker_epoch=0, fenced=False),
        TopicRecord(name="gone", topic_id="T1"),
        PartitionRecord(topic_id="T1", partition=0, replicas=(1,), isr=(1,), leader=1),
        KVRecord(key="old", value="1"),
        KVRecord(key="kept", value="1"),
    ]).apply()
    snapshot: list[Record] = [
        RegisterBrokerRecord(broker_id=1, incarnation_id="i", broker_epoch=0, fenced=False),
        KVRecord(key="kept", value="2"),
    ]
    delta, image = snapshot_delta(old, snapshot, 99)
    assert image.offset == 99
    assert dict(image.kv) == {"kept": "2"}
    assert image.topics.get("gone") is None
    changes = delta.local_changes(1)
    assert [tp.topic_id for tp in changes.lost] == ["T1"]


async def test_stale_leader_hints_pointing_at_each_other_back_off_until_the_timeout(
        monkeypatch: pytest.MonkeyPatch) -> None:
    hits: list[int] = []
    sleeps: list[float] = []
    real_sleep = asyncio.sleep

    async def counting_sleep(delay: float) -> None:
        sleeps.append(delay)
        await real_sleep(delay)

    monkeypatch.setattr("metadata_quorum.client.asyncio.sleep", counting_sleep)
    ports = free_ports(2)

    def handler_for(other: int) -> Any:
        async def not_me(request: web.Request) -> web.Response:
            hits.append(other)
            return web.json_response({"error": "NOT_CONTROLLER", "code": 41, "message": "stale",
                                      "details": {"leader_id": 9, "leader_url": f"http://{LOOPBACK}:{other}"}},
                                     status=421)
        return not_me

    runners = []
    for mine, other in ((ports[0], ports[1]), (ports[1], ports[0])):
        app = web.Application()
        app.router.add_post("/v1/write/{op}", handler_for(other))
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, LOOPBACK, mine).start()
        runners.append(runner)
    try:
        async with ControllerClient([f"{LOOPBACK}:{ports[0]}"], timeout_ms=400) as client:
            with pytest.raises(FerryError) as err:
                await client.write("put_kv", {"key": "k", "value": "v"})
        assert err.value.error is ErrorCode.NOT_CONTROLLER
        assert len(hits) <= 2 * (len(sleeps) + 1)  # at most one redirect between two back-offs
    finally:
        for runner in runners:
            await runner.cleanup()
