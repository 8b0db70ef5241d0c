"""Kafka 4.4's kafka-configs and kafka-metadata-quorum, unmodified, against a SASL cluster; real SASL
SCRAM clients log in with the credentials kafka-configs put in the metadata log.

The users file has one admin user (PLAIN, the tools' --command-config); alice exists only through
kafka-configs --entity-type users.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CTP

from tools.cluster import LocalCluster
from tools.peer.checks import Peer
from tools.peer.kafka_tools import KafkaTools, properties_file

pytestmark = pytest.mark.integration

ADMIN = ("admin", "admin-secret")


@pytest.fixture(scope="module")
def sasl_peer(kafka_tools: KafkaTools, tmp_path_factory):  # type: ignore[no-untyped-def]
    work = tmp_path_factory.mktemp("scram")
    users = work / "users.json"
    users.write_text(json.dumps({"users": {ADMIN[0]: ADMIN[1]}}))
    cluster = LocalCluster(str(work / "cluster"), broker_overrides={"sasl_users_file": str(users)})
    cluster.start()
    yield Peer(kafka_tools, cluster.kafka_bootstrap, work, tuple(sorted(cluster.kafka_ports)), thorough=False)
    cluster.stop(graceful=False)


def _admin_config(work: Path) -> str:
    jaas = f'org.apache.kafka.common.security.plain.PlainLoginModule required username="{ADMIN[0]}" ' \
           f'password="{ADMIN[1]}";'
    return str(properties_file(work / "admin.properties", {"security.protocol": "SASL_PLAINTEXT",
                                                           "sasl.mechanism": "PLAIN", "sasl.jaas.config": jaas}))


def _round_trip(bootstrap: str, mechanism: str, user: str, password: str, topic: str) -> str:
    """Produce one record and read it back as ``user``; the first error seen otherwise."""
    conf = {"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism,
            "sasl.username": user, "sasl.password": password}
    errors: list[str] = []
    producer = Producer({**conf, "message.timeout.ms": 8000, "error_cb": lambda e: errors.append(str(e))})
    producer.produce(topic, value=f"{mechanism}-{user}".encode(), partition=0,
                     on_delivery=lambda err, _m: errors.append(str(err)) if err else None)
    if producer.flush(10) or errors:
        return f"produce failed: {errors[:2]}"
    consumer = Consumer({**conf, "group.id": f"g-{mechanism}", "auto.offset.reset": "earliest"})
    consumer.assign([CTP(topic, 0, 0)])
    deadline = time.monotonic() + 10
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None and msg.value() == f"{mechanism}-{user}".encode():
                return "ok"
    finally:
        consumer.close()
    return "record not read back"


def _refused(bootstrap: str, mechanism: str, user: str, password: str) -> bool:
    """Does the login fail as an authentication failure (within 10 s)?"""
    errors: list[str] = []
    producer = Producer({"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT",
                         "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password,
                         "error_cb": lambda e: errors.append(str(e))})
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not any("Authentication failed" in e for e in errors):
        producer.poll(0.1)
    return any("Authentication failed" in e for e in errors)


def test_kafka_configs_scram_users_log_in(sasl_peer: Peer) -> None:
    peer = sasl_peer
    admin = _admin_config(peer.workdir)
    peer.ok("kafka-topics", "--command-config", admin, "--create", "--topic", "scram-t", "--partitions", "1")
    alice = ("--entity-type", "users", "--entity-name", "alice")
    assert _refused(peer.bootstrap, "SCRAM-SHA-256", "alice", "alice-secret")  # no such user yet
    peer.ok("kafka-configs", "--command-config", admin, "--alter", *alice, "--add-config",
            "SCRAM-SHA-256=[iterations=8192,password=alice-secret]")
    assert _round_trip(peer.bootstrap, "SCRAM-SHA-256", "alice", "alice-secret", "scram-t") == "ok"
    assert _refused(peer.bootstrap, "SCRAM-SHA-256", "alice", "wrong")

    peer.ok("kafka-configs", "--command-config", admin, "--alter", *alice, "--add-config",
            "SCRAM-SHA-512=[password=alice-512]")
    described = peer.ok("kafka-configs", "--command-config", admin, "--describe", *alice)
    assert "SCRAM-SHA-256=iterations=8192, SCRAM-SHA-512=iterations=4096" in described.stdout, described.describe()

    def kafka_python_512() -> int:
        from kafka import KafkaProducer
        kp = KafkaProducer(bootstrap_servers=peer.bootstrap, security_protocol="SASL_PLAINTEXT",
                           sasl_mechanism="SCRAM-SHA-512", sasl_plain_username="alice",
                           sasl_plain_password="alice-512")
        try:
            return int(kp.send("scram-t", b"kafka-python-512", partition=0).get(timeout=15).offset)
        finally:
            kp.close()
    assert kafka_python_512() >= 1

    # a metadata credential replaces the file's for that user and mechanism; PLAIN stays the file's
    peer.ok("kafka-configs", "--command-config", admin, "--alter", "--entity-type", "users", "--entity-name",
            ADMIN[0], "--add-config", "SCRAM-SHA-256=[password=admin-new]")
    assert _round_trip(peer.bootstrap, "SCRAM-SHA-256", ADMIN[0], "admin-new", "scram-t") == "ok"
    assert _refused(peer.bootstrap, "SCRAM-SHA-256", ADMIN[0], ADMIN[1])
    assert _round_trip(peer.bootstrap, "SCRAM-SHA-512", ADMIN[0], ADMIN[1], "scram-t") == "ok"

    peer.ok("kafka-configs", "--command-config", admin, "--alter", *alice, "--delete-config", "SCRAM-SHA-256")
    assert _refused(peer.bootstrap, "SCRAM-SHA-256", "alice", "alice-secret")


def test_kafka_metadata_quorum_over_sasl(sasl_peer: Peer) -> None:
    peer = sasl_peer
    admin = _admin_config(peer.workdir)
    run = peer.ok("kafka-metadata-quorum", "--command-config", admin, "describe", "--status")
    fields = {k.strip(): v.strip() for k, v in (line.split(":", 1) for line in run.stdout.splitlines() if ":" in line)}
    voters = [v["id"] for v in json.loads(fields["CurrentVoters"])]
    assert len(voters) == 3 and int(fields["LeaderId"]) in voters, run.describe()
    assert int(fields["LeaderEpoch"]) >= 1 and int(fields["HighWatermark"]) > 0, run.describe()
    assert sorted(o["id"] for o in json.loads(fields["CurrentObservers"])) == list(peer.broker_ids), run.describe()
    rep = peer.ok("kafka-metadata-quorum", "--command-config", admin, "describe", "--replication")
    rows = [line.split() for line in rep.stdout.splitlines()[1:] if line.strip()]
    leader = [r for r in rows if r[-1] == "Leader"]
    assert len(leader) == 1 and int(leader[0][0]) == int(fields["LeaderId"]), rep.describe()
    assert int(leader[0][2]) >= int(fields["HighWatermark"]), rep.describe()  # its log end, read after --status
