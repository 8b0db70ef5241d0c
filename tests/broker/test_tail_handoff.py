"""The old owner's hand-off of its closing object's tail: to whom (pure, from the image), and the
route that takes it (strict parameters, brokers' token only, the body checked against them)."""
from __future__ import annotations

import time
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from broker import partition as sm
from broker.tail_handoff import TailHandoff, broker_url, next_leader, plan_handoffs
from broker.tail_handoff_http import MAX_TAIL_BYTES, PATH, TailHandoffClient, handler
from metadata_quorum.kernel.auth import NodeSecurity
from metadata_quorum.kernel.auth_middleware import broker_auth_middleware
from metadata_quorum.kernel.http_parsing import errors_middleware
from metadata_quorum.local_controller import LocalController
from stream_storage.reader import index_tail_start

ADMIN = "a" * 20
INTERNAL = "i" * 20


def _cluster(brokers: int = 3) -> LocalController:
    c = LocalController(lambda: int(time.time() * 1000), session_timeout_ms=60_000)
    for bid in range(1, brokers + 1):
        epoch = c.write("register_broker", {"broker_id": bid, "incarnation_id": f"inc-{bid}",
                                            "endpoints": [f"http://127.0.0.1:{9000 + bid}", "kafka://127.0.0.1:1"],
                                            "log_dirs": [{"dir_id": f"d{bid}", "path": f"/d{bid}"}]})["broker_epoch"]
        c.write("broker_heartbeat", {"broker_id": bid, "broker_epoch": epoch, "metadata_offset": 10**9})
    c.write("create_topics", {"topics": [{"name": "t", "num_partitions": 3, "replication_factor": 1,
                                          "assignments": {"0": [1], "1": [1], "2": [1]}}]})
    return c


def _reassign(c: LocalController, partition: int, replicas: list[int]) -> None:
    c.write("alter_partition_reassignments",
            {"reassignments": [{"topic": "t", "partition": partition, "replicas": replicas}]})


def test_the_tail_goes_to_the_broker_the_controller_will_elect() -> None:
    c = _cluster()
    tid = c.image.topics.by_name["t"]
    assert next_leader(c.image, tid, 0, me=1) is None  # no move: it has a leader
    _reassign(c, 0, [2])
    _reassign(c, 1, [3])
    _reassign(c, 2, [3])
    image = c.image
    assert next_leader(image, tid, 0, me=1) == 2 and next_leader(image, tid, 1, me=1) == 3
    assert next_leader(image, tid, 0, me=2) is None  # the candidate is the sender itself
    assert next_leader(image, "no-such-topic", 0, me=1) is None
    size = 1_000_000
    plans = plan_handoffs(image, 1, [(tid, 0), (tid, 1), (tid, 2)], "streams/1/k", size)
    # one hand-off per receiving broker, however many of its partitions the object closes
    assert plans == [TailHandoff(2, "streams/1/k", size, index_tail_start(size)),
                     TailHandoff(3, "streams/1/k", size, index_tail_start(size))]
    assert plan_handoffs(image, 1, [(tid, 0)], "streams/1/k", 0) == []
    assert broker_url(image, 2) == "http://127.0.0.1:9002" and broker_url(image, 99) is None


def test_no_tail_for_a_target_that_may_not_lead() -> None:
    c = _cluster()
    tid = c.image.topics.by_name["t"]
    _reassign(c, 0, [2])
    c.write("unregister_broker", {"broker_id": 2})  # the controller elects nobody there now
    broker = c.image.cluster.brokers.get(2)
    assert broker is None or not broker.is_active
    assert next_leader(c.image, tid, 0, me=1) is None
    assert plan_handoffs(c.image, 1, [(tid, 0)], "streams/1/k", 100) == []


def test_the_election_rides_with_the_closing_commit_only_for_a_partition_left_without_leader() -> None:
    closing = sm.PartitionStatus(state=sm.PartitionState.CLOSING, leader_epoch=3, elect_after_close=True)
    status, actions = sm.on_close_committing(closing)
    assert actions == (sm.Action.ELECT,) and status == closing
    closed = sm.PartitionStatus(state=sm.PartitionState.CLOSED, leader_epoch=3)
    # elected with the commit: the close asks for no second election; not elected: it asks
    assert sm.on_closed(status, elected=True) == (closed, ())
    assert sm.on_closed(status, elected=False) == (closed, (sm.Action.ELECT,))
    # a shutdown's close elects nobody; a partition wanted back here elects nobody either
    assert sm.on_close_committing(sm.PartitionStatus(state=sm.PartitionState.CLOSING))[1] == ()
    back = sm.PartitionStatus(state=sm.PartitionState.CLOSING, want_lead=True, elect_after_close=True)
    assert sm.on_close_committing(back)[1] == ()
    assert sm.on_close_committing(sm.PartitionStatus(state=sm.PartitionState.SERVING, elect_after_close=True))[1] == ()


async def test_the_route_takes_well_formed_tails_from_brokers_only() -> None:
    kept: list[tuple[str, int, int, bytes]] = []

    def accept(key: str, size: int, tail_start: int, tail: bytes) -> bool:
        kept.append((key, size, tail_start, tail))
        return tail != b"bad"

    security = NodeSecurity(admin_token=ADMIN, internal_token=INTERNAL)
    app = web.Application(middlewares=[errors_middleware("docs"), broker_auth_middleware(security)])
    app.router.add_post(PATH, handler(accept))
    internal = {"Authorization": f"Bearer {INTERNAL}"}
    async with TestClient(TestServer(app)) as client:
        ok = {"object_key": "streams/1/k", "size": "10", "tail_start": "7"}
        resp = await client.post(PATH, params=ok, data=b"abc", headers=internal)
        assert resp.status == 200 and await resp.json() == {"kept": True}
        resp = await client.post(PATH, params=ok, data=b"abc", headers={"Authorization": f"Bearer {ADMIN}"})
        assert resp.status == 403 and (await resp.json())["error"] == "CLUSTER_AUTHORIZATION_FAILED"
        bad: list[tuple[dict[str, Any], bytes]] = [
            (dict(ok, extra="1"), b"abc"),  # unknown parameter
            ({"size": "10", "tail_start": "7"}, b"abc"),  # no key
            (dict(ok, tail_start="10"), b""),  # starts at the end
            (dict(ok, tail_start="-1"), b"abc"),
            (ok, b"abcd"),  # the body is not [tail_start, size)
            (dict(ok, size=str(MAX_TAIL_BYTES + 8), tail_start="7"), b"x"),  # more than an index GET reads
        ]
        for params, body in bad:
            resp = await client.post(PATH, params=params, data=body, headers=internal)
            assert resp.status == 400 and (await resp.json())["error"] == "INVALID_REQUEST", params
        resp = await client.post(PATH, params=dict(ok, size="3", tail_start="0"), data=b"bad", headers=internal)
        assert resp.status == 200 and await resp.json() == {"kept": False}
        assert kept == [("streams/1/k", 10, 7, b"abc"), ("streams/1/k", 3, 0, b"bad")]  # nothing refused reached it

        sender = TailHandoffClient(INTERNAL)
        url = str(client.make_url("")).rstrip("/")
        try:
            assert await sender.send(url, TailHandoff(2, "streams/1/j", 5, 2), b"xyz")
            assert not await sender.send(url, TailHandoff(2, "streams/1/j", 5, 2), b"xyzw")  # refused: not raised
            assert not await sender.send("http://127.0.0.1:9", TailHandoff(2, "streams/1/j", 5, 2), b"xyz")
            assert (sender.sent, sender.failed) == (2, 1)
        finally:
            await sender.close()
    assert kept[-1] == ("streams/1/j", 5, 2, b"xyz")
