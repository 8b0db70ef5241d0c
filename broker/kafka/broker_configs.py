"""The broker configs DescribeConfigs reports: Kafka's names for what this broker applies.

Each entry is a Kafka broker config that has a meaning in Ferry, with the value the broker runs
with (read from its parsed config, or the constant the code applies), Kafka's type and, where
Kafka has them, the synonyms it lists (``log.retention.ms`` before ``log.retention.hours``).
A setting the broker's config file sets to a value other than Ferry's default is a
``STATIC_BROKER_CONFIG``; one at Ferry's default a ``DEFAULT_CONFIG``. All are read-only: the broker applies them at start-up.

Kafka's broker configs without a meaning here (``num.network.threads``, ``log.flush.*``, …)
are not listed: reporting a value nothing applies would mislead. Pure functions.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Sequence

from broker.compaction import DEFAULT_DELETE_RETENTION_MS
from broker.config import BrokerConfig
from broker.kafka.auto_create import TopicDefaults
from broker.kafka.config_catalog import ConfigType
from broker.local_layout import RollPolicy
from broker.retention import DEFAULT_RETENTION_MS, UNLIMITED
from metadata_quorum.authorizer import AuthorizerSettings
from stream_storage.record_validator import ValidationPolicy

MS_PER_HOUR = 3_600_000
#: what authorizer.class.name reports with the authorizer on: Kafka's class whose rules it follows
STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


@dataclass(frozen=True)
class StaticConfig:
    """One broker config as this broker applies it."""

    value: str
    type: ConfigType
    is_set: bool  # set by the broker's config file (STATIC_BROKER_CONFIG), else Ferry's default
    documentation: str
    synonyms: tuple[tuple[str, str], ...] = ()  # (name, value) of Kafka's lower-priority synonyms


def topic_defaults(config: BrokerConfig) -> TopicDefaults:
    """What the broker creates topics with (auto-creation, CreateTopics -1)."""
    return TopicDefaults(config.auto_create_topics_enable, config.num_partitions, config.default_replication_factor)


def authorizer_settings(config: BrokerConfig) -> AuthorizerSettings:
    """What the broker's authorizer decides with (authorizer.class.name, super.users,
    allow.everyone.if.no.acl.found)."""
    return AuthorizerSettings(config.authorizer_enabled, frozenset(config.super_users),
                              config.allow_everyone_if_no_acl_found)


def default_validation_policy(config: BrokerConfig) -> ValidationPolicy:
    """The record-validation rules of a topic that sets none: the broker's message.max.bytes is
    every topic's max.message.bytes default, as in Kafka."""
    return ValidationPolicy(max_message_bytes=config.max_batch_bytes)


def _defaults() -> dict[str, object]:
    return {f.name: f.default for f in fields(BrokerConfig)}


def broker_static_configs(config: BrokerConfig, log_dir_paths: Sequence[str],
                          listener: str | None) -> dict[str, StaticConfig]:
    """Kafka's name -> what this broker applies; a setting whose value is not Ferry's default was
    set by the broker's config file (STATIC_BROKER_CONFIG)."""
    defaults = _defaults()

    def is_set(setting: str) -> bool:
        return bool(getattr(config, setting) != defaults.get(setting))

    def of(setting: str, type_: ConfigType, doc: str) -> StaticConfig:
        raw = getattr(config, setting)
        text = str(raw).lower() if isinstance(raw, bool) else str(raw)
        return StaticConfig(text, type_, is_set(setting), doc)

    roll = RollPolicy()
    out: dict[str, StaticConfig] = {
        "broker.id": StaticConfig(str(config.broker_id), ConfigType.INT, True, "The broker's id."),
        "node.id": StaticConfig(str(config.broker_id), ConfigType.INT, True, "The node id (the broker's id)."),
        "process.roles": StaticConfig("broker", ConfigType.LIST, True,
                                      "This node's roles: a broker (the controllers are separate processes)."),
        "log.dirs": StaticConfig(",".join(log_dir_paths) or ",".join(config.log_dirs), ConfigType.LIST, True,
                                 "The directories the broker keeps its partitions' logs in."),
        "controller.quorum.bootstrap.servers": StaticConfig(
            ",".join(config.controllers), ConfigType.LIST, True, "The controller quorum's addresses."),
        "auto.create.topics.enable": of(
            "auto_create_topics_enable", ConfigType.BOOLEAN,
            "Create a topic a Metadata request names when it does not exist and the request allows it."),
        "num.partitions": of("num_partitions", ConfigType.INT,
                             "The partitions of a topic created without a count (auto-creation, CreateTopics -1)."),
        "default.replication.factor": of(
            "default_replication_factor", ConfigType.INT,
            "The replication factor of a topic created without one (auto-creation, CreateTopics -1)."),
        "message.max.bytes": of("max_batch_bytes", ConfigType.INT,
                                "The largest record batch the broker accepts; every topic's max.message.bytes "
                                "default, and its upper bound."),
        "socket.request.max.bytes": of("kafka_max_request_bytes", ConfigType.INT,
                                       "The largest request the Kafka listener reads; a larger one closes "
                                       "the connection."),
        "authorizer.class.name": StaticConfig(
            STANDARD_AUTHORIZER if config.authorizer_enabled else "", ConfigType.STRING, config.authorizer_enabled,
            "The authorizer: the ACLs in the metadata log decide every request (authorizer_enabled), or none."),
        "super.users": StaticConfig(";".join(config.super_users), ConfigType.STRING, bool(config.super_users),
                                    "Principals the authorizer allows everything."),
        "allow.everyone.if.no.acl.found": of(
            "allow_everyone_if_no_acl_found", ConfigType.BOOLEAN,
            "Allow a request on a resource no ACL covers (with the authorizer on)."),
        "log.retention.ms": StaticConfig(str(DEFAULT_RETENTION_MS), ConfigType.LONG, False,
                                         "How long records are kept when the topic sets no retention.ms.",
                                         (("log.retention.hours", str(DEFAULT_RETENTION_MS // MS_PER_HOUR)),)),
        "log.retention.hours": StaticConfig(str(DEFAULT_RETENTION_MS // MS_PER_HOUR), ConfigType.INT, False,
                                            "log.retention.ms in hours."),
        "log.retention.bytes": StaticConfig(str(UNLIMITED), ConfigType.LONG, False,
                                            "The size a partition grows to when the topic sets no retention.bytes "
                                            "(-1: no limit)."),
        "log.retention.check.interval.ms": of("retention_check_interval_ms", ConfigType.LONG,
                                              "How often retention is applied."),
        "log.cleanup.policy": StaticConfig("delete", ConfigType.LIST, False,
                                           "The cleanup policy of a topic that sets none."),
        "log.cleaner.delete.retention.ms": StaticConfig(str(DEFAULT_DELETE_RETENTION_MS), ConfigType.LONG, False,
                                                        "How long tombstones are kept in compacted topics."),
        "log.segment.bytes": StaticConfig(str(roll.segment_bytes), ConfigType.INT, False,
                                          "The size of one segment file of a storage=local partition."),
        "log.roll.ms": StaticConfig(str(roll.segment_ms), ConfigType.LONG, False,
                                    "The age at which a storage=local partition's segment is rolled.",
                                    (("log.roll.hours", str(roll.segment_ms // MS_PER_HOUR)),)),
        "log.index.interval.bytes": StaticConfig(str(roll.index_interval_bytes), ConfigType.INT, False,
                                                 "How often an offset index entry is added (storage=local)."),
        "min.insync.replicas": StaticConfig("1", ConfigType.INT, False,
                                            "Replicas that must acknowledge an acks=all write of a topic that "
                                            "sets none (storage=local)."),
        "replica.lag.time.max.ms": of("replica_lag_time_max_ms", ConfigType.LONG,
                                      "How long a follower may lag before it leaves the ISR (storage=local)."),
        "replica.fetch.wait.max.ms": of("replica_fetch_wait_max_ms", ConfigType.INT,
                                        "A follower's longest fetch wait (storage=local)."),
        "replica.high.watermark.checkpoint.interval.ms": of(
            "replica_high_watermark_checkpoint_interval_ms", ConfigType.LONG,
            "How often the high watermark is saved (storage=local)."),
    }
    if config.rack is not None:
        out["broker.rack"] = StaticConfig(config.rack, ConfigType.STRING, True, "The broker's rack.")
    if listener is not None:
        out["listeners"] = StaticConfig(listener, ConfigType.LIST, True, "The Kafka listener's address.")
    return out
