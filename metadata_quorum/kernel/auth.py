"""Who may call a controller or a broker: bearer tokens, their principals and what each may do.

Two tokens, distinct by rule, so that the credentials handed to operators and client programs
(the admin token) are not those that let a process act as a broker (the inter-node token):

- ``internal`` — brokers (and controllers) use it among themselves. It may do everything,
  including the broker-only writes below.
- ``admin`` — operators, tools and client programs. It may do everything except act as a broker:
  registering, heartbeating, changing a partition's ISR or a stream's state are refused, since a
  forged heartbeat or stream close would break the single-owner promise.

A missing or unknown token is ``SASL_AUTHENTICATION_FAILED`` (401); a known token asking for what
its principal may not do is ``CLUSTER_AUTHORIZATION_FAILED`` (403). Either way the request is
refused before its handler runs, so nothing changes. Comparisons are constant-time, and no message
ever repeats a presented or configured token.

Raft traffic between controllers is protected separately, by pysyncobj's ``password`` (every
message encrypted and authenticated with Fernet: AES-128-CBC and HMAC-SHA256, a key derived from
the password with PBKDF2).

Everything here is pure; ``auth_middleware.py`` puts it in front of the aiohttp handlers.
"""
from __future__ import annotations

import enum
import hmac
import secrets
from dataclasses import dataclass, field

from metadata_quorum.kernel import messages as ops
from metadata_quorum.kernel.errors import ErrorCode, FerryError
from metadata_quorum.kernel.strict_config import Secret, invalid

# A token shorter than this is guessable; `generate_secrets` makes 43-character ones.
MIN_SECRET_CHARS = 16

# Controller writes only a broker may send (register, heartbeat, ISR changes, stream state).
BROKER_ONLY_WRITES = frozenset(op.name for op in (
    ops.REGISTER_BROKER, ops.BROKER_HEARTBEAT, ops.ALTER_PARTITION, ops.CREATE_STREAM, ops.OPEN_STREAM,
    ops.CLOSE_STREAM, ops.COMMIT_OBJECT, ops.TRIM_STREAM, ops.STREAM_RECOVERED, ops.REPORT_BROKER_DEAD, ops.TICK))


class Principal(enum.Enum):
    ADMIN = "admin"
    INTERNAL = "internal"


ANY = frozenset({Principal.ADMIN, Principal.INTERNAL})
INTERNAL_ONLY = frozenset({Principal.INTERNAL})


@dataclass(frozen=True)
class NodeSecurity:
    """A broker's ``security`` setting: the tokens it accepts, and ``internal_token`` to send."""

    admin_token: Secret = field(repr=False)
    internal_token: Secret = field(repr=False)

    def check(self, what: str) -> None:
        check_secrets(what, {"admin_token": self.admin_token, "internal_token": self.internal_token})


@dataclass(frozen=True)
class ControllerSecurity:
    """A controller's ``security`` setting: the HTTP tokens, and the Raft password of the quorum."""

    admin_token: Secret = field(repr=False)
    internal_token: Secret = field(repr=False)
    raft_password: Secret = field(repr=False)

    def check(self, what: str) -> None:
        check_secrets(what, {"admin_token": self.admin_token, "internal_token": self.internal_token,
                             "raft_password": self.raft_password})


def check_secrets(what: str, named: dict[str, str]) -> None:
    """Each secret long enough, and no two alike (INVALID_CONFIG naming the keys, never the values)."""
    for name, value in named.items():
        if len(value) < MIN_SECRET_CHARS:
            raise invalid(f"{what} setting 'security.{name}' must be at least {MIN_SECRET_CHARS} characters")
    names = sorted(named)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            if hmac.compare_digest(named[a].encode(), named[b].encode()):
                raise invalid(f"{what} settings 'security.{a}' and 'security.{b}' must differ")


def generate_secrets() -> ControllerSecurity:
    """Fresh random secrets for a cluster (``ferry cluster up --secure``)."""
    return ControllerSecurity(admin_token=secrets.token_urlsafe(32), internal_token=secrets.token_urlsafe(32),
                              raft_password=secrets.token_urlsafe(32))


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, else None."""
    if authorization is None:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return None
    return token


def authenticate(authorization: str | None, admin_token: str, internal_token: str) -> Principal:
    """The principal whose token the header carries; SASL_AUTHENTICATION_FAILED otherwise."""
    token = bearer_token(authorization)
    if token is None:
        raise FerryError(ErrorCode.SASL_AUTHENTICATION_FAILED,
                         "this API requires 'Authorization: Bearer <token>' (an admin or inter-node token)")
    presented = token.encode()
    # Both comparisons always run: the time taken says nothing about which token was close.
    is_internal = hmac.compare_digest(presented, internal_token.encode())
    is_admin = hmac.compare_digest(presented, admin_token.encode())
    if is_internal:
        return Principal.INTERNAL
    if is_admin:
        return Principal.ADMIN
    raise FerryError(ErrorCode.SASL_AUTHENTICATION_FAILED, "the bearer token is not valid for this cluster")


def authorize(principal: Principal, allowed: frozenset[Principal], action: str) -> None:
    """CLUSTER_AUTHORIZATION_FAILED unless ``principal`` may do ``action``."""
    if principal not in allowed:
        raise FerryError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                         f"the {principal.value} token may not {action}; it needs the inter-node token")


def controller_route_principals(path: str, op: str | None) -> frozenset[Principal] | None:
    """Who may call a controller route (None: anyone, unauthenticated)."""
    if path == "/v1/health":
        return None
    if path == "/v1/write":  # the batch endpoint: brokers' stream and election batches
        return INTERNAL_ONLY
    if path.startswith("/v1/write/") and op in BROKER_ONLY_WRITES:
        return INTERNAL_ONLY
    return ANY


def broker_route_principals(path: str) -> frozenset[Principal] | None:
    """Who may call a broker route (None: anyone, unauthenticated)."""
    if path == "/v1/health":
        return None
    if path == "/v1/object-tail":  # bytes another broker's reads will trust (CRC-checked): brokers only
        return INTERNAL_ONLY
    return ANY
