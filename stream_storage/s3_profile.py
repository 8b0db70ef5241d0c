"""What a realistic S3 adds to each request: a latency profile and the seeded draws from it (pure).

A profile gives, per request kind, a latency distribution and an error rate. Latency is
log-normal, fitted so that its median and 99th percentile are the profile's P50 and P99: a
log-normal's right tail is heavy (a few requests take many times the median), which is what S3's
latency looks like from a client. Errors are S3's retriable ones: ``SlowDown`` (503, refused
before the request is applied) and ``InternalError`` (500, returned after the request was applied,
so a client retries something that already happened). Nothing here sleeps or opens a socket; the
proxy (``s3_proxy.py``) draws a :class:`RequestFate` per request and carries it out.

Profiles (``--s3-profile``):

* ``local`` — nothing added (the endpoint as it is).
* ``fixed:MS`` — exactly MS milliseconds before every request, no errors.
* ``aws-standard`` — S3 Standard in the same region, from AWS's published numbers: median latency
  of small requests "in the tens of milliseconds" (AWS, *Best Practices Design Patterns:
  Optimizing Amazon S3 Performance*, "Timeouts and Retries for Latency-Sensitive Applications",
  which also advises retrying a small GET or PUT after 2 s) and small-object and first-byte
  latencies of "roughly 100–200 milliseconds" (the same paper's performance guidelines). The
  profile takes P50 = 30 ms and P99 = 200 ms for GET (first byte) and P50 = 40 ms, P99 = 250 ms
  for PUT (AWS publishes no separate PUT figure; a PUT carries its body before S3 answers, so it
  is set a little above GET), LIST and DELETE as PUT. Errors at 0.1 %: the S3 SLA's monthly
  uptime for Standard is 99.9 %, counted as the share of requests answered with 5xx.
* ``latency:P50,P99[,ERROR_RATE]`` — what ``ferry s3 serve --latency-ms P50,P99 --error-rate R`` builds.
"""
from __future__ import annotations

import math
import random
from xml.sax.saxutils import escape
from dataclasses import dataclass, field

KINDS = ("PUT", "GET", "LIST", "DELETE", "HEAD", "OTHER")
Z_99 = 2.3263478740408408  # the standard normal's 99th percentile


@dataclass(frozen=True)
class LatencyDist:
    """Log-normal latency with the given median and 99th percentile (equal: a fixed latency)."""

    p50_ms: float
    p99_ms: float

    def __post_init__(self) -> None:
        if self.p50_ms < 0 or self.p99_ms < self.p50_ms:
            raise ValueError(f"latency needs 0 <= P50 <= P99, got P50={self.p50_ms} ms, P99={self.p99_ms} ms")

    @property
    def sigma(self) -> float:
        if self.p50_ms <= 0 or self.p99_ms == self.p50_ms:
            return 0.0
        return math.log(self.p99_ms / self.p50_ms) / Z_99

    def draw_ms(self, rng: random.Random) -> float:
        if self.p50_ms <= 0:
            return 0.0
        sigma = self.sigma
        return self.p50_ms if sigma == 0 else self.p50_ms * math.exp(sigma * rng.gauss(0.0, 1.0))


NO_LATENCY = LatencyDist(0.0, 0.0)


@dataclass(frozen=True)
class S3Profile:
    """Per-kind latency, an error rate, and the share of errors that are SlowDown (else InternalError)."""

    name: str
    latency: dict[str, LatencyDist] = field(default_factory=dict)
    error_rate: float = 0.0
    slowdown_share: float = 0.5

    def __post_init__(self) -> None:
        if not 0.0 <= self.error_rate < 1.0:
            raise ValueError(f"error rate must be in [0, 1), got {self.error_rate}")
        if not 0.0 <= self.slowdown_share <= 1.0:
            raise ValueError(f"SlowDown share must be in [0, 1], got {self.slowdown_share}")

    def dist(self, kind: str) -> LatencyDist:
        return self.latency.get(kind) or self.latency.get("OTHER") or NO_LATENCY

    @property
    def adds_nothing(self) -> bool:
        return self.error_rate == 0.0 and all(d.p50_ms == 0 for d in self.latency.values())


def _uniform(dist: LatencyDist, error_rate: float, name: str) -> S3Profile:
    return S3Profile(name, {kind: dist for kind in KINDS}, error_rate)


LOCAL = S3Profile("local")
_AWS_GET = LatencyDist(30.0, 200.0)
_AWS_PUT = LatencyDist(40.0, 250.0)
AWS_STANDARD = S3Profile("aws-standard", {"GET": _AWS_GET, "HEAD": _AWS_GET, "PUT": _AWS_PUT, "LIST": _AWS_PUT,
                                          "DELETE": _AWS_PUT, "OTHER": _AWS_PUT}, error_rate=0.001)


def parse_profile(text: str) -> S3Profile:
    """``local`` | ``aws-standard`` | ``fixed:MS`` | ``latency:P50,P99[,ERROR_RATE]``; ValueError otherwise."""
    spec = text.strip()
    if spec == "local":
        return LOCAL
    if spec == "aws-standard":
        return AWS_STANDARD
    kind, sep, rest = spec.partition(":")
    if sep and kind == "fixed":
        ms = _number(rest, spec)
        return _uniform(LatencyDist(ms, ms), 0.0, f"fixed:{rest}")
    if sep and kind == "latency":
        parts = rest.split(",")
        if len(parts) not in (2, 3):
            raise ValueError(f"S3 profile {spec!r}: expected latency:P50,P99[,ERROR_RATE]")
        rate = _number(parts[2], spec) if len(parts) == 3 else 0.0
        return _uniform(LatencyDist(_number(parts[0], spec), _number(parts[1], spec)), rate, spec)
    raise ValueError(f"unknown S3 profile {spec!r}: use local, aws-standard, fixed:MS or latency:P50,P99[,RATE]")


def _number(text: str, spec: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"S3 profile {spec!r}: {text!r} is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"S3 profile {spec!r}: {text!r} must be a finite number >= 0")
    return value


def latency_profile(p50_ms: float, p99_ms: float, error_rate: float = 0.0) -> S3Profile:
    """The profile of ``--latency-ms P50,P99 --error-rate R``."""
    return _uniform(LatencyDist(p50_ms, p99_ms), error_rate, f"latency:{p50_ms:g},{p99_ms:g},{error_rate:g}")


def request_kind(method: str, path: str, query: str) -> str:
    """S3's billing kind of a path-style HTTP request: ListObjects is a GET of the bucket (no key),
    DeleteObjects a POST with ``delete``. ``query`` is the raw query string."""
    names = {part.split("=", 1)[0] for part in query.split("&") if part}
    method = method.upper()
    has_key = "/" in path.strip("/")
    if method == "GET":
        return "GET" if has_key and "list-type" not in names else "LIST"
    if method == "PUT":
        return "PUT"
    if method == "DELETE" or (method == "POST" and "delete" in names):
        return "DELETE"
    if method == "HEAD":
        return "HEAD"
    return "OTHER"


SLOWDOWN = "SlowDown"
INTERNAL_ERROR = "InternalError"


@dataclass(frozen=True)
class RequestFate:
    """What happens to one request: wait ``delay_ms``; then ``error`` (None: forward it).
    A SlowDown is answered instead of forwarding; an InternalError after forwarding."""

    delay_ms: float
    error: str | None = None


class FateDrawer:
    """Seeded draws: the same seed and the same sequence of kinds give the same fates."""

    def __init__(self, profile: S3Profile, seed: int) -> None:
        self.profile = profile
        self._rng = random.Random(seed)

    def draw(self, kind: str) -> RequestFate:
        delay = self.profile.dist(kind).draw_ms(self._rng)
        error: str | None = None
        if self.profile.error_rate > 0 and self._rng.random() < self.profile.error_rate:
            error = SLOWDOWN if self._rng.random() < self.profile.slowdown_share else INTERNAL_ERROR
        return RequestFate(delay, error)


def error_body(code: str, resource: str) -> tuple[int, bytes]:
    """The status and S3 XML error body of an injected error."""
    status, message = (503, "Please reduce your request rate.") if code == SLOWDOWN else \
        (500, "We encountered an internal error. Please try again.")
    body = (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code><Message>{message}</Message>'
            f"<Resource>{escape(resource)}</Resource><RequestId>ferry-proxy</RequestId></Error>").encode()
    return status, body
