"""SCRAM credentials (RFC 5802, RFC 7677): the mechanisms, their limits and the key derivation.

Shared by the controller (AlterUserScramCredentials stores what a client's salted password gives,
never the password) and the brokers (a SCRAM login checks a proof against the stored key). A
credential is Kafka's ScramCredential: salt, stored key, server key and iteration count. Pure.
"""
from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass


@dataclass(frozen=True)
class ScramMechanism:
    """One SCRAM mechanism as Kafka numbers it (ScramMechanism.type) and bounds its iterations."""

    name: str
    type: int  # the wire's int8 in the SCRAM credential APIs
    hash_name: str  # hashlib's name
    min_iterations: int = 4096
    max_iterations: int = 16384

    @property
    def digest_bytes(self) -> int:
        return hashlib.new(self.hash_name).digest_size


SCRAM_SHA_256 = ScramMechanism("SCRAM-SHA-256", 1, "sha256")
SCRAM_SHA_512 = ScramMechanism("SCRAM-SHA-512", 2, "sha512")
MECHANISMS: tuple[ScramMechanism, ...] = (SCRAM_SHA_256, SCRAM_SHA_512)
BY_NAME: dict[str, ScramMechanism] = {m.name: m for m in MECHANISMS}
BY_TYPE: dict[int, ScramMechanism] = {m.type: m for m in MECHANISMS}


@dataclass(frozen=True)
class ScramCredential:
    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes

    @classmethod
    def from_salted_password(cls, mechanism: ScramMechanism, salted_password: bytes, salt: bytes,
                             iterations: int) -> "ScramCredential":
        """What a server keeps of a salted password (SaltedPassword = Hi(password, salt, i))."""
        client_key = hmac.digest(salted_password, b"Client Key", mechanism.hash_name)
        return cls(salt, iterations, hashlib.new(mechanism.hash_name, client_key).digest(),
                   hmac.digest(salted_password, b"Server Key", mechanism.hash_name))

    @classmethod
    def derive(cls, mechanism: ScramMechanism, password: str, salt: bytes, iterations: int) -> "ScramCredential":
        salted = hashlib.pbkdf2_hmac(mechanism.hash_name, password.encode("utf-8"), salt, iterations)
        return cls.from_salted_password(mechanism, salted, salt, iterations)


__all__ = ["ScramMechanism", "ScramCredential", "SCRAM_SHA_256", "SCRAM_SHA_512", "MECHANISMS", "BY_NAME",
           "BY_TYPE"]
