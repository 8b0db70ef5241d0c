"""Fixtures: in-process single controllers (fast) and real 3-controller quorums (processes)."""
from __future__ import annotations

import asyncio
import contextlib
import json
import os
from typing import Any, AsyncIterator, Iterator

import aiohttp
import pytest

from metadata_quorum.config import PeerAddress, load_config, quorum_config_json
from metadata_quorum.server import serve
from tools.proc import LOOPBACK, Quorum, free_ports, start_quorum


class InProcessController:
    """One controller (a single-node Raft quorum) running in the test's event loop."""

    def __init__(self, directory: str, **overrides: Any) -> None:
        self.directory = directory
        # Alone, a node learns of its own commit on its next tick (no follower reply wakes it):
        # tick often so that single-node tests do not wait 50 ms per write.
        overrides["raft"] = {"auto_tick_period_s": 0.005, **overrides.get("raft", {})}
        raft_port, http_port = free_ports(2)
        peers = {1: PeerAddress(raft=f"{LOOPBACK}:{raft_port}", http=f"{LOOPBACK}:{http_port}")}
        self.config_path = os.path.join(directory, "controllers.json")
        with open(self.config_path, "w", encoding="utf-8") as f:
            json.dump(quorum_config_json(peers, os.path.join(directory, "data"), **overrides), f)
        self.url = peers[1].url
        self.address = peers[1].http
        self._stop: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._stop = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(serve(load_config(self.config_path, 1), self._stop))
        async with aiohttp.ClientSession() as session:
            for _ in range(500):
                if self._task.done():
                    self._task.result()
                try:
                    async with session.get(f"{self.url}/v1/health") as resp:
                        body = await resp.json()
                        if body.get("active") and body.get("ready"):
                            return
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(0.02)
        raise TimeoutError("the in-process controller did not become active")

    async def stop(self) -> None:
        if self._stop is not None and self._task is not None:
            self._stop.set()
            await asyncio.wait_for(self._task, 15)
            self._task = None

    async def post(self, path: str, body: Any) -> tuple[int, Any]:
        async with aiohttp.ClientSession() as session:
            async with session.post(f"{self.url}{path}", json=body) as resp:
                return resp.status, await resp.json()

    async def post_raw(self, path: str, data: bytes) -> tuple[int, Any]:
        async with aiohttp.ClientSession() as session:
            async with session.post(f"{self.url}{path}", data=data) as resp:
                return resp.status, await resp.json()

    async def get(self, path: str) -> tuple[int, Any]:
        async with aiohttp.ClientSession() as session:
            async with session.get(f"{self.url}{path}") as resp:
                if resp.content_type == "application/json":
                    return resp.status, await resp.json()
                return resp.status, await resp.text()


@pytest.fixture
async def controller(tmp_path: Any) -> AsyncIterator[InProcessController]:
    ctl = InProcessController(str(tmp_path))
    await ctl.start()
    try:
        yield ctl
    finally:
        await ctl.stop()


@pytest.fixture
async def controller_factory(tmp_path: Any) -> AsyncIterator[Any]:
    """Make in-process controllers with config overrides; all are stopped at the end."""
    made: list[InProcessController] = []

    async def make(name: str = "c", **overrides: Any) -> InProcessController:
        directory = os.path.join(str(tmp_path), name)
        os.makedirs(directory, exist_ok=True)
        ctl = InProcessController(directory, **overrides)
        await ctl.start()
        made.append(ctl)
        return ctl

    try:
        yield make
    finally:
        for ctl in made:
            with contextlib.suppress(Exception):
                await ctl.stop()


@pytest.fixture
def quorum(tmp_path: Any) -> Iterator[Quorum]:
    """Three real controller processes on loopback, stopped (process groups killed) at the end."""
    q = start_quorum(str(tmp_path / "quorum"))
    try:
        yield q
    finally:
        q.stop_all()


@pytest.fixture(scope="module")
def shared_quorum(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Quorum]:
    """One real quorum for read-mostly tests of a module (CLI tests)."""
    q = start_quorum(str(tmp_path_factory.mktemp("shared-quorum")))
    try:
        yield q
    finally:
        q.stop_all()
