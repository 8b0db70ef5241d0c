"""SASL PLAIN and SCRAM-SHA-256/512: the pure session and credential store, then real clients against a
SASL listener."""
from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import struct
import time
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CTP

from broker.kafka.sasl import SaslSession, ScramStore, State, Users
from metadata_quorum.delta import replay_records
from metadata_quorum.image import MetadataImage
from metadata_quorum.kernel.errors import ErrorCode, FerryError
from metadata_quorum.kernel.scram import SCRAM_SHA_256, ScramCredential, ScramMechanism
from metadata_quorum.records import RemoveUserScramCredentialRecord, UserScramCredentialRecord
from tests.kafka.test_wire import metadata
from tools.admin import Admin
from tools.client import TopicPartition
from tools.cluster import LocalCluster

USERS = {"alice": "alice-secret", "bob": "b0b"}


def scram_client(session: SaslSession, user: str, password: str, hash_name: str = "sha256") -> tuple[ErrorCode, bytes]:
    """RFC 5802 from the client's side, driving the server session."""
    nonce = "fyko+d2lbbFgONRv9qkxdawL"
    first_bare = f"n={user},r={nonce}"
    step = session.authenticate(f"n,,{first_bare}".encode())
    if step.error is not ErrorCode.NONE:
        return step.error, b""
    server_first = step.auth_bytes.decode()
    attrs = dict(p.split("=", 1) for p in server_first.split(","))
    salted = hashlib.pbkdf2_hmac(hash_name, password.encode(), base64.b64decode(attrs["s"]), int(attrs["i"]))
    client_key = hmac.digest(salted, b"Client Key", hash_name)
    without_proof = f"c=biws,r={attrs['r']}"
    auth_message = f"{first_bare},{server_first},{without_proof}".encode()
    signature = hmac.digest(hashlib.new(hash_name, client_key).digest(), auth_message, hash_name)
    proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, signature, strict=True))).decode()
    final = session.authenticate(f"{without_proof},p={proof}".encode())
    if final.error is ErrorCode.NONE:
        expected = hmac.digest(hmac.digest(salted, b"Server Key", hash_name), auth_message, hash_name)
        assert final.auth_bytes == b"v=" + base64.b64encode(expected)
    return final.error, final.auth_bytes


def test_plain_accepts_the_password_and_refuses_everything_else() -> None:
    users = Users.from_passwords(USERS)
    ok = SaslSession(users)
    assert not ok.allows("Metadata") and ok.allows("ApiVersions")
    assert ok.handshake("PLAIN").error is ErrorCode.NONE
    assert ok.authenticate(b"\x00alice\x00alice-secret").error is ErrorCode.NONE
    assert ok.authenticated and ok.principal == "alice" and ok.allows("Fetch")
    for token in (b"\x00alice\x00wrong", b"\x00nobody\x00x", b"garbage", b"bob\x00alice\x00alice-secret"):
        bad = SaslSession(users)
        bad.handshake("PLAIN")
        step = bad.authenticate(token)
        assert step.error is ErrorCode.SASL_AUTHENTICATION_FAILED and step.close and not bad.authenticated


def test_scram_sha_256_round_trip_and_wrong_password() -> None:
    users = Users.from_passwords(USERS)
    good = SaslSession(users)
    good.handshake("SCRAM-SHA-256")
    assert scram_client(good, "bob", "b0b")[0] is ErrorCode.NONE and good.principal == "bob"
    bad = SaslSession(users)
    bad.handshake("SCRAM-SHA-256")
    assert scram_client(bad, "bob", "nope")[0] is ErrorCode.SASL_AUTHENTICATION_FAILED
    unknown = SaslSession(users)
    unknown.handshake("SCRAM-SHA-256")
    assert scram_client(unknown, "carol", "x")[0] is ErrorCode.SASL_AUTHENTICATION_FAILED


def test_scram_sha_512_round_trip() -> None:
    users = Users.from_passwords(USERS)
    good = SaslSession(users)
    assert good.handshake("SCRAM-SHA-512").error is ErrorCode.NONE
    assert scram_client(good, "alice", "alice-secret", "sha512")[0] is ErrorCode.NONE and good.principal == "alice"
    wrong_hash = SaslSession(users)  # a SHA-256 proof on a SHA-512 exchange
    wrong_hash.handshake("SCRAM-SHA-512")
    assert scram_client(wrong_hash, "alice", "alice-secret", "sha256")[0] is ErrorCode.SASL_AUTHENTICATION_FAILED


def _image_with(records: list[Any]) -> MetadataImage:
    return replay_records(MetadataImage(), records)


def test_metadata_credentials_add_users_and_override_the_files() -> None:
    """The store answers SCRAM from the metadata log first, then the users file; PLAIN only from the file."""
    def record(user: str, password: str, mechanism: ScramMechanism) -> UserScramCredentialRecord:
        cred = ScramCredential.derive(mechanism, password, b"salt-of-" + user.encode(), 4096)
        b64 = lambda raw: base64.b64encode(raw).decode()  # noqa: E731
        return UserScramCredentialRecord(name=user, mechanism=mechanism.name, salt=b64(cred.salt),
                                         stored_key=b64(cred.stored_key), server_key=b64(cred.server_key),
                                         iterations=4096)
    current = [_image_with([record("carol", "c4rol", SCRAM_SHA_256), record("bob", "new-bob", SCRAM_SHA_256)])]
    store = ScramStore(Users.from_passwords(USERS), lambda: current[0])

    def login(user: str, password: str, mechanism: str = "SCRAM-SHA-256") -> ErrorCode:
        s = SaslSession(store)
        s.handshake(mechanism)
        return scram_client(s, user, password, "sha512" if mechanism.endswith("512") else "sha256")[0]
    assert login("carol", "c4rol") is ErrorCode.NONE  # added by the metadata log
    assert login("carol", "c4rol", "SCRAM-SHA-512") is ErrorCode.SASL_AUTHENTICATION_FAILED  # no 512 credential
    assert login("bob", "new-bob") is ErrorCode.NONE  # the metadata log's credential wins
    assert login("bob", "b0b") is ErrorCode.SASL_AUTHENTICATION_FAILED
    assert login("bob", "b0b", "SCRAM-SHA-512") is ErrorCode.NONE  # the file's, for the other mechanism
    plain = SaslSession(store)
    plain.handshake("PLAIN")
    assert plain.authenticate(b"\x00bob\x00b0b").error is ErrorCode.NONE  # PLAIN stays the file's
    current[0] = replay_records(current[0], [RemoveUserScramCredentialRecord(name="bob", mechanism="SCRAM-SHA-256")])
    assert login("bob", "b0b") is ErrorCode.NONE and login("bob", "new-bob") is ErrorCode.SASL_AUTHENTICATION_FAILED
    assert ScramStore(None, lambda: None).scram("bob", SCRAM_SHA_256) is None


@pytest.mark.parametrize("content, words", [
    ({"users": {"alice": "x"}, "extra": 1}, ["unknown", "'extra'"]),
    ({"user": {"alice": "x"}}, ["'user'"]),
    ({"users": {"alice": 3}}, ["'users.alice'", "string"]),
    ({"users": {"alice": ""}}, ["'users.alice'", "empty"]),
    ({"users": {}}, ["at least one user"]),
    ({"users": ["alice"]}, ["'users'", "object"]),
    ([], ["JSON object"]),
])
def test_users_file_is_strict(tmp_path, content: Any, words: list[str]) -> None:
    path = tmp_path / "users.json"
    path.write_text(json.dumps(content))
    with pytest.raises(FerryError) as info:
        Users.load(str(path))
    assert info.value.error is ErrorCode.INVALID_CONFIG
    for word in words:
        assert word in info.value.message, info.value.message
    assert "x" not in info.value.message.replace("extra", "").replace(str(tmp_path), "")  # no password shown


def test_wrong_order_and_unknown_mechanisms() -> None:
    users = Users.from_passwords(USERS)
    s = SaslSession(users)
    assert s.authenticate(b"\x00alice\x00alice-secret").error is ErrorCode.ILLEGAL_SASL_STATE
    s = SaslSession(users)
    assert s.handshake("GSSAPI").error is ErrorCode.UNSUPPORTED_SASL_MECHANISM
    s = SaslSession(users)
    s.handshake("PLAIN")
    assert s.handshake("PLAIN").error is ErrorCode.ILLEGAL_SASL_STATE and s.state is State.FAILED


@pytest.fixture(scope="module")
def sasl_cluster(tmp_path_factory):
    root = tmp_path_factory.mktemp("sasl")
    users_file = root / "users.json"
    users_file.write_text(json.dumps({"users": USERS}))
    c = LocalCluster(str(root / "cluster"), broker_overrides={"sasl_users_file": str(users_file)})
    c.start()
    yield c
    c.stop(graceful=False)


@pytest.mark.integration
async def test_real_clients_authenticate_and_strangers_get_nothing(sasl_cluster) -> None:
    c = sasl_cluster
    async with Admin(bootstrap_controllers=c.controller_bootstrap) as admin:
        await admin.create_topic("st", 1)
        await admin.wait_for_leader(TopicPartition("st", 0), timeout_s=20)
    # an unauthenticated request gets ILLEGAL_SASL_STATE and the connection closes
    reader, writer = await asyncio.open_connection("127.0.0.1", c.kafka_ports[1])
    writer.write(metadata(9))
    await writer.drain()
    (size,) = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), 5))
    body = await reader.readexactly(size)
    assert struct.unpack(">ih", body) == (1, ErrorCode.ILLEGAL_SASL_STATE.code)
    assert await asyncio.wait_for(reader.read(), 5) == b""
    writer.close()

    def confluent(mechanism: str, user: str, password: str) -> list[bytes]:
        conf = {"bootstrap.servers": c.kafka_bootstrap, "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password}
        producer = Producer({**conf, "enable.idempotence": True, "message.timeout.ms": 10000})
        errors: list[str] = []
        producer.produce("st", value=f"{mechanism}-{user}".encode(), partition=0,
                         on_delivery=lambda err, _m: errors.append(str(err)) if err else None)
        left = producer.flush(15)
        assert left == 0 and not errors, errors
        consumer = Consumer({**conf, "group.id": f"sasl-{mechanism}", "auto.offset.reset": "earliest"})
        consumer.assign([CTP("st", 0, 0)])
        got: list[bytes] = []
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
            elif got:
                break
        consumer.close()
        return got

    assert b"PLAIN-alice" in await asyncio.to_thread(confluent, "PLAIN", "alice", "alice-secret")
    assert b"SCRAM-SHA-256-bob" in await asyncio.to_thread(confluent, "SCRAM-SHA-256", "bob", "b0b")

    def wrong_password() -> str:
        errors: list[str] = []
        producer = Producer({"bootstrap.servers": c.kafka_bootstrap, "security.protocol": "SASL_PLAINTEXT",
                             "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "bob", "sasl.password": "bad",
                             "message.timeout.ms": 3000, "error_cb": lambda e: errors.append(str(e))})
        producer.produce("st", value=b"never", partition=0)
        producer.flush(5)
        return " ".join(errors)
    assert "Authentication failed" in await asyncio.to_thread(wrong_password)

    from aiokafka import AIOKafkaProducer
    producer = AIOKafkaProducer(bootstrap_servers=c.kafka_bootstrap, security_protocol="SASL_PLAINTEXT",
                                sasl_mechanism="SCRAM-SHA-256", sasl_plain_username="alice",
                                sasl_plain_password="alice-secret")
    await producer.start()
    md = await producer.send_and_wait("st", b"aiokafka", partition=0)
    await producer.stop()
    assert md.offset >= 2

    def kafka_python() -> int:
        from kafka import KafkaProducer
        kp = KafkaProducer(bootstrap_servers=c.kafka_bootstrap, security_protocol="SASL_PLAINTEXT",
                           sasl_mechanism="PLAIN", sasl_plain_username="bob", sasl_plain_password="b0b")
        offset = kp.send("st", b"kafka-python", partition=0).get(timeout=15).offset
        kp.close()
        return offset
    assert await asyncio.to_thread(kafka_python) >= 3
