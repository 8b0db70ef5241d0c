"""SCRAM credentials in the metadata log: alter_user_scram_credentials / describe_user_scram_credentials."""
from __future__ import annotations

import base64
import hashlib
from typing import Any

from metadata_quorum.image import MetadataImage
from metadata_quorum.kernel.errors import ErrorCode
from metadata_quorum.kernel.scram import SCRAM_SHA_256, SCRAM_SHA_512, ScramCredential
from metadata_quorum.operations import run_read
from metadata_quorum.records import RemoveUserScramCredentialRecord, UserScramCredentialRecord
from tests.quorum.quorum_helpers import controller, run

SALT = b"NaCl-salt"


def upsert(name: str, password: str = "pw", mechanism: int = 1, iterations: int = 4096,
           salt: bytes = SALT) -> dict[str, Any]:
    hash_name = {1: "sha256", 2: "sha512"}.get(mechanism, "sha256")
    salted = hashlib.pbkdf2_hmac(hash_name, password.encode(), salt, max(1, iterations))
    return {"name": name, "mechanism": mechanism, "iterations": iterations,
            "salt": base64.b64encode(salt).decode(), "salted_password": base64.b64encode(salted).decode()}


def errors_of(reply: dict[str, Any]) -> dict[str, str]:
    return {r["user"]: r["error"] for r in reply["results"]}


def alter(image: MetadataImage, **args: Any) -> Any:
    return run(image, "alter_user_scram_credentials", args)


def test_upsert_stores_the_keys_not_the_password_and_describe_reports_it() -> None:
    out = alter(controller(1).image, upsertions=[upsert("alice", "s3cret"), upsert("alice2", "x", mechanism=2,
                                                                                     iterations=8192)])
    assert errors_of(out.reply) == {"alice": "NONE", "alice2": "NONE"}
    [r1, r2] = [r for r in out.records if isinstance(r, UserScramCredentialRecord)]
    expected = ScramCredential.derive(SCRAM_SHA_256, "s3cret", SALT, 4096)
    assert (r1.name, r1.mechanism, r1.iterations) == ("alice", "SCRAM-SHA-256", 4096)
    assert base64.b64decode(r1.stored_key) == expected.stored_key
    assert base64.b64decode(r1.server_key) == expected.server_key
    assert "s3cret" not in repr(out.records)
    assert base64.b64decode(r2.stored_key) == ScramCredential.derive(SCRAM_SHA_512, "x", SALT, 8192).stored_key
    described = run_read(out.image, "describe_user_scram_credentials", {"users": ["alice", "alice2"]})
    assert described["results"] == [
        {"user": "alice", "error": "NONE", "code": 0, "message": None,
         "credentials": [{"mechanism": 1, "iterations": 4096}]},
        {"user": "alice2", "error": "NONE", "code": 0, "message": None,
         "credentials": [{"mechanism": 2, "iterations": 8192}]}]
    everyone = run_read(out.image, "describe_user_scram_credentials", {"users": None})
    assert [r["user"] for r in everyone["results"]] == ["alice", "alice2"]


def test_describe_unknown_and_duplicate_users() -> None:
    image = alter(controller(1).image, upsertions=[upsert("bob")]).image
    out = run_read(image, "describe_user_scram_credentials", {"users": ["nobody", "bob", "bob"]})
    by_user = {r["user"]: r for r in out["results"]}
    assert by_user["nobody"]["error"] == "RESOURCE_NOT_FOUND" and by_user["nobody"]["credentials"] == []
    assert by_user["bob"]["error"] == "DUPLICATE_RESOURCE"
    assert len(out["results"]) == 2


def test_refusals_are_per_user_and_change_nothing_for_that_user() -> None:
    image = controller(1).image
    out = alter(image, upsertions=[upsert("few", iterations=4095), upsert("many", iterations=16385),
                                   upsert("mech", mechanism=3), upsert("ok"), upsert("twice"), upsert("twice")],
                deletions=[{"name": "ghost", "mechanism": 1}, {"name": "bad-mech", "mechanism": 0}])
    assert errors_of(out.reply) == {"few": "UNACCEPTABLE_CREDENTIAL", "many": "UNACCEPTABLE_CREDENTIAL",
                                    "mech": "UNSUPPORTED_SASL_MECHANISM", "ok": "NONE",
                                    "twice": "DUPLICATE_RESOURCE", "ghost": "RESOURCE_NOT_FOUND",
                                    "bad-mech": "UNSUPPORTED_SASL_MECHANISM"}
    messages = {r["user"]: r["message"] for r in out.reply["results"]}
    assert messages["few"] == "Too few iterations" and messages["many"] == "Too many iterations"
    assert [r.name for r in out.records] == ["ok"]  # type: ignore[union-attr]
    assert {u for u, _m in out.image.scram.credentials} == {"ok"}
    assert ErrorCode.UNACCEPTABLE_CREDENTIAL.code == 93 and ErrorCode.RESOURCE_NOT_FOUND.code == 91


def test_a_user_both_deleted_and_upserted_is_a_duplicate() -> None:
    image = alter(controller(1).image, upsertions=[upsert("carol")]).image
    out = alter(image, deletions=[{"name": "carol", "mechanism": 1}], upsertions=[upsert("carol", "new")])
    assert errors_of(out.reply) == {"carol": "DUPLICATE_RESOURCE"} and out.records == ()


def test_delete_removes_one_mechanism_and_survives_a_snapshot() -> None:
    image = alter(controller(1).image, upsertions=[upsert("dave")]).image
    image = alter(image, upsertions=[upsert("dave", mechanism=2)]).image
    out = alter(image, deletions=[{"name": "dave", "mechanism": 1}])
    assert out.records == (RemoveUserScramCredentialRecord(name="dave", mechanism="SCRAM-SHA-256"),)
    assert set(out.image.scram.credentials) == {("dave", "SCRAM-SHA-512")}
    rebuilt = MetadataImage.from_records(out.image.to_records())
    assert rebuilt.same_content(out.image) and set(rebuilt.scram.credentials) == {("dave", "SCRAM-SHA-512")}


def test_malformed_arguments_are_invalid_request() -> None:
    image = controller(1).image
    for args in ({"upsertions": [{"name": "x"}]}, {"upsertions": [dict(upsert("x"), salt="not base64!")]},
                 {"deletions": "alice"}, {"upsertions": [dict(upsert("x"), iterations="4096")]}):
        try:
            run(image, "alter_user_scram_credentials", args)
        except Exception as exc:  # noqa: BLE001
            assert getattr(exc, "error", None) is ErrorCode.INVALID_REQUEST, exc
        else:
            raise AssertionError(f"{args} was accepted")


def test_checks_happen_in_kafkas_order() -> None:
    """A user refused at its first alteration is not also a duplicate at its second (Kafka walks
    deletions then upsertions, checking each when met); both mechanisms of one user in one request
    are a duplicate, as Kafka 4.4's controller answers kafka-configs' combined --add-config."""
    out = alter(controller(1).image, deletions=[{"name": "erin", "mechanism": 9}],
                upsertions=[upsert("erin"), upsert("frank"), upsert("frank", mechanism=2)])
    assert errors_of(out.reply) == {"erin": "UNSUPPORTED_SASL_MECHANISM", "frank": "DUPLICATE_RESOURCE"}
    assert out.records == ()
