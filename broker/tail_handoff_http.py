"""The object-tail hand-off on the wire: ``POST /v1/object-tail`` between brokers.

Both ends of ``tail_handoff.py``'s exchange: the receiving broker's route (strict query, the
body's length checked against it, the bytes given to its stream storages) and the sender's
aiohttp client. The hand-off only saves the receiver a GET: the sender never waits for it and
never retries it, and any failure leaves the receiver to read S3 as it would have anyway.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Awaitable, Callable

import aiohttp
from aiohttp import web

from broker.tail_handoff import TailHandoff
from metadata_quorum.kernel.http_parsing import check_query_names, query_int, query_str
from metadata_quorum.kernel.validation import invalid
from stream_storage.object_format import TAIL_READ_BYTES
from stream_storage.reader import SMALL_TAIL_BLOCKS_BYTES

PATH = "/v1/object-tail"
QUERY = ("object_key", "size", "tail_start")
MAX_TAIL_BYTES = TAIL_READ_BYTES + SMALL_TAIL_BLOCKS_BYTES  # what an index GET reads, at most
MAX_KEY_CHARS = 1024  # S3's limit on a key's length
SEND_TIMEOUT_S = 1.0  # later than this, the receiver has GET the object itself

log = logging.getLogger("ferry.broker.tail_handoff")

Accept = Callable[[str, int, int, bytes], bool]


def handler(accept: Accept) -> Callable[[web.Request], Awaitable[web.Response]]:
    """The receiver's route: ``accept(object_key, size, tail_start, body)`` says whether the bytes
    were kept (a malformed tail is refused by the reader's checks and answered ``kept: false``)."""

    async def object_tail(request: web.Request) -> web.Response:
        check_query_names(request.query, QUERY)
        key = query_str(request.query, "object_key", max_chars=MAX_KEY_CHARS)
        if not key:
            raise invalid("query parameter 'object_key' is required")
        size = query_int(request.query, "size", minimum=1)
        tail_start = query_int(request.query, "tail_start", minimum=0, maximum=size - 1)
        if size - tail_start > MAX_TAIL_BYTES:
            raise invalid(f"a tail is at most {MAX_TAIL_BYTES} bytes; [{tail_start}, {size}) is "
                          f"{size - tail_start}")
        body = await request.read()
        if len(body) != size - tail_start:
            raise invalid(f"the body holds {len(body)} bytes; bytes [{tail_start}, {size}) are {size - tail_start}")
        return web.json_response({"kept": accept(key, size, tail_start, body)})

    return object_tail


class TailHandoffClient:
    """The sender's side, on one aiohttp session (the inter-node token when security is on)."""

    def __init__(self, token: str | None) -> None:
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._session: aiohttp.ClientSession | None = None
        self.sent = 0
        self.failed = 0

    async def send(self, url: str, handoff: TailHandoff, tail: bytes) -> bool:
        """POST the tail; returns whether the receiver kept it. Never raises for the exchange's
        own failures (the receiver then reads S3 itself)."""
        if self._session is None:
            self._session = aiohttp.ClientSession(headers=self._headers)
        params = {"object_key": handoff.object_key, "size": str(handoff.size), "tail_start": str(handoff.tail_start)}
        try:
            async with self._session.post(f"{url}{PATH}", params=params, data=tail,
                                          timeout=aiohttp.ClientTimeout(total=SEND_TIMEOUT_S)) as resp:
                reply = await resp.json(content_type=None)
                kept = resp.status == 200 and isinstance(reply, dict) and reply.get("kept") is True
        except (aiohttp.ClientError, asyncio.TimeoutError, ValueError) as exc:
            self.failed += 1
            log.debug("object tail of %s to %s: %r", handoff.object_key, url, exc)
            return False
        self.sent += 1
        if not kept:
            log.debug("object tail of %s not kept by %s: %s", handoff.object_key, url, reply)
        return kept

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
