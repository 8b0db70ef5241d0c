"""Broker configuration: one JSON file per broker, every setting named with its unit.

Example::

    {"broker_id": 1, "host": "127.0.0.1", "port": 9101,
     "controllers": ["http://127.0.0.1:9001", "http://127.0.0.1:9002", "http://127.0.0.1:9003"],
     "log_dirs": ["/var/ferry/b1/d0", "/var/ferry/b1/d1"],
     "wal_root": "/var/ferry/wal", "s3": {"endpoint_url": "http://127.0.0.1:9000", "bucket": "ferry"},
     "heartbeat_interval_ms": 2000, "session_timeout_ms": 9000}

The WAL of broker N lives in ``<wal_root>/broker-<N>`` (or ``wal_dir``). ``wal_root`` is where a
broker finds the WAL of a dead peer to recover what it had not uploaded: on one machine the
brokers' dirs are side by side; in production it is a shared volume.
"""
from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from typing import Any

from metadata_quorum.errors import ErrorCode, FerryError


@dataclass(frozen=True)
class BrokerConfig:
    broker_id: int
    controllers: tuple[str, ...]
    log_dirs: tuple[str, ...]
    host: str = "127.0.0.1"
    port: int = 0
    kafka_port: int | None = None  # the Kafka listener's port (0: any free port); None: no listener
    kafka_max_request_bytes: int = 100 * 1024 * 1024  # Kafka's socket.request.max.bytes
    cluster_id: str = "ferry-local"
    sasl_users_file: str | None = None  # JSON {"users": {name: password}}: the Kafka listener requires SASL
    rack: str | None = None
    wal_root: str | None = None
    wal_dir: str | None = None
    s3: dict[str, Any] = field(default_factory=dict)
    storage: dict[str, Any] = field(default_factory=dict)  # StreamStorageConfig overrides (upload thresholds, …)
    heartbeat_interval_ms: int = 2000
    session_timeout_ms: int = 9000
    metrics_interval_ms: int = 10000
    meta_checkpoint_interval_ms: int = 30000
    metadata_poll_wait_ms: int = 5000
    controller_timeout_ms: int = 10000
    max_batch_bytes: int = 8 * 1024 * 1024
    fetch_max_wait_ms_limit: int = 30000
    log_dir_reserved_bytes: int = 0
    log_dir_check_interval_ms: int = 5000
    retention_check_interval_ms: int = 300000  # Kafka's log.retention.check.interval.ms
    gc_interval_ms: int = 300000  # how often the lowest live broker collects unnamed objects from S3
    gc_grace_ms: int = 600000  # an unnamed object younger than this is left alone (an upload about to commit)
    alter_log_dirs_max_bytes_per_second: int = 0  # replica.alter.log.dirs.io.max.bytes.per.second; 0 = unlimited
    shutdown_timeout_ms: int = 30000
    log_level: str = "INFO"

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


def config_from_dict(data: dict[str, Any], broker_id: int | None = None) -> BrokerConfig:
    """Validate and build; a wrong setting is INVALID_CONFIG with the setting's name."""
    if not isinstance(data, dict):
        raise FerryError(ErrorCode.INVALID_CONFIG, "the broker config must be a JSON object")
    names = {f.name for f in dataclasses.fields(BrokerConfig)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise FerryError(ErrorCode.INVALID_CONFIG, f"unknown broker setting(s): {', '.join(unknown)}")
    values = dict(data)
    if broker_id is not None:
        if "broker_id" in values and int(values["broker_id"]) != broker_id:
            raise FerryError(ErrorCode.INVALID_CONFIG,
                             f"--id {broker_id} does not match broker_id {values['broker_id']} in the config")
        values["broker_id"] = broker_id
    if "broker_id" not in values:
        raise FerryError(ErrorCode.INVALID_CONFIG, "broker_id is required (in the config or as --id)")
    controllers = values.get("controllers")
    if not controllers or not isinstance(controllers, list):
        raise FerryError(ErrorCode.INVALID_CONFIG, "controllers must be a non-empty list of controller URLs")
    values["controllers"] = tuple(str(c) if str(c).startswith("http") else f"http://{c}" for c in controllers)
    dirs = values.get("log_dirs")
    if not dirs or not isinstance(dirs, list):
        raise FerryError(ErrorCode.INVALID_CONFIG, "log_dirs must be a non-empty list of absolute paths")
    for d in dirs:
        if not isinstance(d, str) or not os.path.isabs(d):
            raise FerryError(ErrorCode.INVALID_CONFIG, f"log dir {d!r} is not an absolute path")
    if len(set(os.path.normpath(d) for d in dirs)) != len(dirs):
        raise FerryError(ErrorCode.INVALID_CONFIG, "log_dirs has duplicate entries")
    values["log_dirs"] = tuple(os.path.normpath(d) for d in dirs)
    for name in ("heartbeat_interval_ms", "session_timeout_ms", "metrics_interval_ms"):
        if name in values and int(values[name]) <= 0:
            raise FerryError(ErrorCode.INVALID_CONFIG, f"{name} must be positive")
    kafka_port = values.get("kafka_port")
    if kafka_port is not None and (not isinstance(kafka_port, int) or isinstance(kafka_port, bool)
                                   or not 0 <= kafka_port <= 65535):
        raise FerryError(ErrorCode.INVALID_CONFIG, f"kafka_port {kafka_port!r} must be an integer in 0..65535")
    cfg = BrokerConfig(**values)
    if cfg.heartbeat_interval_ms >= cfg.session_timeout_ms:
        raise FerryError(ErrorCode.INVALID_CONFIG, "heartbeat_interval_ms must be below session_timeout_ms")
    return cfg


def load_config(path: str, broker_id: int | None = None) -> BrokerConfig:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except OSError as exc:
        raise FerryError(ErrorCode.INVALID_CONFIG, f"cannot read broker config {path}: {exc.strerror}") from exc
    except json.JSONDecodeError as exc:
        raise FerryError(ErrorCode.INVALID_CONFIG, f"broker config {path} is not valid JSON: {exc}") from exc
    return config_from_dict(data, broker_id)
