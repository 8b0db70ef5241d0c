"""The controller HTTP API on a real (single-node) pysyncobj quorum running in-process."""
from __future__ import annotations

import asyncio
import os
from typing import Any

from metadata_quorum.delta import MetadataDelta
from metadata_quorum.image import EMPTY_IMAGE
from metadata_quorum.records import KVRecord, NoOpRecord, decode_record


async def hw(ctl: Any) -> int:
    status, body = await ctl.get("/v1/health")
    assert status == 200
    return int(body["high_watermark"])


async def test_write_then_read_and_log(controller: Any) -> None:
    status, body = await controller.post("/v1/write/put_kv", {"key": "a", "value": "1"})
    assert status == 200
    offset = body["offset"]
    assert body["reply"] == {}
    status, body = await controller.post("/v1/read/get_kv", {"key": "a"})
    assert status == 200 and body["reply"]["value"] == "1" and body["offset"] >= offset
    status, body = await controller.post("/v1/read/get_kv?consistency=leader", {"key": "a"})
    assert status == 200 and body["reply"]["value"] == "1"
    status, log = await controller.get("/v1/log?offset=0")
    records = [(r["offset"], decode_record(r["record"])) for r in log["records"]]
    assert [o for o, _ in records] == list(range(len(records)))
    assert isinstance(records[0][1], NoOpRecord)  # the leader's first record fences the old term
    assert records[-1] == (offset, KVRecord(key="a", value="1"))
    assert log["high_watermark"] == offset + 1


async def test_each_write_is_one_batch_with_increasing_offsets(controller: Any) -> None:
    offsets = []
    for i in range(20):
        status, body = await controller.post("/v1/write/put_kv", {"key": f"k{i}", "value": str(i)})
        assert status == 200
        offsets.append(body["offset"])
    assert offsets == list(range(offsets[0], offsets[0] + 20))


async def test_concurrent_writes_are_all_committed_once(controller: Any) -> None:
    results = await asyncio.gather(*(controller.post("/v1/write/put_kv", {"key": f"c{i}", "value": str(i)})
                                     for i in range(50)))
    offsets = sorted(body["offset"] for status, body in results if status == 200)
    assert len(offsets) == 50 and len(set(offsets)) == 50
    _, log = await controller.get("/v1/log?offset=0")
    kv = [decode_record(r["record"]) for r in log["records"]]
    assert sorted(r.key for r in kv if isinstance(r, KVRecord)) == sorted(f"c{i}" for i in range(50))


async def test_batch_endpoint_answers_each_op_in_order(controller: Any) -> None:
    status, body = await controller.post("/v1/write", {"ops": [
        {"op": "put_kv", "args": {"key": "x", "value": "1"}},
        {"op": "put_kv", "args": {"value": "no key"}},
        {"op": "put_kv", "args": {"key": "y", "value": "2"}},
    ]})
    assert status == 200
    first, bad, third = body["results"]
    assert third["offset"] == first["offset"] + 1
    assert bad["error"] == "INVALID_REQUEST" and "key" in bad["message"]


async def test_bad_input_is_4xx_with_kafka_error_and_changes_nothing(controller: Any) -> None:
    before = await hw(controller)
    cases = [
        await controller.post_raw("/v1/write/put_kv", b"{not json"),
        await controller.post_raw("/v1/write/put_kv", b"[1, 2]"),
        await controller.post("/v1/write/no_such_op", {}),
        await controller.post("/v1/write/put_kv", {"value": "missing key"}),
        await controller.post("/v1/write", {"ops": []}),
        await controller.post("/v1/write", {"ops": [{"op": "put_kv", "args": {"key": "z", "value": "1"}},
                                                     {"op": "nope"}]}),
        await controller.post("/v1/read/no_such_read", {}),
        await controller.get("/v1/log?offset=-1"),
        await controller.get("/v1/log?offset=abc"),
        await controller.get("/v1/log"),
        await controller.post("/v1/read/get_kv?consistency=sometimes", {"key": "a"}),
    ]
    for status, body in cases:
        assert 400 <= status < 500, (status, body)
        assert body["error"] in {"INVALID_REQUEST", "INVALID_CONFIG"}, body
        assert body["message"]
    assert await hw(controller) == before


async def test_long_poll_returns_when_a_record_commits(controller: Any) -> None:
    start = await hw(controller)
    poll = asyncio.ensure_future(controller.get(f"/v1/log?offset={start}&max_wait_ms=20000"))
    await asyncio.sleep(0.1)
    assert not poll.done()
    await controller.post("/v1/write/put_kv", {"key": "late", "value": "v"})
    status, body = await asyncio.wait_for(poll, 20)
    assert status == 200
    assert [r["offset"] for r in body["records"]] == [start]
    assert decode_record(body["records"][0]["record"]) == KVRecord(key="late", value="v")


async def test_long_poll_without_new_records_returns_empty(controller: Any) -> None:
    start = await hw(controller)
    status, body = await controller.get(f"/v1/log?offset={start}&max_wait_ms=50")
    assert status == 200 and body["records"] == [] and body["high_watermark"] == start


async def test_snapshot_rebuilds_the_image(controller: Any) -> None:
    for i in range(5):
        await controller.post("/v1/write/put_kv", {"key": f"s{i}", "value": str(i)})
    await controller.post("/v1/write/put_kv", {"key": "s0", "value": None})
    _, snap = await controller.get("/v1/snapshot")
    image = MetadataDelta(EMPTY_IMAGE).replay_all([decode_record(r) for r in snap["records"]]).apply()
    assert dict(image.kv) == {f"s{i}": str(i) for i in range(1, 5)}
    assert snap["offset"] == await hw(controller) - 1


async def test_old_offsets_are_served_as_a_snapshot(controller_factory: Any) -> None:
    ctl = await controller_factory(log_retention_records=10)
    for i in range(40):
        status, _ = await ctl.post("/v1/write/put_kv", {"key": f"r{i % 7}", "value": str(i)})
        assert status == 200
    _, health = await ctl.get("/v1/health")
    assert health["log_start_offset"] > 0
    _, body = await ctl.get("/v1/log?offset=0")
    snap = body["snapshot"]
    image = MetadataDelta(EMPTY_IMAGE).replay_all([decode_record(r) for r in snap["records"]]).apply()
    expected = {f"r{k}": str(max(i for i in range(40) if i % 7 == k)) for k in range(7)}
    assert dict(image.kv) == expected
    _, recent = await ctl.get(f"/v1/log?offset={health['log_start_offset']}")
    assert recent["records"][0]["offset"] == health["log_start_offset"]
    assert recent["records"][-1]["offset"] == health["high_watermark"] - 1


async def test_restart_recovers_log_and_image(controller_factory: Any) -> None:
    ctl = await controller_factory(log_retention_records=25)
    for i in range(60):
        await ctl.post("/v1/write/put_kv", {"key": f"p{i % 9}", "value": str(i)})
    _, health = await ctl.get("/v1/health")
    start = health["log_start_offset"]
    assert start > 0  # some batches were dropped: the restart must rebuild from the snapshot
    _, before_log = await ctl.get(f"/v1/log?offset={start}")
    _, before_snap = await ctl.get("/v1/snapshot")
    before_hw = await hw(ctl)
    await ctl.stop()
    await ctl.start()
    assert await hw(ctl) >= before_hw  # a new term writes its NoOp
    _, after_log = await ctl.get(f"/v1/log?offset={start}")
    if "snapshot" in after_log:
        # A node drops old batches once its image covers them, and a restarted node replays its
        # journal before its image catches up: it may have dropped further. The snapshot then
        # covers everything the old read returned.
        assert after_log["snapshot"]["offset"] >= before_log["records"][-1]["offset"]
    else:
        assert after_log["records"][: len(before_log["records"])] == before_log["records"]
    status, body = await ctl.post("/v1/read/get_kv", {"key": "p5"})
    assert body["reply"]["value"] == "59"
    _, after_snap = await ctl.get("/v1/snapshot")
    kv = lambda s: sorted(r["fields"]["key"] for r in s["records"] if r["type"] == "KV")  # noqa: E731
    assert kv(after_snap) == kv(before_snap)


async def test_restart_after_raft_log_compaction(controller_factory: Any) -> None:
    """pysyncobj compacts its journal into a full dump; a restart must rebuild from both."""
    ctl = await controller_factory(raft={"log_compaction_min_entries": 20}, log_retention_records=30)
    for i in range(120):
        await ctl.post("/v1/write/put_kv", {"key": f"q{i % 11}", "value": str(i)})
    _, health = await ctl.get("/v1/health")
    start = health["log_start_offset"]
    assert start > 0  # old batches were dropped: the dump holds a snapshot of the image
    _, before = await ctl.get(f"/v1/log?offset={start}&max_records=100000")
    dump = os.path.join(ctl.directory, "data", "controller-1", "raft.dump")
    for _ in range(100):
        if os.path.exists(dump):
            break
        await asyncio.sleep(0.05)
    assert os.path.exists(dump)
    await ctl.stop()
    await ctl.start()
    _, after = await ctl.get(f"/v1/log?offset={start}&max_records=100000")
    assert after["records"][: len(before["records"])] == before["records"]
    _, body = await ctl.post("/v1/read/get_kv", {"key": "q10"})
    assert body["reply"]["value"] == "109"
    _, snap = await ctl.get("/v1/snapshot")
    keys = {r["fields"]["key"]: r["fields"]["value"] for r in snap["records"] if r["type"] == "KV"}
    assert keys == {f"q{k}": str(max(i for i in range(120) if i % 11 == k)) for k in range(11)}


async def test_status_replication_health_and_metrics(controller: Any) -> None:
    await controller.post("/v1/write/put_kv", {"key": "m", "value": "1"})
    _, status = await controller.get("/v1/quorum/status")
    assert status["leader_id"] == 1 and status["leader_epoch"] >= 1
    assert [v["id"] for v in status["current_voters"]] == [1]
    _, repl = await controller.get("/v1/quorum/replication")
    (row,) = repl["replicas"]
    assert row["status"] == "Leader" and row["lag"] == 0 and row["log_end_offset"] == repl["high_watermark"]
    code, text = await controller.get("/metrics")
    assert code == 200
    assert "ferry_controller_commit_latency_seconds_count" in text
    assert "ferry_controller_log_end_offset" in text


async def test_heartbeating_brokers_are_observers(controller: Any) -> None:
    _, reg = await controller.post("/v1/write/register_broker", {
        "broker_id": 7, "incarnation_id": "inc-7", "endpoints": ["http://127.0.0.1:1"],
        "log_dirs": [{"dir_id": "d1", "path": "/tmp/ferry-d1"}]})
    epoch = reg["reply"]["broker_epoch"]
    status, hb = await controller.post("/v1/write/broker_heartbeat", {
        "broker_id": 7, "broker_epoch": epoch, "metadata_offset": reg["offset"]})
    assert status == 200 and hb["reply"]["is_fenced"] is False
    _, repl = await controller.get("/v1/quorum/replication")
    observers = [r for r in repl["replicas"] if r["status"] == "Observer"]
    assert [(o["node_id"], o["directory_id"]) for o in observers] == [(7, "d1")]
    assert observers[0]["log_end_offset"] == reg["offset"] + 1
    _, status_body = await controller.get("/v1/quorum/status")
    assert status_body["current_observers"] == [{"id": 7, "directory_id": "d1"}]


async def test_heartbeat_reply_carries_the_active_controllers_committed_high_watermark(controller: Any) -> None:
    _, reg = await controller.post("/v1/write/register_broker", {"broker_id": 8, "incarnation_id": "inc-8"})
    epoch = reg["reply"]["broker_epoch"]
    for i in range(3):
        await controller.post("/v1/write/put_kv", {"key": f"hw{i}", "value": "1"})
    # the unfencing heartbeat writes a record: its high watermark includes it
    _, hb = await controller.post("/v1/write/broker_heartbeat", {
        "broker_id": 8, "broker_epoch": epoch, "metadata_offset": reg["offset"]})
    _, health = await controller.get("/v1/health")
    assert hb["reply"]["metadata_high_watermark"] == hb["offset"] + 1 == health["high_watermark"]
    # a quiet heartbeat (no records) still reports everything committed before it
    await controller.post("/v1/write/put_kv", {"key": "hw-last", "value": "1"})
    _, quiet = await controller.post("/v1/write/broker_heartbeat", {
        "broker_id": 8, "broker_epoch": epoch, "metadata_offset": reg["offset"]})
    _, log = await controller.get(f"/v1/log?offset={hb['offset'] + 1}&max_wait_ms=0")
    assert quiet["reply"]["metadata_high_watermark"] == log["high_watermark"] == hb["offset"] + 2


async def test_describe_topics_pages_over_http(controller: Any) -> None:
    status, reg = await controller.post("/v1/write/register_broker", {
        "broker_id": 1, "incarnation_id": "i1", "endpoints": ["http://127.0.0.1:1"],
        "log_dirs": [{"dir_id": "d", "path": "/tmp/ferry-d"}]})
    assert status == 200
    status, _ = await controller.post("/v1/write/broker_heartbeat", {
        "broker_id": 1, "broker_epoch": reg["reply"]["broker_epoch"], "metadata_offset": reg["offset"]})
    assert status == 200
    status, created = await controller.post("/v1/write/create_topics", {"topics": [{"name": "paged", "num_partitions": 5}]})
    assert status == 200 and "error" not in created["reply"]["topics"][0], created
    args: dict[str, Any] = {"names": ["paged"], "partition_limit": 2}
    seen: list[int] = []
    while True:
        status, body = await controller.post("/v1/read/describe_topics", args)
        assert status == 200
        (topic,) = body["reply"]["topics"]
        assert len(topic["partitions"]) <= 2
        seen.extend(p["partition"] for p in topic["partitions"])
        if "next_cursor" not in body["reply"]:
            break
        args["cursor"] = body["reply"]["next_cursor"]
    assert seen == [0, 1, 2, 3, 4]
    status, body = await controller.post("/v1/read/describe_topics", {"names": ["paged"], "cursor": {"name": "x", "partition": 0}})
    assert status == 400 and body["error"] == "INVALID_REQUEST"
