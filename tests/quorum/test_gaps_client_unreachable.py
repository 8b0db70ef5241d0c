"""ControllerClient with ``unreachable_timeout_ms``: a bootstrap list nobody listens on fails early
with the addresses named; a leader change, a redirect or an outage after first contact is retried."""
from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiohttp import web

from metadata_quorum.client import ControllerClient
from metadata_quorum.kernel.errors import ErrorCode, FerryError
from tools.proc import LOOPBACK, free_ports

GUARD_S = 30  # far above the unreachable timeout, far below the client's own timeout


async def _serve(handler: Any, port: int) -> web.AppRunner:
    app = web.Application()
    app.router.add_post("/v1/write/{op}", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, LOOPBACK, port).start()
    return runner


@pytest.fixture
def dead_ports() -> list[int]:
    return list(free_ports(2))  # nothing listens on them


async def test_every_address_refusing_fails_early_naming_them(dead_ports: list[int]) -> None:
    bootstrap = [f"{LOOPBACK}:{p}" for p in dead_ports]
    async with ControllerClient(bootstrap, timeout_ms=600_000, unreachable_timeout_ms=200) as client:
        with pytest.raises(FerryError) as err:
            await asyncio.wait_for(client.write("put_kv", {"key": "k", "value": "v"}), GUARD_S)
    assert err.value.error is ErrorCode.REQUEST_TIMED_OUT
    assert err.value.message.startswith("cannot connect to any bootstrap controller: ")
    for address in bootstrap:
        assert f"{address} (connection refused)" in err.value.message


async def test_one_live_address_is_enough(controller: Any, dead_ports: list[int]) -> None:
    async with ControllerClient([f"{LOOPBACK}:{dead_ports[0]}", controller.address],
                                unreachable_timeout_ms=1) as client:
        for i in range(3):
            await client.write("put_kv", {"key": f"k{i}", "value": "v"})
        assert (await client.read("get_kv", {"key": "k2"}))["value"] == "v"


async def test_an_election_and_a_redirect_are_waited_for(controller: Any, dead_ports: list[int]) -> None:
    """The old leader refuses, another controller knows no leader yet, then names the new one."""
    answers = 0

    async def electing(request: web.Request) -> web.Response:
        nonlocal answers
        answers += 1
        leader_url = controller.url if answers > 5 else None
        return web.json_response({"error": "NOT_CONTROLLER", "code": 41, "message": "election in progress",
                                  "details": {"leader_id": 1 if leader_url else -1, "leader_url": leader_url}},
                                 status=421)

    runner = await _serve(electing, dead_ports[1])
    try:
        async with ControllerClient([f"{LOOPBACK}:{dead_ports[0]}", f"{LOOPBACK}:{dead_ports[1]}"],
                                    unreachable_timeout_ms=1) as client:
            await client.write("put_kv", {"key": "after-election", "value": "yes"})
            assert client.leader_url == controller.url
    finally:
        await runner.cleanup()
    assert answers > 5


async def test_an_outage_after_first_contact_is_retried_until_the_timeout(dead_ports: list[int]) -> None:
    async def ok(request: web.Request) -> web.Response:
        return web.json_response({"reply": {}, "offset": 1})

    address = f"{LOOPBACK}:{dead_ports[0]}"
    runner = await _serve(ok, dead_ports[0])
    async with ControllerClient([address], timeout_ms=500, unreachable_timeout_ms=1) as client:
        await client.write("put_kv", {"key": "k", "value": "v"})
        await runner.cleanup()  # the only controller stops: a restart, not a wrong address
        with pytest.raises(FerryError) as err:
            await client.write("put_kv", {"key": "k", "value": "w"})
    assert err.value.error is ErrorCode.REQUEST_TIMED_OUT
    assert err.value.message.startswith("no controller answered /v1/write/put_kv within 500 ms")


async def test_without_the_option_refusals_are_retried_until_the_timeout(dead_ports: list[int]) -> None:
    async with ControllerClient([f"{LOOPBACK}:{dead_ports[0]}"], timeout_ms=300) as client:
        with pytest.raises(FerryError) as err:
            await client.write("put_kv", {"key": "k", "value": "v"})
    assert err.value.message.startswith("no controller answered /v1/write/put_kv within 300 ms")
