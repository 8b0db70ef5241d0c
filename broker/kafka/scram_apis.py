"""DescribeUserScramCredentials (50) and AlterUserScramCredentials (51), KIP-554 as KRaft serves them.

AlterUserScramCredentials is forwarded to the active controller (the ``alter_user_scram_credentials``
operation writes UserScramCredentialRecord / RemoveUserScramCredentialRecord); its answer waits
for this broker's image to hold the change, so a login or a describe on this broker right after
sees it. DescribeUserScramCredentials is answered from this broker's own image, as a Kafka broker
answers it from its metadata cache (the same pure function the controller has). The salted
password travels in the request; the password itself never reaches the broker.
"""
from __future__ import annotations

import base64

from kafka.protocol.admin.users import (AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse,
                                        DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse)
from kafka.protocol.api_message import ApiMessage

from broker.kafka.admin_apis import AdminCore, failure_of
from broker.kafka.forwarding import ControllerCalls, forward_timeout_ms
from broker.kafka.wire import Request
from metadata_quorum.kernel.controller_api import ControllerApi
from metadata_quorum.kernel.messages.security import AlterUserScramCredentialsRequest as AlterUserScramCredentialsArgs
from metadata_quorum.kernel.messages.security import DescribeUserScramCredentialsRequest as DescribeUserScramCredentialsArgs
from metadata_quorum.ops.scram import describe_user_scram_credentials


def _b64(raw: bytes | None) -> str:
    return base64.b64encode(bytes(raw or b"")).decode("ascii")


class ScramApis:
    def __init__(self, core: AdminCore, controller: ControllerCalls) -> None:
        self.core = core
        self.controller = controller
        self.api = ControllerApi(controller)

    async def describe_user_scram_credentials(self, req: Request) -> ApiMessage:
        body: DescribeUserScramCredentialsRequest = req.body
        R = DescribeUserScramCredentialsResponse.DescribeUserScramCredentialsResult
        args: DescribeUserScramCredentialsArgs = {"users": None if body.users is None else [u.name for u in body.users]}
        image = self.core.image
        try:
            # a broker still loading its image asks the active controller's committed one
            reply = describe_user_scram_credentials(image, args) if image is not None else \
                await self.api.describe_user_scram_credentials(args, forward_timeout_ms(None))
        except Exception as exc:  # noqa: BLE001 - a top-level error
            failure = failure_of(exc)
            return DescribeUserScramCredentialsResponse(throttle_time_ms=0, error_code=failure.error.code,
                                                        error_message=failure.message, results=[])
        results = [R(user=r["user"], error_code=int(r["code"]), error_message=r["message"],
                     credential_infos=[R.CredentialInfo(mechanism=int(c["mechanism"]), iterations=int(c["iterations"]))
                                       for c in r["credentials"]])
                   for r in reply["results"]]
        return DescribeUserScramCredentialsResponse(throttle_time_ms=0, error_code=0, error_message=None,
                                                    results=results)

    async def alter_user_scram_credentials(self, req: Request) -> ApiMessage:
        body: AlterUserScramCredentialsRequest = req.body
        R = AlterUserScramCredentialsResponse.AlterUserScramCredentialsResult
        args: AlterUserScramCredentialsArgs = {
            "deletions": [{"name": d.name, "mechanism": d.mechanism} for d in body.deletions],
            "upsertions": [{"name": u.name, "mechanism": u.mechanism, "iterations": u.iterations,
                            "salt": _b64(u.salt), "salted_password": _b64(u.salted_password)}
                           for u in body.upsertions]}
        users = list(dict.fromkeys([d.name for d in body.deletions] + [u.name for u in body.upsertions]))
        if not users:
            return AlterUserScramCredentialsResponse(throttle_time_ms=0, results=[])
        try:
            reply = await self.api.alter_user_scram_credentials(args, forward_timeout_ms(None))
        except Exception as exc:  # noqa: BLE001 - every user gets the error
            failure = failure_of(exc)
            return AlterUserScramCredentialsResponse(throttle_time_ms=failure.throttle_time_ms, results=[
                R(user=u, error_code=failure.error.code, error_message=failure.message) for u in users])
        return AlterUserScramCredentialsResponse(throttle_time_ms=0, results=[
            R(user=r["user"], error_code=int(r["code"]), error_message=r["message"]) for r in reply["results"]])
