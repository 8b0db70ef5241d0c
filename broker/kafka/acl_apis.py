"""Kafka's ACL APIs: CreateAcls and DeleteAcls forwarded to the controller quorum, DescribeAcls
answered from this broker's image.

As Kafka's AclApis: with the authorizer off every answer is ``SECURITY_DISABLED`` ("No Authorizer
is configured."); CreateAcls and DeleteAcls need ALTER on the cluster and DescribeAcls DESCRIBE
on it (``CLUSTER_AUTHORIZATION_FAILED`` otherwise, and nothing changes). Bindings and filters are
judged one by one by the controller's operations (``metadata_quorum/ops/acls.py``), so one bad
binding fails alone with ``INVALID_REQUEST``; a quorum that does not answer fails every item with
the error clients retry on (``broker/kafka/forwarding.py``). A write is answered once this
broker's image holds it, so a DescribeAcls to the same broker sees it.
"""
from __future__ import annotations

from typing import Any

from kafka.protocol.admin.acl import (CreateAclsRequest, CreateAclsResponse, DeleteAclsRequest, DeleteAclsResponse,
                                      DescribeAclsRequest, DescribeAclsResponse)
from kafka.protocol.api_message import ApiMessage

from broker.kafka.admin_apis import failure_of
from broker.kafka.authorization import Authorization
from broker.kafka.forwarding import ControllerCalls, forward_timeout_ms
from broker.kafka.wire import Request
from metadata_quorum.acls import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType,
                                  PatternType, ResourceType, from_code)
from metadata_quorum.kernel.controller_api import ControllerApi
from metadata_quorum.kernel.errors import ErrorCode, FerryError
from metadata_quorum.kernel.messages.security import AclBindingMessage

NO_AUTHORIZER = "No Authorizer is configured."


def _not_authorized(api: str) -> str:
    return f"{api} is not authorized: it needs {'DESCRIBE' if api == 'DescribeAcls' else 'ALTER'} on the cluster"


def _binding_json(item: Any) -> AclBindingMessage:
    """A CreateAcls creation as the operation's JSON (a code Kafka does not define becomes UNKNOWN)."""
    return {"resource_type": from_code(ResourceType, item.resource_type).name, "resource_name": item.resource_name,
            "pattern_type": from_code(PatternType, item.resource_pattern_type).name, "principal": item.principal,
            "host": item.host, "operation": from_code(AclOperation, item.operation).name,
            "permission_type": from_code(AclPermissionType, item.permission_type).name}


def _filter(item: Any) -> AclBindingFilter:
    return AclBindingFilter(from_code(ResourceType, item.resource_type_filter), item.resource_name_filter,
                            from_code(PatternType, item.pattern_type_filter), item.principal_filter, item.host_filter,
                            from_code(AclOperation, item.operation), from_code(AclPermissionType, item.permission_type))


class AclApis:
    def __init__(self, authorization: Authorization, controller: ControllerCalls) -> None:
        self.auth = authorization
        self.controller = controller
        self.api = ControllerApi(controller)

    def _refusal(self, req: Request, operation: AclOperation, api: str) -> tuple[ErrorCode, str] | None:
        if not self.auth.enabled:
            return ErrorCode.SECURITY_DISABLED, NO_AUTHORIZER
        if not self.auth.allows_cluster(req, operation):
            return ErrorCode.CLUSTER_AUTHORIZATION_FAILED, _not_authorized(api)
        return None

    async def create_acls(self, req: Request) -> ApiMessage:
        body: CreateAclsRequest = req.body
        R = CreateAclsResponse.AclCreationResult
        refused = self._refusal(req, AclOperation.ALTER, "CreateAcls")
        if refused is None and body.creations:
            try:
                reply = await self.api.create_acls(
                    {"creations": [_binding_json(c) for c in body.creations]}, forward_timeout_ms(None))
            except Exception as exc:  # noqa: BLE001 - every creation gets the error
                failure = failure_of(exc)
                refused = failure.error, failure.message
            else:
                return CreateAclsResponse(throttle_time_ms=0, results=[
                    R(error_code=ErrorCode.from_name(r["error"]).code, error_message=r.get("message"))
                    for r in reply["results"]])
        results = [R(error_code=refused[0].code, error_message=refused[1]) if refused else
                   R(error_code=0, error_message=None) for _ in body.creations]
        return CreateAclsResponse(throttle_time_ms=0, results=results)

    async def describe_acls(self, req: Request) -> ApiMessage:
        body: DescribeAclsRequest = req.body
        refused = self._refusal(req, AclOperation.DESCRIBE, "DescribeAcls")
        if refused is None:
            flt = _filter(body)
            try:
                flt.check()
            except FerryError as exc:
                refused = exc.error, exc.message
        if refused is not None:
            return DescribeAclsResponse(throttle_time_ms=0, error_code=refused[0].code, error_message=refused[1],
                                        resources=[])
        acls = self.auth.acls()
        return DescribeAclsResponse(throttle_time_ms=0, error_code=0, error_message=None,
                                    resources=_resources([b for _, b in acls.matching(flt)]))

    async def delete_acls(self, req: Request) -> ApiMessage:
        body: DeleteAclsRequest = req.body
        R = DeleteAclsResponse.DeleteAclsFilterResult
        M = R.DeleteAclsMatchingAcl
        refused = self._refusal(req, AclOperation.ALTER, "DeleteAcls")
        if refused is None and body.filters:
            try:
                reply = await self.api.delete_acls(
                    {"filters": [_filter(f).to_json() for f in body.filters]}, forward_timeout_ms(None))
            except Exception as exc:  # noqa: BLE001 - every filter gets the error
                failure = failure_of(exc)
                refused = failure.error, failure.message
            else:
                results = []
                for r in reply["results"]:
                    matched = [AclBinding.from_json(b) for b in r.get("matching_acls", [])]
                    results.append(R(error_code=ErrorCode.from_name(r["error"]).code, error_message=r.get("message"),
                                     matching_acls=[M(error_code=0, error_message=None, resource_type=b.resource_type,
                                                      resource_name=b.resource_name, pattern_type=b.pattern_type,
                                                      principal=b.principal, host=b.host, operation=b.operation,
                                                      permission_type=b.permission_type) for b in matched]))
                return DeleteAclsResponse(throttle_time_ms=0, filter_results=results)
        results = [R(error_code=refused[0].code if refused else 0, error_message=refused[1] if refused else None,
                     matching_acls=[]) for _ in body.filters]
        return DeleteAclsResponse(throttle_time_ms=0, filter_results=results)


def _resources(bindings: list[AclBinding]) -> list[Any]:
    """DescribeAcls' answer: the bindings grouped by resource pattern, in the order first seen."""
    RES = DescribeAclsResponse.DescribeAclsResource
    grouped: dict[tuple[int, str, int], list[Any]] = {}
    for b in bindings:
        grouped.setdefault((b.resource_type, b.resource_name, b.pattern_type), []).append(
            RES.AclDescription(principal=b.principal, host=b.host, operation=b.operation,
                               permission_type=b.permission_type))
    return [RES(resource_type=t, resource_name=n, pattern_type=p, acls=acls) for (t, n, p), acls in grouped.items()]
