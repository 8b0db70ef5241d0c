"""Raw HTTP helpers for broker tests (the broker API as a client sees it, no client library)."""
from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import aiohttp

from stream_storage import batches
from tools.cluster import LocalCluster, http_post_json


def controller_write(c: LocalCluster, op: str, args: dict[str, Any]) -> dict[str, Any]:
    assert c.quorum is not None
    for _ in range(50):
        leader = c.controller_leader()
        answer = http_post_json(f"{c.quorum.url(leader)}/v1/write/{op}", args)
        if "reply" in answer:
            return dict(answer["reply"])
        if answer.get("error") != "NOT_CONTROLLER":
            raise AssertionError(f"{op} failed: {answer}")
        time.sleep(0.1)
    raise AssertionError(f"{op}: no controller leader")


def create_topic(c: LocalCluster, name: str, leader: int, partitions: int = 1) -> None:
    reply = controller_write(c, "create_topics", {"topics": [{
        "name": name, "num_partitions": partitions, "replication_factor": 1,
        "assignments": {str(p): [leader] for p in range(partitions)}}]})
    assert not reply["topics"][0].get("error"), reply


def reassign(c: LocalCluster, topic: str, partition: int, broker: int) -> None:
    reply = controller_write(c, "alter_partition_reassignments",
                             {"reassignments": [{"topic": topic, "partition": partition, "replicas": [broker]}]})
    assert not reply["responses"][0].get("error"), reply


def batch(values: list[bytes], ts_ms: int | None = None) -> bytes:
    return batches.build_batch([(None, v) for v in values], timestamp_ms=ts_ms or int(time.time() * 1000))


async def produce(session: aiohttp.ClientSession, url: str, topic: str, partition: int, body: bytes,
                  **params: str) -> tuple[int, dict[str, Any]]:
    async with session.post(f"{url}/v1/produce/{topic}/{partition}", data=body, params=params) as resp:
        return resp.status, await resp.json()


async def fetch_all(session: aiohttp.ClientSession, url: str, topic: str, partition: int,
                    start: int = 0) -> list[batches.Record]:
    out: list[batches.Record] = []
    offset = start
    for _ in range(1000):
        async with session.get(f"{url}/v1/fetch/{topic}/{partition}",
                               params={"offset": str(offset), "max_wait_ms": "0"}) as resp:
            assert resp.status == 200, await resp.text()
            data = await resp.read()
            hw = int(resp.headers["X-Ferry-High-Watermark"])
        recs = [r for r in batches.read_records(data) if r.offset >= offset]
        out += recs
        if recs:
            offset = recs[-1].offset + 1
        if offset >= hw:
            return out
    raise AssertionError("fetch did not reach the high watermark")


async def wait_serving(session: aiohttp.ClientSession, url: str, topic: str, partition: int,
                       timeout_s: float = 20.0) -> None:
    """Until the broker at ``url`` answers list-offsets for the partition (it leads and serves it)."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        async with session.get(f"{url}/v1/offsets/{topic}/{partition}", params={"spec": "latest"}) as resp:
            last = await resp.json()
            if resp.status == 200:
                return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{url} does not serve {topic}-{partition}: {json.dumps(last)}")


async def leader_of(session: aiohttp.ClientSession, url: str, topic: str, partition: int) -> int:
    async with session.get(f"{url}/v1/metadata", params={"topics": topic}) as resp:
        body = await resp.json()
    return int(body["topics"][0]["partitions"][partition]["leader"])


async def wait_running(session: aiohttp.ClientSession, url: str, timeout_s: float = 30.0) -> None:
    """Until the broker is registered (a restarted broker waits for its old incarnation's session
    to expire) and unfenced."""
    deadline = time.monotonic() + timeout_s
    body: Any = None
    while time.monotonic() < deadline:
        try:
            async with session.get(f"{url}/v1/health") as resp:
                body = await resp.json()
            if body.get("state") == "RUNNING" and body.get("fenced") is False:
                return
        except (aiohttp.ClientError, asyncio.TimeoutError):
            pass
        await asyncio.sleep(0.05)
    raise AssertionError(f"{url} is not running: {body}")
