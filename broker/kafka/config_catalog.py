"""What DescribeConfigs reports about a config: Kafka's default, type, documentation, source and
synonyms.

The controller stores only the configs someone set (``describe_configs`` returns them); a Kafka
client expects every topic config, each with where its value comes from. This catalogue fills in
the rest the way Kafka's LogConfig does, so ``kafka-configs --describe --all`` and the admin
clients' ``describe_configs`` show the same list a Kafka broker would. Pure data and functions.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Mapping, Protocol, Sequence

from metadata_quorum.ops.group_configs import GROUP_CONFIG_DOCS, GroupConfigDefaults, group_config_default


class ConfigSource(IntEnum):
    """DescribeConfigsResponse's ConfigSource."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6
    DYNAMIC_CLIENT_METRICS_CONFIG = 7
    DYNAMIC_GROUP_CONFIG = 8


class ConfigType(IntEnum):
    """DescribeConfigsResponse's ConfigType (v3+)."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7


@dataclass(frozen=True)
class TopicConfigSpec:
    default: str
    type: ConfigType
    broker_synonym: str | None
    documentation: str


_LONG_MAX = str(2 ** 63 - 1)

# Kafka's TopicConfig names, LogConfig defaults and the broker config each one falls back to.
TOPIC_CONFIG_SPECS: dict[str, TopicConfigSpec] = {
    "cleanup.policy": TopicConfigSpec("delete", ConfigType.LIST, "log.cleanup.policy",
                                      "The retention policy of old log segments: delete, compact, or both."),
    "compression.gzip.level": TopicConfigSpec("-1", ConfigType.INT, "compression.gzip.level",
                                              "The compression level when compression.type is gzip."),
    "compression.lz4.level": TopicConfigSpec("9", ConfigType.INT, "compression.lz4.level",
                                             "The compression level when compression.type is lz4."),
    "compression.type": TopicConfigSpec("producer", ConfigType.STRING, "compression.type",
                                        "The final compression of the topic's data; producer keeps the producer's."),
    "compression.zstd.level": TopicConfigSpec("3", ConfigType.INT, "compression.zstd.level",
                                              "The compression level when compression.type is zstd."),
    "delete.retention.ms": TopicConfigSpec("86400000", ConfigType.LONG, "log.cleaner.delete.retention.ms",
                                           "How long delete tombstones are kept in compacted topics."),
    "file.delete.delay.ms": TopicConfigSpec("60000", ConfigType.LONG, "log.segment.delete.delay.ms",
                                            "How long to wait before deleting a file from the filesystem."),
    "flush.messages": TopicConfigSpec(_LONG_MAX, ConfigType.LONG, "log.flush.interval.messages",
                                      "Records written between forced fsyncs of the log."),
    "flush.ms": TopicConfigSpec(_LONG_MAX, ConfigType.LONG, "log.flush.interval.ms",
                                "Time between forced fsyncs of the log."),
    "follower.replication.throttled.replicas": TopicConfigSpec(
        "", ConfigType.LIST, None, "Replicas whose follower-side replication is throttled ([partition]:[broker],...)."),
    "index.interval.bytes": TopicConfigSpec("4096", ConfigType.INT, "log.index.interval.bytes",
                                            "How often an offset index entry is added."),
    "leader.replication.throttled.replicas": TopicConfigSpec(
        "", ConfigType.LIST, None, "Replicas whose leader-side replication is throttled ([partition]:[broker],...)."),
    "local.retention.bytes": TopicConfigSpec("-2", ConfigType.LONG, "log.local.retention.bytes",
                                             "Local bytes kept before tiered segments are deleted (-2: retention.bytes)."),
    "local.retention.ms": TopicConfigSpec("-2", ConfigType.LONG, "log.local.retention.ms",
                                          "Time kept locally before tiered segments are deleted (-2: retention.ms)."),
    "max.compaction.lag.ms": TopicConfigSpec(_LONG_MAX, ConfigType.LONG, "log.cleaner.max.compaction.lag.ms",
                                             "The longest a record stays uncompacted."),
    # the default a topic gets is the broker's message.max.bytes (broker_configs.py), as in Kafka
    "max.message.bytes": TopicConfigSpec("1048588", ConfigType.INT, "message.max.bytes",
                                         "The largest record batch size allowed."),
    # Kafka 4's default is 3600000; Ferry's record validator applies no bound unless the topic sets one
    "message.timestamp.after.max.ms": TopicConfigSpec(
        _LONG_MAX, ConfigType.LONG, "log.message.timestamp.after.max.ms",
        "How far a record's timestamp may be ahead of the broker's clock."),
    "message.timestamp.before.max.ms": TopicConfigSpec(
        _LONG_MAX, ConfigType.LONG, "log.message.timestamp.before.max.ms",
        "How far a record's timestamp may be behind the broker's clock."),
    "message.timestamp.type": TopicConfigSpec("CreateTime", ConfigType.STRING, "log.message.timestamp.type",
                                              "Whether record timestamps are CreateTime or LogAppendTime."),
    "min.cleanable.dirty.ratio": TopicConfigSpec("0.5", ConfigType.DOUBLE, "log.cleaner.min.cleanable.ratio",
                                                 "The dirty share of the log that triggers compaction."),
    "min.compaction.lag.ms": TopicConfigSpec("0", ConfigType.LONG, "log.cleaner.min.compaction.lag.ms",
                                             "The shortest a record stays uncompacted."),
    "min.insync.replicas": TopicConfigSpec("1", ConfigType.INT, "min.insync.replicas",
                                           "Replicas that must acknowledge a write with acks=all."),
    "preallocate": TopicConfigSpec("false", ConfigType.BOOLEAN, "log.preallocate",
                                   "Preallocate the file of a new segment."),
    "remote.log.copy.disable": TopicConfigSpec("false", ConfigType.BOOLEAN, None,
                                               "Stop copying segments to tiered storage."),
    "remote.log.delete.on.disable": TopicConfigSpec("false", ConfigType.BOOLEAN, None,
                                                    "Delete tiered data when tiered storage is disabled."),
    "remote.storage.enable": TopicConfigSpec("false", ConfigType.BOOLEAN, None,
                                             "Whether the topic uses Kafka's tiered storage."),
    "retention.bytes": TopicConfigSpec("-1", ConfigType.LONG, "log.retention.bytes",
                                       "The largest a partition grows before old segments are deleted (-1: no limit)."),
    "retention.ms": TopicConfigSpec("604800000", ConfigType.LONG, "log.retention.ms",
                                    "How long records are kept before old segments are deleted (-1: forever)."),
    "segment.bytes": TopicConfigSpec("1073741824", ConfigType.INT, "log.segment.bytes",
                                     "The size of one segment file."),
    "segment.index.bytes": TopicConfigSpec("10485760", ConfigType.INT, "log.index.size.max.bytes",
                                           "The size of the index mapping offsets to file positions."),
    "segment.jitter.ms": TopicConfigSpec("0", ConfigType.LONG, "log.roll.jitter.ms",
                                         "The largest random jitter subtracted from segment.ms."),
    "segment.ms": TopicConfigSpec("604800000", ConfigType.LONG, "log.roll.ms",
                                  "The time after which a segment is rolled even if not full."),
    "unclean.leader.election.enable": TopicConfigSpec(
        "false", ConfigType.BOOLEAN, "unclean.leader.election.enable",
        "Whether a replica outside the ISR may become leader, at the cost of data loss."),
}


@dataclass(frozen=True)
class Synonym:
    name: str
    value: str | None
    source: ConfigSource


@dataclass(frozen=True)
class ConfigEntry:
    """One row of a DescribeConfigs answer (also CreateTopics v5+'s configs of a new topic)."""

    name: str
    value: str | None
    source: ConfigSource
    read_only: bool
    is_sensitive: bool
    type: ConfigType
    documentation: str | None
    synonyms: tuple[Synonym, ...]

    @property
    def is_default(self) -> bool:
        return self.source is ConfigSource.DEFAULT_CONFIG


class BrokerValue(Protocol):
    """A broker config as the broker applies it (broker_configs.StaticConfig)."""

    @property
    def value(self) -> str: ...
    @property
    def type(self) -> ConfigType: ...
    @property
    def is_set(self) -> bool: ...
    @property
    def documentation(self) -> str: ...
    @property
    def synonyms(self) -> tuple[tuple[str, str], ...]: ...


def topic_entries(stored: Mapping[str, str], keys: Sequence[str] | None = None,
                  broker: Mapping[str, BrokerValue] | None = None) -> list[ConfigEntry]:
    """Every topic config Kafka knows (or the ``keys`` asked for), with the stored value where one
    is set; synonyms list the topic's own value, then the broker's (its config's when the broker
    config it falls back to is one the broker reports, as ``message.max.bytes`` for
    ``max.message.bytes``), the value a topic without its own gets."""
    names = sorted(TOPIC_CONFIG_SPECS) if keys is None else [k for k in keys if k in TOPIC_CONFIG_SPECS]
    out = []
    for name in names:
        spec = TOPIC_CONFIG_SPECS[name]
        applied = (broker or {}).get(spec.broker_synonym or "")
        if applied is not None:
            source = ConfigSource.STATIC_BROKER_CONFIG if applied.is_set else ConfigSource.DEFAULT_CONFIG
            default = Synonym(spec.broker_synonym or name, applied.value, source)
        else:
            default = Synonym(spec.broker_synonym or name, spec.default, ConfigSource.DEFAULT_CONFIG)
        if name in stored:
            own = Synonym(name, stored[name], ConfigSource.DYNAMIC_TOPIC_CONFIG)
            out.append(ConfigEntry(name, stored[name], ConfigSource.DYNAMIC_TOPIC_CONFIG, False, False, spec.type,
                                   spec.documentation, (own, default)))
        else:
            out.append(ConfigEntry(name, default.value, default.source, False, False, spec.type,
                                   spec.documentation, (default,)))
    return out


def broker_entries(broker_id: int, static: Mapping[str, BrokerValue], per_broker: Mapping[str, str],
                   cluster_default: Mapping[str, str], keys: Sequence[str] | None = None) -> list[ConfigEntry]:
    """A broker's configs: its dynamic ones, the cluster-wide dynamic defaults, then the ones it
    applies from its config file (``STATIC_BROKER_CONFIG``, read-only) or its defaults
    (``DEFAULT_CONFIG``), the most specific first as Kafka orders synonyms."""
    names = sorted(set(static) | set(per_broker) | set(cluster_default)) if keys is None else list(keys)
    out = []
    for name in names:
        synonyms = []
        if name in per_broker:
            synonyms.append(Synonym(name, per_broker[name], ConfigSource.DYNAMIC_BROKER_CONFIG))
        if name in cluster_default:
            synonyms.append(Synonym(name, cluster_default[name], ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG))
        applied = static.get(name)
        if applied is not None:
            source = ConfigSource.STATIC_BROKER_CONFIG if applied.is_set else ConfigSource.DEFAULT_CONFIG
            synonyms.append(Synonym(name, applied.value, source))
            synonyms += [Synonym(n, v, ConfigSource.DEFAULT_CONFIG) for n, v in applied.synonyms]
        if not synonyms:
            continue
        first = synonyms[0]
        read_only = first.source in (ConfigSource.STATIC_BROKER_CONFIG, ConfigSource.DEFAULT_CONFIG)
        out.append(ConfigEntry(name, first.value, first.source, read_only, False,
                               applied.type if applied is not None else ConfigType.STRING,
                               applied.documentation if applied is not None else None, tuple(synonyms)))
    return out


def group_entries(stored: Mapping[str, str], defaults: GroupConfigDefaults,
                  keys: Sequence[str] | None = None) -> list[ConfigEntry]:
    """A group's configs as Kafka's ConfigHelper describes them: every group config Kafka's
    GroupConfig has that Ferry applies (or the ``keys`` asked for), the group's own value
    (``DYNAMIC_GROUP_CONFIG``) or the coordinator's default (``DEFAULT_CONFIG``), never read-only."""
    names = sorted(GROUP_CONFIG_DOCS) if keys is None else [k for k in keys if k in GROUP_CONFIG_DOCS]
    out = []
    for name in names:
        documentation = GROUP_CONFIG_DOCS[name][1]
        if name in stored:
            own = Synonym(name, stored[name], ConfigSource.DYNAMIC_GROUP_CONFIG)
            out.append(ConfigEntry(name, stored[name], ConfigSource.DYNAMIC_GROUP_CONFIG, False, False, ConfigType.INT,
                                   documentation, (own,)))
        else:
            out.append(ConfigEntry(name, str(group_config_default(name, defaults)), ConfigSource.DEFAULT_CONFIG,
                                   False, False, ConfigType.INT, documentation, ()))
    return out
