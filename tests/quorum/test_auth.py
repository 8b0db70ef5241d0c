"""Bearer tokens, principals and route policies (pure), and the security settings' checks."""
from __future__ import annotations

import pytest

from broker.config import config_from_dict
from metadata_quorum.kernel.auth import (ANY, BROKER_ONLY_WRITES, INTERNAL_ONLY, Principal, authenticate, authorize,
                                  bearer_token, broker_route_principals, controller_route_principals,
                                  generate_secrets)
from metadata_quorum.config import parse_config
from metadata_quorum.kernel.errors import ErrorCode, FerryError

ADMIN = "a" * 20
INTERNAL = "i" * 20
PEERS = {"1": {"raft": "127.0.0.1:9001", "http": "127.0.0.1:8001"}}


def test_bearer_header_parsing() -> None:
    assert bearer_token("Bearer abc") == "abc" and bearer_token("bearer  abc ") == "abc"
    assert bearer_token(None) is None and bearer_token("Basic abc") is None and bearer_token("Bearer ") is None


def test_tokens_map_to_principals_and_anything_else_is_refused_without_echo() -> None:
    assert authenticate(f"Bearer {ADMIN}", ADMIN, INTERNAL) is Principal.ADMIN
    assert authenticate(f"Bearer {INTERNAL}", ADMIN, INTERNAL) is Principal.INTERNAL
    for header in (None, "Bearer wrong-token-123", f"Basic {ADMIN}", f"Bearer {ADMIN}x"):
        with pytest.raises(FerryError) as err:
            authenticate(header, ADMIN, INTERNAL)
        assert err.value.error is ErrorCode.SASL_AUTHENTICATION_FAILED and err.value.error.http_status == 401
        assert ADMIN not in err.value.message and "wrong-token" not in err.value.message


def test_admin_may_not_act_as_a_broker() -> None:
    for op in BROKER_ONLY_WRITES:
        assert controller_route_principals(f"/v1/write/{op}", op) == INTERNAL_ONLY
    assert controller_route_principals("/v1/write", None) == INTERNAL_ONLY
    for op in ("create_topics", "alter_partition_reassignments", "elect_leaders", "unregister_broker", "put_kv"):
        assert controller_route_principals(f"/v1/write/{op}", op) == ANY
    assert controller_route_principals("/v1/read/describe_cluster", "describe_cluster") == ANY
    assert controller_route_principals("/metrics", None) == ANY
    assert controller_route_principals("/v1/health", None) is None
    assert broker_route_principals("/v1/produce/t/0") == ANY and broker_route_principals("/v1/health") is None
    with pytest.raises(FerryError) as err:
        authorize(Principal.ADMIN, INTERNAL_ONLY, "call POST /v1/write/broker_heartbeat")
    assert err.value.error is ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    authorize(Principal.INTERNAL, INTERNAL_ONLY, "anything")


def test_generated_secrets_are_distinct_and_long() -> None:
    s = generate_secrets()
    values = {s.admin_token, s.internal_token, s.raft_password}
    assert len(values) == 3 and all(len(v) >= 40 for v in values)
    assert not any(v in repr(s) for v in values)


@pytest.mark.parametrize("security, words", [
    ({"admin_token": ADMIN, "internal_token": ADMIN, "raft_password": "p" * 20}, "must differ"),
    ({"admin_token": "short", "internal_token": INTERNAL, "raft_password": "p" * 20}, "at least 16 characters"),
    ({"admin_token": ADMIN, "internal_token": INTERNAL}, "'security.raft_password' is required"),
    ({"admin_token": ADMIN, "internal_token": INTERNAL, "raft_password": "p" * 20, "x": 1}, "'security.x'"),
])
def test_controller_security_is_checked_without_showing_secrets(security: dict[str, str], words: str) -> None:
    with pytest.raises(FerryError) as err:
        parse_config({"controllers": PEERS, "data_dir": "/d", "security": security}, 1)
    assert err.value.error is ErrorCode.INVALID_CONFIG and words in err.value.message
    assert ADMIN not in err.value.message and INTERNAL not in err.value.message


def test_security_settings_are_parsed() -> None:
    config = parse_config({"controllers": PEERS, "data_dir": "/d", "security": {
        "admin_token": ADMIN, "internal_token": INTERNAL, "raft_password": "p" * 20}}, 1)
    assert config.security is not None and config.security.raft_password == "p" * 20
    assert ADMIN not in repr(config)
    broker = config_from_dict({"broker_id": 1, "controllers": ["h:1"], "log_dirs": ["/d"],
                               "security": {"admin_token": ADMIN, "internal_token": INTERNAL}})
    assert broker.security is not None and broker.security.internal_token == INTERNAL
    with pytest.raises(FerryError, match="unknown broker setting 'security.raft_password'"):
        config_from_dict({"broker_id": 1, "controllers": ["h:1"], "log_dirs": ["/d"], "security": {
            "admin_token": ADMIN, "internal_token": INTERNAL, "raft_password": "p" * 20}})


async def test_the_middleware_refuses_before_the_handler_runs() -> None:
    from aiohttp import web
    from aiohttp.test_utils import TestClient, TestServer

    from metadata_quorum.kernel.auth import ControllerSecurity
    from metadata_quorum.kernel.auth_middleware import controller_auth_middleware
    from metadata_quorum.kernel.http_parsing import errors_middleware

    calls: list[str] = []

    async def handler(request: web.Request) -> web.Response:
        calls.append(request.path)
        return web.json_response({"ok": True})

    security = ControllerSecurity(admin_token=ADMIN, internal_token=INTERNAL, raft_password="p" * 20)
    app = web.Application(middlewares=[errors_middleware("docs"), controller_auth_middleware(security)])
    app.router.add_post("/v1/write/{op}", handler)
    app.router.add_get("/v1/health", handler)
    async with TestClient(TestServer(app)) as client:
        for headers in ({}, {"Authorization": "Bearer nope-nope-nope-nope"}, {"Authorization": f"Basic {ADMIN}"}):
            resp = await client.post("/v1/write/create_topics", json={}, headers=headers)
            body = await resp.json()
            assert resp.status == 401 and body["error"] == "SASL_AUTHENTICATION_FAILED"
            assert resp.headers["WWW-Authenticate"].startswith("Bearer") and ADMIN not in await resp.text()
        resp = await client.post("/v1/write/broker_heartbeat", json={}, headers={"Authorization": f"Bearer {ADMIN}"})
        assert resp.status == 403 and (await resp.json())["error"] == "CLUSTER_AUTHORIZATION_FAILED"
        assert calls == []  # nothing refused reached a handler
        assert (await client.get("/v1/health")).status == 200
        for token, op in ((ADMIN, "create_topics"), (INTERNAL, "create_topics"), (INTERNAL, "broker_heartbeat")):
            resp = await client.post(f"/v1/write/{op}", json={}, headers={"Authorization": f"Bearer {token}"})
            assert resp.status == 200
    assert calls == ["/v1/health", "/v1/write/create_topics", "/v1/write/create_topics", "/v1/write/broker_heartbeat"]
