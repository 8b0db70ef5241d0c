"""One Spark session for the whole test run (start-up costs seconds and ~1 GB): the planner's
tests, the data source's and those of Spark's own Kafka source and sink share it (whichever
call starts it, its ``spark.jars`` carry that connector when ``make spark-kafka-jars`` has cached
it)."""
from __future__ import annotations

import warnings
from typing import Any, Iterator

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from tools.rebalance.spark_session import spark_session

    warnings.filterwarnings("ignore", category=FutureWarning)
    session = spark_session("local[2]")
    yield session
    session.stop()
