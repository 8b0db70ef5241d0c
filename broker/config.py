"""Broker configuration: one JSON file per broker, every setting named with its unit.

Example::

    {"broker_id": 1, "host": "127.0.0.1", "port": 9101,
     "controllers": ["http://127.0.0.1:9001", "http://127.0.0.1:9002", "http://127.0.0.1:9003"],
     "log_dirs": ["/var/ferry/b1/d0", "/var/ferry/b1/d1"],
     "wal_root": "/var/ferry/wal", "s3": {"endpoint_url": "http://127.0.0.1:9000", "bucket": "ferry"},
     "heartbeat_interval_ms": 2000, "session_timeout_ms": 9000}

The WAL of broker N lives in ``<wal_root>/broker-<N>`` (or ``wal_dir``). ``wal_root`` is where a
broker finds the WAL of a dead peer to recover what it had not uploaded: on one machine the
brokers' dirs are side by side; in production it is a shared volume. With
``"storage": {"wal": {"mode": "s3"}}`` the WAL is objects in the bucket instead
(``<wal.key_prefix>/broker-<N>/...``) and no directory of a peer is needed.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from metadata_quorum.kernel.auth import NodeSecurity
from metadata_quorum.kernel.strict_config import NonNegativeInt, Port, PositiveInt, build, invalid, load_json
from stream_storage.config import S3Config, StreamStorageConfig


@dataclass(frozen=True)
class BrokerConfig:
    broker_id: int
    controllers: tuple[str, ...]
    log_dirs: tuple[str, ...]
    host: str = "127.0.0.1"
    port: Port = 0
    kafka_port: Port | None = None  # the Kafka listener's port (0: any free port); None: no listener
    kafka_max_request_bytes: PositiveInt = 100 * 1024 * 1024  # Kafka's socket.request.max.bytes
    cluster_id: str = "ferry-local"
    sasl_users_file: str | None = None  # JSON {"users": {name: password}}: the Kafka listener requires SASL
    rack: str | None = None
    wal_root: str | None = None
    wal_dir: str | None = None
    s3: S3Config = field(default_factory=S3Config)
    # stream storage settings (upload thresholds, WAL mode, …), parsed once at load; ``wal_dir`` is
    # left empty here: each log dir's storage gets its own (storage_factory.open_storage)
    storage: StreamStorageConfig = field(default_factory=lambda: StreamStorageConfig(wal_dir=""))
    heartbeat_interval_ms: PositiveInt = 2000
    session_timeout_ms: PositiveInt = 9000
    # how often the other brokers' WAL locks are probed for a process that is gone (peer_liveness.py); 0 = never
    peer_probe_interval_ms: NonNegativeInt = 250
    metrics_interval_ms: PositiveInt = 10000
    meta_checkpoint_interval_ms: NonNegativeInt = 30000  # 0 = only on close
    metadata_poll_wait_ms: PositiveInt = 5000
    controller_timeout_ms: PositiveInt = 10000
    max_batch_bytes: PositiveInt = 8 * 1024 * 1024  # Kafka's message.max.bytes
    # Kafka's auto.create.topics.enable, num.partitions and default.replication.factor: a Metadata
    # request for an unknown topic creates it (when the request allows it), and CreateTopics with
    # -1 partitions or replication factor gets these
    auto_create_topics_enable: bool = True
    num_partitions: PositiveInt = 1
    default_replication_factor: PositiveInt = 1
    fetch_max_wait_ms_limit: PositiveInt = 30000
    log_dir_reserved_bytes: NonNegativeInt = 0
    log_dir_check_interval_ms: PositiveInt = 5000
    retention_check_interval_ms: PositiveInt = 300000  # Kafka's log.retention.check.interval.ms
    # how often key compaction looks for new committed data on compacted topics (Kafka's log
    # cleaner looks every log.cleaner.backoff.ms, 15 s; shorter here since data is only
    # committed, and so cleanable, once uploaded, up to storage.upload_interval_ms later)
    key_compaction_interval_ms: PositiveInt = 5000
    gc_interval_ms: PositiveInt = 300000  # how often the lowest live broker collects unnamed objects from S3
    gc_grace_ms: NonNegativeInt = 600000  # an unnamed object younger than this is left alone (an upload about to commit)
    # wal.mode = s3: how often the same broker deletes the WAL objects of brokers that are not live once no
    # recovery needs them (they trim nothing themselves any more)
    dead_wal_gc_interval_ms: PositiveInt = 5000
    alter_log_dirs_max_bytes_per_second: NonNegativeInt = 0  # replica.alter.log.dirs.io.max.bytes.per.second; 0 = unlimited
    shutdown_timeout_ms: PositiveInt = 30000
    # a produce for a partition changing hands here waits this long for the hand-off (0 = refuse at once)
    produce_handoff_wait_ms: NonNegativeInt = 1000
    # for this long after handing a partition over, a produce for it is forwarded to the new owner
    # (its answer names the owner, so the client moves without a refusal); 0 = refuse as before
    produce_forward_window_ms: NonNegativeInt = 5000
    # storage=local replication, as Kafka names them (replica.lag.time.max.ms, replica.fetch.wait.max.ms,
    # replica.high.watermark.checkpoint.interval.ms, request.timeout.ms of an acks=all produce)
    replica_lag_time_max_ms: PositiveInt = 30000
    replica_fetch_wait_max_ms: PositiveInt = 500
    replica_high_watermark_checkpoint_interval_ms: PositiveInt = 5000
    produce_request_timeout_ms: PositiveInt = 30000
    # Kafka's authorizer.class.name (false: none, every request allowed; true: the ACLs in the
    # metadata log decide, as Kafka's StandardAuthorizer), super.users ("User:<name>" each) and
    # allow.everyone.if.no.acl.found
    authorizer_enabled: bool = False
    super_users: tuple[str, ...] = ()
    allow_everyone_if_no_acl_found: bool = False
    log_level: str = "INFO"
    # When set: clients need a bearer token, and the broker sends internal_token to the controllers.
    security: NodeSecurity | None = None

    @property
    def advertised_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def effective_wal_root(self) -> str:
        if self.wal_root:
            return self.wal_root
        return os.path.join(os.path.dirname(os.path.abspath(self.log_dirs[0])), "wal")

    @property
    def effective_wal_dir(self) -> str:
        return self.wal_dir or wal_dir_of(self.effective_wal_root, self.broker_id)


def wal_dir_of(wal_root: str, broker_id: int) -> str:
    """Where broker ``broker_id`` keeps its WAL under ``wal_root`` (also how peers find it). With
    several log dirs, each has its own WAL in a sub-directory named by the log dir's id."""
    return os.path.join(wal_root, f"broker-{broker_id}")


def wal_dirs_of(wal_root: str, broker_id: int) -> list[str]:
    """Every WAL dir of a broker: its own dir and one per log dir beneath it."""
    root = wal_dir_of(wal_root, broker_id)
    try:
        subdirs = sorted(os.path.join(root, d) for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
    except OSError:
        return [root]
    return [root] + subdirs


_LOG_LEVELS = ("CRITICAL", "ERROR", "WARNING", "INFO", "DEBUG")


def config_from_dict(data: dict[str, Any], broker_id: int | None = None) -> BrokerConfig:
    """Validate and build (metadata_quorum/kernel/strict_config.py); a wrong setting, here or in ``s3`` /
    ``storage``, is INVALID_CONFIG naming the setting."""
    if not isinstance(data, dict):
        raise invalid("the broker config must be a JSON object")
    values = dict(data)
    if broker_id is not None:
        if "broker_id" in values and values["broker_id"] != broker_id:
            raise invalid(f"--id {broker_id} does not match broker_id {values['broker_id']!r} in the config")
        values["broker_id"] = broker_id
    if "broker_id" not in values:
        raise invalid("broker setting 'broker_id' is required (in the config or as --id)")
    controllers = values.get("controllers")
    if not controllers or not isinstance(controllers, list) or not all(isinstance(c, str) for c in controllers):
        raise invalid("broker setting 'controllers' must be a non-empty list of controller URLs")
    values["controllers"] = [c if c.startswith("http") else f"http://{c}" for c in controllers]
    dirs = values.get("log_dirs")
    if not dirs or not isinstance(dirs, list):
        raise invalid("broker setting 'log_dirs' must be a non-empty list of absolute paths")
    for d in dirs:
        if not isinstance(d, str) or not os.path.isabs(d):
            raise invalid(f"broker setting 'log_dirs': {d!r} is not an absolute path")
    if len(set(os.path.normpath(d) for d in dirs)) != len(dirs):
        raise invalid("broker setting 'log_dirs' has duplicate entries")
    values["log_dirs"] = [os.path.normpath(d) for d in dirs]
    # the nested sections are parsed here, once, into the typed objects the broker uses
    raw_storage = values.pop("storage", {})
    if isinstance(raw_storage, dict) and "wal_dir" in raw_storage:
        raise invalid("broker setting 'storage.wal_dir' is not allowed: set 'wal_dir' or 'wal_root' at the top level")
    given: dict[str, Any] = {
        "s3": build(S3Config, values.pop("s3", {}), "broker", prefix="s3."),
        "storage": build(StreamStorageConfig, raw_storage, "broker", prefix="storage.", given={"wal_dir": ""}),
    }
    cfg = build(BrokerConfig, values, "broker", given=given)
    if cfg.broker_id < 0:
        raise invalid(f"broker setting 'broker_id' must be >= 0, got {cfg.broker_id}")
    if cfg.heartbeat_interval_ms >= cfg.session_timeout_ms:
        raise invalid("broker setting 'heartbeat_interval_ms' must be below 'session_timeout_ms'")
    if cfg.replica_fetch_wait_max_ms > cfg.replica_lag_time_max_ms:
        # Kafka's rule too: a follower parked in a fetch longer than the lag limit drops out of the ISR
        raise invalid("broker setting 'replica_fetch_wait_max_ms' must be at most 'replica_lag_time_max_ms'")
    for user in cfg.super_users:
        kind, _, name = user.partition(":")
        if not kind or not name:
            raise invalid(f"broker setting 'super_users': {user!r} is not a principal of the form User:<name>")
    if cfg.log_level.upper() not in _LOG_LEVELS:
        raise invalid(f"broker setting 'log_level' must be one of {', '.join(_LOG_LEVELS)}, got {cfg.log_level!r}")
    if cfg.security is not None:
        cfg.security.check("broker")
    storage = cfg.storage
    wal_keys, object_keys = storage.wal.key_prefix.strip("/") + "/", storage.object_key_prefix.strip("/") + "/"
    if wal_keys == "/" or wal_keys.startswith(object_keys) or object_keys.startswith(wal_keys):
        # the garbage collector deletes what no stream names under the object prefix
        raise invalid(f"broker setting 'storage.wal.key_prefix' ({storage.wal.key_prefix!r}) must be non-empty "
                      f"and apart from 'storage.object_key_prefix' ({storage.object_key_prefix!r})")
    return cfg


def load_config(path: str, broker_id: int | None = None) -> BrokerConfig:
    return config_from_dict(load_json(path, "broker"), broker_id)
