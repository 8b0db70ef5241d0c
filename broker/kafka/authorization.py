"""The broker's authorizer: its settings and the ACLs of its current metadata image.

Every Kafka handler asks it the same question — may this request's principal, from this
request's host, perform this operation on this resource — and the authorized-operations lists
(Metadata, DescribeCluster, DescribeGroups) are made of its answers, so what is reported is what
is enforced. The decisions are :func:`metadata_quorum.authorizer.authorize`'s; this only brings
the request's principal and host and the broker's image to it.
"""
from __future__ import annotations

from typing import Callable, Iterable

from metadata_quorum.acls import CLUSTER_NAME, AclOperation, AclsImage, ResourceType
from metadata_quorum.authorizer import OFF, AuthorizerSettings, authorize, authorized_operations
from metadata_quorum.image import MetadataImage

from broker.kafka.wire import Request

TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
TRANSACTIONAL_ID = ResourceType.TRANSACTIONAL_ID
_EMPTY = AclsImage()


def client_address(req: Request) -> str:
    """The host ACLs name ("127.0.0.1"): the request's client host without Kafka's leading slash."""
    return req.client_host.removeprefix("/")


class Authorization:
    def __init__(self, settings: AuthorizerSettings = OFF,
                 image: Callable[[], MetadataImage | None] = lambda: None) -> None:
        self.settings = settings
        self._image = image

    @property
    def enabled(self) -> bool:
        return self.settings.enabled

    def acls(self) -> AclsImage:
        """The ACLs of the broker's current image."""
        image = self._image()
        return image.acls if image is not None else _EMPTY

    def allows(self, req: Request, operation: AclOperation, resource_type: ResourceType, name: str) -> bool:
        if not self.settings.enabled:
            return True
        return authorize(self.acls(), self.settings, req.principal, client_address(req), operation, resource_type,
                         name)

    def allows_cluster(self, req: Request, operation: AclOperation) -> bool:
        return self.allows(req, operation, CLUSTER, CLUSTER_NAME)

    def denied(self, req: Request, operation: AclOperation, resource_type: ResourceType,
               names: Iterable[str | None]) -> frozenset[str]:
        """The names of ``names`` the request may not perform ``operation`` on (none with the authorizer off)."""
        if not self.settings.enabled:
            return frozenset()
        return frozenset(n for n in set(names) if n is not None and not self.allows(req, operation, resource_type, n))

    def operations(self, req: Request, resource_type: ResourceType, name: str) -> set[int]:
        """The operations reported as authorized on the resource (every supported one when off)."""
        return authorized_operations(self.acls(), self.settings, req.principal, client_address(req), resource_type,
                                     name)

    def cluster_operations(self, req: Request) -> set[int]:
        """As Kafka reports the cluster's: none at all without DESCRIBE on it."""
        if not self.allows_cluster(req, AclOperation.DESCRIBE):
            return set()
        return self.operations(req, CLUSTER, CLUSTER_NAME)


OPEN = Authorization()  # the authorizer off: handlers built without one allow everything
