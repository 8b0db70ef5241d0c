"""Spark's own Kafka source and sink (``format("kafka")``): where their pinned jars are.

``make spark-kafka-jars`` copies them from Maven Central into ``.cache/spark-kafka-<version>/``
(tools/peer/spark-kafka-pom.xml names them); nothing is downloaded here or while a test runs. The
jars are the connector and what it needs beyond pyspark's own jars: Spark's
``spark-sql-kafka-0-10`` and ``spark-token-provider-kafka-0-10``, Kafka's ``kafka-clients`` and
``commons-pool2``. A session gets them through ``spark.jars`` (the files themselves, never
``spark.jars.packages``, which would resolve them from the network at start-up).
"""
from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: the connector's version: Maven Central's newest (it has no 4.3.0 for pyspark 4.3.0)
SPARK_KAFKA_VERSION = "4.2.0"
#: the artifacts ``make spark-kafka-jars`` copies, by name prefix
ARTIFACTS = ("spark-sql-kafka-0-10_2.13-", "spark-token-provider-kafka-0-10_2.13-", "kafka-clients-",
             "commons-pool2-")


def spark_kafka_jars_dir() -> Path:
    """The cache directory; ``FERRY_SPARK_KAFKA_JARS`` names another one."""
    return Path(os.environ.get("FERRY_SPARK_KAFKA_JARS") or ROOT / ".cache" / f"spark-kafka-{SPARK_KAFKA_VERSION}")


def spark_kafka_jars(directory: Path | None = None) -> list[Path] | None:
    """The jars for ``spark.jars``, one per artifact, or None when any is missing (the target
    has not run)."""
    directory = directory or spark_kafka_jars_dir()
    found: list[Path] = []
    for prefix in ARTIFACTS:
        matches = sorted(directory.glob(f"{prefix}[0-9]*.jar"))
        if not matches:
            return None
        found.append(matches[-1])
    return found
