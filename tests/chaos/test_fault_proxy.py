"""The S3 fault proxy: transparent when idle, seeded failures before or after S3 applies a request."""
from __future__ import annotations

import random
from typing import Any

import botocore.exceptions
import pytest

from stream_storage.config import S3Config
from stream_storage.s3_server import S3Server
from stream_storage.s3_store import make_s3_client
from tools.chaos.fault_proxy import FaultProxy, FaultSettings, decide


def test_decisions_are_seeded_and_follow_the_rates() -> None:
    settings = FaultSettings(error_rate=0.3, after_fraction=0.5, latency_ms=7)
    a = [decide(random.Random(5), settings) for _ in range(1)]
    rng1, rng2 = random.Random(5), random.Random(5)
    first = [decide(rng1, settings) for _ in range(2000)]
    assert first == [decide(rng2, settings) for _ in range(2000)] and a[0] == first[0]
    failed = sum(x.fail_before or x.fail_after for x in first)
    after = sum(x.fail_after for x in first)
    assert 500 < failed < 700 and 0.35 < after / failed < 0.65 and all(x.delay_ms == 7 for x in first)
    assert not any(x.fail_before and x.fail_after for x in first)
    assert not any(decide(rng1, FaultSettings()).fail_before for _ in range(100))
    with pytest.raises(ValueError):
        FaultSettings.parse({"error_rate": 2})
    with pytest.raises(ValueError):
        FaultSettings.parse({"eror_rate": 0.1})


@pytest.mark.integration
def test_the_proxy_forwards_and_injects(tmp_path: Any) -> None:
    with S3Server(bucket="proxied") as s3:
        proxy = FaultProxy(s3.endpoint_url, seed=1, log_path=str(tmp_path / "proxy.log")).start()
        try:
            through = make_s3_client(S3Config(endpoint_url=proxy.endpoint_url, bucket="proxied"))
            direct = make_s3_client(S3Config(endpoint_url=s3.endpoint_url, bucket="proxied"))
            body = bytes(range(256)) * 4096  # 1 MiB
            through.put_object(Bucket="proxied", Key="a", Body=body)
            assert through.get_object(Bucket="proxied", Key="a", Range="bytes=10-19")["Body"].read() == body[10:20]
            assert [o["Key"] for o in through.list_objects_v2(Bucket="proxied")["Contents"]] == ["a"]

            proxy.set_faults(FaultSettings(error_rate=1.0))
            with pytest.raises(botocore.exceptions.ClientError) as err:
                through.put_object(Bucket="proxied", Key="b", Body=b"x")
            assert err.value.response["Error"]["Code"] == "SlowDown"
            assert "Contents" not in direct.list_objects_v2(Bucket="proxied", Prefix="b")  # never reached S3

            proxy.set_faults(FaultSettings(error_rate=1.0, after_fraction=1.0, latency_ms=5))
            with pytest.raises(botocore.exceptions.ClientError) as err:
                through.put_object(Bucket="proxied", Key="c", Body=b"y")
            assert err.value.response["Error"]["Code"] == "InternalError"
            assert direct.get_object(Bucket="proxied", Key="c")["Body"].read() == b"y"  # applied all the same

            proxy.set_faults(FaultSettings())
            through.put_object(Bucket="proxied", Key="d", Body=b"z")
            stats = proxy.stats()
            assert stats["failed_before"] == 1 and stats["failed_after"] == 1 and stats["delayed"] == 1
            assert stats["requests"] == 6 and proxy.alive()
        finally:
            proxy.stop()
        assert not proxy.alive()
