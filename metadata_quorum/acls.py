"""ACL bindings as Kafka defines them: resource patterns, entries, filters, and their rules.

Kafka's enums keep their wire codes (``ResourceType``, ``PatternType``, ``AclOperation``,
``AclPermissionType``, with UNKNOWN for a code Kafka does not define); records and controller
operations carry their names. ``AclBindingFilter.matches`` is Kafka's ``AclBindingFilter.matches``
(DescribeAcls and DeleteAcls), ``check_new_binding`` the checks a CreateAcls binding passes
(KRaft's AclControlManager.validateNewAcl and the broker's AclApis), so a bad binding is
INVALID_REQUEST with Kafka's message. ``AclsImage`` is the image's part: every binding by id.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Mapping, TypeVar

from metadata_quorum.kernel.errors import ErrorCode, FerryError
from metadata_quorum.kernel.messages.security import AclBindingMessage, AclFilterMessage
from metadata_quorum.pmap import EMPTY_PMAP, PMap
from metadata_quorum.records import AccessControlEntryRecord

WILDCARD_RESOURCE = "*"  # a LITERAL pattern named "*" matches every resource of its type
WILDCARD_PRINCIPAL = "User:*"
WILDCARD_HOST = "*"
CLUSTER_NAME = "kafka-cluster"  # the one name of the CLUSTER resource
ANONYMOUS = "User:ANONYMOUS"  # the principal of a connection that did not authenticate


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14
    TWO_PHASE_COMMIT = 15


class AclPermissionType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


E = TypeVar("E", ResourceType, PatternType, AclOperation, AclPermissionType)


def from_code(kind: type[E], code: int) -> E:
    """The member for a wire code; a code Kafka does not define is UNKNOWN (as Kafka's fromCode)."""
    try:
        return kind(code)
    except ValueError:
        return kind(0)


def from_name(kind: type[E], value: Any, what: str) -> E:
    """The member named ``value`` (a controller operation's JSON); anything else is INVALID_REQUEST."""
    if not isinstance(value, str) or value not in kind.__members__:
        raise FerryError(ErrorCode.INVALID_REQUEST, f"{what} must be one of {', '.join(kind.__members__)}, "
                                                    f"got {value!r}")
    return kind[value]


#: the operations that apply to each resource type (Kafka's AclEntry.supportedOperations)
SUPPORTED_OPERATIONS: dict[ResourceType, frozenset[AclOperation]] = {
    ResourceType.TOPIC: frozenset({AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DESCRIBE,
                                   AclOperation.DELETE, AclOperation.ALTER, AclOperation.DESCRIBE_CONFIGS,
                                   AclOperation.ALTER_CONFIGS}),
    ResourceType.GROUP: frozenset({AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE}),
    ResourceType.CLUSTER: frozenset({AclOperation.CREATE, AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS,
                                     AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER,
                                     AclOperation.DESCRIBE}),
    ResourceType.TRANSACTIONAL_ID: frozenset({AclOperation.DESCRIBE, AclOperation.WRITE,
                                              AclOperation.TWO_PHASE_COMMIT}),
    ResourceType.DELEGATION_TOKEN: frozenset({AclOperation.DESCRIBE}),
    ResourceType.USER: frozenset({AclOperation.CREATE_TOKENS, AclOperation.DESCRIBE_TOKENS}),
}

_FIELDS = ("resource_type", "resource_name", "pattern_type", "principal", "host", "operation", "permission_type")


@dataclass(frozen=True)
class AclBinding:
    """A resource pattern and an access control entry (Kafka's AclBinding)."""

    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission_type: AclPermissionType

    def to_json(self) -> AclBindingMessage:
        return {"resource_type": self.resource_type.name, "resource_name": self.resource_name,
                "pattern_type": self.pattern_type.name, "principal": self.principal, "host": self.host,
                "operation": self.operation.name, "permission_type": self.permission_type.name}

    @classmethod
    def from_json(cls, raw: Any) -> "AclBinding":
        item = _mapping(raw)
        return cls(from_name(ResourceType, item.get("resource_type"), "resource_type"),
                   _text(item, "resource_name"), from_name(PatternType, item.get("pattern_type"), "pattern_type"),
                   _text(item, "principal"), _text(item, "host"),
                   from_name(AclOperation, item.get("operation"), "operation"),
                   from_name(AclPermissionType, item.get("permission_type"), "permission_type"))

    def to_record(self, acl_id: int) -> AccessControlEntryRecord:
        return AccessControlEntryRecord(acl_id=acl_id, **self.to_json())

    @classmethod
    def from_record(cls, record: AccessControlEntryRecord) -> "AclBinding":
        return cls.from_json({name: getattr(record, name) for name in _FIELDS})

    def matches_resource(self, resource_type: ResourceType, name: str) -> bool:
        """Does this binding's pattern cover the resource (the authorizer's view)?"""
        if resource_type is not self.resource_type:
            return False
        if self.pattern_type is PatternType.LITERAL:
            return self.resource_name == name or self.resource_name == WILDCARD_RESOURCE
        return self.pattern_type is PatternType.PREFIXED and name.startswith(self.resource_name)


@dataclass(frozen=True)
class AclBindingFilter:
    """What DescribeAcls and DeleteAcls select (Kafka's AclBindingFilter); None matches anything."""

    resource_type: ResourceType
    resource_name: str | None
    pattern_type: PatternType
    principal: str | None
    host: str | None
    operation: AclOperation
    permission_type: AclPermissionType

    def to_json(self) -> AclFilterMessage:
        return {"resource_type": self.resource_type.name, "resource_name": self.resource_name,
                "pattern_type": self.pattern_type.name, "principal": self.principal, "host": self.host,
                "operation": self.operation.name, "permission_type": self.permission_type.name}

    @classmethod
    def from_json(cls, raw: Any) -> "AclBindingFilter":
        item = _mapping(raw)
        return cls(from_name(ResourceType, item.get("resource_type"), "resource_type"),
                   _text(item, "resource_name", nullable=True),
                   from_name(PatternType, item.get("pattern_type"), "pattern_type"),
                   _text(item, "principal", nullable=True), _text(item, "host", nullable=True),
                   from_name(AclOperation, item.get("operation"), "operation"),
                   from_name(AclPermissionType, item.get("permission_type"), "permission_type"))

    def check(self) -> None:
        """A filter with an UNKNOWN element selects nothing Kafka can name: INVALID_REQUEST."""
        if self.resource_type is ResourceType.UNKNOWN or self.pattern_type is PatternType.UNKNOWN:
            raise FerryError(ErrorCode.INVALID_REQUEST, "Unknown patternFilter.")
        if self.operation is AclOperation.UNKNOWN or self.permission_type is AclPermissionType.UNKNOWN:
            raise FerryError(ErrorCode.INVALID_REQUEST, "Unknown entryFilter.")

    def matches(self, b: AclBinding) -> bool:
        """Kafka's ResourcePatternFilter.matches and AccessControlEntryFilter.matches: MATCH selects
        the bindings that would apply to the named resource (the literal name, the literal
        wildcard, every prefix of it); ANY and a concrete type select by equal name."""
        if self.resource_type is not ResourceType.ANY and self.resource_type is not b.resource_type:
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH) and self.pattern_type is not b.pattern_type:
            return False
        if self.resource_name is not None:
            if self.pattern_type is PatternType.ANY or self.pattern_type is b.pattern_type:
                if self.resource_name != b.resource_name:
                    return False
            elif b.pattern_type is PatternType.LITERAL:
                if self.resource_name != b.resource_name and b.resource_name != WILDCARD_RESOURCE:
                    return False
            elif not self.resource_name.startswith(b.resource_name):  # PREFIXED
                return False
        if self.principal is not None and self.principal != b.principal:
            return False
        if self.host is not None and self.host != b.host:
            return False
        if self.operation is not AclOperation.ANY and self.operation is not b.operation:
            return False
        return self.permission_type is AclPermissionType.ANY or self.permission_type is b.permission_type


def check_new_binding(b: AclBinding) -> None:
    """What Kafka refuses in a CreateAcls binding, each INVALID_REQUEST with its message."""
    if b.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
        raise FerryError(ErrorCode.INVALID_REQUEST, f"Invalid resourceType {b.resource_type.name}")
    if b.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise FerryError(ErrorCode.INVALID_REQUEST, f"Invalid patternType {b.pattern_type.name}")
    if b.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
        raise FerryError(ErrorCode.INVALID_REQUEST, f"Invalid operation {b.operation.name}")
    if b.permission_type not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
        raise FerryError(ErrorCode.INVALID_REQUEST, f"Invalid permissionType {b.permission_type.name}")
    if b.resource_type is ResourceType.CLUSTER and b.resource_name != CLUSTER_NAME:
        raise FerryError(ErrorCode.INVALID_REQUEST, f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}")
    if not b.resource_name:
        raise FerryError(ErrorCode.INVALID_REQUEST, "Resource name should not be empty")
    if ":" not in b.principal:
        raise FerryError(ErrorCode.INVALID_REQUEST, f"Could not parse principal from `{b.principal}` (no colon is "
                                                    "present separating the principal type from the principal name)")


@dataclass(frozen=True)
class AclsImage:
    """Every ACL binding, by id (the offset of the record that created it)."""

    by_id: PMap[int, AclBinding] = field(default_factory=lambda: EMPTY_PMAP)

    @cached_property
    def by_resource_type(self) -> Mapping[ResourceType, tuple[AclBinding, ...]]:
        """The bindings of each resource type: what the authorizer looks through (built once per image)."""
        out: dict[ResourceType, list[AclBinding]] = {}
        for acl_id in sorted(self.by_id):
            b = self.by_id[acl_id]
            out.setdefault(b.resource_type, []).append(b)
        return {k: tuple(v) for k, v in out.items()}

    def matching(self, flt: AclBindingFilter) -> list[tuple[int, AclBinding]]:
        return [(i, self.by_id[i]) for i in sorted(self.by_id) if flt.matches(self.by_id[i])]


def _mapping(raw: Any) -> Mapping[str, Any]:
    if not isinstance(raw, Mapping):
        raise FerryError(ErrorCode.INVALID_REQUEST, f"an ACL binding or filter must be a JSON object, got {raw!r}")
    return raw


def _text(item: Mapping[str, Any], name: str, nullable: bool = False) -> Any:
    value = item.get(name)
    if value is None and nullable:
        return None
    if not isinstance(value, str):
        raise FerryError(ErrorCode.INVALID_REQUEST, f"{name} must be a string{' or null' if nullable else ''}, "
                                                    f"got {value!r}")
    return value
