"""Where the pinned JVM peers' jars are (fetched by ``make kafka-jars``; nothing is downloaded here)."""
from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
KAFKA_VERSION = "4.4.0"


def kafka_jars_dir() -> Path | None:
    """Apache Kafka's jars (broker, tools, clients), or None when ``make kafka-jars`` has not run.
    ``FERRY_KAFKA_JARS`` names another directory."""
    path = Path(os.environ.get("FERRY_KAFKA_JARS") or ROOT / ".cache" / f"kafka-{KAFKA_VERSION}")
    return path if any(path.glob("kafka_2.13-*.jar")) else None
