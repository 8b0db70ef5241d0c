"""Fixtures: real local clusters (moto server, 3 controllers, 3 brokers as processes on loopback)."""
from __future__ import annotations

import pytest

from tools.cluster import LocalCluster


@pytest.fixture
def cluster(tmp_path):
    """A fresh cluster for a test that breaks things (kill -9, SIGSTOP)."""
    c = LocalCluster(str(tmp_path / "cluster"))
    c.start()
    yield c
    c.stop(graceful=False)


@pytest.fixture(scope="module")
def shared_cluster(tmp_path_factory):
    """One cluster for the tests of a module that leave it healthy."""
    c = LocalCluster(str(tmp_path_factory.mktemp("cluster")))
    c.start()
    yield c
    c.stop(graceful=False)
