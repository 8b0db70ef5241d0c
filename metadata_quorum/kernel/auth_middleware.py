"""The aiohttp middleware that puts ``auth.py``'s decisions in front of a server's handlers.

It runs after routing (so the route's ``{op}`` is known) and before the handler, so a refused
request changes nothing. The refusal is the usual Kafka error body; a 401 also carries
``WWW-Authenticate: Bearer`` as HTTP asks.
"""
from __future__ import annotations

import logging
from typing import Callable

from aiohttp import web
from aiohttp.typedefs import Middleware

from metadata_quorum.kernel.auth import (ControllerSecurity, NodeSecurity, Principal, authenticate, authorize,
                                  broker_route_principals, controller_route_principals)
from metadata_quorum.kernel.errors import ErrorCode, FerryError
from metadata_quorum.kernel.http_parsing import Handler, error_response

log = logging.getLogger("ferry.auth")

# Which principals may call a request (None: anyone); decided from the request's path and route.
RoutePolicy = Callable[[web.Request], "frozenset[Principal] | None"]


def bearer_auth_middleware(admin_token: str, internal_token: str, policy: RoutePolicy,
                           on_refused: Callable[[web.Request, FerryError], None] | None = None) -> Middleware:
    """Refuse any request whose bearer token ``policy`` does not allow."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        allowed = policy(request)
        if allowed is None:
            return await handler(request)
        try:
            principal = authenticate(request.headers.get("Authorization"), admin_token, internal_token)
            authorize(principal, allowed, f"call {request.method} {request.path[:200]}")
        except FerryError as exc:
            # The peer's address and what it asked for, never what it presented.
            log.warning("refused %s %s from %s: %s", request.method, request.path[:200], request.remote,
                        exc.error.name)
            if on_refused is not None:
                on_refused(request, exc)
            response = error_response(exc)
            if exc.error is ErrorCode.SASL_AUTHENTICATION_FAILED:
                response.headers["WWW-Authenticate"] = 'Bearer realm="ferry"'
            return response
        return await handler(request)

    return middleware


def controller_auth_middleware(security: ControllerSecurity,
                               on_refused: Callable[[web.Request, FerryError], None] | None = None) -> Middleware:
    return bearer_auth_middleware(
        security.admin_token, security.internal_token,
        lambda request: controller_route_principals(request.path, request.match_info.get("op")), on_refused)


def broker_auth_middleware(security: NodeSecurity) -> Middleware:
    return bearer_auth_middleware(security.admin_token, security.internal_token,
                                  lambda request: broker_route_principals(request.path))


def auth_headers(token: str | None) -> dict[str, str]:
    """The header a client sends with ``token`` (none without one)."""
    return {"Authorization": f"Bearer {token}"} if token else {}
