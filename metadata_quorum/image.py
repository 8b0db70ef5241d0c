"""The metadata image: an immutable view of everything the metadata log has said so far.

An image is only ever built by replaying records (see ``delta.py``); nothing else changes it.
Mappings are ``PMap``s: immutable, and an update copies only the buckets it touches, so building
the next image costs the size of what changed, not the size of the cluster. The image also keeps
a few indexes (leaderless partitions, replicas per broker and per log dir, object references)
that the delta maintains as it applies changes, so the controller's periodic work does not scan
every partition.
``offset`` is the log offset of the last record applied (-1 = empty); ``epoch`` is the Raft term
under which that record was written (-1 = unknown).
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any, Callable, Iterable, Mapping, NamedTuple

from metadata_quorum.acls import AclsImage
from metadata_quorum.kernel.messages.streams import DescribeStreamReply
from metadata_quorum.pmap import EMPTY_PMAP, PMap
from metadata_quorum.records import (
    NO_LEADER,
    STORAGE_S3,
    STREAM_CLOSED,
    STREAM_OPENED,
    BrokerRegistrationChangeRecord,
    ConfigRecord,
    KVRecord,
    LogDirSpec,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    Record,
    RegisterBrokerRecord,
    StreamObjectRecord,
    StreamRecord,
    TopicRecord,
    UserScramCredentialRecord,
)

#: KV key holding the next stream id to allocate, so that ids are never reused after deletion.
STREAM_ID_COUNTER_KEY = "ferry/next_stream_id"


EMPTY_MAP: Mapping[Any, Any] = EMPTY_PMAP


class TopicIdPartition(NamedTuple):
    topic_id: str
    partition: int


@dataclass(frozen=True)
class BrokerRegistration:
    """A registered broker: the fields of its RegisterBrokerRecord plus its log dirs' health.

    ``saturated_log_dirs`` / ``offline_log_dirs`` are ids of the broker's own log dirs (replay
    resolves paths and drops names it does not know), sorted and disjoint: an offline dir is not
    also saturated. Every other registered dir is online. A saturated dir (full, KIP-928) and an
    offline one get no new partitions; :meth:`usable_log_dirs` are the online ones.
    """

    broker_id: int
    incarnation_id: str
    broker_epoch: int
    endpoints: tuple[str, ...] = ()
    rack: str | None = None
    log_dirs: tuple[LogDirSpec, ...] = ()
    fenced: bool = True
    in_controlled_shutdown: bool = False
    saturated_log_dirs: tuple[str, ...] = ()
    offline_log_dirs: tuple[str, ...] = ()

    @property
    def is_active(self) -> bool:
        """May lead partitions and receive new ones: unfenced and not shutting down."""
        return not self.fenced and not self.in_controlled_shutdown

    def log_dir_by_path(self, path: str) -> LogDirSpec | None:
        return next((d for d in self.log_dirs if d.path.rstrip("/") == path.rstrip("/")), None)

    def usable_log_dirs(self) -> tuple[LogDirSpec, ...]:
        """The online log dirs: neither saturated nor offline."""
        bad = set(self.saturated_log_dirs) | set(self.offline_log_dirs)
        return tuple(d for d in self.log_dirs if d.dir_id not in bad)

    @property
    def online_log_dirs(self) -> tuple[str, ...]:
        """Ids of the online log dirs, sorted."""
        return tuple(sorted(d.dir_id for d in self.usable_log_dirs()))

    def log_dir_state(self, dir_id: str) -> str | None:
        """"online", "saturated" or "offline"; None for a dir this broker did not register."""
        if not any(d.dir_id == dir_id for d in self.log_dirs):
            return None
        if dir_id in self.offline_log_dirs:
            return "offline"
        return "saturated" if dir_id in self.saturated_log_dirs else "online"

    def can_take_new_partitions(self) -> bool:
        """Active, and with an online log dir (or none registered: it places partitions itself)."""
        return self.is_active and (not self.log_dirs or bool(self.usable_log_dirs()))

    def resolve_log_dirs(self, names: Iterable[str]) -> tuple[str, ...]:
        """The ids of the named dirs (ids or absolute paths), sorted; unknown names are dropped."""
        by_path = {d.path.rstrip("/"): d.dir_id for d in self.log_dirs}
        ids = {d.dir_id for d in self.log_dirs}
        out = {n if n in ids else by_path.get(n.rstrip("/"), "") for n in names}
        return tuple(sorted(out - {""}))

    def with_log_dir_changes(self, online: Iterable[str] | None, saturated: Iterable[str] | None,
                             offline: Iterable[str] | None) -> "BrokerRegistration":
        """Apply a BrokerRegistrationChange's dir fields: ``online`` dirs leave both sets, then
        ``saturated`` and ``offline`` (each the whole set when given) replace theirs; offline wins."""
        sat = set(self.saturated_log_dirs)
        off = set(self.offline_log_dirs)
        if online is not None:
            back = set(self.resolve_log_dirs(online))
            sat -= back
            off -= back
        if saturated is not None:
            sat = set(self.resolve_log_dirs(saturated))
        if offline is not None:
            off = set(self.resolve_log_dirs(offline))
        return replace(self, saturated_log_dirs=tuple(sorted(sat - off)), offline_log_dirs=tuple(sorted(off)))

    @classmethod
    def from_record(cls, record: RegisterBrokerRecord) -> "BrokerRegistration":
        return cls(
            broker_id=record.broker_id,
            incarnation_id=record.incarnation_id,
            broker_epoch=record.broker_epoch,
            endpoints=tuple(record.endpoints),
            rack=record.rack,
            log_dirs=tuple(record.log_dirs),
            fenced=record.fenced,
            in_controlled_shutdown=record.in_controlled_shutdown,
        )

    def to_records(self) -> list[Record]:
        records: list[Record] = [
            RegisterBrokerRecord(
                broker_id=self.broker_id,
                incarnation_id=self.incarnation_id,
                broker_epoch=self.broker_epoch,
                endpoints=self.endpoints,
                rack=self.rack,
                log_dirs=self.log_dirs,
                fenced=self.fenced,
                in_controlled_shutdown=self.in_controlled_shutdown,
            )
        ]
        if self.saturated_log_dirs or self.offline_log_dirs:
            records.append(
                BrokerRegistrationChangeRecord(
                    broker_id=self.broker_id,
                    broker_epoch=self.broker_epoch,
                    saturated_log_dirs=self.saturated_log_dirs,
                    offline_log_dirs=self.offline_log_dirs,
                )
            )
        return records


@dataclass(frozen=True, slots=True)
class PartitionRegistration:
    """A partition's replication state: the fields of PartitionRecord."""

    topic_id: str
    partition: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    removing_replicas: tuple[int, ...] = ()
    adding_replicas: tuple[int, ...] = ()
    leader: int = NO_LEADER
    leader_epoch: int = 0
    partition_epoch: int = 0
    directories: tuple[str, ...] = ()
    storage: str = STORAGE_S3
    reelection_deadline_ms: int = 0
    change_started_ms: int = 0

    @classmethod
    def from_record(cls, record: PartitionRecord) -> "PartitionRegistration":
        return cls(**{f.name: getattr(record, f.name) for f in fields(PartitionRecord)})

    def to_record(self) -> PartitionRecord:
        return PartitionRecord(**{f.name: getattr(self, f.name) for f in fields(PartitionRecord)})

    @property
    def is_reassigning(self) -> bool:
        return bool(self.adding_replicas or self.removing_replicas or self.reelection_deadline_ms)

    @property
    def original_replicas(self) -> tuple[int, ...]:
        """The replicas before the reassignment in progress (Kafka: replicas - adding, plus removing)."""
        kept = tuple(r for r in self.replicas if r not in self.adding_replicas)
        return kept + tuple(r for r in self.removing_replicas if r not in kept)

    def first_active_replica(self, is_active: Callable[[int], bool]) -> int:
        """The replica an s3 partition's election picks: the first active one (its data is in
        object storage, so every replica is in sync). NO_LEADER when none is active."""
        return next((r for r in self.replicas if is_active(r)), NO_LEADER)

    def named_leader(self, is_active: Callable[[int], bool]) -> tuple[int, int]:
        """The leader and leader epoch clients are told about.

        During an s3 hand-over the partition has no leader in the log (the old owner must close
        its streams first), but the owner-to-be is already decided: the first active replica of
        the target, which the election behind the old owner's closing commit (or ``tick`` at the
        deadline) makes leader at ``leader_epoch + 1``. Naming it at once, as Kafka keeps a leader
        named through a reassignment, lets a client send its next request straight to the broker
        that is about to serve instead of backing off on ``LEADER_NOT_AVAILABLE``; that broker
        holds the request until it serves. Any other leaderless partition has no leader named."""
        if self.leader != NO_LEADER or self.storage != STORAGE_S3 or not self.reelection_deadline_ms:
            return self.leader, self.leader_epoch
        owner_to_be = self.first_active_replica(is_active)
        if owner_to_be == NO_LEADER:
            return NO_LEADER, self.leader_epoch
        return owner_to_be, self.leader_epoch + 1

    def merge(self, change: PartitionChangeRecord) -> "PartitionRegistration":
        """Apply a PartitionChange with KRaft's epoch rules.

        ``partition_epoch`` always bumps; ``leader_epoch`` bumps when the leader changes or when
        the change removes a replica (so a removed replica's writes are fenced).
        """
        replicas = self.replicas if change.replicas is None else tuple(change.replicas)
        leader = self.leader if change.leader is None else change.leader
        leader_epoch = self.leader_epoch
        if leader != self.leader or any(r not in replicas for r in self.replicas):
            leader_epoch += 1

        def pick(new: Any, old: Any) -> Any:
            return old if new is None else (tuple(new) if isinstance(new, (list, tuple)) else new)

        return PartitionRegistration(
            topic_id=self.topic_id,
            partition=self.partition,
            replicas=replicas,
            isr=pick(change.isr, self.isr),
            removing_replicas=pick(change.removing_replicas, self.removing_replicas),
            adding_replicas=pick(change.adding_replicas, self.adding_replicas),
            leader=leader,
            leader_epoch=leader_epoch,
            partition_epoch=self.partition_epoch + 1,
            directories=pick(change.directories, self.directories),
            storage=self.storage,
            reelection_deadline_ms=pick(change.reelection_deadline_ms, self.reelection_deadline_ms),
            change_started_ms=pick(change.change_started_ms, self.change_started_ms),
        )


@dataclass(frozen=True)
class TopicImage:
    name: str
    topic_id: str
    storage: str
    partitions: PMap[int, PartitionRegistration] = field(default_factory=lambda: EMPTY_PMAP)

    def to_records(self) -> list[Record]:
        records: list[Record] = [TopicRecord(name=self.name, topic_id=self.topic_id, storage=self.storage)]
        records += [self.partitions[p].to_record() for p in sorted(self.partitions)]
        return records


@dataclass(frozen=True, slots=True)
class StreamMetadata:
    """A stream as the controller knows it (AutoMQ's S3StreamMetadata).

    A stream is created CLOSED with ``epoch = -1`` and ``owner = -1``, so the first owner opens it
    with any epoch >= 0 (brokers use the partition's leader epoch). ``owner_epoch`` is the broker
    epoch of the owner's incarnation that opened it.
    """

    stream_id: int
    epoch: int
    state: str
    owner: int
    start_offset: int = 0
    end_offset: int = 0
    objects: tuple[StreamObjectRecord, ...] = ()
    owner_epoch: int = -1
    wal_owners: tuple[tuple[int, int], ...] = ()  # see StreamRecord

    @property
    def is_opened(self) -> bool:
        return self.state == STREAM_OPENED

    def to_record(self) -> StreamRecord:
        return StreamRecord(
            stream_id=self.stream_id,
            epoch=self.epoch,
            state=self.state,
            owner=self.owner,
            start_offset=self.start_offset,
            end_offset=self.end_offset,
            owner_epoch=self.owner_epoch,
            wal_owners=self.wal_owners,
        )

    def to_records(self) -> list[Record]:
        return [self.to_record(), *self.objects]

    def describe(self) -> DescribeStreamReply:
        return {
            "stream_id": self.stream_id,
            "epoch": self.epoch,
            "state": self.state,
            "owner": self.owner,
            "owner_epoch": self.owner_epoch,
            "wal_owners": [list(o) for o in self.wal_owners],
            "start_offset": self.start_offset,
            "end_offset": self.end_offset,
            "objects": [
                {
                    "object_key": o.object_key,
                    "start_offset": o.start_offset,
                    "end_offset": o.end_offset,
                    "size": o.size,
                    "epoch": o.epoch,
                    "committed_ms": o.committed_ms,
                    "range_bytes": o.range_bytes,
                }
                for o in self.objects
            ],
        }


@dataclass(frozen=True)
class ClusterImage:
    brokers: PMap[int, BrokerRegistration] = field(default_factory=lambda: EMPTY_PMAP)

    def active_broker_ids(self) -> list[int]:
        """Unfenced brokers not in controlled shutdown, sorted by id."""
        return sorted(b for b, reg in self.brokers.items() if reg.is_active)

    def is_active(self, broker_id: int) -> bool:
        reg = self.brokers.get(broker_id)
        return reg is not None and reg.is_active


@dataclass(frozen=True)
class TopicsImage:
    by_id: PMap[str, TopicImage] = field(default_factory=lambda: EMPTY_PMAP)
    by_name: PMap[str, str] = field(default_factory=lambda: EMPTY_PMAP)
    #: partitions with no leader (maintained by the delta; ``tick`` looks only at these)
    leaderless: frozenset[TopicIdPartition] = frozenset()
    #: broker id -> replicas it hosts / partitions it leads; log dir id -> replicas in it
    replica_counts: PMap[int, int] = field(default_factory=lambda: EMPTY_PMAP)
    leader_counts: PMap[int, int] = field(default_factory=lambda: EMPTY_PMAP)
    dir_counts: PMap[str, int] = field(default_factory=lambda: EMPTY_PMAP)

    def get(self, name: str) -> TopicImage | None:
        topic_id = self.by_name.get(name)
        return None if topic_id is None else self.by_id.get(topic_id)

    def partition(self, topic_id: str, partition: int) -> PartitionRegistration | None:
        topic = self.by_id.get(topic_id)
        return None if topic is None else topic.partitions.get(partition)

    def all_partitions(self) -> list[tuple[TopicImage, PartitionRegistration]]:
        """Every partition, ordered by topic name then partition index (deterministic)."""
        out = []
        for name in sorted(self.by_name):
            topic = self.by_id[self.by_name[name]]
            out += [(topic, topic.partitions[p]) for p in sorted(topic.partitions)]
        return out


@dataclass(frozen=True)
class StreamsImage:
    streams: PMap[int, StreamMetadata] = field(default_factory=lambda: EMPTY_PMAP)
    #: object_key -> ids (sorted) of the streams that still reference it
    object_refs: PMap[str, tuple[int, ...]] = field(default_factory=lambda: EMPTY_PMAP)


@dataclass(frozen=True)
class ConfigsImage:
    """Dynamic configs by (resource_type, resource_name)."""

    configs: PMap[tuple[str, str], PMap[str, str]] = field(default_factory=lambda: EMPTY_PMAP)

    def get(self, resource_type: str, resource_name: str) -> Mapping[str, str]:
        return self.configs.get((resource_type, resource_name), EMPTY_MAP)


@dataclass(frozen=True)
class ScramImage:
    """SCRAM credentials by (user, mechanism name), as the metadata log holds them."""

    credentials: PMap[tuple[str, str], UserScramCredentialRecord] = field(default_factory=lambda: EMPTY_PMAP)

    def get(self, user: str, mechanism: str) -> UserScramCredentialRecord | None:
        return self.credentials.get((user, mechanism))


@dataclass(frozen=True)
class MetadataImage:
    offset: int = -1
    epoch: int = -1
    cluster: ClusterImage = field(default_factory=ClusterImage)
    topics: TopicsImage = field(default_factory=TopicsImage)
    streams: StreamsImage = field(default_factory=StreamsImage)
    configs: ConfigsImage = field(default_factory=ConfigsImage)
    kv: PMap[str, str] = field(default_factory=lambda: EMPTY_PMAP)
    scram: ScramImage = field(default_factory=ScramImage)
    acls: AclsImage = field(default_factory=AclsImage)
    # the first producer id no broker has been given yet (``ops/producer_ids.py``)
    next_producer_id: int = 0

    @property
    def next_stream_id(self) -> int:
        """The id the next created stream gets: never reused, even after streams are removed."""
        counter = self.kv.get(STREAM_ID_COUNTER_KEY)
        if counter is not None:  # every operation creating streams advances it
            return int(counter)
        return max(self.streams.streams, default=-1) + 1

    def to_records(self) -> list[Record]:
        """Records that rebuild this image (offset and epoch aside) when replayed onto the empty one."""
        records: list[Record] = []
        for broker_id in sorted(self.cluster.brokers):
            records += self.cluster.brokers[broker_id].to_records()
        for name in sorted(self.topics.by_name):
            records += self.topics.by_id[self.topics.by_name[name]].to_records()
        for stream_id in sorted(self.streams.streams):
            records += self.streams.streams[stream_id].to_records()
        for (rtype, rname) in sorted(self.configs.configs):
            for key, value in sorted(self.configs.configs[(rtype, rname)].items()):
                records.append(ConfigRecord(resource_type=rtype, resource_name=rname, key=key, value=value))
        for key in sorted(self.kv):
            records.append(KVRecord(key=key, value=self.kv[key]))
        records += [self.scram.credentials[key] for key in sorted(self.scram.credentials)]
        records += [self.acls.by_id[i].to_record(i) for i in sorted(self.acls.by_id)]
        if self.next_producer_id > 0:
            records.append(ProducerIdsRecord(broker_id=-1, broker_epoch=-1, next_producer_id=self.next_producer_id))
        return records

    def same_content(self, other: "MetadataImage") -> bool:
        """Equal state, ignoring provenance (offset, epoch)."""
        return (
            dict(self.cluster.brokers) == dict(other.cluster.brokers)
            and _topics_plain(self.topics) == _topics_plain(other.topics)
            and dict(self.topics.by_name) == dict(other.topics.by_name)
            and dict(self.streams.streams) == dict(other.streams.streams)
            and {k: dict(v) for k, v in self.configs.configs.items()}
            == {k: dict(v) for k, v in other.configs.configs.items()}
            and dict(self.kv) == dict(other.kv)
            and dict(self.scram.credentials) == dict(other.scram.credentials)
            and dict(self.acls.by_id) == dict(other.acls.by_id)
            and self.next_producer_id == other.next_producer_id
        )

    def indexes_consistent(self) -> bool:
        """Whether the maintained indexes equal ones computed from scratch (a self-check)."""
        leaderless: set[TopicIdPartition] = set()
        replicas: dict[int, int] = {}
        leaders: dict[int, int] = {}
        dirs: dict[str, int] = {}
        for topic in self.topics.by_id.values():
            for part in topic.partitions.values():
                if part.leader == NO_LEADER:
                    leaderless.add(TopicIdPartition(part.topic_id, part.partition))
                else:
                    leaders[part.leader] = leaders.get(part.leader, 0) + 1
                for r in part.replicas:
                    replicas[r] = replicas.get(r, 0) + 1
                for d in part.directories:
                    if d:
                        dirs[d] = dirs.get(d, 0) + 1
        refs: dict[str, list[int]] = {}
        for stream_id in sorted(self.streams.streams):
            for obj in self.streams.streams[stream_id].objects:
                refs.setdefault(obj.object_key, []).append(stream_id)
        return (
            leaderless == set(self.topics.leaderless)
            and replicas == dict(self.topics.replica_counts)
            and leaders == dict(self.topics.leader_counts)
            and dirs == dict(self.topics.dir_counts)
            and {k: tuple(v) for k, v in refs.items()} == dict(self.streams.object_refs)
        )

    @classmethod
    def from_records(cls, records: list[Record], offset: int | None = None, epoch: int = -1) -> "MetadataImage":
        """Build an image from a snapshot's records; ``offset`` is the snapshot's last offset."""
        from metadata_quorum.delta import MetadataDelta

        delta = MetadataDelta(EMPTY_IMAGE)
        for record in records:
            delta.replay(record)
        image = delta.apply()
        if offset is not None:
            image = MetadataImage(offset, epoch, image.cluster, image.topics, image.streams, image.configs, image.kv,
                                  image.scram, image.acls, image.next_producer_id)
        return image


def _topics_plain(topics: TopicsImage) -> dict[str, Any]:
    return {
        tid: (t.name, t.storage, dict(t.partitions)) for tid, t in topics.by_id.items()
    }


EMPTY_IMAGE = MetadataImage()

__all__ = [
    "STREAM_ID_COUNTER_KEY",
    "BrokerRegistration",
    "PartitionRegistration",
    "TopicImage",
    "StreamMetadata",
    "ClusterImage",
    "TopicsImage",
    "StreamsImage",
    "ConfigsImage",
    "ScramImage",
    "MetadataImage",
    "EMPTY_IMAGE",
    "TopicIdPartition",
    "PMap",
    "STREAM_CLOSED",
    "STREAM_OPENED",
]
