"""The controller process: the aiohttp API over one Raft node (docs/controller-api.md).

The Raft node (pysyncobj) runs in a child process of its own (``raft_process.py``), so that
computing operations and serving requests here never starves its elections and heartbeats.

``ferry controller --id N --config FILE``. Writes go to the active controller (any other answers
``NOT_CONTROLLER`` with the leader's id and URL); reads, the committed log (long-poll) and
snapshots are served by every controller from its committed state.
"""
from __future__ import annotations

import argparse
import asyncio
import collections
import functools
import json
import logging
import signal
import sys
import time
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client import CONTENT_TYPE_LATEST

from metadata_quorum.kernel.auth_middleware import controller_auth_middleware
from metadata_quorum.kernel.heap import HeapKeeper
from metadata_quorum.kernel.loop_lag import LoopLagProbe
from metadata_quorum.backpressure import TIMEOUT_HEADER, answer_within_ms, parse_timeout_header
from metadata_quorum.config import ControllerConfig, load_config
from metadata_quorum.kernel.messages import CREATE_TOPICS, TICK
from metadata_quorum.kernel.errors import ErrorCode, FerryError
from metadata_quorum.kernel.http_parsing import OFF_LOOP_BYTES, check_query_names, errors_middleware, query_int, \
    query_str, read_json_object
from metadata_quorum.kernel.validation import as_list, as_mapping, as_str
from metadata_quorum.kernel.clock import mono_to_wall_ms, wall_ms
from metadata_quorum.quorum_controller import SESSION_CREDIT_MIN_MS, QuorumController, now_ms
from metadata_quorum.raft import CommittedLog
from metadata_quorum.raft_node import RaftNode

log = logging.getLogger("ferry.controller")

MAX_BODY_BYTES = 8 * 1024 * 1024
MAX_BATCH_OPS = 10_000
OBSERVER_EXPIRY_MS = 5 * 60 * 1000
LOOP_LAG_WARN_MS = 1000
LOG_ANSWER_CACHE = 16  # encoded /v1/log answers kept for the next broker asking for the same piece
MAX_LOG_RECORDS = 100_000  # per /v1/log answer (a batch cut short is continued by the next)
LOG_RECORDS_ON_LOOP = 500  # a /v1/log answer with more records is encoded on a worker thread
KNOWN_KINDS = frozenset({"write", "read", "log", "snapshot", "quorum", "health"})  # bounded metric labels


def load_operations(max_partitions_per_request: int) -> tuple[dict[str, Any], dict[str, Any]]:
    from metadata_quorum.operations import READ_OPERATIONS, WRITE_OPERATIONS
    from metadata_quorum.ops.topics import create_topics

    write_ops = dict(WRITE_OPERATIONS)
    write_ops[CREATE_TOPICS.name] = functools.partial(create_topics, max_partitions_per_request=max_partitions_per_request)
    return write_ops, dict(READ_OPERATIONS)


def _json(body: Any, status: int = 200) -> web.Response:
    return web.Response(body=_encode(body), status=status, content_type="application/json")


def _encode(body: Any) -> bytes:
    return json.dumps(body, separators=(",", ":")).encode()


async def _json_off_loop(body: Any) -> web.Response:
    """A reply that may be large (thousands of partitions), encoded on a worker thread."""
    return web.Response(body=await asyncio.to_thread(_encode, body), content_type="application/json")


class ControllerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.commit_latency = Histogram(
            "ferry_controller_commit_latency_seconds", "Time from appending a command to its commit (leader)",
            buckets=(0.0005, 0.001, 0.002, 0.003, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
            registry=self.registry)
        self.log_end_offset = Gauge("ferry_controller_log_end_offset", "Next offset of the committed log",
                                    registry=self.registry)
        self.leader = Gauge("ferry_controller_leader_id", "Id of the active controller (-1 = none)",
                            registry=self.registry)
        self.term = Gauge("ferry_controller_raft_term", "Current Raft term (the metadata epoch)",
                          registry=self.registry)
        self.is_active = Gauge("ferry_controller_is_active", "1 on the active controller", registry=self.registry)
        self.requests = Counter("ferry_controller_requests_total", "API requests by kind and outcome",
                                ["kind", "outcome"], registry=self.registry)
        self.log_snapshots = Counter("ferry_controller_log_snapshots_served_total",
                                     "Log reads answered with a snapshot (the reader's offset was dropped)",
                                     registry=self.registry)


class ControllerServer:
    """The HTTP shell around a :class:`QuorumController` and its :class:`RaftNode`."""

    def __init__(self, config: ControllerConfig) -> None:
        self.config = config
        self.metrics = ControllerMetrics()
        self.write_ops, self.read_ops = load_operations(config.max_partitions_per_request)
        self.loop = asyncio.get_running_loop()
        self.ready = asyncio.Event()
        self.state = CommittedLog(config.log_retention_records, on_applied=self._on_applied)
        self.controller = QuorumController(config, self.state, self.write_ops, self.loop,
                                           on_commit_latency=self.metrics.commit_latency.observe)
        self.lost = asyncio.Event()
        self.node = RaftNode(config, self.state, on_state_changed=self.controller.on_state_changed_threadsafe,
                             on_ready=self._on_ready, on_lost=self._on_lost)
        self.controller.start(self.node)
        self.started_ms = now_ms()
        self.closing = False
        # Every broker reads the same pieces of the log: a piece is encoded once, not once per broker
        # (a 5,000-partition topic's creation is ~5 MB of JSON, seconds of a busy controller's loop).
        self._log_answers: collections.OrderedDict[tuple[int, int, int], bytes] = collections.OrderedDict()
        self._snapshot_answer: tuple[int, bytes] | None = None  # the last snapshot answer, encoded
        self.loop_lag = LoopLagProbe()  # how long requests (heartbeats) waited for the loop
        self._ticker: asyncio.Task[None] | None = None

    def _on_ready(self) -> None:
        self.loop.call_soon_threadsafe(self.ready.set)

    def _on_lost(self) -> None:
        self.loop.call_soon_threadsafe(self.lost.set)

    def _on_applied(self, applied: Any) -> None:
        self.controller.on_applied_threadsafe(applied)

    # -- lifecycle ---------------------------------------------------------------------------------

    def app(self) -> web.Application:
        middlewares = [errors_middleware("docs/controller-api.md", self._count_error)]
        if self.config.security is not None:  # bearer tokens (metadata_quorum/kernel/auth.py)
            middlewares.append(controller_auth_middleware(self.config.security, self._count_error))
        app = web.Application(client_max_size=MAX_BODY_BYTES, middlewares=middlewares)
        app.router.add_post("/v1/write/{op}", self.handle_write)
        app.router.add_post("/v1/write", self.handle_write_batch)
        app.router.add_post("/v1/read/{op}", self.handle_read)
        app.router.add_get("/v1/log", self.handle_log)
        app.router.add_get("/v1/snapshot", self.handle_snapshot)
        app.router.add_get("/v1/quorum/status", self.handle_status)
        app.router.add_get("/v1/quorum/replication", self.handle_replication)
        app.router.add_get("/v1/health", self.handle_health)
        app.router.add_get("/metrics", self.handle_metrics)
        return app

    def start_ticker(self) -> None:
        self._ticker = self.loop.create_task(self._tick_loop())
        self.loop_lag.start()

    async def close(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
        self.loop_lag.stop()
        await self.controller.stop()
        await self.loop.run_in_executor(None, self.node.destroy)

    async def _tick_loop(self) -> None:
        """Run ``tick`` on the active controller, expire stuck commands, refresh gauges."""
        interval_s = self.config.tick_interval_ms / 1000
        while True:
            slept_from = time.monotonic()
            await asyncio.sleep(interval_s)
            late_ms = (time.monotonic() - slept_from - interval_s) * 1000
            if late_ms > LOOP_LAG_WARN_MS:
                log.warning("controller event loop held up %.0f ms", late_ms)
            try:
                if late_ms >= SESSION_CREDIT_MIN_MS:
                    # the loop was held (a long request, a busy machine): heartbeats waited unread
                    self.controller.extend_sessions(late_ms)
                if not self.controller.is_leader and self.state.pending_records > 0:
                    # a follower's image: replayed here, off the Raft thread (see CommittedLog)
                    await self.loop.run_in_executor(None, self.state.materialize)
                self.controller.expire_inflight()
                if self.controller.active:
                    self.controller.enqueue_internal(TICK.name)
                    self.controller.sample_voters()
                leader_id, _url = self.controller.leader_hint()
                self.metrics.leader.set(-1 if leader_id is None else leader_id)
                self.metrics.term.set(self.node.term)
                self.metrics.log_end_offset.set(self.state.high_watermark)
                self.metrics.is_active.set(1 if self.controller.active else 0)
            except Exception:
                log.exception("controller tick failed")

    # -- middleware & helpers ------------------------------------------------------------------------

    def _count_error(self, request: web.Request, error: FerryError) -> None:
        kind = request.path.split("/")[2] if request.path.count("/") > 1 else "other"
        self.metrics.requests.labels(kind if kind in KNOWN_KINDS else "other", error.error.name).inc()

    async def committed_image(self) -> Any:
        """The committed image, replaying what a follower has pending on a worker thread.

        Replaying the records of a large operation takes a second or more; on the loop it would
        hold up every request this controller serves.
        """
        if self.state.pending_records > 0:
            return await self.loop.run_in_executor(None, self.state.materialize)
        return self.state.image

    def _require_ready(self) -> None:
        if not self.ready.is_set():
            raise FerryError(ErrorCode.REPLICA_NOT_AVAILABLE,
                             f"controller {self.config.node_id} is still loading the metadata log")

    # -- writes & reads --------------------------------------------------------------------------------

    async def handle_write(self, request: web.Request) -> web.Response:
        check_query_names(request.query, ())
        op = request.match_info["op"]
        args = await read_json_object(request)
        timeout_ms = self._answer_within_ms(request)
        reply, offset = await self.controller.write(op, args, timeout_ms / 1000)
        self.metrics.requests.labels("write", "NONE").inc()
        if request.content_length is not None and request.content_length >= OFF_LOOP_BYTES:
            return await _json_off_loop({"reply": reply, "offset": offset})  # a large request's reply is large
        return _json({"reply": reply, "offset": offset})

    def _answer_within_ms(self, request: web.Request) -> int:
        """This controller's request timeout, or less than the client says it waits (backpressure.py)."""
        return answer_within_ms(self.config.request_timeout_ms,
                                parse_timeout_header(request.headers.get(TIMEOUT_HEADER)))

    async def handle_write_batch(self, request: web.Request) -> web.Response:
        """Several independent write operations in one request: ``{"ops": [{"op", "args"}, ...]}``.

        Each runs alone (not atomically with the others); answers come back in order.
        """
        check_query_names(request.query, ())
        body = await read_json_object(request)
        ops = as_list(body.get("ops"), "ops", MAX_BATCH_OPS)
        if not ops:
            raise FerryError(ErrorCode.INVALID_REQUEST, f"'ops' must be a list of 1..{MAX_BATCH_OPS} operations")
        for item in ops:
            entry = as_mapping(item, "ops[]")
            name = as_str(entry.get("op"), "ops[].op", 200)
            as_mapping(entry.get("args", {}), "ops[].args")
            if name not in self.write_ops:
                raise FerryError(ErrorCode.INVALID_REQUEST, f"unknown write operation {name!r}")
        timeout_ms = self._answer_within_ms(request)
        timeout_s = timeout_ms / 1000
        # Refused operations (load) come back as failed futures; not being the leader raises.
        futures = self.controller.submit_many([(item["op"], item.get("args", {})) for item in ops], timeout_ms)
        # What has not run by then is dropped from the queue (a cancelled operation is skipped) and
        # answered REQUEST_TIMED_OUT before the client gives up and sends it again.
        _done, pending = await asyncio.wait(futures, timeout=timeout_s)
        for fut in pending:
            fut.cancel()
        answers: list[dict[str, Any]] = []
        for item, fut in zip(ops, futures, strict=True):
            if fut.cancelled():
                answers.append(self.controller.timed_out(item["op"], timeout_s).to_json())
                continue
            exc = fut.exception()
            if isinstance(exc, FerryError):
                answers.append(exc.to_json())
            elif exc is not None:
                answers.append(FerryError(ErrorCode.UNKNOWN_SERVER_ERROR, repr(exc)).to_json())
            else:
                reply, offset = fut.result()
                answers.append({"reply": reply, "offset": offset})
        if all(a.get("error") == ErrorCode.NOT_CONTROLLER.name for a in answers):
            # No operation was answered: the client retries the whole request on the leader (as for
            # a single write, one that was in flight when leadership was lost may still have committed).
            first = futures[0].exception() if not futures[0].cancelled() else None
            raise first if isinstance(first, FerryError) else self.controller.timed_out("write", timeout_s)
        self.metrics.requests.labels("write_batch", "NONE").inc()
        return _json({"results": answers})

    async def handle_read(self, request: web.Request) -> web.Response:
        """A read operation on the committed image; ``?consistency=leader`` only on the active controller.

        The active controller answers only after its first record committed, so its committed image
        holds every write acknowledged so far (read-your-writes across clients); any other
        controller may lag by the records it has not yet applied.
        """
        self._require_ready()
        check_query_names(request.query, ("consistency",))
        consistency = query_str(request.query, "consistency", "any")
        if consistency not in ("any", "leader"):
            raise FerryError(ErrorCode.INVALID_REQUEST, f"consistency must be 'any' or 'leader', got {consistency!r}")
        if consistency == "leader" and not self.controller.active:
            self.controller._check_leader()
            raise FerryError(ErrorCode.NOT_CONTROLLER, "the active controller is still committing its first record",
                             {"leader_id": self.config.node_id, "leader_url": self.config.me.url})
        op = request.match_info["op"]
        fn = self.read_ops.get(op)
        if fn is None:
            raise FerryError(ErrorCode.INVALID_REQUEST, f"unknown read operation {op!r}; known: {sorted(self.read_ops)}")
        args = await read_json_object(request)
        image = await self.committed_image()
        # on a worker thread: a description of thousands of partitions takes the loop's time
        # otherwise (the image is immutable, so reading it there is safe)
        body = await asyncio.to_thread(lambda: _encode({"reply": fn(image, args), "offset": image.offset}))
        return web.Response(body=body, content_type="application/json")

    # -- the committed log ---------------------------------------------------------------------------------

    async def handle_log(self, request: web.Request) -> web.Response:
        self._require_ready()
        check_query_names(request.query, ("offset", "max_wait_ms", "max_records"))
        offset = query_int(request.query, "offset", minimum=0)
        max_wait_ms = min(query_int(request.query, "max_wait_ms", 0, minimum=0), self.config.long_poll_max_wait_ms)
        max_records = min(query_int(request.query, "max_records", 10_000, minimum=1), MAX_LOG_RECORDS)
        deadline = time.monotonic() + max_wait_ms / 1000
        self.controller.log_waiters += 1  # before reading the high watermark (see on_applied_threadsafe)
        try:
            while self.state.high_watermark <= offset and offset >= self.state.log_start_offset and not self.closing:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                changed = self.controller.log_changed
                if self.state.high_watermark > offset:
                    break
                try:
                    await asyncio.wait_for(changed.wait(), remaining)
                except asyncio.TimeoutError:
                    break
        finally:
            self.controller.log_waiters -= 1
        if offset < self.state.log_start_offset:
            # answered with a snapshot: building one is seconds of work at tens of thousands of
            # partitions, which on the loop would hold heartbeats and writes that long
            piece = await asyncio.to_thread(self.state.read, offset, max_records, True)
        else:
            piece = self.state.read(offset, max_records, cut_batches=True)
        if piece.snapshot_offset is not None:
            self.metrics.log_snapshots.inc()
            log.info("log read at offset %d (log starts at %d) answered with the snapshot at %d",
                     offset, self.state.log_start_offset, piece.snapshot_offset)
            cached_snapshot = self._snapshot_answer
            if cached_snapshot is None or cached_snapshot[0] != piece.snapshot_offset:
                # encoded once per snapshot: a reader that timed out on it asks again at once
                body = await asyncio.to_thread(_encode, {
                    "snapshot": {"offset": piece.snapshot_offset, "records": piece.snapshot_records},
                    "high_watermark": piece.high_watermark})
                cached_snapshot = self._snapshot_answer = (piece.snapshot_offset, body)
            return web.Response(body=cached_snapshot[1], content_type="application/json")
        key = (piece.records[0][0], piece.records[-1][0], piece.high_watermark) if piece.records else None
        cached = self._log_answers.get(key) if key is not None else None
        if cached is None:
            answer = {"records": [{"offset": o, "record": r} for o, r in piece.records],
                      "high_watermark": piece.high_watermark, "batch_end": piece.batch_end}
            cached = await asyncio.to_thread(_encode, answer) if len(piece.records) > LOG_RECORDS_ON_LOOP \
                else _encode(answer)
            if key is not None:
                self._log_answers[key] = cached
                while len(self._log_answers) > LOG_ANSWER_CACHE:
                    self._log_answers.popitem(last=False)
        return web.Response(body=cached, content_type="application/json")

    async def handle_snapshot(self, request: web.Request) -> web.Response:
        self._require_ready()
        offset, records = await asyncio.to_thread(self.state.snapshot)
        return await _json_off_loop({"offset": offset, "records": records})

    # -- quorum status ----------------------------------------------------------------------------------

    def _voter_rows(self) -> list[dict[str, Any]]:
        sampled = self.controller.sample_voters() if self.controller.is_leader else {}
        hw = self.state.high_watermark
        rows = []
        for nid in sorted(self.config.controllers):
            s = sampled.get(nid, {"log_end_offset": -1, "last_fetch_ms": -1, "last_caught_up_ms": -1})
            rows.append({
                "node_id": nid,
                "directory_id": self.config.directory_id(nid),
                "log_end_offset": s["log_end_offset"],
                "lag": max(0, hw - s["log_end_offset"]) if s["log_end_offset"] >= 0 else -1,
                "last_fetch_timestamp": s["last_fetch_ms"],
                "last_caught_up_timestamp": s["last_caught_up_ms"],
                "status": "Leader" if nid == self.config.node_id and self.controller.is_leader else "Follower",
            })
        return rows

    def _observer_rows(self) -> list[dict[str, Any]]:
        """Brokers that heartbeat to this controller, like KRaft's observers (forgotten after 5 minutes)."""
        hw = self.state.high_watermark
        now = now_ms()
        brokers = self.state.image.cluster.brokers
        rows = []
        for broker_id, obs in sorted(self.controller.observers.items()):
            if now - obs.last_fetch_ms > OBSERVER_EXPIRY_MS:
                continue
            leo = obs.metadata_offset + 1
            reg = brokers.get(broker_id)
            dir_id = reg.log_dirs[0].dir_id if reg is not None and reg.log_dirs else ""
            rows.append({"node_id": broker_id, "directory_id": dir_id, "log_end_offset": leo,
                         "lag": max(0, hw - leo), "last_fetch_timestamp": mono_to_wall_ms(obs.last_fetch_ms),
                         "last_caught_up_timestamp": mono_to_wall_ms(obs.last_caught_up_ms) if obs.last_caught_up_ms
                         else 0, "status": "Observer"})
        return rows

    def _require_leader(self) -> None:
        if not self.controller.is_leader:
            self.controller._check_leader()

    async def handle_status(self, request: web.Request) -> web.Response:
        self._require_leader()
        voters = self._voter_rows()
        now = wall_ms()  # the voters' timestamps are wall time
        followers = [v for v in voters if v["status"] == "Follower"]
        max_lag = max((v["lag"] for v in followers if v["lag"] >= 0), default=0)
        lag_times = [now - v["last_caught_up_timestamp"] for v in followers if v["last_caught_up_timestamp"] > 0]
        leader_id, leader_url = self.controller.leader_hint()
        return _json({
            "cluster_id": self.config.cluster_id,
            "leader_id": leader_id if leader_id is not None else -1,
            "leader_url": leader_url,
            "leader_epoch": self.controller.epoch,
            "high_watermark": self.state.high_watermark,
            "max_follower_lag": max_lag,
            "max_follower_lag_time_ms": max(lag_times, default=0),
            "current_voters": [{"id": v["node_id"], "directory_id": v["directory_id"],
                                "endpoints": [f"CONTROLLER://{self.config.controllers[v['node_id']].http}"]}
                               for v in voters],
            "current_observers": [{"id": o["node_id"], "directory_id": o["directory_id"]}
                                  for o in self._observer_rows()],
        })

    async def handle_replication(self, request: web.Request) -> web.Response:
        self._require_leader()
        return _json({"high_watermark": self.state.high_watermark,
                      "replicas": self._voter_rows() + self._observer_rows()})

    async def handle_health(self, request: web.Request) -> web.Response:
        leader_id, leader_url = self.controller.leader_hint()
        return _json({
            "node_id": self.config.node_id,
            "cluster_id": self.config.cluster_id,
            "ready": self.ready.is_set(),
            "is_leader": self.controller.is_leader,
            "active": self.controller.active,
            "leader_id": leader_id if leader_id is not None else -1,
            "leader_url": leader_url,
            "term": self.node.term,
            "high_watermark": self.state.high_watermark,
            "log_start_offset": self.state.log_start_offset,
            "image_offset": self.state.materialized_offset,
            "queue_depth": self.controller.queue_depth,
            "shed_ops": self.controller.shed_ops,
            "raft_tick_gap_max_ms": round(self.node.tick_gaps.max_gap_ms, 1),
            "raft_tick_stalls": self.node.tick_gaps.stalls,
            "raft_log_synced": self.node.log_sync.synced,
            "raft_log_syncs": self.node.log_sync.syncs,
            "raft_log_appends": self.node.log_sync.appends,
            "raft_log_sync_max_ms": self.node.log_sync.sync_max_ms,
            **self.loop_lag.report(),
            "uptime_ms": now_ms() - self.started_ms,
        })

    async def handle_metrics(self, request: web.Request) -> web.Response:
        self.metrics.log_end_offset.set(self.state.high_watermark)
        return web.Response(body=generate_latest(self.metrics.registry),
                            headers={"Content-Type": CONTENT_TYPE_LATEST})


async def serve(config: ControllerConfig, stop: asyncio.Event | None = None, keep_heap: bool = False) -> None:
    """Run one controller until ``stop`` is set (or SIGTERM/SIGINT); ``keep_heap``: this process is
    the controller's own, and its garbage collector follows ``kernel/heap.py``."""
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError):
            pass
    server = ControllerServer(config)
    runner = web.AppRunner(server.app(), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, config.http_host, config.http_port, reuse_address=True, shutdown_timeout=1.0)
    await site.start()
    server.start_ticker()
    heap = HeapKeeper(loop) if keep_heap else None
    if heap is not None:
        heap.install()
    log.info("controller %d serving http://%s (raft %s)", config.node_id, config.me.http, config.me.raft)
    waiters = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(server.lost.wait())]
    try:
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        if server.lost.is_set():
            log.error("controller %d stops: its Raft process is gone", config.node_id)
    finally:
        for waiter in waiters:
            waiter.cancel()
        server.closing = True
        server.controller.log_changed.set()  # long-polls answer now instead of at their deadline
        await runner.cleanup()
        await server.close()
        if heap is not None:
            heap.uninstall()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ferry controller", description="Run one metadata-quorum controller.")
    parser.add_argument("--id", type=int, required=True, help="this controller's id in the config")
    parser.add_argument("--config", required=True, help="the quorum's JSON config file")
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("pysyncobj").setLevel(logging.WARNING)
    # Commits arrive on the thread reading the Raft process: hand the interpreter over to it sooner
    # than the default 5 ms so that a busy event loop does not delay them (commit latency).
    sys.setswitchinterval(0.0005)
    try:
        config = load_config(args.config, args.id)
    except FerryError as e:
        print(f"ferry controller: {e}", file=sys.stderr)
        return 2
    try:
        asyncio.run(serve(config, keep_heap=True))
    except OSError as e:
        print(f"ferry controller {config.node_id}: cannot serve on {config.me.http}: {e.strerror or e}",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
