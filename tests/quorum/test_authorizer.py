"""The authorizer's decisions, as Kafka's StandardAuthorizer takes them."""
from __future__ import annotations

from metadata_quorum.acls import (AclBinding, AclOperation, AclPermissionType, AclsImage, PatternType,
                                  ResourceType)
from metadata_quorum.authorizer import AuthorizerSettings, authorize, authorized_operations
from metadata_quorum.pmap import PMap

A = AclOperation
TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
ON = AuthorizerSettings(enabled=True)


def acl(name: str, op: AclOperation, allow: bool = True, principal: str = "User:alice", host: str = "*",
        pattern: PatternType = PatternType.LITERAL, rtype: ResourceType = TOPIC) -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, host, op,
                      AclPermissionType.ALLOW if allow else AclPermissionType.DENY)


def acls(*bindings: AclBinding) -> AclsImage:
    return AclsImage(PMap({i: b for i, b in enumerate(bindings)}))


def may(image: AclsImage, op: AclOperation, name: str = "t", principal: str = "User:alice", host: str = "127.0.0.1",
        settings: AuthorizerSettings = ON, rtype: ResourceType = TOPIC) -> bool:
    return authorize(image, settings, principal, host, op, rtype, name)


def test_off_allows_everything_and_on_denies_without_acls_unless_allow_everyone() -> None:
    deny_all = acls(acl("*", A.ALL, allow=False, principal="User:*"))
    assert may(deny_all, A.WRITE, settings=AuthorizerSettings())
    assert not may(acls(), A.READ)
    assert may(acls(), A.READ, settings=AuthorizerSettings(True, allow_everyone_if_no_acl_found=True))


def test_allow_everyone_applies_only_where_no_acl_covers_the_resource() -> None:
    everyone = AuthorizerSettings(True, allow_everyone_if_no_acl_found=True)
    image = acls(acl("t", A.READ, principal="User:bob"))
    assert not may(image, A.READ, settings=everyone)  # an ACL covers t, none applies to alice
    assert may(image, A.READ, name="u", settings=everyone)


def test_deny_beats_allow_and_wildcards_match() -> None:
    image = acls(acl("t", A.ALL), acl("*", A.WRITE, allow=False, principal="User:*"))
    assert may(image, A.READ) and not may(image, A.WRITE)
    assert not may(image, A.WRITE, name="anything", principal="User:bob")


def test_implied_describe_by_allow_only() -> None:
    for op in (A.READ, A.WRITE, A.DELETE, A.ALTER):
        assert may(acls(acl("t", op)), A.DESCRIBE)
    assert not may(acls(acl("t", A.CREATE)), A.DESCRIBE)
    assert may(acls(acl("t", A.ALTER_CONFIGS)), A.DESCRIBE_CONFIGS)
    assert not may(acls(acl("t", A.DESCRIBE_CONFIGS)), A.ALTER_CONFIGS)
    # a DENY of READ denies READ only, not the DESCRIBE an ALLOW would imply
    image = acls(acl("t", A.DESCRIBE), acl("t", A.READ, allow=False))
    assert may(image, A.DESCRIBE) and not may(image, A.READ)


def test_prefixed_literal_and_host() -> None:
    image = acls(acl("orders-", A.READ, pattern=PatternType.PREFIXED), acl("x", A.READ, host="10.0.0.1"))
    assert may(image, A.READ, name="orders-eu") and not may(image, A.READ, name="order")
    assert not may(image, A.READ, name="x") and may(image, A.READ, name="x", host="10.0.0.1")
    assert not may(acls(acl("t", A.READ, rtype=GROUP)), A.READ)  # another resource type


def test_super_users_may_do_everything() -> None:
    image = acls(acl("*", A.ALL, allow=False, principal="User:*"))
    assert may(image, A.WRITE, principal="User:admin", settings=AuthorizerSettings(True, frozenset({"User:admin"})))


def test_authorized_operations_are_the_decisions() -> None:
    image = acls(acl("t", A.READ), acl("kafka-cluster", A.DESCRIBE, rtype=CLUSTER))
    assert authorized_operations(image, ON, "User:alice", "h", TOPIC, "t") == {int(A.READ), int(A.DESCRIBE)}
    assert authorized_operations(image, ON, "User:alice", "h", CLUSTER, "kafka-cluster") == {int(A.DESCRIBE)}
    assert len(authorized_operations(image, AuthorizerSettings(), "User:x", "h", GROUP, "g")) == 3
