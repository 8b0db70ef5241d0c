"""The load-sample format: what brokers publish and the rebalancer reads (docs/load-samples.md).

Every ``metrics_interval_ms`` a broker writes one object holding one JSON line per partition it
leads, under the bucket's metrics prefix::

    metrics/broker=<broker_id>/<ts_ms, 13 digits>.jsonl

One object per broker per interval keeps S3 requests few; the time in the key lets a reader pick
a window by listing, without reading objects outside it. Counters are per interval (not
cumulative): ``bytes_in`` is what the partition took in during the ``interval_ms`` ending at
``ts_ms``. A partition that moved during a window has samples from both owners; the latest
sample names the current owner.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterable, Protocol

from metadata_quorum.errors import ErrorCode, FerryError

METRICS_PREFIX = "metrics/"
SAMPLE_COLUMNS: tuple[str, ...] = ("ts_ms", "interval_ms", "broker_id", "topic", "partition", "bytes_in",
                                   "bytes_out", "records_in", "records_out", "size_bytes")
_KEY_RE = re.compile(r"^metrics/broker=(\d+)/(\d{13})\.jsonl$")
_INT_FIELDS = tuple(c for c in SAMPLE_COLUMNS if c != "topic")


@dataclass(frozen=True)
class PartitionSample:
    ts_ms: int
    interval_ms: int
    broker_id: int
    topic: str
    partition: int
    bytes_in: int
    bytes_out: int
    records_in: int
    records_out: int
    size_bytes: int


class SampleStore(Protocol):
    """The part of an object store samples need (stream_storage's ObjectStore has it)."""

    def put(self, key: str, data: bytes) -> Any: ...

    def get(self, key: str) -> bytes: ...

    def list(self, prefix: str) -> Iterable[str]: ...


def sample_key(broker_id: int, ts_ms: int) -> str:
    if broker_id < 0 or not 0 <= ts_ms < 10**13:
        raise ValueError(f"bad sample key parts: broker_id={broker_id} ts_ms={ts_ms}")
    return f"{METRICS_PREFIX}broker={broker_id}/{ts_ms:013d}.jsonl"


def parse_sample_key(key: str) -> tuple[int, int] | None:
    """(broker_id, ts_ms) of a sample object's key, or None when the key is not one."""
    m = _KEY_RE.match(key)
    return (int(m.group(1)), int(m.group(2))) if m else None


def encode_samples(samples: Iterable[PartitionSample]) -> bytes:
    return "".join(json.dumps(asdict(s), separators=(",", ":")) + "\n" for s in samples).encode()


def decode_samples(data: bytes) -> list[PartitionSample]:
    """Parse and check one sample object; a bad line raises INVALID_RECORD naming the line."""
    out = []
    for lineno, line in enumerate(data.decode().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            fields: dict[str, Any] = {c: int(row[c]) for c in _INT_FIELDS}
            fields["topic"] = str(row["topic"])
        except (ValueError, KeyError, TypeError) as exc:
            raise FerryError(ErrorCode.INVALID_RECORD, f"load sample line {lineno} is not valid: {exc}") from exc
        out.append(PartitionSample(**fields))
    return out


def write_samples(store: SampleStore, broker_id: int, ts_ms: int, samples: Iterable[PartitionSample]) -> str:
    """Publish one interval's samples of one broker as one object; returns its key."""
    key = sample_key(broker_id, ts_ms)
    store.put(key, encode_samples(samples))
    return key


def keys_in_window(keys: Iterable[str], window_ms: int, end_ms: int | None = None) -> tuple[list[str], int | None]:
    """Sample keys with end_ms - window_ms < ts_ms <= end_ms (end_ms defaults to the newest key)."""
    parsed = [(k, p) for k in keys if (p := parse_sample_key(k)) is not None]
    if not parsed:
        return [], end_ms
    end = max(p[1] for _k, p in parsed) if end_ms is None else end_ms
    chosen = sorted(k for k, (_b, ts) in parsed if end - window_ms < ts <= end)
    return chosen, end


def local_sample_files(root: str | os.PathLike[str]) -> list[str]:
    """Every sample object under a local directory laid out like the bucket (``root/metrics/...``)."""
    base = Path(root)
    if not base.is_dir():
        raise FerryError(ErrorCode.INVALID_REQUEST, f"input directory {str(base)!r} does not exist")
    return sorted(p.relative_to(base).as_posix() for p in base.glob("metrics/broker=*/*.jsonl"))


def write_samples_dir(root: str | os.PathLike[str], broker_id: int, ts_ms: int, data: bytes) -> Path:
    """Write one encoded sample object into a local directory laid out like the bucket."""
    path = Path(root) / sample_key(broker_id, ts_ms)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


class S3SampleSource:
    """Reads sample objects from an S3 endpoint with boto3 (moto, MinIO or AWS)."""

    def __init__(self, endpoint_url: str, bucket: str, region: str = "us-east-1") -> None:
        import boto3  # imported here: planning from local files needs no S3 client

        self.bucket = bucket
        self.s3 = boto3.client("s3", endpoint_url=endpoint_url, region_name=region,
                               aws_access_key_id=os.environ.get("AWS_ACCESS_KEY_ID", "ferry"),
                               aws_secret_access_key=os.environ.get("AWS_SECRET_ACCESS_KEY", "ferry"))

    def list(self, prefix: str) -> list[str]:
        keys: list[str] = []
        paginator = self.s3.get_paginator("list_objects_v2")
        try:
            for page in paginator.paginate(Bucket=self.bucket, Prefix=prefix):
                keys.extend(obj["Key"] for obj in page.get("Contents", []))
        except self.s3.exceptions.NoSuchBucket as exc:
            raise FerryError(ErrorCode.INVALID_REQUEST, f"bucket {self.bucket!r} does not exist") from exc
        return keys

    def get(self, key: str) -> bytes:
        return self.s3.get_object(Bucket=self.bucket, Key=key)["Body"].read()

    def put(self, key: str, data: bytes) -> None:
        self.s3.put_object(Bucket=self.bucket, Key=key, Body=data)


def download_window(source: SampleStore, dest_dir: str | os.PathLike[str], window_ms: int,
                    end_ms: int | None = None) -> tuple[list[str], int | None]:
    """Copy the window's sample objects into ``dest_dir`` (same layout) for Spark's JSON reader."""
    keys, end = keys_in_window(source.list(METRICS_PREFIX), window_ms, end_ms)
    paths = []
    for key in keys:
        path = Path(dest_dir) / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(source.get(key))
        paths.append(str(path))
    return paths, end
