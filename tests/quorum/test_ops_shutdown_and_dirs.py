"""Controlled shutdown completion (fenced at once, as KRaft does), log dir states in the image and
in placement (KIP-928), and the heartbeat's metadata high watermark: run an op, replay, assert."""
from __future__ import annotations

from typing import Any

from metadata_quorum.delta import MetadataDelta, replay_records
from metadata_quorum.kernel.errors import ErrorCode
from metadata_quorum.image import MetadataImage
from metadata_quorum.records import NO_LEADER, BrokerRegistrationChangeRecord
from tests.quorum.quorum_helpers import (
    SESSION_TIMEOUT_MS,
    ManualClock,
    controller,
    epoch_of,
    expect_error,
    partition,
    run,
)


def beat(c, broker_id: int, **extra) -> dict:  # type: ignore[no-untyped-def, type-arg]
    return {"broker_id": broker_id, "broker_epoch": epoch_of(c.image, broker_id),
            "metadata_offset": c.image.offset, **extra}


def stream_of(c, topic: str, p: int) -> int:  # type: ignore[no-untyped-def]
    t = c.image.topics.get(topic)
    return int(c.image.kv[f"partition/{t.topic_id}/{p}/data"])


# ----------------------------------------------------------------------------- controlled shutdown

def test_controlled_shutdown_completes_once_the_broker_closed_its_streams_and_fences_it() -> None:
    c = controller(2)
    c.write("create_topics", {"topics": [{"name": "t", "assignments": {"0": [0], "1": [1]}}]})
    sid = stream_of(c, "t", 0)
    c.write("open_stream", {"stream_id": sid, "epoch": 0, "broker_id": 0, "broker_epoch": epoch_of(c.image, 0)})
    first = c.run("broker_heartbeat", beat(c, 0, want_shutdown=True))
    reg = c.image.cluster.brokers[0]
    assert reg.in_controlled_shutdown and not reg.fenced
    assert first.reply["should_shut_down"] is False and first.reply["is_fenced"] is False
    assert partition(c.image, "t", 0).leader == NO_LEADER  # it leads nothing, but its stream is still open
    c.write("close_stream", {"stream_id": sid, "epoch": 0, "broker_id": 0, "broker_epoch": epoch_of(c.image, 0)})
    done = run(c.image, "broker_heartbeat", beat(c, 0, want_shutdown=True), now_ms=c.clock_ms())
    assert BrokerRegistrationChangeRecord(broker_id=0, broker_epoch=epoch_of(c.image, 0), fenced=True,
                                          in_controlled_shutdown=False) in done.records
    reg = done.image.cluster.brokers[0]
    assert reg.fenced and not reg.in_controlled_shutdown and not reg.is_active
    assert done.reply["should_shut_down"] is True and done.reply["is_fenced"] is True


def test_same_broker_id_registers_again_right_after_its_controlled_shutdown() -> None:
    c = controller(2)
    c.write("create_topics", {"topics": [{"name": "t", "assignments": {"0": [0]}}]})
    assert c.write("broker_heartbeat", beat(c, 0, want_shutdown=True))["should_shut_down"] is True
    now = c.clock_ms()  # no time passes: the old session has not expired
    out = run(c.image, "register_broker", {"broker_id": 0, "incarnation_id": "restarted", "log_dirs": []},
              now_ms=now, heartbeats={0: now, 1: now})
    assert out.reply == {"broker_epoch": c.image.offset + 1, "session_timeout_ms": 9000}
    assert out.image.cluster.brokers[0].incarnation_id == "restarted"


def test_without_a_completed_shutdown_the_same_id_still_waits_for_the_session() -> None:
    c = controller(2)
    c.write("create_topics", {"topics": [{"name": "t", "assignments": {"0": [0]}}]})
    sid = stream_of(c, "t", 0)
    c.write("open_stream", {"stream_id": sid, "epoch": 0, "broker_id": 0, "broker_epoch": epoch_of(c.image, 0)})
    assert c.write("broker_heartbeat", beat(c, 0, want_shutdown=True))["should_shut_down"] is False
    now = c.clock_ms()
    expect_error(c.image, "register_broker", {"broker_id": 0, "incarnation_id": "restarted"},
                 ErrorCode.DUPLICATE_BROKER_REGISTRATION, now_ms=now, heartbeats={0: now})


def test_heartbeats_after_the_shutdown_completed_write_nothing_and_keep_saying_shut_down() -> None:
    c = controller(2)
    c.write("broker_heartbeat", beat(c, 0, want_shutdown=True))
    again = run(c.image, "broker_heartbeat", beat(c, 0, want_shutdown=True))
    assert again.records == ()
    assert again.reply["should_shut_down"] is True and again.reply["is_fenced"] is True


def test_a_fenced_broker_asking_to_shut_down_may_do_so_at_once() -> None:
    c = controller(0)
    epoch = c.write("register_broker", {"broker_id": 0, "incarnation_id": "a"})["broker_epoch"]
    out = run(c.image, "broker_heartbeat", {"broker_id": 0, "broker_epoch": epoch, "metadata_offset": -1,
                                            "want_shutdown": True})
    assert out.records == () and out.reply["should_shut_down"] is True and out.reply["is_fenced"] is True
    assert not out.image.cluster.brokers[0].in_controlled_shutdown


# ----------------------------------------------------------------------------- log dir states

def test_replay_applies_online_saturated_and_offline_dirs_consistently() -> None:
    c = controller(1)
    epoch = epoch_of(c.image, 0)

    def change(image: MetadataImage, **fields: Any) -> MetadataImage:
        return replay_records(image, [BrokerRegistrationChangeRecord(broker_id=0, broker_epoch=epoch, **fields)])

    img = change(c.image, saturated_log_dirs=("b0-d0", "/data/b0/d1", "unknown"))  # paths resolve, unknowns drop
    reg = img.cluster.brokers[0]
    assert reg.saturated_log_dirs == ("b0-d0", "b0-d1") and reg.online_log_dirs == ()
    img = change(img, offline_log_dirs=("b0-d0",))  # offline wins over saturated
    reg = img.cluster.brokers[0]
    assert reg.offline_log_dirs == ("b0-d0",) and reg.saturated_log_dirs == ("b0-d1",)
    assert reg.log_dir_state("b0-d0") == "offline" and reg.log_dir_state("b0-d1") == "saturated"
    img = change(img, online_log_dirs=("/data/b0/d1/",))  # back online: leaves the saturated set
    reg = img.cluster.brokers[0]
    assert reg.saturated_log_dirs == () and reg.online_log_dirs == ("b0-d1",)
    assert reg.log_dir_state("b0-d1") == "online" and reg.log_dir_state("nope") is None
    img = change(img, online_log_dirs=("b0-d0",), saturated_log_dirs=("b0-d0",))  # later field wins
    assert img.cluster.brokers[0].saturated_log_dirs == ("b0-d0",)
    assert img.cluster.brokers[0].offline_log_dirs == ()
    stale = replay_records(img, [BrokerRegistrationChangeRecord(broker_id=0, broker_epoch=epoch - 1,
                                                                offline_log_dirs=("b0-d1",))])
    assert stale.cluster.brokers[0] == img.cluster.brokers[0]  # another incarnation's change is ignored
    rebuilt = MetadataImage.from_records(img.to_records())
    assert rebuilt.cluster.brokers[0] == img.cluster.brokers[0]


def test_heartbeat_reporting_a_dir_healthy_again_brings_it_back_online() -> None:
    c = controller(1)
    c.write("broker_heartbeat", beat(c, 0, offline_log_dirs=["b0-d1"], saturated_log_dirs=["b0-d0"]))
    assert c.image.cluster.brokers[0].online_log_dirs == ()
    out = run(c.image, "broker_heartbeat", beat(c, 0))
    reg = out.image.cluster.brokers[0]
    assert reg.online_log_dirs == ("b0-d0", "b0-d1") and reg.offline_log_dirs == () and reg.saturated_log_dirs == ()
    same = run(out.image, "broker_heartbeat", beat(c, 0, saturated_log_dirs=["/data/b0/d0"]))
    assert len(same.records) == 1
    assert run(same.image, "broker_heartbeat", beat(c, 0, saturated_log_dirs=["b0-d0"])).records == ()


def test_a_broker_whose_dirs_are_all_saturated_or_offline_gets_no_new_partitions() -> None:
    c = controller(2)
    c.write("broker_heartbeat", beat(c, 0, saturated_log_dirs=["b0-d0"], offline_log_dirs=["b0-d1"]))
    out = run(c.image, "create_topics", {"topics": [{"name": "t", "num_partitions": 4}]})
    assert {partition(out.image, "t", p).replicas for p in range(4)} == {(1,)}
    refused = run(c.image, "create_topics", {"topics": [{"name": "l", "storage": "local", "replication_factor": 2}]})
    assert refused.reply["topics"][0]["error"] == "INVALID_REPLICATION_FACTOR" and refused.records == ()


def test_an_offline_dir_gets_no_new_partitions_and_is_never_named_for_an_explicit_one() -> None:
    c = controller(1)
    c.write("broker_heartbeat", beat(c, 0, offline_log_dirs=["b0-d0"]))
    out = run(c.image, "create_topics", {"topics": [{"name": "t", "num_partitions": 3}]})
    assert {partition(out.image, "t", p).directories for p in range(3)} == {("b0-d1",)}
    c.write("broker_heartbeat", beat(c, 0, offline_log_dirs=["b0-d0"], saturated_log_dirs=["b0-d1"]))
    explicit = run(c.image, "create_topics", {"topics": [{"name": "e", "assignments": {"0": [0]}}]})
    assert partition(explicit.image, "e", 0).directories == ("b0-d1",)  # full but online, not the offline one


def test_a_dead_brokers_partitions_skip_brokers_without_an_online_dir() -> None:
    clock = ManualClock()
    c = controller(3, clock)
    c.write("create_topics", {"topics": [{"name": "t", "assignments": {"0": [0], "1": [0]}}]})
    c.write("broker_heartbeat", beat(c, 1, saturated_log_dirs=["b1-d0", "b1-d1"]))
    clock.advance(SESSION_TIMEOUT_MS // 2)
    for b in (1, 2):
        c.write("broker_heartbeat", beat(c, b, saturated_log_dirs=["b1-d0", "b1-d1"] if b == 1 else []))
    clock.advance(SESSION_TIMEOUT_MS // 2 + 1)
    assert c.tick()["fenced_brokers"] == [0]
    assert partition(c.image, "t", 0).leader == 2 and partition(c.image, "t", 1).leader == 2


# ----------------------------------------------------------------------------- metadata high watermark

def test_heartbeat_reply_carries_the_log_end_once_its_own_records_are_in() -> None:
    c = controller(2)
    quiet = c.write("broker_heartbeat", beat(c, 0))
    assert quiet["metadata_high_watermark"] == c.next_offset == c.image.offset + 1
    before = c.next_offset
    changed = c.run("broker_heartbeat", beat(c, 1, saturated_log_dirs=["b1-d0"]))
    assert len(changed.records) == 1
    assert changed.reply["metadata_high_watermark"] == before + 1 == c.next_offset


def test_delta_sees_dir_changes_of_its_own_records() -> None:
    c = controller(1)
    delta = MetadataDelta(c.image)
    delta.replay(BrokerRegistrationChangeRecord(broker_id=0, broker_epoch=epoch_of(c.image, 0),
                                                offline_log_dirs=("/data/b0/d0",)))
    reg = delta.broker(0)
    assert reg is not None and reg.offline_log_dirs == ("b0-d0",) and reg.online_log_dirs == ("b0-d1",)
    assert reg.can_take_new_partitions()
    delta.replay(BrokerRegistrationChangeRecord(broker_id=0, broker_epoch=epoch_of(c.image, 0),
                                                saturated_log_dirs=("b0-d1",)))
    reg = delta.broker(0)
    assert reg is not None and not reg.can_take_new_partitions()


def test_describe_cluster_shows_each_dir_state() -> None:
    c = controller(1)
    c.write("broker_heartbeat", beat(c, 0, offline_log_dirs=["b0-d1"]))
    (broker,) = c.read("describe_cluster", {})["brokers"]
    assert (broker["online_log_dirs"], broker["saturated_log_dirs"], broker["offline_log_dirs"]) == \
        (["b0-d0"], [], ["b0-d1"])


def test_a_reassignment_naming_an_offline_dir_is_refused_and_changes_nothing() -> None:
    c = controller(2)
    c.write("create_topics", {"topics": [{"name": "t", "assignments": {"0": [0]}}]})
    c.write("broker_heartbeat", beat(c, 1, offline_log_dirs=["b1-d0"]))
    out = run(c.image, "alter_partition_reassignments", {"reassignments": [
        {"topic": "t", "partition": 0, "replicas": [1], "log_dirs": ["/data/b1/d0"]}]})
    assert out.reply["responses"][0]["error"] == "KAFKA_STORAGE_ERROR" and out.records == ()
    ok = run(c.image, "alter_partition_reassignments", {"reassignments": [
        {"topic": "t", "partition": 0, "replicas": [1], "log_dirs": ["any"]}]})
    assert "error" not in ok.reply["responses"][0] and partition(ok.image, "t", 0).directories == ("b1-d1",)
