"""SCRAM credentials in the metadata log (KIP-554, as KRaft's ScramControlManager keeps them).

``alter_user_scram_credentials`` turns AlterUserScramCredentials into UserScramCredentialRecord /
RemoveUserScramCredentialRecord; ``describe_user_scram_credentials`` answers
DescribeUserScramCredentials from an image (brokers answer it from their own). Both answer user by
user with Kafka's errors and wording: a user named twice in one request is DUPLICATE_RESOURCE, an
unknown mechanism UNSUPPORTED_SASL_MECHANISM, iterations outside the mechanism's bounds
UNACCEPTABLE_CREDENTIAL, a deletion or description of a credential that does not exist
RESOURCE_NOT_FOUND. The credentials that pass are written as one atomic batch; a failed user
changes nothing. The client sends the salted password, never the password: the controller keeps
only the stored key and server key derived from it (RFC 5802).
"""
from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Any, Mapping

from metadata_quorum.controller_result import ControllerResult, OpContext
from metadata_quorum.image import MetadataImage
from metadata_quorum.kernel.errors import ErrorCode, FerryError
from metadata_quorum.kernel.scram import BY_TYPE, MECHANISMS, ScramCredential, ScramMechanism
from metadata_quorum.kernel.validation import as_int, as_list, as_mapping, as_str, invalid, item_error, opt_list
from metadata_quorum.records import Record, RemoveUserScramCredentialRecord, UserScramCredentialRecord

MAX_ALTERATIONS = 10_000
_TWICE = "A user credential cannot be altered twice in the same request"


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


def _bytes(item: Mapping[str, Any], name: str, where: str) -> bytes:
    text = as_str(item.get(name), f"{where}.{name}")
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise invalid(f"{where}.{name} must be base64, got {text[:40]!r}") from None


def _mechanism(value: int) -> ScramMechanism:
    mechanism = BY_TYPE.get(value)
    if mechanism is None:
        raise FerryError(ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
    return mechanism


@dataclass(frozen=True)
class Alteration:
    """One deletion (salt and salted password None) or upsertion, its shape already checked."""

    name: str
    mechanism: int
    iterations: int = 0
    salt: bytes | None = None
    salted_password: bytes | None = None


def _parse(item: Any, where: str, upsertion: bool) -> Alteration:
    """A well-formed alteration, or INVALID_REQUEST for the whole request (malformed input)."""
    m = as_mapping(item, where)
    name = as_str(m.get("name"), f"{where}.name")
    mechanism = as_int(m.get("mechanism"), f"{where}.mechanism", -128, 127)
    if not upsertion:
        return Alteration(name, mechanism)
    return Alteration(name, mechanism, as_int(m.get("iterations"), f"{where}.iterations", -(2 ** 31), 2 ** 31 - 1),
                      _bytes(m, "salt", where), _bytes(m, "salted_password", where))


def _record(image: MetadataImage, a: Alteration) -> Record:
    """The record of one alteration; FerryError (Kafka's per-user error) when it is refused."""
    mechanism = _mechanism(a.mechanism)
    if a.salt is None or a.salted_password is None:  # a deletion
        if image.scram.get(a.name, mechanism.name) is None:
            raise FerryError(ErrorCode.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist")
        return RemoveUserScramCredentialRecord(name=a.name, mechanism=mechanism.name)
    if not a.name:
        raise FerryError(ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
    if a.iterations < mechanism.min_iterations:
        raise FerryError(ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations")
    if a.iterations > mechanism.max_iterations:
        raise FerryError(ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations")
    if not a.salt or not a.salted_password:
        raise FerryError(ErrorCode.UNACCEPTABLE_CREDENTIAL, "Salt and salted password must not be empty")
    cred = ScramCredential.from_salted_password(mechanism, a.salted_password, a.salt, a.iterations)
    return UserScramCredentialRecord(name=a.name, mechanism=mechanism.name, salt=_b64(cred.salt),
                                     stored_key=_b64(cred.stored_key), server_key=_b64(cred.server_key),
                                     iterations=a.iterations)


def alter_user_scram_credentials(image: MetadataImage, args: dict[str, Any], ctx: OpContext) -> ControllerResult:
    """``{"deletions": [{name, mechanism}], "upsertions": [{name, mechanism, iterations, salt,
    salted_password}]}`` (mechanism: Kafka's type, 1 = SCRAM-SHA-256, 2 = SCRAM-SHA-512; salt and
    salted password base64) -> ``{"results": [{user, error, code, message}]}``, one per user in
    the order first named.

    As Kafka's ScramControlManager: deletions then upsertions are walked in order, each checked
    when met; a user met a second time (whatever the mechanism: Kafka 4.4's controller refuses
    SCRAM-SHA-256 and SCRAM-SHA-512 of one user in one request too) loses both alterations to
    DUPLICATE_RESOURCE, and a user already refused is skipped."""
    alterations = [_parse(d, f"deletions[{i}]", False)
                   for i, d in enumerate(opt_list(args, "deletions", MAX_ALTERATIONS) or [])]
    alterations += [_parse(u, f"upsertions[{i}]", True)
                    for i, u in enumerate(opt_list(args, "upsertions", MAX_ALTERATIONS) or [])]
    order: list[str] = []
    errors: dict[str, FerryError] = {}
    wanted: dict[str, Record] = {}
    for a in alterations:
        if a.name not in order:
            order.append(a.name)
        if a.name in errors:
            continue
        if wanted.pop(a.name, None) is not None:
            errors[a.name] = FerryError(ErrorCode.DUPLICATE_RESOURCE, _TWICE)
            continue
        try:
            wanted[a.name] = _record(image, a)
        except FerryError as exc:
            errors[a.name] = exc
    results: list[dict[str, Any]] = []
    for user in order:
        refused = errors.get(user)
        error = item_error(refused.error, refused.message) if refused is not None else \
            {**item_error(ErrorCode.NONE, ""), "message": None}
        results.append({"user": user, **error})
    return ControllerResult(tuple(wanted.values()), {"results": results})


def describe_user_scram_credentials(image: MetadataImage, args: Mapping[str, Any]) -> dict[str, Any]:
    """``{"users": [name, ...] | null}`` (null or empty: every user with a credential) ->
    ``{"results": [{user, error, code, message, credentials: [{mechanism, iterations}]}]}``."""
    raw = args.get("users")
    asked = [] if raw is None else [as_str(u, f"users[{i}]") for i, u in enumerate(as_list(raw, "users"))]
    if not asked:
        users = sorted({user for user, _m in image.scram.credentials})
        twice: set[str] = set()
    else:
        users = list(dict.fromkeys(asked))
        twice = {u for u in users if asked.count(u) > 1}
    results: list[dict[str, Any]] = []
    for user in users:
        creds = [{"mechanism": m.type, "iterations": c.iterations}
                 for m in MECHANISMS if (c := image.scram.get(user, m.name)) is not None]
        error: Mapping[str, Any]
        if user in twice:
            error = item_error(ErrorCode.DUPLICATE_RESOURCE, "Cannot describe SCRAM credentials for the same "
                                                             f"user twice in a single request: {user}")
            creds = []
        elif not creds:
            error = item_error(ErrorCode.RESOURCE_NOT_FOUND,
                               f"Attempt to describe a user credential that does not exist: {user}")
        else:
            error = {**item_error(ErrorCode.NONE, ""), "message": None}
        results.append({"user": user, **error, "credentials": creds})
    return {"results": results}


__all__ = ["alter_user_scram_credentials", "describe_user_scram_credentials"]
