"""An in-process fake of the broker HTTP API (for fast client tests beside the real end-to-end ones).

Two or more fake brokers share one log per partition (as real brokers share S3); `leader` says
which of them accepts produce. A non-leader answers NOT_LEADER_OR_FOLLOWER like a real broker.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from aiohttp import web

from broker.fetch_guard import sound_batches
from metadata_quorum.kernel.errors import ErrorCode, FerryError
from stream_storage import batches


@dataclass
class FakeCluster:
    topic: str = "t"
    num_partitions: int = 2
    leader: int = 1
    leader_epoch: int = 0
    logs: dict[int, bytearray] = field(default_factory=dict)
    next_offset: dict[int, int] = field(default_factory=dict)
    urls: dict[int, str] = field(default_factory=dict)
    produce_error: dict[int, ErrorCode] = field(default_factory=dict)  # broker id -> forced error
    produce_calls: int = 0
    sequences: dict[tuple[int, int, int], int] = field(default_factory=dict)  # (producer id, epoch, partition) -> next seq
    appended: dict[tuple[int, int, int, int], tuple[int, int]] = field(default_factory=dict)
    lose_next_answer: bool = False  # append, then drop the connection (the client must retry)

    def metadata(self) -> dict:
        return {"offset": 7,
                "brokers": [{"broker_id": b, "url": u} for b, u in sorted(self.urls.items())],
                "controllers": [],
                "topics": [{"name": self.topic, "partitions": [
                    {"partition": p, "leader": self.leader, "leader_epoch": self.leader_epoch,
                     "replicas": [self.leader], "isr": [self.leader]} for p in range(self.num_partitions)]}]}


def error_response(err: FerryError) -> web.Response:
    return web.json_response(err.to_json(), status=err.error.http_status)


def make_app(cluster: FakeCluster, broker_id: int) -> web.Application:
    async def metadata(_req: web.Request) -> web.Response:
        return web.json_response(cluster.metadata())

    async def produce(req: web.Request) -> web.Response:
        cluster.produce_calls += 1
        p = int(req.match_info["partition"])
        if broker_id in cluster.produce_error:
            code = cluster.produce_error[broker_id]
            return error_response(FerryError(code, f"forced {code.name}"))
        if cluster.leader != broker_id:
            return error_response(FerryError(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"broker {broker_id} does not lead"))
        body = bytearray(await req.read())
        infos = batches.validate_batches(body)
        pid, epoch, seq = infos[0].producer_id, infos[0].producer_epoch, infos[0].base_sequence
        base = cluster.next_offset.get(p, 0)
        if pid >= 0:
            expected = cluster.sequences.get((pid, epoch, p), 0)
            if seq < expected:  # a re-sent batch already appended: acknowledge it again, do not append
                base, last = cluster.appended[(pid, epoch, p, seq)]
                return web.json_response({"base_offset": base, "last_offset": last,
                                          "leader_epoch": cluster.leader_epoch, "log_append_time_ms": -1})
            cluster.sequences[(pid, epoch, p)] = seq + sum(i.offset_count for i in infos)
            cluster.appended[(pid, epoch, p, seq)] = (base, base + sum(i.offset_count for i in infos) - 1)
        nxt = batches.assign_offsets(body, base, cluster.leader_epoch)
        cluster.logs.setdefault(p, bytearray()).extend(body)
        cluster.next_offset[p] = nxt
        if cluster.lose_next_answer:
            cluster.lose_next_answer = False
            assert req.transport is not None
            req.transport.close()
            raise ConnectionResetError("answer lost")
        return web.json_response({"base_offset": base, "last_offset": nxt - 1,
                                  "leader_epoch": cluster.leader_epoch, "log_append_time_ms": -1})

    async def fetch(req: web.Request) -> web.Response:
        p = int(req.match_info["partition"])
        if cluster.leader != broker_id:
            return error_response(FerryError(ErrorCode.NOT_LEADER_OR_FOLLOWER, "not leader"))
        offset = int(req.query["offset"])
        data = batches.slice_from(bytes(cluster.logs.get(p, b"")), offset, int(req.query.get("max_bytes", 1 << 20)))
        try:
            data = sound_batches(data, offset)
        except FerryError as exc:
            return error_response(exc)
        return web.Response(body=data, headers={"X-Ferry-High-Watermark": str(cluster.next_offset.get(p, 0)),
                                                "X-Ferry-Log-Start-Offset": "0",
                                                "X-Ferry-Leader-Epoch": str(cluster.leader_epoch)})

    async def offsets(req: web.Request) -> web.Response:
        p = int(req.match_info["partition"])
        spec = req.query.get("spec", "latest")
        return web.json_response({"offset": 0 if spec == "earliest" else cluster.next_offset.get(p, 0),
                                  "timestamp_ms": -1})

    app = web.Application()
    app.router.add_get("/v1/metadata", metadata)
    app.router.add_post("/v1/produce/{topic}/{partition}", produce)
    app.router.add_get("/v1/fetch/{topic}/{partition}", fetch)
    app.router.add_get("/v1/offsets/{topic}/{partition}", offsets)
    return app


async def start_fake_broker(cluster: FakeCluster, broker_id: int) -> web.AppRunner:
    runner = web.AppRunner(make_app(cluster, broker_id))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    cluster.urls[broker_id] = f"http://127.0.0.1:{port}"
    return runner
