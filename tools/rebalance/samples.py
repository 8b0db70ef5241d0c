"""Reading and writing load samples for the rebalancer (docs/load-samples.md).

The format itself (the object keys, ``PartitionSample``, the JSON-lines encoding) lives in
``broker/load_samples.py`` with its writer, the broker's load sampler; it is re-exported here so
that the rebalancer's modules and tests have one import. This module adds what only readers and
test writers need: picking a window by key, local directories laid out like the bucket, and a
boto3 source (listing on the driver; executors read the objects, tools/rebalance/aggregate.py).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterable, Protocol

from broker.load_samples import (
    METRICS_PREFIX,
    SAMPLE_COLUMNS,
    PartitionSample,
    decode_samples,
    encode_samples,
    parse_sample_key,
    sample_key,
)
from metadata_quorum.kernel.errors import ErrorCode, FerryError

__all__ = ["METRICS_PREFIX", "SAMPLE_COLUMNS", "PartitionSample", "S3SampleSource", "SampleStore", "decode_samples",
           "encode_samples", "keys_in_window", "local_sample_files", "parse_sample_key",
           "sample_key", "write_samples", "write_samples_dir"]


class SampleStore(Protocol):
    """The part of an object store samples need (stream_storage's ObjectStore has it)."""

    def put(self, key: str, data: bytes) -> Any: ...

    def get(self, key: str) -> bytes: ...

    def list(self, prefix: str) -> Iterable[str]: ...


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
        body: bytes = self.s3.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        return body

    def put(self, key: str, data: bytes) -> None:
        self.s3.put_object(Bucket=self.bucket, Key=key, Body=data)
