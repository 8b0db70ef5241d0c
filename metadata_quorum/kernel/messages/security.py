"""Messages of ACLs and SCRAM credentials (metadata_quorum/ops/acls.py, ops/scram.py).

Bindings and filters travel as :meth:`metadata_quorum.acls.AclBinding.to_json` writes them: enum
members by name (``"TOPIC"``, ``"LITERAL"``, ``"ALLOW"``…), as Kafka's admin client names them.
Credentials travel base64-encoded; the controller never sees a password, only the salted form.
"""
# No ``from __future__ import annotations`` here: the TypedDicts must see ``NotRequired`` at class
# creation, or their __required_keys__ / __optional_keys__ are wrong at run time.

from typing import NotRequired, TypedDict


class AclBindingMessage(TypedDict):
    resource_type: str
    resource_name: str
    pattern_type: str
    principal: str
    host: str
    operation: str
    permission_type: str


class AclFilterMessage(TypedDict):
    """A filter: ``None`` in a name, principal or host matches anything (Kafka's AclBindingFilter)."""

    resource_type: str
    resource_name: str | None
    pattern_type: str
    principal: str | None
    host: str | None
    operation: str
    permission_type: str


class AclResult(TypedDict):
    """One creation's or filter's outcome: ``"NONE"``, or an error's name with its code and message."""

    error: str
    code: NotRequired[int]
    message: NotRequired[str]


class CreateAclsRequest(TypedDict):
    creations: list[AclBindingMessage]


class CreateAclsReply(TypedDict):
    results: list[AclResult]  # in creation order


class DeleteAclsRequest(TypedDict):
    filters: list[AclFilterMessage]


class DeleteAclsResult(AclResult):
    matching_acls: NotRequired[list[AclBindingMessage]]  # absent on an error


class DeleteAclsReply(TypedDict):
    results: list[DeleteAclsResult]  # in filter order


class DescribeAclsRequest(TypedDict):
    filter: AclFilterMessage


class DescribeAclsReply(TypedDict):
    acls: list[AclBindingMessage]


class ScramDeletion(TypedDict):
    name: str
    mechanism: int  # 1 SCRAM-SHA-256, 2 SCRAM-SHA-512 (Kafka's ScramMechanism)


class ScramUpsertion(ScramDeletion):
    iterations: int
    salt: str  # base64
    salted_password: str  # base64


class AlterUserScramCredentialsRequest(TypedDict, total=False):
    deletions: list[ScramDeletion]
    upsertions: list[ScramUpsertion]


class UserResult(TypedDict):
    user: str
    error: str
    code: int
    message: str | None


class AlterUserScramCredentialsReply(TypedDict):
    results: list[UserResult]  # one per user, in request order


class DescribeUserScramCredentialsRequest(TypedDict):
    users: list[str] | None  # None or empty: every user with a credential


class CredentialInfo(TypedDict):
    mechanism: int
    iterations: int


class UserCredentials(UserResult):
    credentials: list[CredentialInfo]


class DescribeUserScramCredentialsReply(TypedDict):
    results: list[UserCredentials]
