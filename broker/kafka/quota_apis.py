"""DescribeClientQuotas (48): Ferry enforces no client quotas, so none is ever configured.

Kafka's ``kafka-configs --describe --entity-type users`` asks for a user's quotas before its SCRAM
credentials; answering "no quota entries" (what a Kafka cluster without quotas answers) lets the
tool go on to the credentials. AlterClientQuotas is not offered: a quota that nothing enforces
must not be accepted. The filter is checked as Kafka's broker checks it (entity types ``user``,
``client-id``, ``ip``, each at most once, match types 0-2, an ``ip`` component alone), a bad one
is ``INVALID_REQUEST``. Pure.
"""
from __future__ import annotations

from kafka.protocol.admin.client_quotas import DescribeClientQuotasRequest, DescribeClientQuotasResponse
from kafka.protocol.api_message import ApiMessage

from broker.kafka.wire import Request
from metadata_quorum.kernel.errors import ErrorCode

ENTITY_TYPES = ("user", "client-id", "ip")
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2


def filter_error(components: list[tuple[str, int, str | None]]) -> str | None:
    """Why a DescribeClientQuotas filter is refused (None: it is well-formed)."""
    seen: set[str] = set()
    for entity_type, match_type, match in components:
        if entity_type not in ENTITY_TYPES:
            return f"Custom entity type {entity_type!r} not supported"
        if entity_type in seen:
            return f"Entity type {entity_type} cannot appear more than once in the filter."
        seen.add(entity_type)
        if match_type not in (MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED):
            return f"Unknown match type: {match_type}"
        if match_type == MATCH_EXACT and match is None:
            return f"Entity match for {entity_type} of type EXACT must have a non-null name"
        if match_type != MATCH_EXACT and match is not None:
            return f"Entity match for {entity_type} of type {match_type} must not have a name"
    if "ip" in seen and len(seen) > 1:
        return ("Invalid entity filter component combination, IP filter component should not be used with "
                "user or clientId filter component.")
    return None


async def describe_client_quotas(req: Request) -> ApiMessage:
    body: DescribeClientQuotasRequest = req.body
    error = filter_error([(c.entity_type, c.match_type, c.match) for c in body.components])
    if error is not None:
        return DescribeClientQuotasResponse(throttle_time_ms=0, error_code=ErrorCode.INVALID_REQUEST.code,
                                            error_message=error, entries=None)
    return DescribeClientQuotasResponse(throttle_time_ms=0, error_code=0, error_message=None, entries=[])
