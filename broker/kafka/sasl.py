"""SASL on the Kafka listener: PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802 / 7677), as pure
state machines.

A connection on a SASL listener starts unauthenticated: only ApiVersions, SaslHandshake (v1) and
SaslAuthenticate are served; anything else gets ``ILLEGAL_SASL_STATE`` and the connection is
closed, so no data ever reaches an unauthenticated peer. A failed authentication answers
``SASL_AUTHENTICATION_FAILED`` and the connection is closed, as Kafka does.

Credentials come from two places, as in Kafka: the users file (``sasl_users_file``, JSON
``{"users": {"name": "password", ...}}``, the broker's static users, like a JAAS file) serves PLAIN
and SCRAM; the metadata log's SCRAM credentials (AlterUserScramCredentials, ``kafka-configs
--entity-type users``) serve SCRAM, and where both know a user and mechanism the metadata log's
credential wins. The file's SCRAM credentials (salt, stored key, server key) are derived once at
load, so a password is never compared on the wire path; the metadata log never holds one.
"""
from __future__ import annotations

import base64
import enum
import hashlib
import hmac
import os
import secrets
from dataclasses import dataclass, field
from typing import Annotated, Callable, Protocol

from metadata_quorum.image import MetadataImage
from metadata_quorum.kernel.errors import ErrorCode
from metadata_quorum.kernel.scram import BY_NAME, MECHANISMS as SCRAM_MECHANISMS, ScramCredential, ScramMechanism
from metadata_quorum.kernel.strict_config import SECRET, build, invalid, load_json

MECHANISMS = ("PLAIN", *(m.name for m in SCRAM_MECHANISMS))
SCRAM_ITERATIONS = 4096  # of the file users' credentials


class Credentials(Protocol):
    """What a login is checked against."""

    def password(self, user: str) -> str | None:
        """The PLAIN password of ``user`` (None: no such user)."""
        ...

    def scram(self, user: str, mechanism: ScramMechanism) -> ScramCredential | None:
        """The SCRAM credential of ``user`` for ``mechanism`` (None: none)."""
        ...


@dataclass(frozen=True)
class UsersFile:
    """The users file's JSON, checked strictly (metadata_quorum/kernel/strict_config.py)."""

    users: dict[str, Annotated[str, SECRET]] = field(repr=False)


@dataclass(frozen=True)
class Users:
    """The users file: passwords for PLAIN and SCRAM credentials derived from them."""

    passwords: dict[str, str] = field(repr=False)
    scram_credentials: dict[tuple[str, str], ScramCredential] = field(repr=False)

    @classmethod
    def from_passwords(cls, passwords: dict[str, str]) -> "Users":
        return cls(dict(passwords), {
            (u, m.name): ScramCredential.derive(m, p, secrets.token_bytes(16), SCRAM_ITERATIONS)
            for u, p in passwords.items() for m in SCRAM_MECHANISMS})

    @classmethod
    def load(cls, path: str) -> "Users":
        """Strict: an unknown key, a value that is not a non-empty string or a file without users is
        INVALID_CONFIG naming the key's path (``users.alice``)."""
        what = f"sasl_users_file {path}"
        parsed = build(UsersFile, load_json(path, "sasl_users_file"), what)
        if not parsed.users:
            raise invalid(f"{what}: 'users' must name at least one user")
        if "" in parsed.users:
            raise invalid(f"{what}: 'users' has an empty user name")
        return cls.from_passwords(parsed.users)

    def password(self, user: str) -> str | None:
        return self.passwords.get(user)

    def scram(self, user: str, mechanism: ScramMechanism) -> ScramCredential | None:
        return self.scram_credentials.get((user, mechanism.name))


class ScramStore:
    """The broker's credentials: the users file's, with the metadata log's SCRAM credentials added
    and taking precedence (``image`` is the broker's current metadata image)."""

    def __init__(self, file_users: Users | None, image: Callable[[], MetadataImage | None]) -> None:
        self.file_users = file_users
        self.image = image

    def password(self, user: str) -> str | None:
        return self.file_users.password(user) if self.file_users is not None else None

    def scram(self, user: str, mechanism: ScramMechanism) -> ScramCredential | None:
        image = self.image()
        record = image.scram.get(user, mechanism.name) if image is not None else None
        if record is not None:
            return ScramCredential(base64.b64decode(record.salt), record.iterations,
                                   base64.b64decode(record.stored_key), base64.b64decode(record.server_key))
        return self.file_users.scram(user, mechanism) if self.file_users is not None else None


class State(enum.Enum):
    START = "start"  # nothing but ApiVersions and SaslHandshake
    HANDSHAKEN = "handshaken"  # a mechanism was chosen; SaslAuthenticate next
    SCRAM_FIRST_SENT = "scram_first_sent"  # server-first-message sent; client-final next
    AUTHENTICATED = "authenticated"
    FAILED = "failed"


@dataclass(frozen=True)
class Step:
    """The answer to one SASL request: error (NONE on success), bytes for the client, a message,
    and whether the connection must be closed after the answer."""

    error: ErrorCode
    auth_bytes: bytes = b""
    message: str | None = None
    close: bool = False


def _attrs(message: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in message.split(","):
        if len(part) < 2 or part[1] != "=":
            raise ValueError(f"malformed SCRAM attribute {part!r}")
        out[part[0]] = part[2:]
    return out


class SaslSession:
    """One connection's authentication. Pure: the listener feeds requests and sends the steps."""

    def __init__(self, users: Credentials, enabled_mechanisms: tuple[str, ...] = MECHANISMS) -> None:
        self.users = users
        self.enabled = enabled_mechanisms
        self.state = State.START
        self.mechanism: str | None = None
        self.principal: str | None = None
        self._scram_user: str | None = None
        self._scram: ScramMechanism | None = None
        self._credential: ScramCredential | None = None
        self._nonce = ""
        self._first_bare = ""
        self._server_first = ""
        self._gs2_header = ""

    @property
    def authenticated(self) -> bool:
        return self.state is State.AUTHENTICATED

    def allows(self, api_name: str) -> bool:
        """May a request of this API be served now?"""
        if self.authenticated:
            return api_name != "SaslHandshake"
        return api_name in ("ApiVersions", "SaslHandshake", "SaslAuthenticate")

    def handshake(self, mechanism: str) -> Step:
        if self.state is not State.START:
            return self._fail(ErrorCode.ILLEGAL_SASL_STATE, "SaslHandshake after the handshake")
        if mechanism not in self.enabled:
            return Step(ErrorCode.UNSUPPORTED_SASL_MECHANISM, message=f"mechanism {mechanism!r}; this listener "
                        f"supports {', '.join(self.enabled)}", close=True)
        self.mechanism = mechanism
        self.state = State.HANDSHAKEN
        return Step(ErrorCode.NONE)

    def authenticate(self, auth_bytes: bytes) -> Step:
        if self.state is State.HANDSHAKEN and self.mechanism == "PLAIN":
            return self._plain(auth_bytes)
        if self.state is State.HANDSHAKEN and self.mechanism in BY_NAME:
            return self._scram_first(BY_NAME[self.mechanism], auth_bytes)
        if self.state is State.SCRAM_FIRST_SENT:
            return self._scram_final(auth_bytes)
        return self._fail(ErrorCode.ILLEGAL_SASL_STATE, f"SaslAuthenticate in state {self.state.value}")

    def _fail(self, error: ErrorCode, message: str) -> Step:
        self.state = State.FAILED
        return Step(error, message=message, close=True)

    def _bad_credentials(self) -> Step:
        return self._fail(ErrorCode.SASL_AUTHENTICATION_FAILED,
                          f"Authentication failed: Invalid username or password (mechanism {self.mechanism})")

    def _plain(self, auth_bytes: bytes) -> Step:
        parts = auth_bytes.split(b"\x00")
        if len(parts) != 3:
            return self._fail(ErrorCode.SASL_AUTHENTICATION_FAILED, "PLAIN expects authzid\\0user\\0password")
        authzid, user_raw, password_raw = parts
        try:
            user, password, authz = user_raw.decode(), password_raw.decode(), authzid.decode()
        except UnicodeDecodeError:
            return self._bad_credentials()
        expected = self.users.password(user)
        if expected is None or not hmac.compare_digest(expected.encode(), password.encode()) or \
                (authz and authz != user):
            return self._bad_credentials()
        self.principal, self.state = user, State.AUTHENTICATED
        return Step(ErrorCode.NONE)

    def _scram_first(self, mechanism: ScramMechanism, auth_bytes: bytes) -> Step:
        try:
            text = auth_bytes.decode("utf-8")
            gs2_flag, authzid, bare = text.split(",", 2)
            if gs2_flag not in ("n", "y"):
                raise ValueError("channel binding is not supported")
            attrs = _attrs(bare)
            user = attrs["n"].replace("=2C", ",").replace("=3D", "=")
            client_nonce = attrs["r"]
        except (UnicodeDecodeError, ValueError, KeyError) as exc:
            return self._fail(ErrorCode.SASL_AUTHENTICATION_FAILED, f"malformed SCRAM client-first-message: {exc}")
        cred = self.users.scram(user, mechanism)
        if cred is None:
            return self._bad_credentials()
        # the credential of this login is fixed here: a change in the metadata log mid-exchange
        # applies to the next login
        self._scram_user, self._scram, self._credential = user, mechanism, cred
        self._gs2_header = f"{gs2_flag},{authzid},"
        self._nonce = client_nonce + base64.b64encode(os.urandom(18)).decode()
        self._first_bare = bare
        self._server_first = f"r={self._nonce},s={base64.b64encode(cred.salt).decode()},i={cred.iterations}"
        self.state = State.SCRAM_FIRST_SENT
        return Step(ErrorCode.NONE, self._server_first.encode())

    def _scram_final(self, auth_bytes: bytes) -> Step:
        try:
            text = auth_bytes.decode("utf-8")
            without_proof, _, proof_part = text.rpartition(",p=")
            attrs = _attrs(without_proof)
            proof = base64.b64decode(proof_part, validate=True)
            binding = base64.b64decode(attrs["c"], validate=True).decode()
        except (UnicodeDecodeError, ValueError, KeyError) as exc:
            return self._fail(ErrorCode.SASL_AUTHENTICATION_FAILED, f"malformed SCRAM client-final-message: {exc}")
        mechanism, cred = self._scram, self._credential
        assert self._scram_user is not None and mechanism is not None and cred is not None
        if attrs.get("r") != self._nonce or binding != self._gs2_header or len(proof) != mechanism.digest_bytes:
            return self._bad_credentials()
        auth_message = f"{self._first_bare},{self._server_first},{without_proof}".encode()
        signature = hmac.digest(cred.stored_key, auth_message, mechanism.hash_name)
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(hashlib.new(mechanism.hash_name, client_key).digest(), cred.stored_key):
            return self._bad_credentials()
        server_signature = hmac.digest(cred.server_key, auth_message, mechanism.hash_name)
        self.principal, self.state = self._scram_user, State.AUTHENTICATED
        return Step(ErrorCode.NONE, f"v={base64.b64encode(server_signature).decode()}".encode())
