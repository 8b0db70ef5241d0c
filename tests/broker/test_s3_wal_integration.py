"""``wal.mode = s3`` on real processes (moto server, 3 controllers, 3 brokers, raw HTTP): a broker
killed with kill -9 whose disk is then deleted loses nothing it acknowledged, and its WAL objects
are deleted once recovered elsewhere; a SIGSTOPped old
owner, resumed after its partition moved, acknowledges nothing and its late WAL objects never
count; a move and a controlled shutdown lose nothing. Stream uploads are rare here, so what the
brokers acknowledged lives only in WAL objects when they fail.
"""
from __future__ import annotations

import asyncio
import os
import shutil
import time

import aiohttp
import pytest

from tests.broker.conftest import FAST
from tests.broker.helpers import create_topic, fetch_all, produce, reassign, wait_running, wait_serving, batch
from tests.broker.test_broker_integration import Writer, assert_exactly_once_in_order
from stream_storage.config import S3Config
from stream_storage.s3_store import S3ObjectStore
from tools.cluster import LocalCluster

pytestmark = pytest.mark.integration

ACKED_BEFORE_FAULT = 40


@pytest.fixture(scope="module")
def s3_wal_cluster(tmp_path_factory):  # type: ignore[no-untyped-def]
    c = LocalCluster(str(tmp_path_factory.mktemp("s3-wal-cluster")), brokers=3, wal_mode="s3", broker_overrides=dict(
        FAST, dead_wal_gc_interval_ms=500, storage={"upload_interval_ms": 600000, "upload_bytes": 256 * 1024 * 1024,
                       "wal": {"object_interval_ms": 10}}))
    c.start()
    yield c
    c.stop()


def lose_disk(c: LocalCluster, broker_id: int) -> None:
    """Everything the broker had on its machine: its log dirs and its (unused) WAL dir."""
    for path in c.broker_log_dirs(broker_id) + [os.path.join(c.state_dir, "wal", f"broker-{broker_id}")]:
        shutil.rmtree(path, ignore_errors=True)
        assert not os.path.exists(path)


async def wal_object_count(c: LocalCluster, broker_id: int) -> int:
    store = S3ObjectStore(S3Config(endpoint_url=c.s3_endpoint, bucket=c.bucket))
    try:
        return len(await store.list(f"wal/broker-{broker_id}/"))
    finally:
        await store.close()


async def acked_at_least(w: Writer, n: int, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while len(w.acked) < n and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    assert len(w.acked) >= n, (len(w.acked), w.refused)


async def owner_url(s: aiohttp.ClientSession, c: LocalCluster, topic: str, exclude: set[int],
                    timeout_s: float = 30.0) -> tuple[int, str]:
    """The broker (not in ``exclude``) that serves the partition, once one does."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for bid in sorted(set(c.broker_procs) - exclude):
            async with s.get(f"{c.broker_url(bid)}/v1/offsets/{topic}/0", params={"spec": "latest"}) as r:
                if r.status == 200:
                    return bid, c.broker_url(bid)
        await asyncio.sleep(0.05)
    raise AssertionError(f"nobody serves {topic}-0")


async def test_kill9_with_lost_disk_loses_nothing_acknowledged(s3_wal_cluster: LocalCluster) -> None:
    c = s3_wal_cluster
    create_topic(c, "lost", leader=1)
    async with aiohttp.ClientSession() as s:
        await wait_serving(s, c.broker_url(1), "lost", 0)
        w = Writer(s, c, "lost")
        task = asyncio.ensure_future(w.run())
        await acked_at_least(w, ACKED_BEFORE_FAULT)
        assert await wal_object_count(c, 1) > 0  # the acknowledged tail is in WAL objects only
        c.kill_broker(1)  # kill -9 while produce is in flight ...
        lose_disk(c, 1)  # ... and the machine's disk is gone before anyone fails over
        killed_at = len(w.acked)
        new_owner, url = await owner_url(s, c, "lost", exclude={1})
        await acked_at_least(w, killed_at + 20)  # the writer goes on against the new owner
        w.stop.set()
        await task
        assert set(w.refused) <= {"NOT_LEADER_OR_FOLLOWER", "CONNECTION", "LEADER_NOT_AVAILABLE"}, w.refused
        assert_exactly_once_in_order(await fetch_all(s, url, "lost", 0), w.acked)
        async with s.get(f"{url}/v1/moves", params={"topic": "lost"}) as r:
            moves = (await r.json())["moves"]
        failover = [m for m in moves if m["to_broker"] == new_owner and m["complete"] and not m["clean"]]
        assert failover and not failover[0]["wal_unreachable"], moves
        # nobody trims the dead broker's WAL objects but the garbage collector: gone once recovered
        deadline = time.monotonic() + 10
        while await wal_object_count(c, 1) and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        assert await wal_object_count(c, 1) == 0
        for d in c.broker_log_dirs(1):  # the broker comes back on a blank disk
            os.makedirs(d, exist_ok=True)
        c.restart_broker(1)
        await wait_running(s, c.broker_url(1))


async def test_resumed_old_owner_acknowledges_nothing_and_its_late_objects_never_count(
        s3_wal_cluster: LocalCluster) -> None:
    c = s3_wal_cluster
    create_topic(c, "late", leader=2)
    # a request to the stopped broker hangs until it resumes: the writer gives up and looks again
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=1.0)) as s:
        await wait_serving(s, c.broker_url(2), "late", 0)
        w = Writer(s, c, "late")
        task = asyncio.ensure_future(w.run())
        await acked_at_least(w, ACKED_BEFORE_FAULT)
        c.pause_broker(2)  # SIGSTOP with produce in flight: WAL objects may be sealed and not yet sent
        new_owner, url = await owner_url(s, c, "late", exclude={2})
        await acked_at_least(w, len(w.acked) + 20)
        c.resume_broker(2)  # its pending PUTs now land, after the takeover
        for _ in range(10):
            status, body = await produce(s, c.broker_url(2), "late", 0, batch([b"stale"]))
            assert status != 200 and body["error"] == "NOT_LEADER_OR_FOLLOWER", body
            await asyncio.sleep(0.05)
        # ownership goes back to the resumed broker, which then dies with its disk: its WAL
        # objects (late ones included) are read again, under the epoch it holds now
        await acked_at_least(w, len(w.acked) + 10)
        reassign(c, "late", 0, 2)
        await wait_serving(s, c.broker_url(2), "late", 0)
        await acked_at_least(w, len(w.acked) + 20)
        c.kill_broker(2)
        lose_disk(c, 2)
        _third, url = await owner_url(s, c, "late", exclude={2})
        await acked_at_least(w, len(w.acked) + 10)
        w.stop.set()
        await task
        records = await fetch_all(s, url, "late", 0)
        assert_exactly_once_in_order(records, w.acked)
        assert b"stale" not in {r.value for r in records}
        for d in c.broker_log_dirs(2):
            os.makedirs(d, exist_ok=True)
        c.restart_broker(2)
        await wait_running(s, c.broker_url(2))


async def test_move_and_controlled_shutdown_lose_nothing(s3_wal_cluster: LocalCluster) -> None:
    c = s3_wal_cluster
    create_topic(c, "mvs", leader=1)
    async with aiohttp.ClientSession() as s:
        await wait_serving(s, c.broker_url(1), "mvs", 0)
        w = Writer(s, c, "mvs")
        task = asyncio.ensure_future(w.run())
        await acked_at_least(w, 30)
        reassign(c, "mvs", 0, 3)
        await wait_serving(s, c.broker_url(3), "mvs", 0)
        await acked_at_least(w, len(w.acked) + 30)
        assert c.terminate_broker(3) == 0  # SIGTERM: moves its partitions away, then exits
        _owner, url = await owner_url(s, c, "mvs", exclude={3})
        await acked_at_least(w, len(w.acked) + 30)
        w.stop.set()
        await task
        assert set(w.refused) <= {"NOT_LEADER_OR_FOLLOWER", "CONNECTION", "LEADER_NOT_AVAILABLE"}, w.refused
        assert_exactly_once_in_order(await fetch_all(s, url, "mvs", 0), w.acked)
        assert await wal_object_count(c, 3) == 0  # a clean shutdown leaves no WAL object behind
        async with s.get(f"{url}/v1/moves", params={"topic": "mvs"}) as r:
            moves = (await r.json())["moves"]
        assert all(m["clean"] for m in moves if m["complete"] and m["from_broker"] is not None), moves
        c.restart_broker(3)
        await wait_running(s, c.broker_url(3))
