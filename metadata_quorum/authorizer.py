"""The authorizer: Kafka's StandardAuthorizer as a pure function of the image's ACLs.

A decision is taken for a principal ("User:alice"; "User:ANONYMOUS" without authentication),
the client's host ("127.0.0.1"), an operation and a resource (type and name), as
StandardAuthorizerData takes it:

- a super user (``super.users``) may do everything;
- the ACLs whose pattern covers the resource are those of its type that are LITERAL with its
  name or with the wildcard ``*``, or PREFIXED with a prefix of its name;
- of those, an ACL applies when its principal is the principal or ``User:*``, its host the host
  or ``*``, and its operation the operation or ALL; an ALLOW of READ, WRITE, DELETE or ALTER also
  allows DESCRIBE, and an ALLOW of ALTER_CONFIGS also DESCRIBE_CONFIGS (a DENY implies nothing);
- any DENY that applies refuses, whatever allows; else any ALLOW that applies allows;
- when no ACL covers the resource at all, ``allow.everyone.if.no.acl.found`` decides; when some
  do but none applies, the answer is no.

With the authorizer off everything is allowed, as a Kafka broker without ``authorizer.class.name``.
"""
from __future__ import annotations

from dataclasses import dataclass

from metadata_quorum.acls import (SUPPORTED_OPERATIONS, WILDCARD_HOST, WILDCARD_PRINCIPAL, AclOperation,
                                  AclPermissionType, AclsImage, ResourceType)

IMPLIES_DESCRIBE = frozenset({AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE,
                              AclOperation.ALTER})
IMPLIES_DESCRIBE_CONFIGS = frozenset({AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS})


@dataclass(frozen=True)
class AuthorizerSettings:
    """Kafka's ``authorizer.class.name`` (on or off), ``super.users`` and
    ``allow.everyone.if.no.acl.found``."""

    enabled: bool = False
    super_users: frozenset[str] = frozenset()
    allow_everyone_if_no_acl_found: bool = False


OFF = AuthorizerSettings()


def _applies(principal: str, host: str, operation: AclOperation, acl_principal: str, acl_host: str,
             acl_operation: AclOperation, allow: bool) -> bool:
    if acl_principal != principal and acl_principal != WILDCARD_PRINCIPAL:
        return False
    if acl_host != WILDCARD_HOST and acl_host != host:
        return False
    if acl_operation is AclOperation.ALL or acl_operation is operation:
        return True
    if not allow:
        return False
    if operation is AclOperation.DESCRIBE:
        return acl_operation in IMPLIES_DESCRIBE
    return operation is AclOperation.DESCRIBE_CONFIGS and acl_operation in IMPLIES_DESCRIBE_CONFIGS


def authorize(acls: AclsImage, settings: AuthorizerSettings, principal: str, host: str, operation: AclOperation,
              resource_type: ResourceType, resource_name: str) -> bool:
    """May ``principal`` from ``host`` perform ``operation`` on the resource?"""
    if not settings.enabled or principal in settings.super_users:
        return True
    covered = allowed = False
    for acl in acls.by_resource_type.get(resource_type, ()):
        if not acl.matches_resource(resource_type, resource_name):
            continue
        covered = True
        allow = acl.permission_type is AclPermissionType.ALLOW
        if _applies(principal, host, operation, acl.principal, acl.host, acl.operation, allow):
            if not allow:
                return False
            allowed = True
    if allowed:
        return True
    return not covered and settings.allow_everyone_if_no_acl_found


def authorized_operations(acls: AclsImage, settings: AuthorizerSettings, principal: str, host: str,
                          resource_type: ResourceType, resource_name: str) -> set[int]:
    """The operations of the resource's type the principal may perform (the codes Metadata,
    DescribeCluster and DescribeGroups report): the same decisions requests are held to."""
    return {int(op) for op in SUPPORTED_OPERATIONS.get(resource_type, ())
            if authorize(acls, settings, principal, host, op, resource_type, resource_name)}
