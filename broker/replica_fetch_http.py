"""The follower fetch on the wire: ``GET /v1/replica-fetch/{topic}/{partition}`` between brokers.

Kafka's followers send a Fetch with their replica id, fetch offset, current leader epoch and the
epoch of their last batch (KIP-320); the leader answers with record batches up to its log end,
its high watermark and log start offset, or the epoch where the follower's log diverged. This
module is both ends of that exchange over the brokers' HTTP API: the query parsing and response
headers on the leader, the aiohttp client on the follower. Errors travel as the API's JSON error
bodies (Kafka's names and codes).
"""
from __future__ import annotations

import json
from typing import Awaitable, Callable, Protocol

import aiohttp
from aiohttp import web

from broker import replication_rules as rules
from broker.local_replica import ReplicaFetchResult

__all__ = ["ReplicaFetchResult", "HttpReplicaFetchClient", "ReplicaFetchClient", "handler", "PATH"]
from metadata_quorum.kernel.errors import ErrorCode, FerryError
from metadata_quorum.kernel.http_parsing import check_query_names, path_int, query_int
from metadata_quorum.kernel.validation import INT32_MAX

PATH = "/v1/replica-fetch/{topic}/{partition}"
QUERY = ("replica_id", "offset", "last_fetched_epoch", "leader_epoch", "max_bytes", "max_wait_ms")
H_HW = "X-Ferry-High-Watermark"
H_LSO = "X-Ferry-Log-Start-Offset"
H_LEO = "X-Ferry-Log-End-Offset"
H_DIV_EPOCH = "X-Ferry-Diverging-Epoch"
H_DIV_END = "X-Ferry-Diverging-End-Offset"
MAX_WAIT_MS_LIMIT = 30000

ServeFetch = Callable[[str, int, int, int, int, int, int, int], Awaitable[ReplicaFetchResult]]


def handler(serve: ServeFetch) -> Callable[[web.Request], Awaitable[web.Response]]:
    """The leader's route: strict query, then ``serve(topic, partition, replica_id, offset,
    last_fetched_epoch, leader_epoch, max_bytes, max_wait_ms)``."""

    async def replica_fetch(request: web.Request) -> web.Response:
        check_query_names(request.query, QUERY)
        q = request.query
        result = await serve(
            request.match_info["topic"], path_int(request.match_info, "partition", maximum=INT32_MAX),
            query_int(q, "replica_id", None, minimum=0, maximum=INT32_MAX),
            query_int(q, "offset", None, minimum=0),
            query_int(q, "last_fetched_epoch", -1, minimum=-1, maximum=INT32_MAX, allow_negative=True),
            query_int(q, "leader_epoch", None, minimum=0, maximum=INT32_MAX),
            query_int(q, "max_bytes", 1024 * 1024, minimum=1, maximum=INT32_MAX),
            query_int(q, "max_wait_ms", 500, minimum=0, maximum=MAX_WAIT_MS_LIMIT))
        headers = {H_HW: str(result.high_watermark), H_LSO: str(result.log_start_offset),
                   H_LEO: str(result.log_end_offset)}
        if result.divergence is not None:
            headers[H_DIV_EPOCH] = str(result.divergence.epoch)
            headers[H_DIV_END] = str(result.divergence.end_offset)
        return web.Response(body=result.data, content_type="application/octet-stream", headers=headers)

    return replica_fetch


class ReplicaFetchClient(Protocol):
    async def fetch(self, leader_url: str, topic: str, partition: int, replica_id: int, offset: int,
                    last_fetched_epoch: int, leader_epoch: int, max_bytes: int,
                    max_wait_ms: int) -> ReplicaFetchResult: ...


class HttpReplicaFetchClient:
    """The follower's side, on one aiohttp session for all of this broker's fetchers."""

    def __init__(self, token: str | None, timeout_ms: int) -> None:
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._timeout_ms = timeout_ms
        self._session: aiohttp.ClientSession | None = None

    async def fetch(self, leader_url: str, topic: str, partition: int, replica_id: int, offset: int,
                    last_fetched_epoch: int, leader_epoch: int, max_bytes: int,
                    max_wait_ms: int) -> ReplicaFetchResult:
        if self._session is None:
            self._session = aiohttp.ClientSession(headers=self._headers)
        params = {"replica_id": str(replica_id), "offset": str(offset), "last_fetched_epoch": str(last_fetched_epoch),
                  "leader_epoch": str(leader_epoch), "max_bytes": str(max_bytes), "max_wait_ms": str(max_wait_ms)}
        url = f"{leader_url}/v1/replica-fetch/{topic}/{partition}"
        timeout = aiohttp.ClientTimeout(total=(max_wait_ms + self._timeout_ms) / 1000)
        try:
            async with self._session.get(url, params=params, timeout=timeout) as resp:
                body = await resp.read()
                if resp.status >= 400:
                    try:
                        raise FerryError.from_json(json.loads(body))
                    except ValueError:
                        raise FerryError(ErrorCode.UNKNOWN_SERVER_ERROR, f"HTTP {resp.status}: {body[:200]!r}") \
                            from None
                divergence = None
                if H_DIV_EPOCH in resp.headers:
                    divergence = rules.Divergence(int(resp.headers[H_DIV_EPOCH]), int(resp.headers[H_DIV_END]))
                return ReplicaFetchResult(body, int(resp.headers[H_HW]), int(resp.headers[H_LSO]),
                                          int(resp.headers[H_LEO]), divergence)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise FerryError(ErrorCode.LEADER_NOT_AVAILABLE, f"replica fetch from {leader_url}: {exc!r}") from exc

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
