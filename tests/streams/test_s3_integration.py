"""Stream storage against a real moto server process over HTTP (and through a failing proxy)."""
from __future__ import annotations

import asyncio
import hashlib
import random
import uuid
from collections import Counter
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from metadata_quorum.kernel.errors import ErrorCode, FerryError
from stream_storage.config import RetryPolicy, S3Config
from stream_storage.s3_server import S3Server
from stream_storage.s3_store import S3ObjectStore, make_s3_client, open_s3_store
from stream_storage.object_store import ObjectNotFound, PreconditionFailed, RetryingObjectStore
from tests.streams.conftest import batch_of, heartbeat, read_all
from tests.streams.test_faults import check_committed_objects

pytestmark = pytest.mark.integration


def s3_config(endpoint: str, bucket: str, **kw: Any) -> S3Config:
    return S3Config(endpoint_url=endpoint, bucket=bucket, retry=RetryPolicy(max_attempts=8, base_backoff_ms=5,
                                                                         max_backoff_ms=50), **kw)


def s3_store(server: S3Server, endpoint: str | None = None) -> RetryingObjectStore:
    return open_s3_store(s3_config(endpoint or server.endpoint_url, server.bucket))


class RecordingStore(RetryingObjectStore):
    """Keeps the put keys so that tests can compare them with the committed ones."""

    def __init__(self, inner: Any, policy: RetryPolicy) -> None:
        super().__init__(inner, policy)
        self.objects: dict[str, bytes] = {}

    async def put(self, key: str, data: Any, if_none_match: bool = False, if_match: str | None = None) -> str:
        etag = await super().put(key, data, if_none_match, if_match)
        self.objects[key] = bytes(data)
        return etag


def test_s3_serve_binds_loopback_and_created_the_bucket(s3_server: S3Server) -> None:
    assert s3_server.endpoint_url.startswith("http://127.0.0.1:")
    client = make_s3_client(S3Config(endpoint_url=s3_server.endpoint_url))
    assert s3_server.bucket in [b["Name"] for b in client.list_buckets()["Buckets"]]


async def test_s3_store_ranged_get_list_delete_and_conditional_put(s3_server: S3Server) -> None:
    store = s3_store(s3_server)
    prefix = f"t-{uuid.uuid4().hex}/"
    await store.put(prefix + "a", b"0123456789")
    assert await store.get(prefix + "a", 2, 5) == b"234"
    assert await store.get(prefix + "a", 7) == b"789"
    with pytest.raises(PreconditionFailed):
        await store.put(prefix + "a", b"again", if_none_match=True)
    etag = await store.put(prefix + "b", b"v1", if_none_match=True)
    with pytest.raises(PreconditionFailed):
        await store.put(prefix + "b", b"v2", if_match='"0000"')
    await store.put(prefix + "b", b"v2", if_match=etag)
    assert [o.key for o in await store.list(prefix)] == [prefix + "a", prefix + "b"]
    await store.delete([prefix + "a", prefix + "b", prefix + "missing"])
    with pytest.raises(ObjectNotFound):
        await store.get(prefix + "a")
    await store.close()


@pytest.mark.parametrize("sign_payload", [False, True])
async def test_a_put_body_goes_out_whole_signed_as_configured_and_reads_back_exactly(s3_server: S3Server,
                                                                                     sign_payload: bool) -> None:
    store = S3ObjectStore(s3_config(s3_server.endpoint_url, s3_server.bucket, sign_payload=sign_payload))
    sent: list[Any] = []
    store.client.meta.events.register("before-send.s3", lambda request, **_: sent.append(request))
    data = random.Random(7).randbytes(3 * 1024 * 1024 + 7)
    key = f"t-{uuid.uuid4().hex}/whole"
    etag = await store.put(key, data)
    (request,) = sent
    assert type(request.body) is bytes and request.body == data  # one buffer, not a stream read in blocks
    assert request.headers["Content-Length"] == str(len(data))
    expected = hashlib.sha256(data).hexdigest() if sign_payload else "UNSIGNED-PAYLOAD"
    assert request.headers["X-Amz-Content-SHA256"] == expected.encode()  # prepared headers are bytes
    assert etag.strip('"') == hashlib.md5(data).hexdigest()
    assert await store.get(key) == data
    await store.close()


async def test_append_close_reopen_elsewhere_reads_every_byte(s3_server: S3Server, make_storage, controller) -> None:
    a = make_storage(1, s3_store(s3_server), upload_bytes=256 * 1024, object_block_bytes=64 * 1024,
                     cache_bytes=1)
    await a.start()
    sids = [await a.create_stream() for _ in range(2)]
    for sid in sids:
        await a.open_stream(sid, 0)
    rng = random.Random(7)
    sent: dict[int, list[bytes]] = {sid: [] for sid in sids}
    for i in range(120):
        sid = sids[i % 2]
        value = rng.randbytes(rng.randint(100, 12_000))
        await a.append(sid, _one(value))
        sent[sid].append(value)
    for sid in sids:
        await a.close_stream(sid)
    b = make_storage(2, s3_store(s3_server), cache_bytes=1)
    await b.start()
    for sid in sids:
        info = await b.open_stream(sid, 1)
        assert info.end_offset == 60
        got = await read_all(b, sid, max_bytes=50_000)
        assert [r.value for r in got] == sent[sid]
        assert [r.offset for r in got] == list(range(60))
    await a.close()
    await b.close()


def _one(value: bytes) -> bytes:
    from stream_storage.batches import build_batch
    return build_batch([(None, value)], timestamp_ms=1)


async def test_race_to_open_over_s3_one_winner_and_loser_never_visible(s3_server: S3Server, make_storage,
                                                                      controller, clock) -> None:
    a = make_storage(1, s3_store(s3_server), control_delay_ms=1)
    b = make_storage(2, s3_store(s3_server), control_delay_ms=1)
    await a.start()
    await b.start()
    sid = await a.create_stream()
    results = await asyncio.gather(a.open_stream(sid, 1), b.open_stream(sid, 1), return_exceptions=True)
    errors = [r for r in results if isinstance(r, BaseException)]
    assert len(errors) == 1 and isinstance(errors[0], FerryError) and errors[0].error == ErrorCode.STREAM_FENCED
    winner, loser = (a, b) if not isinstance(results[0], BaseException) else (b, a)
    await winner.append(sid, batch_of("w1"))
    await winner.force_upload(sid)
    with pytest.raises(FerryError):
        await loser.append(sid, batch_of("l1"))
    # the winner dies; the loser takes over with a higher epoch, recovers the WAL tail, and the
    # old owner's later writes are refused
    await winner.append(sid, batch_of("w2"))
    clock.skew_ms += 60_000
    heartbeat(controller, loser.broker_id, loser.broker_epoch)
    await loser.open_stream(sid, 2)
    assert await loser.recovery.recover_from_wal(winner.config.wal_dir, sid) == 3
    with pytest.raises(FerryError) as err:
        await winner.force_upload(sid)
    assert err.value.error == ErrorCode.STREAM_FENCED
    with pytest.raises(FerryError) as err:
        await winner.append(sid, batch_of("w3"))
    assert err.value.error == ErrorCode.STREAM_FENCED
    await loser.append(sid, batch_of("l2"))
    await loser.close_stream(sid)
    got = [r.key for r in await read_all(loser, sid)]
    assert got == [f"{t}-{i}".encode() for t in ("w1", "w2", "l2") for i in range(3)]
    await a.abort()
    await b.close()


class FailingProxy:
    """An HTTP proxy in front of moto that fails some requests by a seeded plan:
    503 SlowDown before forwarding, 500 after moto acted (a lost reply), or added latency."""

    def __init__(self, target: str, seed: int, error_rate: float, lost_rate: float, slow_rate: float) -> None:
        self.target = target
        self.random = random.Random(seed)
        self.rates = (error_rate, lost_rate, slow_rate)
        self.counts: Counter[str] = Counter()
        self.session: aiohttp.ClientSession | None = None
        self.runner: web.AppRunner | None = None
        self.url = ""

    async def start(self) -> "FailingProxy":
        self.session = aiohttp.ClientSession(auto_decompress=False)
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self.handle)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def stop(self) -> None:
        if self.session:
            await self.session.close()
        if self.runner:
            await self.runner.cleanup()

    @staticmethod
    def _error(status: int, code: str) -> web.Response:
        body = f"<?xml version='1.0'?><Error><Code>{code}</Code><Message>injected</Message></Error>"
        return web.Response(status=status, text=body, content_type="application/xml")

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        draw = self.random.random()
        error_rate, lost_rate, slow_rate = self.rates
        if draw < error_rate:
            self.counts[f"{request.method}:error"] += 1
            return self._error(503, "SlowDown")
        if draw < error_rate + slow_rate:
            self.counts[f"{request.method}:slow"] += 1
            await asyncio.sleep(0.03)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in ("host", "content-length",
                                                                                  "transfer-encoding")}
        assert self.session is not None
        async with self.session.request(request.method, self.target + request.path_qs, headers=headers,
                                        data=body) as resp:
            payload = await resp.read()
            out_headers = {k: v for k, v in resp.headers.items() if k.lower() in ("etag", "content-type",
                                                                                   "content-range", "last-modified")}
            if error_rate + slow_rate <= draw < error_rate + slow_rate + lost_rate and request.method == "PUT":
                self.counts[f"{request.method}:lost"] += 1
                return self._error(500, "InternalError")
            return web.Response(status=resp.status, body=payload, headers=out_headers)


async def test_failing_endpoint_ends_in_retries_without_loss_or_double_commit(s3_server: S3Server, make_storage,
                                                                             controller) -> None:
    proxy = await FailingProxy(s3_server.endpoint_url, seed=11, error_rate=0.15, lost_rate=0.15,
                               slow_rate=0.1).start()
    try:
        inner = S3ObjectStore(s3_config(proxy.url, s3_server.bucket))
        store = RecordingStore(inner, RetryPolicy(max_attempts=10, base_backoff_ms=2, max_backoff_ms=20))
        a = make_storage(1, store, upload_bytes=8 * 1024, upload_interval_ms=20)
        await a.start()
        sids = [await a.create_stream() for _ in range(3)]
        for sid in sids:
            await a.open_stream(sid, 0)
        acked: dict[int, list[str]] = {sid: [] for sid in sids}

        async def producer(sid: int) -> None:
            for i in range(40):
                await a.append(sid, batch_of(f"{sid}-{i}", count=2, value_bytes=900))
                acked[sid].append(f"{sid}-{i}")
                if i % 8 == 7:
                    await a.force_upload(sid)

        await asyncio.gather(*(producer(sid) for sid in sids))
        for sid in sids:
            await a.close_stream(sid)
        assert proxy.counts["PUT:error"] and proxy.counts["PUT:lost"]
        assert store.retries > 0
        check_committed_objects(controller, store, sids)  # type: ignore[arg-type]
        b = make_storage(2, s3_store(s3_server, endpoint=proxy.url), cache_bytes=1)
        await b.start()
        for sid in sids:
            await b.open_stream(sid, 1)
            got = [r.key.decode() for r in await read_all(b, sid)]
            assert got == [f"{t}-{j}" for t in acked[sid] for j in range(2)]
        assert proxy.counts["GET:error"]  # reads were retried too
        await a.close()
        await b.close()
    finally:
        await proxy.stop()


async def test_s3_check_passes_on_the_embedded_server(s3_server: S3Server, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """`ferry s3 check` (what qualifies another S3 implementation) on moto: every check holds."""
    from stream_storage.config import S3Config
    from stream_storage.s3_check import run_checks
    from tools.s3_check import streams_roundtrip
    from stream_storage.s3_store import S3ObjectStore

    config = S3Config(endpoint_url=s3_server.endpoint_url, bucket=s3_server.bucket)
    store = S3ObjectStore(config)
    results = await run_checks(store, "ferry-check/test")
    results.append(await streams_roundtrip(config, str(tmp_path)))
    await store.close()
    assert [r for r in results if not r.ok] == [] and len(results) == 9


def test_a_ranged_get_is_cut_to_the_bytes_asked_whatever_the_server_served() -> None:
    from stream_storage.s3_store import _requested_part

    obj = bytes(range(10))
    assert _requested_part(obj[2:5], "bytes 2-4/10", 2, 5) == obj[2:5]  # a conforming server
    assert _requested_part(obj, "bytes 0-9/10", 0, 1) == obj[:1]  # s3rver's answer to bytes=0-0
    assert _requested_part(obj, None, 3, 6) == obj[3:6]  # Range ignored: 200 with everything
    assert _requested_part(obj, None, 7, None) == obj[7:]
    assert _requested_part(obj[4:], "bytes 4-9/10", 4, None) == obj[4:]
