"""The image is built only by replay; to_records() rebuilds it; deltas tell brokers what changed."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from metadata_quorum.delta import MetadataDelta, TopicIdPartition, replay_records
from metadata_quorum.image import EMPTY_IMAGE, MetadataImage
from metadata_quorum.pmap import REMOVE, PMap
from metadata_quorum.records import (
    NO_LEADER,
    STREAM_OPENED,
    BrokerRegistrationChangeRecord,
    KVRecord,
    PartitionChangeRecord,
    PartitionRecord,
    Record,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    StreamObjectRecord,
    StreamRecord,
    TopicRecord,
    decode_record_bytes,
    encode_record_bytes,
)
from tests.quorum.quorum_helpers import controller, epoch_of, partition


def rich_controller():  # type: ignore[no-untyped-def]
    """A controller whose log touches every record type."""
    c = controller(3)
    c.write("create_topics", {"topics": [
        {"name": "s3-topic", "num_partitions": 3, "configs": {"retention.ms": "1000"}},
        {"name": "local-topic", "num_partitions": 2, "replication_factor": 2, "storage": "local"},
        {"name": "doomed", "num_partitions": 1},
    ]})
    c.write("delete_topics", {"names": ["doomed"]})
    owner = partition(c.image, "s3-topic", 0).leader
    sid = int(c.image.kv[f"partition/{c.image.topics.get('s3-topic').topic_id}/0/data"])  # type: ignore[union-attr]
    ep = epoch_of(c.image, owner)
    c.write("open_stream", {"stream_id": sid, "epoch": 0, "broker_id": owner, "broker_epoch": ep})
    for i in range(3):
        c.write("commit_object", {"object_key": f"obj-{i}", "size": 100, "broker_id": owner, "broker_epoch": ep,
                                  "ranges": [{"stream_id": sid, "epoch": 0, "start_offset": i * 10,
                                              "end_offset": i * 10 + 10}]})
    c.write("trim_stream", {"stream_id": sid, "epoch": 0, "broker_id": owner, "broker_epoch": ep,
                            "new_start_offset": 10})
    c.write("alter_partition_reassignments", {"reassignments": [
        {"topic": "s3-topic", "partition": 1, "replicas": [(partition(c.image, "s3-topic", 1).leader + 1) % 3]}]})
    c.write("alter_configs", {"resources": [{"type": "broker", "name": "1", "configs": {"throttle": "10"}}]})
    c.write("put_kv", {"key": "app/x", "value": "y"})
    c.write("broker_heartbeat", {"broker_id": 2, "broker_epoch": epoch_of(c.image, 2), "metadata_offset": 0,
                                 "saturated_log_dirs": ["b2-d0"]})
    return c


def test_to_records_rebuilds_the_image_from_every_prefix() -> None:
    c = rich_controller()
    records = c.image.to_records()
    rebuilt = MetadataImage.from_records(records, offset=c.image.offset, epoch=c.image.epoch)
    assert rebuilt.same_content(c.image)
    assert rebuilt.offset == c.image.offset and rebuilt.epoch == c.image.epoch
    assert rebuilt.to_records() == records
    over_the_wire = [decode_record_bytes(encode_record_bytes(r)) for r in records]
    assert MetadataImage.from_records(over_the_wire).same_content(c.image)
    for k in range(len(records) + 1):
        prefix = MetadataImage.from_records(records[:k])
        assert MetadataImage.from_records(prefix.to_records()).same_content(prefix), k


def test_every_prefix_of_the_log_has_a_snapshot_that_rebuilds_it() -> None:
    c = rich_controller()
    delta = MetadataDelta(EMPTY_IMAGE)
    for offset, record in c.log:
        delta.replay(record, offset)
        image = delta.apply()
        assert image.offset == offset
        assert MetadataImage.from_records(image.to_records()).same_content(image), offset
        assert image.indexes_consistent(), offset
    assert delta.apply().same_content(c.image)


def test_replay_never_changes_the_base_image() -> None:
    c = controller(2)
    before = c.image
    before_records = before.to_records()
    delta = MetadataDelta(before)
    delta.replay(RegisterBrokerRecord(broker_id=7, incarnation_id="x", broker_epoch=99))
    delta.replay(KVRecord(key="k", value="v"))
    after = delta.apply()
    assert 7 not in before.cluster.brokers and "k" not in before.kv
    assert before.to_records() == before_records
    assert after.cluster.brokers[7].broker_epoch == 99 and after.kv["k"] == "v"
    with pytest.raises(TypeError):
        after.kv["k"] = "w"  # type: ignore[index]


def test_provenance_is_the_last_offset_and_epoch() -> None:
    delta = MetadataDelta(EMPTY_IMAGE)
    delta.replay(KVRecord(key="a", value="1"), offset=0, epoch=3)
    delta.replay(KVRecord(key="b", value="2"), offset=1, epoch=4)
    image = delta.apply()
    assert (image.offset, image.epoch) == (1, 4)
    assert EMPTY_IMAGE.offset == -1


def _one_partition_image(leader: int = 1, replicas: tuple[int, ...] = (1, 2)) -> MetadataImage:
    return replay_records(EMPTY_IMAGE, [
        TopicRecord(name="t", topic_id="T", storage="local"),
        PartitionRecord(topic_id="T", partition=0, replicas=replicas, isr=replicas, leader=leader, storage="local"),
    ])


def test_every_partition_change_bumps_partition_epoch_only() -> None:
    image = replay_records(_one_partition_image(), [PartitionChangeRecord(topic_id="T", partition=0, isr=(1,))])
    p = image.topics.partition("T", 0)
    assert p is not None and (p.partition_epoch, p.leader_epoch, p.isr) == (1, 0, (1,))


def test_leader_change_bumps_leader_epoch() -> None:
    image = replay_records(_one_partition_image(), [PartitionChangeRecord(topic_id="T", partition=0, leader=2)])
    p = image.topics.partition("T", 0)
    assert p is not None and (p.leader, p.leader_epoch, p.partition_epoch) == (2, 1, 1)


def test_leader_to_none_bumps_leader_epoch() -> None:
    image = replay_records(_one_partition_image(), [PartitionChangeRecord(topic_id="T", partition=0, leader=NO_LEADER)])
    p = image.topics.partition("T", 0)
    assert p is not None and (p.leader, p.leader_epoch) == (NO_LEADER, 1)


def test_removing_a_replica_bumps_leader_epoch_but_adding_does_not() -> None:
    added = replay_records(_one_partition_image(), [PartitionChangeRecord(topic_id="T", partition=0, replicas=(1, 2, 3))])
    p = added.topics.partition("T", 0)
    assert p is not None and (p.leader_epoch, p.partition_epoch) == (0, 1)
    removed = replay_records(added, [PartitionChangeRecord(topic_id="T", partition=0, replicas=(1, 3))])
    p = removed.topics.partition("T", 0)
    assert p is not None and (p.leader, p.leader_epoch, p.partition_epoch) == (1, 1, 2)


def test_replay_ignores_records_about_unknown_things() -> None:
    image = _one_partition_image()
    after = replay_records(image, [
        PartitionChangeRecord(topic_id="nope", partition=0, leader=5),
        PartitionChangeRecord(topic_id="T", partition=9, leader=5),
        BrokerRegistrationChangeRecord(broker_id=42, broker_epoch=1, fenced=False),
        StreamObjectRecord(object_key="o", stream_id=77, start_offset=0, end_offset=1, size=1, epoch=0),
        RemoveTopicRecord(topic_id="nope"),
    ])
    assert after.same_content(image)


def test_untouched_topics_are_shared_between_images() -> None:
    records: list[Record] = []
    for t in range(20):
        records.append(TopicRecord(name=f"t{t}", topic_id=f"T{t}"))
        records += [PartitionRecord(topic_id=f"T{t}", partition=p, replicas=(1,), isr=(1,), leader=1)
                    for p in range(500)]
    big = replay_records(EMPTY_IMAGE, records)
    after = replay_records(big, [PartitionChangeRecord(topic_id="T3", partition=7, leader=2)])
    for t in range(20):
        if t != 3:
            assert after.topics.by_id[f"T{t}"] is big.topics.by_id[f"T{t}"]
    assert after.topics.by_id["T3"].partitions[8] is big.topics.by_id["T3"].partitions[8]
    assert after.topics.partition("T3", 7).leader == 2  # type: ignore[union-attr]
    assert big.topics.partition("T3", 7).leader == 1  # type: ignore[union-attr]
    assert after.cluster is big.cluster and after.streams is big.streams


def test_local_changes_gained_lost_reopen_and_deleted() -> None:
    image = replay_records(EMPTY_IMAGE, [
        TopicRecord(name="a", topic_id="A"),
        PartitionRecord(topic_id="A", partition=0, replicas=(1,), isr=(1,), leader=1),
        PartitionRecord(topic_id="A", partition=1, replicas=(1,), isr=(1,), leader=1),
        PartitionRecord(topic_id="A", partition=2, replicas=(2,), isr=(2,), leader=2),
        TopicRecord(name="b", topic_id="B"),
        PartitionRecord(topic_id="B", partition=0, replicas=(1,), isr=(1,), leader=1),
        PartitionRecord(topic_id="B", partition=1, replicas=(1, 2), isr=(1, 2), leader=1, storage="local"),
    ])
    delta = MetadataDelta(image)
    delta.replay(PartitionChangeRecord(topic_id="A", partition=0, replicas=(2,), isr=(2,), leader=NO_LEADER))
    delta.replay(PartitionChangeRecord(topic_id="A", partition=2, replicas=(1,), isr=(1,), leader=1))
    delta.replay(PartitionChangeRecord(topic_id="B", partition=1, replicas=(1,), isr=(1,)))  # removes 2: epoch bump
    delta.replay(PartitionChangeRecord(topic_id="A", partition=1, isr=(1,)))  # same leader, same epoch
    changes = delta.local_changes(1)
    assert set(changes.gained) == {TopicIdPartition("A", 2)}
    assert set(changes.lost) == {TopicIdPartition("A", 0)}
    assert set(changes.reopen) == {TopicIdPartition("B", 1)}
    assert changes.gained[TopicIdPartition("A", 2)].leader_epoch == 1
    other = delta.local_changes(2)
    assert set(other.lost) == {TopicIdPartition("A", 2)} and not other.gained and not other.reopen

    delete = MetadataDelta(image)
    delete.replay(RemoveTopicRecord(topic_id="B"))
    assert set(delete.local_changes(1).lost) == {TopicIdPartition("B", 0), TopicIdPartition("B", 1)}
    assert "b" not in delete.apply().topics.by_name


def test_stream_objects_stay_sorted_and_stream_records_keep_them() -> None:
    image = replay_records(EMPTY_IMAGE, [
        StreamRecord(stream_id=1, epoch=0, state=STREAM_OPENED, owner=1),
        StreamObjectRecord(object_key="b", stream_id=1, start_offset=10, end_offset=20, size=1, epoch=0),
        StreamObjectRecord(object_key="a", stream_id=1, start_offset=0, end_offset=10, size=1, epoch=0),
        StreamRecord(stream_id=1, epoch=0, state=STREAM_OPENED, owner=1, end_offset=20),
    ])
    stream = image.streams.streams[1]
    assert [o.object_key for o in stream.objects] == ["a", "b"] and stream.end_offset == 20
    assert image.streams.object_refs == {"a": (1,), "b": (1,)}


@settings(max_examples=60, deadline=None)
@given(start=st.dictionaries(st.one_of(st.integers(), st.text(max_size=8)), st.integers(), max_size=60),
       changes=st.lists(st.tuples(st.one_of(st.integers(), st.text(max_size=8)), st.one_of(st.none(), st.integers())),
                        max_size=40))
def test_pmap_behaves_like_a_dict_and_never_changes(start: dict, changes: list) -> None:  # type: ignore[type-arg]
    base = PMap(start)
    snapshot = dict(base.items())
    expected = dict(start)
    update = {}
    for key, value in changes:
        update[key] = REMOVE if value is None else value
    for key, value in update.items():
        if value is REMOVE:
            expected.pop(key, None)
        else:
            expected[key] = value
    updated = base.update(update)
    assert dict(updated.items()) == expected and len(updated) == len(expected)
    assert all(updated.get(k) == v and k in updated for k, v in expected.items())
    assert dict(base.items()) == snapshot and len(base) == len(snapshot)


def test_one_change_among_ten_thousand_partitions_copies_one_bucket() -> None:
    records: list[Record] = [TopicRecord(name="big", topic_id="B")]
    records += [PartitionRecord(topic_id="B", partition=p, replicas=(p % 5,), isr=(p % 5,), leader=p % 5)
                for p in range(10_000)]
    big = replay_records(EMPTY_IMAGE, records)
    assert big.indexes_consistent() and big.topics.leader_counts[0] == 2000
    after = replay_records(big, [PartitionChangeRecord(topic_id="B", partition=1234, leader=NO_LEADER)])
    old_parts, new_parts = big.topics.by_id["B"].partitions, after.topics.by_id["B"].partitions
    shared = sum(old_parts.shares_bucket_with(new_parts, p) for p in range(256))
    assert shared == 255 and not old_parts.shares_bucket_with(new_parts, 1234)
    assert after.topics.leaderless == {TopicIdPartition("B", 1234)}
    assert after.topics.leader_counts[1234 % 5] == 1999 and after.indexes_consistent()
