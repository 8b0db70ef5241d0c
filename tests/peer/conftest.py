"""Fixtures for Apache Kafka's own tools and Java client run against a real cluster.

Skipped, with the reason printed, only when the peer is not installed (no Java, or no jars:
`make kafka-jars`)."""
from __future__ import annotations

import pytest

from tools.cluster import LocalCluster
from tools.peer.checks import AUTHORIZER_ON, Peer
from tools.peer.kafka_tools import KafkaTools, PeerMissing


@pytest.fixture(scope="session")
def kafka_tools() -> KafkaTools:
    try:
        return KafkaTools()
    except PeerMissing as exc:
        print(f"\nskipped: {exc}")
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def peer(kafka_tools, tmp_path_factory):  # type: ignore[no-untyped-def]
    """Kafka's tools against one cluster shared by a module's tests, each step once (not thorough)."""
    work = tmp_path_factory.mktemp("peer")
    cluster = LocalCluster(str(work / "cluster"), broker_overrides=AUTHORIZER_ON)  # as librdkafka's test brokers
    cluster.start()
    yield Peer(kafka_tools, cluster.kafka_bootstrap, work, tuple(sorted(cluster.kafka_ports)), thorough=False)
    cluster.stop(graceful=False)


@pytest.fixture
def cluster(kafka_tools, tmp_path):  # type: ignore[no-untyped-def]
    """A fresh cluster for a test that kills a broker (started only when the peer is installed)."""
    c = LocalCluster(str(tmp_path / "cluster"))
    c.start()
    yield c
    c.stop(graceful=False)
