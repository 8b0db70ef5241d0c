"""S3 requests and bytes counted by billing kind, and what they cost at AWS's list prices.

:class:`RequestTally` is the observer :class:`~stream_storage.s3_store.S3ObjectStore` calls for
every HTTP request it sends (each attempt and each page of a listing: S3 bills each) and for the
bytes of every body it sends or receives. The broker feeds the same calls into Prometheus counters
(``ferry_broker_s3_requests_total{kind}``, ``ferry_broker_s3_bytes_total{kind,direction}``).

Prices: AWS S3 Standard, US East (N. Virginia), from the S3 pricing page: PUT, COPY, POST and
LIST $0.005 per 1,000 requests; GET, SELECT and all other requests $0.0004 per 1,000; DELETE
free; storage $0.023 per GB-month (first 50 TB). Data transfer into S3, and out to EC2 in the
same region, is free.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Protocol

GIB = 1024 ** 3
PRICE_PER_1000_USD = {"PUT": 0.005, "LIST": 0.005, "GET": 0.0004, "HEAD": 0.0004, "OTHER": 0.0004, "DELETE": 0.0}
STORAGE_USD_PER_GB_MONTH = 0.023
GB = 1e9


class S3RequestObserver(Protocol):
    """Called from the store's I/O threads: must be thread-safe and quick."""

    def __call__(self, kind: str, requests: int, bytes_sent: int, bytes_received: int) -> None: ...


@dataclass
class RequestTally:
    """Thread-safe counts by kind (the observer perf tools and tests use)."""

    requests: dict[str, int] = field(default_factory=dict)
    bytes_sent: dict[str, int] = field(default_factory=dict)
    bytes_received: dict[str, int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def __call__(self, kind: str, requests: int, bytes_sent: int, bytes_received: int) -> None:
        with self._lock:
            if requests:
                self.requests[kind] = self.requests.get(kind, 0) + requests
            if bytes_sent:
                self.bytes_sent[kind] = self.bytes_sent.get(kind, 0) + bytes_sent
            if bytes_received:
                self.bytes_received[kind] = self.bytes_received.get(kind, 0) + bytes_received

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self.requests)


def requests_since(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {k: after.get(k, 0) - before.get(k, 0) for k in set(before) | set(after) if after.get(k, 0) != before.get(k, 0)}


def request_cost_usd(requests: dict[str, int]) -> float:
    return sum(PRICE_PER_1000_USD.get(kind, PRICE_PER_1000_USD["OTHER"]) * n / 1000 for kind, n in requests.items())


def storage_cost_usd_per_month(stored_bytes: float) -> float:
    return STORAGE_USD_PER_GB_MONTH * stored_bytes / GB


def per_gib(requests: dict[str, int], data_bytes: int) -> dict[str, float]:
    """Requests of each kind per GiB of data moved (produced or consumed)."""
    if data_bytes <= 0:
        return {}
    return {kind: round(n * GIB / data_bytes, 1) for kind, n in sorted(requests.items())}
