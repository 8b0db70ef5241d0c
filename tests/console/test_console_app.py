"""The console's HTTP shell over a synthetic cluster: the page, the event stream (the whole view,
then diffs), and the move endpoint's answers (the source's Kafka error, the token on a secure one)."""
from __future__ import annotations

import json

from aiohttp.test_utils import TestClient, TestServer

from tools.console.app import Console
from tools.console.synthetic import SyntheticSource


async def client_of(console: Console) -> TestClient:
    client = TestClient(TestServer(console.app()))
    await client.start_server()
    return client


async def read_event(stream: object) -> dict:
    data = b""
    while not data.endswith(b"\n\n"):
        data += await stream.readline()  # type: ignore[attr-defined]
    lines = [ln for ln in data.decode().splitlines() if ln.startswith("data: ")]
    return json.loads(lines[0][6:]) if lines else {}


async def test_page_stream_and_move() -> None:
    source = SyntheticSource(100, topics=2, brokers=3, moves_per_s=0)
    console = Console(source, poll_interval_ms=20)
    client = await client_of(console)
    try:
        page = await client.get("/")
        assert page.status == 200 and "Ferry console" in await page.text()
        assert (await client.get("/static/console.js")).status == 200
        events = await client.get("/api/events")
        assert events.headers["Content-Type"] == "text/event-stream"
        hello = await read_event(events.content)
        assert hello == {"secure": False, "error": None}
        full = await read_event(events.content)
        while "full" not in full:
            full = await read_event(events.content)
        assert full["full"]["partitions"]["topic-00"][0] == source.leaders["topic-00"][0]
        leader = source.leaders["topic-00"][0]
        to = 1 + leader % 3
        ok = await client.post("/api/move", json={"topic": "topic-00", "partition": 0, "replicas": str(to)})
        assert ok.status == 200 and (await ok.json())["error"] == "NONE"
        update = await read_event(events.content)
        while "leaders" not in update:
            update = await read_event(events.content)
        assert update["leaders"] == {"topic-00": [[0, to]]}
        bad = await client.post("/api/move", json={"topic": "topic-00", "partition": 0, "replicas": [9]})
        assert bad.status == 400 and (await bad.json())["error"] == "INVALID_REPLICA_ASSIGNMENT"
        assert source.leaders["topic-00"][0] == to
        junk = await client.post("/api/move", data=b"{not json")
        assert (await junk.json())["error"] == "INVALID_REQUEST"
        # a plan of Kafka's format, with Kafka's checks
        plan = {"version": 1, "partitions": [{"topic": "topic-01", "partition": p, "replicas": [3]} for p in (0, 1)]}
        r = await client.post("/api/reassign", json={"plan": json.dumps(plan)})
        assert r.status == 200 and (await r.json())["lines"] and source.leaders["topic-01"][:2] == [3, 3]
        dup = {"version": 1, "partitions": [{"topic": "topic-01", "partition": 2, "replicas": [1, 1]}]}
        for body, error in (({"plan": json.dumps(dup)}, "INVALID_REPLICA_ASSIGNMENT"), ({"plan": "{"}, "INVALID_REQUEST"),
                            ({"plan": ""}, "INVALID_REQUEST"), ({"nope": 1}, "INVALID_REQUEST")):
            r = await client.post("/api/reassign", json=body)
            assert (await r.json())["error"] == error, body
        events.close()
    finally:
        await client.close()


async def test_a_secure_console_requires_the_admin_token_to_move() -> None:
    source = SyntheticSource(10, topics=1, brokers=2, moves_per_s=0)
    client = await client_of(Console(source, poll_interval_ms=50, token="s3cret"))
    try:
        body = {"topic": "topic-00", "partition": 0, "replicas": [2]}
        before = list(source.leaders["topic-00"])
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret"}):
            r = await client.post("/api/move", json=body, headers=headers)
            assert r.status == 401 and (await r.json())["error"] == "SASL_AUTHENTICATION_FAILED"
        assert source.leaders["topic-00"] == before
        r = await client.post("/api/move", json=body, headers={"Authorization": "Bearer s3cret"})
        assert r.status == 200 and source.leaders["topic-00"][0] == 2
        snap = await (await client.get("/api/snapshot")).json()
        assert snap["secure"] is True
    finally:
        await client.close()
