"""The realistic-S3 profiles: the seeded draws match their configuration (pure), and the proxy
process in front of a real moto server delays each request by exactly the draw it was given."""
from __future__ import annotations

import math
import statistics
import subprocess
import sys
import time

import pytest

from stream_storage.config import S3Config
from stream_storage.s3_profile import (
    AWS_STANDARD,
    INTERNAL_ERROR,
    LOCAL,
    SLOWDOWN,
    FateDrawer,
    LatencyDist,
    latency_profile,
    parse_profile,
    request_kind,
)
from stream_storage.s3_proxy import DELAY_HEADER
from stream_storage.s3_server import S3Server
from stream_storage.s3_store import make_s3_client


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@pytest.mark.parametrize("p50,p99", [(30.0, 200.0), (10.0, 50.0), (5.0, 500.0)])
def test_draws_have_the_configured_median_and_99th_percentile(p50: float, p99: float) -> None:
    drawer = FateDrawer(latency_profile(p50, p99), seed=7)
    samples = [drawer.draw("GET").delay_ms for _ in range(40_000)]
    assert quantile(samples, 0.50) == pytest.approx(p50, rel=0.04)
    assert quantile(samples, 0.99) == pytest.approx(p99, rel=0.08)
    # heavy right tail: the mean exceeds the median, and the top 0.1 % is far above the P99
    assert statistics.fmean(samples) > p50
    assert quantile(samples, 0.999) > p99 * 1.2


def test_fixed_profile_is_exact_and_error_free() -> None:
    drawer = FateDrawer(parse_profile("fixed:30"), seed=1)
    fates = [drawer.draw(kind) for kind in ("PUT", "GET", "LIST", "DELETE") * 50]
    assert {f.delay_ms for f in fates} == {30.0}
    assert all(f.error is None for f in fates)


def test_error_rate_and_kinds_of_errors_follow_the_configuration() -> None:
    drawer = FateDrawer(latency_profile(1, 2, 0.05), seed=3)
    fates = [drawer.draw("PUT") for _ in range(40_000)]
    errors = [f.error for f in fates if f.error]
    assert len(errors) / len(fates) == pytest.approx(0.05, rel=0.1)
    assert errors.count(SLOWDOWN) / len(errors) == pytest.approx(0.5, abs=0.05)
    assert set(errors) == {SLOWDOWN, INTERNAL_ERROR}


def test_same_seed_same_fates_other_seed_other_fates() -> None:
    kinds = ["PUT", "GET"] * 100
    a = [FateDrawer(AWS_STANDARD, 5).draw(k) for k in kinds]
    b = [FateDrawer(AWS_STANDARD, 5).draw(k) for k in kinds]
    c = [FateDrawer(AWS_STANDARD, 6).draw(k) for k in kinds]
    assert a == b and a != c


def test_aws_standard_numbers_and_parser_errors() -> None:
    assert AWS_STANDARD.dist("GET") == LatencyDist(30.0, 200.0)
    assert AWS_STANDARD.dist("PUT").p50_ms == 40.0 and AWS_STANDARD.error_rate == 0.001
    assert parse_profile("local") is LOCAL and LOCAL.adds_nothing
    assert parse_profile("latency:10,40,0.01").error_rate == 0.01
    for bad in ("aws", "fixed:", "fixed:-1", "fixed:abc", "latency:10", "latency:50,10", "latency:1,2,1.5",
                "fixed:nan"):
        with pytest.raises(ValueError):
            parse_profile(bad)


def test_request_kinds_are_s3_billing_kinds() -> None:
    assert request_kind("PUT", "/ferry/streams/a", "") == "PUT"
    assert request_kind("GET", "/ferry/streams/a", "") == "GET"
    assert request_kind("GET", "/ferry", "list-type=2&prefix=streams") == "LIST"
    assert request_kind("GET", "/ferry/", "") == "LIST"
    assert request_kind("POST", "/ferry", "delete") == "DELETE"
    assert request_kind("DELETE", "/ferry/streams/a", "") == "DELETE"
    assert request_kind("HEAD", "/ferry", "") == "HEAD"


def test_serve_refuses_bad_profile_flags() -> None:
    for flags in (["--s3-profile", "nope"], ["--latency-ms", "10"], ["--latency-ms", "50,10"],
                  ["--s3-profile", "fixed:5", "--latency-ms", "1,2"]):
        proc = subprocess.run([sys.executable, "-m", "tools.cli", "s3", "serve", "--port", "0", *flags],
                              capture_output=True, text=True, timeout=30)
        assert proc.returncode == 2, flags
        assert "ferry s3 serve:" in proc.stderr


def test_proxy_delays_every_request_by_its_seeded_draw() -> None:
    """Sequential GETs through the proxy: request i takes its drawn latency (replayed here from the
    same seed) plus the endpoint's own small time — never less, and not much more."""
    p50, p99, seed, count = 20.0, 80.0, 11, 150
    with S3Server(bucket="ferry-lat", s3_profile=f"latency:{p50:g},{p99:g}", seed=seed) as server:
        client = make_s3_client(S3Config(endpoint_url=server.endpoint_url, bucket="ferry-lat"))
        # the first request is the PUT; replay the draws in the same order of kinds
        client.put_object(Bucket="ferry-lat", Key="k", Body=b"x" * 1024)
        client.get_object(Bucket="ferry-lat", Key="k")["Body"].read()  # warm the connection
        observed: list[float] = []
        applied: list[float] = []
        for _ in range(count):
            t0 = time.perf_counter()
            reply = client.get_object(Bucket="ferry-lat", Key="k")
            reply["Body"].read()
            observed.append((time.perf_counter() - t0) * 1000)
            applied.append(float(reply["ResponseMetadata"]["HTTPHeaders"][DELAY_HEADER.lower()]))
    drawer = FateDrawer(latency_profile(p50, p99), seed)
    drawn = [drawer.draw(kind).delay_ms for kind in ["PUT", "GET"] + ["GET"] * count][2:]
    assert applied == pytest.approx(drawn, abs=0.001), "the proxy did not apply the seeded draws in order"
    extra = [o - d for o, d in zip(observed, drawn, strict=True)]
    assert min(extra) > -1.0, "a request came back before its drawn latency"
    assert statistics.median(extra) < 100.0  # the endpoint's own time, on a machine that may be loaded
    sigma = math.log(p99 / p50) / 2.326
    assert quantile(drawn, 0.5) == pytest.approx(p50, rel=0.2)
    assert quantile(drawn, 0.9) == pytest.approx(p50 * math.exp(1.2816 * sigma), rel=0.25)
