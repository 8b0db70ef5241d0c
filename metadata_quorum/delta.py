"""Replaying records onto an image: the one path by which metadata changes (Kafka's MetadataDelta).

``MetadataDelta(image)`` collects the changes of a batch of records without touching ``image``;
``apply()`` builds the next image, copying only the mappings that changed. ``local_changes``
tells one broker what the batch means for it. Replay is total and deterministic: a record that
refers to something absent (a change to an unknown partition, say) is ignored, identically on
every node.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Mapping

from metadata_quorum.acls import AclBinding, AclsImage
from metadata_quorum.image import (
    BrokerRegistration,
    ClusterImage,
    ConfigsImage,
    MetadataImage,
    PartitionRegistration,
    ScramImage,
    StreamMetadata,
    StreamsImage,
    TopicIdPartition,
    TopicImage,
    TopicsImage,
)
from metadata_quorum.pmap import REMOVE, PMap
from metadata_quorum.records import (
    AccessControlEntryRecord,
    BrokerRegistrationChangeRecord,
    NO_LEADER,
    ConfigRecord,
    KVRecord,
    NoOpRecord,
    PartitionChangeRecord,
    PartitionRecord,
    Record,
    RegisterBrokerRecord,
    RemoveAccessControlEntryRecord,
    ProducerIdsRecord,
    RemoveStreamObjectRecord,
    RemoveStreamRecord,
    RemoveTopicRecord,
    RemoveUserScramCredentialRecord,
    StreamObjectRecord,
    StreamRecord,
    TopicRecord,
    UnregisterBrokerRecord,
    UserScramCredentialRecord,
)


@dataclass(frozen=True)
class LocalChanges:
    """What a batch of records means for one broker.

    ``gained``: partitions it now leads (new registration); ``lost``: partitions it led and no
    longer leads, including deleted ones (old registration); ``reopen``: partitions it still leads
    whose leader epoch changed, so it must re-open their streams with the new epoch (new
    registration).
    """

    gained: Mapping[TopicIdPartition, PartitionRegistration]
    lost: Mapping[TopicIdPartition, PartitionRegistration]
    reopen: Mapping[TopicIdPartition, PartitionRegistration]

    def __bool__(self) -> bool:
        return bool(self.gained or self.lost or self.reopen)


class MetadataDelta:
    """Changes on top of ``image``, kept as overlays; the image itself is never modified."""

    def __init__(self, image: MetadataImage) -> None:
        self.image = image
        self.offset = image.offset
        self.epoch = image.epoch
        self._brokers: dict[int, BrokerRegistration | None] = {}
        self._topics: dict[str, TopicImage | None] = {}  # created (empty partitions) or None = removed
        self._parts: dict[str, dict[int, PartitionRegistration]] = {}  # per-topic partition overlay
        self._names: dict[str, str | None] = {}
        self._streams: dict[int, StreamMetadata | None] = {}
        self._refs: dict[str, tuple[int, ...]] = {}  # object key -> streams referencing it (() = none)
        self._configs: dict[tuple[str, str], dict[str, str]] = {}
        self._kv: dict[str, str | None] = {}
        self._scram: dict[tuple[str, str], UserScramCredentialRecord | None] = {}
        self._acls: dict[int, AclBinding | None] = {}
        self._next_producer_id: int | None = None
        self._changed_partitions: set[TopicIdPartition] = set()

    # ----------------------------------------------------------------- current view
    def broker(self, broker_id: int) -> BrokerRegistration | None:
        if broker_id in self._brokers:
            return self._brokers[broker_id]
        return self.image.cluster.brokers.get(broker_id)

    def broker_ids(self) -> set[int]:
        return {b for b in set(self.image.cluster.brokers) | set(self._brokers) if self.broker(b) is not None}

    def topic(self, topic_id: str) -> TopicImage | None:
        """The topic's header; its ``partitions`` do not include this delta's changes."""
        if topic_id in self._topics:
            return self._topics[topic_id]
        return self.image.topics.by_id.get(topic_id)

    def topic_id_by_name(self, name: str) -> str | None:
        if name in self._names:
            return self._names[name]
        return self.image.topics.by_name.get(name)

    def partition(self, topic_id: str, partition: int) -> PartitionRegistration | None:
        topic = self.topic(topic_id)
        if topic is None:
            return None
        overlay = self._parts.get(topic_id)
        if overlay is not None and partition in overlay:
            return overlay[partition]
        return topic.partitions.get(partition)

    def partition_ids(self, topic_id: str) -> list[int]:
        topic = self.topic(topic_id)
        if topic is None:
            return []
        return sorted(set(topic.partitions) | set(self._parts.get(topic_id, {})))

    def stream(self, stream_id: int) -> StreamMetadata | None:
        if stream_id in self._streams:
            return self._streams[stream_id]
        return self.image.streams.streams.get(stream_id)

    def object_refs(self, object_key: str) -> tuple[int, ...]:
        if object_key in self._refs:
            return self._refs[object_key]
        return self.image.streams.object_refs.get(object_key, ())

    def kv(self, key: str) -> str | None:
        if key in self._kv:
            return self._kv[key]
        return self.image.kv.get(key)

    # ----------------------------------------------------------------- replay
    def replay(self, record: Record, offset: int | None = None, epoch: int | None = None) -> None:
        """Apply one record; ``offset`` defaults to the next one, ``epoch`` to the current."""
        self.offset = self.offset + 1 if offset is None else offset
        if epoch is not None:
            self.epoch = epoch
        handler = _HANDLERS.get(type(record))
        if handler is None:
            raise TypeError(f"cannot replay {type(record).__name__}")
        handler(self, record)

    def replay_all(self, records: list[Record] | tuple[Record, ...]) -> "MetadataDelta":
        for record in records:
            self.replay(record)
        return self

    def _register_broker(self, r: RegisterBrokerRecord) -> None:
        self._brokers[r.broker_id] = BrokerRegistration.from_record(r)

    def _unregister_broker(self, r: UnregisterBrokerRecord) -> None:
        current = self.broker(r.broker_id)
        if current is not None and current.broker_epoch == r.broker_epoch:
            self._brokers[r.broker_id] = None

    def _broker_change(self, r: BrokerRegistrationChangeRecord) -> None:
        current = self.broker(r.broker_id)
        if current is None or current.broker_epoch != r.broker_epoch:
            return
        changes: dict[str, Any] = {}
        for name in ("fenced", "in_controlled_shutdown"):
            value = getattr(r, name)
            if value is not None:
                changes[name] = value
        updated = replace(current, **changes)
        if r.online_log_dirs is not None or r.saturated_log_dirs is not None or r.offline_log_dirs is not None:
            updated = updated.with_log_dir_changes(r.online_log_dirs, r.saturated_log_dirs, r.offline_log_dirs)
        self._brokers[r.broker_id] = updated

    def _topic(self, r: TopicRecord) -> None:
        if self.topic(r.topic_id) is not None or self.topic_id_by_name(r.name) is not None:
            return
        if r.topic_id in self.image.topics.by_id:
            return  # an id is never reused, even after the topic was removed in this delta
        self._topics[r.topic_id] = TopicImage(name=r.name, topic_id=r.topic_id, storage=r.storage)
        self._names[r.name] = r.topic_id

    def _remove_topic(self, r: RemoveTopicRecord) -> None:
        topic = self.topic(r.topic_id)
        if topic is None:
            return
        for p in self.partition_ids(r.topic_id):
            self._changed_partitions.add(TopicIdPartition(r.topic_id, p))
        self._topics[r.topic_id] = None
        self._parts.pop(r.topic_id, None)
        self._names[topic.name] = None

    def _set_partition(self, topic_id: str, partition: int, reg: PartitionRegistration) -> None:
        self._parts.setdefault(topic_id, {})[partition] = reg
        self._changed_partitions.add(TopicIdPartition(topic_id, partition))

    def _partition(self, r: PartitionRecord) -> None:
        if self.topic(r.topic_id) is not None:
            self._set_partition(r.topic_id, r.partition, PartitionRegistration.from_record(r))

    def _partition_change(self, r: PartitionChangeRecord) -> None:
        current = self.partition(r.topic_id, r.partition)
        if current is not None:
            self._set_partition(r.topic_id, r.partition, current.merge(r))

    def _stream(self, r: StreamRecord) -> None:
        current = self.stream(r.stream_id)
        objects = current.objects if current is not None else ()
        self._streams[r.stream_id] = StreamMetadata(
            stream_id=r.stream_id,
            epoch=r.epoch,
            state=r.state,
            owner=r.owner,
            start_offset=r.start_offset,
            end_offset=r.end_offset,
            objects=objects,
            owner_epoch=r.owner_epoch,
            wal_owners=r.wal_owners,
        )

    def _unref(self, object_key: str, stream_id: int) -> None:
        self._refs[object_key] = tuple(s for s in self.object_refs(object_key) if s != stream_id)

    def _remove_stream(self, r: RemoveStreamRecord) -> None:
        current = self.stream(r.stream_id)
        if current is None:
            return
        for obj in current.objects:
            self._unref(obj.object_key, r.stream_id)
        self._streams[r.stream_id] = None

    def _stream_object(self, r: StreamObjectRecord) -> None:
        current = self.stream(r.stream_id)
        if current is None:
            return
        objects = current.objects
        if any(o.object_key == r.object_key for o in objects):
            objects = tuple(o for o in objects if o.object_key != r.object_key)
        else:
            self._refs[r.object_key] = tuple(sorted(self.object_refs(r.object_key) + (r.stream_id,)))
        if objects and (objects[-1].start_offset, objects[-1].end_offset, objects[-1].object_key) > \
                (r.start_offset, r.end_offset, r.object_key):
            objects = tuple(sorted(objects + (r,), key=lambda o: (o.start_offset, o.end_offset, o.object_key)))
        else:
            objects = objects + (r,)  # the usual case: an object appended at the end
        # A committed object extends its stream: the commit needs no StreamRecord of its own.
        self._streams[r.stream_id] = replace(current, objects=objects,
                                             end_offset=max(current.end_offset, r.end_offset))

    def _remove_stream_object(self, r: RemoveStreamObjectRecord) -> None:
        current = self.stream(r.stream_id)
        if current is None:
            return
        kept = tuple(o for o in current.objects if o.object_key != r.object_key)
        if len(kept) != len(current.objects):
            self._streams[r.stream_id] = replace(current, objects=kept)
            self._unref(r.object_key, r.stream_id)

    def _config(self, r: ConfigRecord) -> None:
        key = (r.resource_type, r.resource_name)
        if key not in self._configs:
            self._configs[key] = dict(self.image.configs.get(*key))
        if r.value is None:
            self._configs[key].pop(r.key, None)
        else:
            self._configs[key][r.key] = r.value

    def _kv_record(self, r: KVRecord) -> None:
        self._kv[r.key] = r.value

    def _scram_credential(self, r: UserScramCredentialRecord) -> None:
        self._scram[(r.name, r.mechanism)] = r

    def _remove_scram_credential(self, r: RemoveUserScramCredentialRecord) -> None:
        self._scram[(r.name, r.mechanism)] = None
    def _acl(self, r: AccessControlEntryRecord) -> None:
        self._acls[r.acl_id] = AclBinding.from_record(r)

    def _producer_ids(self, r: ProducerIdsRecord) -> None:
        self._next_producer_id = r.next_producer_id

    def _remove_acl(self, r: RemoveAccessControlEntryRecord) -> None:
        if r.acl_id in self._acls or r.acl_id in self.image.acls.by_id:
            self._acls[r.acl_id] = None

    def _noop(self, r: NoOpRecord) -> None:
        return None

    # ----------------------------------------------------------------- results
    def apply(self) -> MetadataImage:
        """The image with every replayed record applied (provenance: the last offset/epoch)."""
        image = self.image
        cluster = image.cluster
        if self._brokers:
            cluster = ClusterImage(image.cluster.brokers.update(_removals(self._brokers)))
        topics = image.topics
        if self._topics or self._parts:
            topics = self._apply_topics()
        streams = image.streams
        if self._streams or self._refs:
            streams = StreamsImage(
                image.streams.streams.update(_removals(self._streams)),
                image.streams.object_refs.update({k: (v if v else REMOVE) for k, v in self._refs.items()}),
            )
        configs = image.configs
        if self._configs:
            configs = ConfigsImage(image.configs.configs.update(
                {k: (PMap(v) if v else REMOVE) for k, v in self._configs.items()}))
        kv = image.kv.update(_removals(self._kv)) if self._kv else image.kv
        scram = ScramImage(image.scram.credentials.update(_removals(self._scram))) if self._scram else image.scram
        acls = AclsImage(image.acls.by_id.update(_removals(self._acls))) if self._acls else image.acls
        next_producer_id = image.next_producer_id if self._next_producer_id is None else self._next_producer_id
        return MetadataImage(self.offset, self.epoch, cluster, topics, streams, configs, kv, scram, acls,
                             next_producer_id)

    def _apply_topics(self) -> TopicsImage:
        old = self.image.topics
        changes: dict[str, Any] = {}
        for topic_id in set(self._topics) | set(self._parts):
            header = self.topic(topic_id)
            if header is None:
                changes[topic_id] = REMOVE
            else:
                overlay = self._parts.get(topic_id, {})
                changes[topic_id] = replace(header, partitions=header.partitions.update(overlay))
        leaderless = set(old.leaderless)
        counts: dict[str, dict[Any, int]] = {"replicas": {}, "leaders": {}, "dirs": {}}
        current: dict[str, Mapping[Any, int]] = {
            "replicas": old.replica_counts, "leaders": old.leader_counts, "dirs": old.dir_counts}

        def bump(kind: str, key: Any, by: int) -> None:
            table = counts[kind]
            table[key] = int(table.get(key, current[kind].get(key, 0))) + by

        for tp in self._changed_partitions:
            before = old.partition(tp.topic_id, tp.partition)
            after = self.partition(tp.topic_id, tp.partition)
            for reg, sign in ((before, -1), (after, 1)):
                if reg is None:
                    continue
                for r in reg.replicas:
                    bump("replicas", r, sign)
                for d in reg.directories:
                    if d:
                        bump("dirs", d, sign)
                if reg.leader != NO_LEADER:
                    bump("leaders", reg.leader, sign)
            if after is not None and after.leader == NO_LEADER:
                leaderless.add(tp)
            else:
                leaderless.discard(tp)
        return TopicsImage(
            by_id=old.by_id.update(changes),
            by_name=old.by_name.update(_removals(self._names)),
            leaderless=frozenset(leaderless) if leaderless != old.leaderless else old.leaderless,
            replica_counts=old.replica_counts.update({k: v or REMOVE for k, v in counts["replicas"].items()}),
            leader_counts=old.leader_counts.update({k: v or REMOVE for k, v in counts["leaders"].items()}),
            dir_counts=old.dir_counts.update({k: v or REMOVE for k, v in counts["dirs"].items()}),
        )

    def changed_partitions(self) -> set[TopicIdPartition]:
        return set(self._changed_partitions)

    def removed_stream_ids(self) -> list[int]:
        return sorted(s for s, v in self._streams.items() if v is None and s in self.image.streams.streams)

    def changed_stream_ids(self) -> list[int]:
        return sorted(self._streams)

    def local_changes(self, broker_id: int) -> LocalChanges:
        gained: dict[TopicIdPartition, PartitionRegistration] = {}
        lost: dict[TopicIdPartition, PartitionRegistration] = {}
        reopen: dict[TopicIdPartition, PartitionRegistration] = {}
        for tp in sorted(self._changed_partitions):
            old = self.image.topics.partition(tp.topic_id, tp.partition)
            new = self.partition(tp.topic_id, tp.partition)
            led = old is not None and old.leader == broker_id
            leads = new is not None and new.leader == broker_id
            if leads and not led:
                assert new is not None
                gained[tp] = new
            elif led and not leads:
                assert old is not None
                lost[tp] = old
            elif led and leads and old is not None and new is not None and new.leader_epoch != old.leader_epoch:
                reopen[tp] = new
        return LocalChanges(gained, lost, reopen)


def _removals(changes: Mapping[Any, Any]) -> dict[Any, Any]:
    """Delta entries (None = removed) as PMap updates."""
    return {k: (REMOVE if v is None else v) for k, v in changes.items()}


_HANDLERS: dict[type, Any] = {
    RegisterBrokerRecord: MetadataDelta._register_broker,
    UnregisterBrokerRecord: MetadataDelta._unregister_broker,
    BrokerRegistrationChangeRecord: MetadataDelta._broker_change,
    TopicRecord: MetadataDelta._topic,
    RemoveTopicRecord: MetadataDelta._remove_topic,
    PartitionRecord: MetadataDelta._partition,
    PartitionChangeRecord: MetadataDelta._partition_change,
    StreamRecord: MetadataDelta._stream,
    RemoveStreamRecord: MetadataDelta._remove_stream,
    StreamObjectRecord: MetadataDelta._stream_object,
    RemoveStreamObjectRecord: MetadataDelta._remove_stream_object,
    ConfigRecord: MetadataDelta._config,
    KVRecord: MetadataDelta._kv_record,
    UserScramCredentialRecord: MetadataDelta._scram_credential,
    RemoveUserScramCredentialRecord: MetadataDelta._remove_scram_credential,
    AccessControlEntryRecord: MetadataDelta._acl,
    RemoveAccessControlEntryRecord: MetadataDelta._remove_acl,
    ProducerIdsRecord: MetadataDelta._producer_ids,
    NoOpRecord: MetadataDelta._noop,
}


def replay_records(image: MetadataImage, records: list[Record] | tuple[Record, ...]) -> MetadataImage:
    """The image after ``records`` (offsets continue from ``image.offset``)."""
    return MetadataDelta(image).replay_all(records).apply()


__all__ = ["MetadataDelta", "LocalChanges", "TopicIdPartition", "replay_records"]
