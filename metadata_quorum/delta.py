"""Replaying records onto an image: the one path by which metadata changes (Kafka's MetadataDelta).

``MetadataDelta(image)`` collects the changes of a batch of records without touching ``image``;
``apply()`` builds the next image, copying only the mappings that changed. ``local_changes``
tells one broker what the batch means for it. Replay is total and deterministic: a record that
refers to something absent (a change to an unknown partition, say) is ignored, identically on
every node.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Mapping, NamedTuple

from metadata_quorum.image import (
    BrokerRegistration,
    ClusterImage,
    ConfigsImage,
    MetadataImage,
    PartitionRegistration,
    StreamMetadata,
    StreamsImage,
    TopicImage,
    TopicsImage,
    frozen,
)
from metadata_quorum.records import (
    BrokerRegistrationChangeRecord,
    ConfigRecord,
    KVRecord,
    NoOpRecord,
    PartitionChangeRecord,
    PartitionRecord,
    Record,
    RegisterBrokerRecord,
    RemoveStreamObjectRecord,
    RemoveStreamRecord,
    RemoveTopicRecord,
    StreamObjectRecord,
    StreamRecord,
    TopicRecord,
    UnregisterBrokerRecord,
)


class TopicIdPartition(NamedTuple):
    topic_id: str
    partition: int


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


_REMOVED = object()


class MetadataDelta:
    """Changes on top of ``image``; the image itself is never modified."""

    def __init__(self, image: MetadataImage) -> None:
        self.image = image
        self.offset = image.offset
        self.epoch = image.epoch
        self._brokers: dict[int, BrokerRegistration | None] = {}
        self._topics: dict[str, TopicImage | None] = {}  # topic_id -> new header (partitions ignored)
        self._partitions: dict[str, dict[int, PartitionRegistration]] = {}  # copied on first write
        self._names: dict[str, str | None] = {}
        self._streams: dict[int, StreamMetadata | None] = {}
        self._configs: dict[tuple[str, str], dict[str, str]] = {}
        self._kv: dict[str, str | None] = {}
        self._changed_partitions: set[TopicIdPartition] = set()
        self._removed_topics: set[str] = set()

    # ----------------------------------------------------------------- current view
    def broker(self, broker_id: int) -> BrokerRegistration | None:
        if broker_id in self._brokers:
            return self._brokers[broker_id]
        return self.image.cluster.brokers.get(broker_id)

    def topic(self, topic_id: str) -> TopicImage | None:
        if topic_id in self._topics:
            return self._topics[topic_id]
        return self.image.topics.by_id.get(topic_id)

    def topic_id_by_name(self, name: str) -> str | None:
        if name in self._names:
            return self._names[name]
        return self.image.topics.by_name.get(name)

    def partitions(self, topic_id: str) -> Mapping[int, PartitionRegistration]:
        if topic_id in self._partitions:
            return self._partitions[topic_id]
        topic = self.topic(topic_id)
        return {} if topic is None else topic.partitions

    def partition(self, topic_id: str, partition: int) -> PartitionRegistration | None:
        return self.partitions(topic_id).get(partition)

    def stream(self, stream_id: int) -> StreamMetadata | None:
        if stream_id in self._streams:
            return self._streams[stream_id]
        return self.image.streams.streams.get(stream_id)

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
        for name in ("fenced", "in_controlled_shutdown", "saturated_log_dirs", "offline_log_dirs"):
            value = getattr(r, name)
            if value is not None:
                changes[name] = tuple(value) if isinstance(value, (list, tuple)) else value
        self._brokers[r.broker_id] = replace(current, **changes)

    def _topic(self, r: TopicRecord) -> None:
        if self.topic(r.topic_id) is not None or self.topic_id_by_name(r.name) is not None:
            return
        self._topics[r.topic_id] = TopicImage(name=r.name, topic_id=r.topic_id, storage=r.storage)
        self._partitions[r.topic_id] = {}
        self._names[r.name] = r.topic_id
        self._removed_topics.discard(r.topic_id)

    def _remove_topic(self, r: RemoveTopicRecord) -> None:
        topic = self.topic(r.topic_id)
        if topic is None:
            return
        for p in self.partitions(r.topic_id):
            self._changed_partitions.add(TopicIdPartition(r.topic_id, p))
        self._topics[r.topic_id] = None
        self._partitions[r.topic_id] = {}
        self._names[topic.name] = None
        self._removed_topics.add(r.topic_id)

    def _writable_partitions(self, topic_id: str) -> dict[int, PartitionRegistration] | None:
        if self.topic(topic_id) is None:
            return None
        if topic_id not in self._partitions:
            self._partitions[topic_id] = dict(self.partitions(topic_id))
        return self._partitions[topic_id]

    def _partition(self, r: PartitionRecord) -> None:
        parts = self._writable_partitions(r.topic_id)
        if parts is None:
            return
        parts[r.partition] = PartitionRegistration.from_record(r)
        self._changed_partitions.add(TopicIdPartition(r.topic_id, r.partition))

    def _partition_change(self, r: PartitionChangeRecord) -> None:
        parts = self._writable_partitions(r.topic_id)
        if parts is None or r.partition not in parts:
            return
        parts[r.partition] = parts[r.partition].merge(r)
        self._changed_partitions.add(TopicIdPartition(r.topic_id, r.partition))

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
        )

    def _remove_stream(self, r: RemoveStreamRecord) -> None:
        if self.stream(r.stream_id) is not None:
            self._streams[r.stream_id] = None

    def _stream_object(self, r: StreamObjectRecord) -> None:
        current = self.stream(r.stream_id)
        if current is None:
            return
        kept = [o for o in current.objects if o.object_key != r.object_key]
        kept.append(r)
        kept.sort(key=lambda o: (o.start_offset, o.end_offset, o.object_key))
        self._streams[r.stream_id] = replace(current, objects=tuple(kept))

    def _remove_stream_object(self, r: RemoveStreamObjectRecord) -> None:
        current = self.stream(r.stream_id)
        if current is None:
            return
        kept = tuple(o for o in current.objects if o.object_key != r.object_key)
        if len(kept) != len(current.objects):
            self._streams[r.stream_id] = replace(current, objects=kept)

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

    def _noop(self, r: NoOpRecord) -> None:
        return None

    # ----------------------------------------------------------------- results
    def apply(self) -> MetadataImage:
        """The image with every replayed record applied (provenance: the last offset/epoch)."""
        image = self.image
        cluster = image.cluster
        if self._brokers:
            brokers = dict(image.cluster.brokers)
            _merge(brokers, self._brokers)
            cluster = ClusterImage(frozen(brokers))
        topics = image.topics
        if self._topics or self._partitions:
            by_id = dict(image.topics.by_id)
            for topic_id, parts in self._partitions.items():
                header = self.topic(topic_id)
                if header is not None:
                    by_id[topic_id] = replace(header, partitions=frozen(dict(parts)))
            for topic_id, header in self._topics.items():
                if header is None:
                    by_id.pop(topic_id, None)
            by_name = dict(image.topics.by_name)
            _merge(by_name, self._names)
            topics = TopicsImage(frozen(by_id), frozen(by_name))
        streams = image.streams
        if self._streams:
            stream_map = dict(image.streams.streams)
            _merge(stream_map, self._streams)
            streams = StreamsImage(frozen(stream_map))
        configs = image.configs
        if self._configs:
            config_map = dict(image.configs.configs)
            for key, values in self._configs.items():
                if values:
                    config_map[key] = frozen(dict(values))
                else:
                    config_map.pop(key, None)
            configs = ConfigsImage(frozen(config_map))
        kv = image.kv
        if self._kv:
            kv_map = dict(image.kv)
            _merge(kv_map, self._kv)
            kv = frozen(kv_map)
        return MetadataImage(self.offset, self.epoch, cluster, topics, streams, configs, kv)

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
        return LocalChanges(frozen(gained), frozen(lost), frozen(reopen))


def _merge(target: dict[Any, Any], changes: Mapping[Any, Any]) -> None:
    for key, value in changes.items():
        if value is None:
            target.pop(key, None)
        else:
            target[key] = value


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
    NoOpRecord: MetadataDelta._noop,
}


def replay_records(image: MetadataImage, records: list[Record] | tuple[Record, ...]) -> MetadataImage:
    """The image after ``records`` (offsets continue from ``image.offset``)."""
    return MetadataDelta(image).replay_all(records).apply()


__all__ = ["MetadataDelta", "LocalChanges", "TopicIdPartition", "replay_records"]
