"""Configuration of the stream storage layer: the S3 endpoint, the WAL and the uploader.

Plain dataclasses so that broker JSON configs map onto them one to one; ``*_from_dict`` build
them with the strict loader (an unknown key or a bad value is INVALID_CONFIG naming the key).
Defaults follow AutoMQ (the S3 WAL seals its objects at 8 MiB or 250 ms; data is uploaded by size)
and moto's measured costs.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from metadata_quorum.kernel.strict_config import NonNegativeInt, PositiveInt, Range, Secret, build

MIB = 1024 * 1024

# compaction.py needs a target that holds two objects, and a run of small objects is at least two
AtLeastTwo = Annotated[int, Range(at_least=2)]


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded exponential backoff for retriable object-store failures (5xx, SlowDown, timeouts)."""

    max_attempts: PositiveInt = 6
    base_backoff_ms: NonNegativeInt = 20  # 0 = retry at once
    max_backoff_ms: NonNegativeInt = 1000  # caps every backoff

    def backoff_ms(self, attempt: int) -> int:
        """Backoff before retry number ``attempt`` (1-based), capped."""
        return min(self.max_backoff_ms, self.base_backoff_ms * (1 << max(0, attempt - 1)))


@dataclass(frozen=True)
class S3Config:
    """Where objects go. Credentials: explicit here, else boto3's usual chain, else dummy ones
    (the embedded moto server accepts any)."""

    endpoint_url: str | None = None
    bucket: str = "ferry"
    region: str = "us-east-1"
    access_key_id: str | None = None
    secret_access_key: Secret | None = field(default=None, repr=False)
    path_style: bool = True
    connect_timeout_ms: PositiveInt = 2000
    read_timeout_ms: PositiveInt = 10000
    # SHA-256 of every PUT body in its signature: boto3 does it on http endpoints unless told not
    # to (a large share of a broker's CPU). Objects carry their own CRCs (blocks, index, footer),
    # checked on every read, so the signature need not cover the bytes.
    sign_payload: bool = False
    max_pool_connections: PositiveInt = 16
    io_threads: PositiveInt = 8
    retry: RetryPolicy = field(default_factory=RetryPolicy)


@dataclass(frozen=True)
class WalConfig:
    """Where appends are made durable before they are acknowledged (``storage.wal`` of a broker).

    ``local``: a WAL file per log dir, fsynced (fast; a dead broker's tail is recovered only where
    its disk can be read). ``s3``: WAL objects in the bucket under ``key_prefix`` (an append is
    acknowledged once the object holding it is stored; any broker recovers a dead one's tail from
    S3 alone). An object is sealed when ``object_bytes`` wait or the oldest waiting append is
    ``object_interval_ms`` old, with at most ``max_inflight_puts`` PUTs at once.
    """

    mode: Literal["local", "s3"] = "local"
    object_interval_ms: NonNegativeInt = 250  # 0 = seal an object as soon as an append waits
    object_bytes: PositiveInt = 8 * MIB
    max_inflight_puts: PositiveInt = 4
    key_prefix: str = "wal"


@dataclass(frozen=True)
class StreamStorageConfig:
    """One broker's stream storage: its WAL dir and upload thresholds."""

    wal_dir: str
    wal_segment_bytes: PositiveInt = 64 * MIB
    wal_fsync: bool = True
    upload_bytes: PositiveInt = 8 * MIB
    # the time cap on the size rule: a slow broker uploads what it buffered at least this often.
    # Each upload is a PUT whatever it holds (2,190-2,360 PUTs per GiB at 1 MiB/s with 250 ms,
    # docs/s3.md); the cap bounds how stale S3 readers are (docs/spark-read.md) and, with
    # upload_bytes, what a close must upload. AutoMQ's data uploads go by size alone.
    upload_interval_ms: PositiveInt = 10_000
    max_inflight_uploads: PositiveInt = 2
    # appends wait while this many uploads' worth (x upload_bytes) of acknowledged bytes are not yet
    # committed in S3, counting uploads under way: what a partition's close may have to upload
    # (backlog.py). Below about max_inflight_uploads + 2 the upload pipeline stalls and produce slows
    # (2 measured at about a third of the throughput of 4 against moto)
    max_uncommitted_uploads: PositiveInt = 4
    object_block_bytes: PositiveInt = 1 * MIB
    object_key_prefix: str = "streams"
    cache_bytes: NonNegativeInt = 64 * MIB  # 0 = appends leave the cache once uploaded
    index_cache_entries: NonNegativeInt = 1024  # 0 = no object index is cached
    max_append_bytes: PositiveInt = 8 * MIB
    controller_retry: RetryPolicy = field(default_factory=lambda: RetryPolicy(max_attempts=8))
    wal: WalConfig = field(default_factory=WalConfig)
    # object compaction (compaction.py): runs of small settled objects become one object each
    readahead_bytes: PositiveInt = 16 * MIB  # a cold or sequential read GETs this much of a stream at once
    compaction_target_bytes: AtLeastTwo = 64 * MIB
    compaction_min_age_ms: NonNegativeInt = 60_000  # 0 = objects of any age are compacted
    compaction_max_small_objects: AtLeastTwo = 64
    compaction_interval_ms: NonNegativeInt = 30_000  # how often a broker compacts the streams it owns (0 = never)
    # replaced objects are deleted this long after the commit (0 = at once)
    compaction_delete_delay_ms: NonNegativeInt = 10_000


def s3_config_from_dict(data: dict[str, Any]) -> S3Config:
    return build(S3Config, data, "s3")


def storage_config_from_dict(data: dict[str, Any]) -> StreamStorageConfig:
    return build(StreamStorageConfig, data, "storage")
