"""Fixtures for broker integration tests: a real cluster (moto server, 3 controllers, 2 brokers)."""
from __future__ import annotations

import pytest

from tools.cluster import LocalCluster

# Quick failure detection so that crash tests finish in seconds (Kafka's defaults are 2 s / 9 s).
FAST = {"heartbeat_interval_ms": 250, "session_timeout_ms": 2000, "metrics_interval_ms": 500}


@pytest.fixture(scope="module")
def two_brokers(tmp_path_factory):  # type: ignore[no-untyped-def]
    c = LocalCluster(str(tmp_path_factory.mktemp("broker-cluster")), brokers=2, broker_overrides=FAST)
    c.start()
    yield c
    c.stop()
