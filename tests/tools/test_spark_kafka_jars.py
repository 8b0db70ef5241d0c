"""The pinned jars of Spark's Kafka connector: one version in the pom, the Makefile and the code,
and a cache directory with a jar missing counts as absent."""
from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from tools.peer.spark_kafka import ARTIFACTS, ROOT, SPARK_KAFKA_VERSION, spark_kafka_jars

POM_NS = {"m": "http://maven.apache.org/POM/4.0.0"}


def test_one_version_in_the_pom_the_makefile_and_the_code() -> None:
    pom = ET.parse(ROOT / "tools" / "peer" / "spark-kafka-pom.xml").getroot()
    props = {p.tag.split("}")[1]: p.text for p in pom.iterfind("m:properties/*", POM_NS)}
    assert props["spark.kafka.version"] == SPARK_KAFKA_VERSION
    artifacts = [d.findtext("m:artifactId", namespaces=POM_NS) for d in pom.iterfind("m:dependencies/m:dependency", POM_NS)]
    assert sorted(f"{a}-" for a in artifacts) == sorted(ARTIFACTS)
    for dependency in pom.iterfind("m:dependencies/m:dependency", POM_NS):  # nothing transitive
        assert dependency.find("m:exclusions/m:exclusion[m:groupId='*']", POM_NS) is not None
    assert f"SPARK_KAFKA_JARS := .cache/spark-kafka-{SPARK_KAFKA_VERSION}\n" in (ROOT / "Makefile").read_text()


def test_jars_are_found_only_when_every_artifact_is_there(tmp_path: Path) -> None:
    names = ["spark-sql-kafka-0-10_2.13-4.2.0.jar", "spark-token-provider-kafka-0-10_2.13-4.2.0.jar",
             "kafka-clients-3.9.2.jar", "commons-pool2-2.13.1.jar"]
    for name in names[:-1]:
        (tmp_path / name).write_bytes(b"")
    assert spark_kafka_jars(tmp_path) is None
    (tmp_path / names[-1]).write_bytes(b"")
    (tmp_path / "commons-pool2-2.13.1-sources.txt").write_bytes(b"")
    assert [p.name for p in spark_kafka_jars(tmp_path) or []] == names
