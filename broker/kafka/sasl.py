"""SASL on the Kafka listener: PLAIN and SCRAM-SHA-256 (RFC 5802 / 7677), as pure state machines.

A connection on a SASL listener starts unauthenticated: only ApiVersions, SaslHandshake (v1) and
SaslAuthenticate are served; anything else gets ``ILLEGAL_SASL_STATE`` and the connection is
closed, so no data ever reaches an unauthenticated peer. A failed authentication answers
``SASL_AUTHENTICATION_FAILED`` and the connection is closed, as Kafka does.

Users come from ``sasl_users_file`` (JSON ``{"users": {"name": "password", ...}}``); SCRAM
credentials (salt, stored key, server key) are derived once at load, so the password itself is
never compared on the wire path.
"""
from __future__ import annotations

import base64
import enum
import hashlib
import hmac
import json
import os
import secrets
from dataclasses import dataclass

from metadata_quorum.kernel.errors import ErrorCode, FerryError

MECHANISMS = ("PLAIN", "SCRAM-SHA-256")
SCRAM_ITERATIONS = 4096


@dataclass(frozen=True)
class ScramCredential:
    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes

    @classmethod
    def derive(cls, password: str, salt: bytes, iterations: int = SCRAM_ITERATIONS) -> "ScramCredential":
        salted = hashlib.pbkdf2_hmac("sha256", password.encode("utf-8"), salt, iterations)
        client_key = hmac.digest(salted, b"Client Key", "sha256")
        return cls(salt, iterations, hashlib.sha256(client_key).digest(), hmac.digest(salted, b"Server Key", "sha256"))


@dataclass(frozen=True)
class Users:
    passwords: dict[str, str]
    scram: dict[str, ScramCredential]

    @classmethod
    def from_passwords(cls, passwords: dict[str, str]) -> "Users":
        return cls(dict(passwords), {u: ScramCredential.derive(p, secrets.token_bytes(16))
                                     for u, p in passwords.items()})

    @classmethod
    def load(cls, path: str) -> "Users":
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, ValueError) as exc:
            raise FerryError(ErrorCode.INVALID_CONFIG, f"sasl_users_file {path}: {exc}") from None
        users = data.get("users") if isinstance(data, dict) else None
        if not isinstance(users, dict) or not users or not all(
                isinstance(k, str) and k and isinstance(v, str) and v for k, v in users.items()):
            raise FerryError(ErrorCode.INVALID_CONFIG, f'sasl_users_file {path} must be {{"users": {{"name": '
                             '"password", ...}} with at least one user')
        return cls.from_passwords(users)


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

    def __init__(self, users: Users, enabled_mechanisms: tuple[str, ...] = MECHANISMS) -> None:
        self.users = users
        self.enabled = enabled_mechanisms
        self.state = State.START
        self.mechanism: str | None = None
        self.principal: str | None = None
        self._scram_user: str | None = None
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
        if self.state is State.HANDSHAKEN and self.mechanism == "SCRAM-SHA-256":
            return self._scram_first(auth_bytes)
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
        expected = self.users.passwords.get(user)
        if expected is None or not hmac.compare_digest(expected.encode(), password.encode()) or \
                (authz and authz != user):
            return self._bad_credentials()
        self.principal, self.state = user, State.AUTHENTICATED
        return Step(ErrorCode.NONE)

    def _scram_first(self, auth_bytes: bytes) -> Step:
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
        cred = self.users.scram.get(user)
        if cred is None:
            return self._bad_credentials()
        self._scram_user = user
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
        assert self._scram_user is not None
        cred = self.users.scram[self._scram_user]
        if attrs.get("r") != self._nonce or binding != self._gs2_header or len(proof) != 32:
            return self._bad_credentials()
        auth_message = f"{self._first_bare},{self._server_first},{without_proof}".encode()
        signature = hmac.digest(cred.stored_key, auth_message, "sha256")
        client_key = bytes(a ^ b for a, b in zip(proof, signature))
        if not hmac.compare_digest(hashlib.sha256(client_key).digest(), cred.stored_key):
            return self._bad_credentials()
        server_signature = hmac.digest(cred.server_key, auth_message, "sha256")
        self.principal, self.state = self._scram_user, State.AUTHENTICATED
        return Step(ErrorCode.NONE, f"v={base64.b64encode(server_signature).decode()}".encode())
