"""The load-sample format brokers publish and the rebalancer reads (docs/load-samples.md).

Every ``metrics_interval_ms`` a broker writes one object holding one JSON line per partition it
leads, under the bucket's metrics prefix::

    metrics/broker=<broker_id>/<ts_ms, 13 digits>.jsonl

One object per broker per interval keeps S3 requests few; the time in the key lets a reader pick
a window by listing, without reading objects outside it. Counters are per interval (not
cumulative): ``bytes_in`` is what the partition took in during the ``interval_ms`` ending at
``ts_ms``. A partition that moved during a window has samples from both owners; the latest
sample names the current owner. The format lives with the broker, its writer; readers import it.
"""
from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from typing import Any, Iterable

from metadata_quorum.kernel.errors import ErrorCode, FerryError

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
