"""One chaos run: a local cluster behind an S3 fault proxy, workloads, the seeded schedule, the verdict.

The run, in order:

1. the embedded S3 (moto server) and the fault proxy in front of it (seeded like the schedule);
   with ``disk_full`` in the faults, each broker's log dir is a small tmpfs (where the machine
   allows ``mount``; otherwise the fault is dropped and the report says so);
2. a ``LocalCluster`` (3 controllers, 3 brokers) whose brokers use the proxy as their S3;
3. workloads: Ferry's HTTP producer on one topic (each acknowledgement kept with its offset),
   librdkafka's idempotent producer (acks=all) and a consumer group of two on another, and
   librdkafka's transactional producer with a live read_committed reader on a third
   (``txn_workload.py``); every second move of the schedule moves a partition of the
   transactional topic or the ``__transaction_state`` partition coordinating it instead of an
   HTTP partition;
4. the schedule (``schedule.py``): each fault applied at its time and healed at its end; process
   faults one at a time, each waiting until the previous one's process serves again;
5. after the run: every broker serving again, producers stopped, the group drained; then every
   partition is read back (the transactional topic with read_committed while a transaction is
   left open), the metadata log fetched from a controller, every process's health read, and
   ``checker.py`` and ``txn_checker.py`` decide. The report (JSON), a timeline PNG and the logs stay in the
   output dir, with the command that replays the seed.
"""
from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import shutil
import time
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

from broker.groups import partition_for_group
from broker.kafka.txn_apis import DEFAULT_TXN_PARTITIONS
from broker.kafka.txn_apis import TXN_TOPIC as TXN_STATE_TOPIC
from metadata_quorum.client import ControllerClient
from metadata_quorum.kernel.clock import CHAOS_CLOCK_ENV
from metadata_quorum.kernel.errors import FerryError
from stream_storage.s3_server import S3Server
from tools.admin import Admin
from tools.chaos.disk import FILLER, RESERVED_BYTES, TMPFS_BYTES, fill, mount_tmpfs, save_and_unmount, unmount
from tools.chaos.checker import (Acked, Verdict, Violation, check_health, check_metadata, check_records,
                                 AckTiming, LeaseCut, check_leases, check_serve_again, verdict)
from tools.chaos.fault_proxy import FaultProxy, FaultSettings
from tools.chaos import clock_faults, net_faults
from tools.chaos.net import Network
from tools.chaos.schedule import ALL_FAULTS, NET_FAULTS, FaultEvent, ScheduleSpec, make_schedule
from tools.chaos.timeline import draw
from tools.chaos.txn_checker import Outcome, check_transactions
from tools.chaos.txn_workload import TxnLoad
from tools.client import TopicPartition, read_all
from tools.cluster import LocalCluster
from tools.kafka_workload import KafkaLoad
from tools.move_workload import ProduceLoad

HTTP_TOPIC = "chaos-http"
KAFKA_TOPIC = "chaos-kafka"
TXN_TOPIC = "chaos-txn"
TXN_ID = "chaos-txn"
Heal = Callable[[], Awaitable[None]]


@dataclass
class ChaosOptions:
    seed: int
    duration_s: float
    faults: frozenset[str] = frozenset(ALL_FAULTS)
    out_dir: str = "chaos-out"
    brokers: int = 3
    http_partitions: int = 6
    kafka_partitions: int = 3
    http_rate_per_s: float = 40.0  # per partition
    kafka_rate_per_s: float = 150.0
    txn_partitions: int = 3
    txn_per_s: float = 5.0  # transactions per second, each of 2-12 records
    heal_timeout_s: float = 60.0
    net: bool = False  # every node in its own network namespace (net.py); the network faults possible

    def replay_command(self) -> str:
        default = frozenset(ALL_FAULTS) | (frozenset(NET_FAULTS) if self.net else frozenset())
        faults = "" if self.faults == default else f" --faults {','.join(sorted(self.faults))}"
        return f"ferry chaos run --seed {self.seed} --duration {self.duration_s:g}{' --net' if self.net else ''}{faults}"


@dataclass
class Applied:
    """What the runner did for one scheduled event (times in seconds since the workload started)."""

    kind: str
    planned_s: float
    start_s: float
    end_s: float
    what: str
    error: str | None = None
    healed_s: float | None = None  # when the process served again (process faults)
    leaseless: list[int] = field(default_factory=list)  # network faults: brokers that could not renew a lease
    cut_s: float = 0.0  # network faults: when every link of the cut was down


@dataclass
class RunState:
    t0: float = 0.0
    applied: list[Applied] = field(default_factory=list)
    samples: list[tuple[float, int, int]] = field(default_factory=list)
    tmpfs: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    load_stop_s: float = float("inf")  # when the HTTP producer was stopped

    def now(self) -> float:
        return time.monotonic() - self.t0


class ChaosRun:
    def __init__(self, options: ChaosOptions) -> None:
        self.o = options
        self.out = os.path.abspath(os.path.join(options.out_dir, f"seed-{options.seed}"))
        self.state = RunState()
        self.s3: S3Server | None = None
        self.proxy: FaultProxy | None = None
        self.cluster: LocalCluster | None = None
        self.admin: Admin | None = None
        self.http: ProduceLoad | None = None
        self.kafka: KafkaLoad | None = None
        self.txn: TxnLoad | None = None
        self._moves: dict[FaultEvent, TopicPartition] = {}
        self._process_lock = asyncio.Lock()
        self.faults = options.faults if options.net else options.faults - set(NET_FAULTS)
        self.net: Network | None = None
        self.clock_dir: str | None = None  # clock_step: the processes' wall-clock offsets (kernel/clock.py)
        self.clock_spans: list[clock_faults.StepSpan] = []
        self._clock_env: str | None = None

    # ------------------------------------------------------------------ set-up
    def _prepare(self) -> None:
        shutil.rmtree(self.out, ignore_errors=True)
        os.makedirs(self.out)
        placements = {}
        if self.o.net:  # the S3 server and its proxy in the "s3" namespace, each node in its own
            self.net = Network.create()
            plan = self.net.plan
            self.state.notes.append(f"network {plan.bridge}: 10.200.{plan.subnet}.0/24, clients at {plan.gateway}")
            placements = {n: plan.placement(n) for n in plan.nodes if n != "s3"}
        if "clock_step" in self.faults:  # every process this run starts takes its wall clock's offset from here
            self.clock_dir = os.path.join(self.out, "clock")
            os.makedirs(self.clock_dir)
            self._clock_env = os.environ.get(CHAOS_CLOCK_ENV)
            os.environ[CHAOS_CLOCK_ENV] = self.clock_dir
        s3_prefix = self.net.plan.prefix("s3") if self.net is not None else ()
        self.s3 = S3Server(bucket="ferry", log_path=os.path.join(self.out, "s3.log"), prefix=s3_prefix).start()
        self.proxy = FaultProxy(self.s3.endpoint_url, self.o.seed, os.path.join(self.out, "s3-proxy.log"),
                                host=self.net.plan.ip("s3") if self.net is not None else "127.0.0.1",
                                prefix=s3_prefix).start()
        state_dir = os.path.join(self.out, "cluster")
        overrides: dict[str, Any] = {"log_dir_check_interval_ms": 500}
        if "disk_full" in self.faults:
            for bid in range(1, self.o.brokers + 1):
                path = os.path.join(state_dir, f"broker-{bid}", "d0")
                reason = mount_tmpfs(path, TMPFS_BYTES)
                if reason is not None:
                    self.state.notes.append(f"disk_full dropped: cannot mount a tmpfs here ({reason})")
                    self.faults = self.faults - {"disk_full"}
                    break
                self.state.tmpfs.append(path)
            if "disk_full" in self.faults:
                overrides["log_dir_reserved_bytes"] = RESERVED_BYTES
        self.cluster = LocalCluster(state_dir, brokers=self.o.brokers, s3_endpoint=self.proxy.endpoint_url,
                                    broker_overrides=overrides, placements=placements)
        self.cluster.start()

    def schedule(self) -> list[FaultEvent]:
        return make_schedule(ScheduleSpec(seed=self.o.seed, duration_s=self.o.duration_s, faults=self.faults,
                                          brokers=self.o.brokers, partitions=self.o.http_partitions))

    # ------------------------------------------------------------------ the run
    async def run(self) -> dict[str, Any]:
        started = time.monotonic()
        try:
            await asyncio.to_thread(self._prepare)
            assert self.cluster is not None
            self.admin = await Admin(bootstrap_controllers=self.cluster.controller_bootstrap, timeout_ms=60_000).start()
            await self.admin.create_topic(HTTP_TOPIC, self.o.http_partitions)
            await self.admin.create_topic(KAFKA_TOPIC, self.o.kafka_partitions)
            await self.admin.create_topic(TXN_TOPIC, self.o.txn_partitions)
            for topic, n in ((HTTP_TOPIC, self.o.http_partitions), (KAFKA_TOPIC, self.o.kafka_partitions),
                             (TXN_TOPIC, self.o.txn_partitions)):
                for p in range(n):
                    await self.admin.wait_for_leader(TopicPartition(topic, p))
            events = self.schedule()
            self._moves = move_plan(events, self.o.txn_partitions)
            tps = [TopicPartition(HTTP_TOPIC, p) for p in range(self.o.http_partitions)]
            self.http = await ProduceLoad(self.cluster.bootstrap_servers, tps, rate_per_s=self.o.http_rate_per_s,
                                          delivery_timeout_ms=60_000).start()
            self.kafka = KafkaLoad(self.cluster.kafka_bootstrap, KAFKA_TOPIC, self.o.kafka_partitions,
                                   per_s=self.o.kafka_rate_per_s, group=f"chaos-{self.o.seed}",
                                   client_config={"logger": self._kafka_logger()}).start()
            self.txn = TxnLoad(self.cluster.kafka_bootstrap, TXN_TOPIC, self.o.txn_partitions, self.o.seed,
                               transactional_id=TXN_ID, per_s=self.o.txn_per_s,
                               client_config={"logger": self._kafka_logger()}).start()
            self.state.t0 = time.monotonic()
            self.state.notes.append(f"faults' times count from {time.strftime('%H:%M:%S', time.localtime())}")
            sampler = asyncio.create_task(self._sample())
            await asyncio.gather(*(self._apply(e) for e in events))
            await asyncio.sleep(max(0.0, self.o.duration_s - self.state.now()))
            await self._heal_everything()
            self.state.load_stop_s = self.state.now()
            await self.http.stop()
            group_complete = await asyncio.to_thread(self.kafka.stop, 60.0)
            await asyncio.to_thread(self.txn.stop)
            sampler.cancel()
            self._sample_once()
            result = await self._check(events, group_complete)
        finally:
            await self._tear_down()
        result["wall_s"] = round(time.monotonic() - started, 1)
        # the campaign's report, written once at its end
        with open(os.path.join(self.out, "report.json"), "w", encoding="utf-8") as f:  # noqa: ASYNC230
            json.dump(result, f, indent=2)
        return result

    def _kafka_logger(self) -> logging.Logger:
        """librdkafka's own log (every disconnect of a fault) goes to a file, not the terminal."""
        logger = logging.getLogger(f"ferry.chaos.kafka.{self.o.seed}")
        logger.propagate = False
        logger.setLevel(logging.INFO)
        for old in list(logger.handlers):
            logger.removeHandler(old)
            old.close()
        logger.addHandler(logging.FileHandler(os.path.join(self.out, "kafka-clients.log")))
        return logger

    async def _sample(self) -> None:
        while True:
            self._sample_once()
            await asyncio.sleep(0.5)

    def _sample_once(self) -> None:
        http = sum(len(a) for a in self.http.acks.values()) if self.http else 0
        kafka = self.kafka.acknowledged() if self.kafka else 0
        self.state.samples.append((round(self.state.now(), 3), http, kafka))

    async def _sleep_until(self, at_s: float) -> None:
        await asyncio.sleep(max(0.0, at_s - self.state.now()))

    async def _apply(self, e: FaultEvent) -> None:
        await self._sleep_until(e.start_s)
        if e.kind in ("s3_errors", "s3_latency"):
            assert self.proxy is not None
            start = self.state.now()
            settings = FaultSettings(e.rate, e.after_fraction) if e.kind == "s3_errors" else \
                FaultSettings(latency_ms=e.latency_ms)
            await asyncio.to_thread(self.proxy.set_faults, settings)
            await self._sleep_until(e.end_s)
            await asyncio.to_thread(self.proxy.set_faults, FaultSettings())
            self.state.applied.append(Applied(e.kind, e.start_s, start, self.state.now(), e.what()))
            return
        if e.kind == "reassign":
            await self._reassign(e)
            return
        if e.kind == "clock_step":
            await self._track_fault(e, self._inject_clock, e.what())
        elif e.kind in NET_FAULTS:
            await self._track_fault(e, self._inject_net, e.what())
        else:
            await self._track_fault(e, self._inject, "")

    async def _track_fault(self, e: FaultEvent, inject: Callable[[FaultEvent, Applied], Awaitable[Heal]],
                           what: str) -> None:
        """A fault of the process track (process, network and clock faults): one at a time, the
        previous one healed; applied, held until its end, healed, recorded."""
        async with self._process_lock:
            start = self.state.now()
            record = Applied(e.kind, e.start_s, start, start, what)
            try:
                heal = await inject(e, record)
                await self._sleep_until(max(e.end_s, start + (e.end_s - e.start_s) / 2))
                record.end_s = self.state.now()
                await heal()
                record.healed_s = self.state.now()
            except Exception as exc:  # noqa: BLE001 - a fault that could not be applied is reported, not fatal
                record.error = f"{type(exc).__name__}: {exc}"[:300]
                record.end_s = max(record.end_s, self.state.now())
                if e.kind in NET_FAULTS and self.net is not None:
                    await asyncio.to_thread(self.net.heal_all)
            self.state.applied.append(record)

    async def _inject_net(self, e: FaultEvent, record: Applied) -> Heal:
        assert self.net is not None and self.cluster is not None

        def noted(cut: net_faults.NetCut) -> None:
            record.what, record.leaseless = cut.what, net_faults.leaseless_brokers(cut)
            record.cut_s = self.state.now()
        return await net_faults.inject(self.net, self.cluster, e, self.o.heal_timeout_s, noted)

    async def _inject_clock(self, e: FaultEvent, record: Applied) -> Heal:
        """Step one process's wall clock (``clock_faults.py``); the heal steps it back. Without a
        cut, the committed metadata offsets from the step to a session after the step back are
        kept for ``check_clock_steps``."""
        c = self.cluster
        assert c is not None and c.quorum is not None and self.clock_dir is not None
        clock_dir = self.clock_dir
        leader = await asyncio.to_thread(c.controller_leader, 20.0)
        node = f"c{leader}" if e.node == "leader" else e.node
        pid = c.quorum.procs[int(node[1:])].pid if node.startswith("c") else c.broker_procs[int(node[1:])].pid
        with_cut = e.peer == clock_faults.WITH_CUT and node.startswith("b")
        record.what = clock_faults.describe_step(node, e.step_ms, with_cut)
        before = await asyncio.to_thread(self._committed_offset)
        cut_heal: Heal | None = None
        if with_cut:
            cut = dataclasses.replace(e, kind="net_broker_controllers", target=int(node[1:]), node="", peer="")
            cut_heal = await self._inject_net(cut, record)
            record.what = clock_faults.describe_step(node, e.step_ms, with_cut)
        await asyncio.to_thread(clock_faults.step, clock_dir, pid, e.step_ms)

        async def heal() -> None:
            await asyncio.to_thread(clock_faults.step, clock_dir, pid, 0)
            if cut_heal is not None:
                await cut_heal()
                return
            await asyncio.sleep(self._session_s() + 1.0)  # what the step alone could do, it has done
            after = await asyncio.to_thread(self._committed_offset)
            self.clock_spans.append(clock_faults.StepSpan(record.what, before, after))
        return heal

    def _committed_offset(self) -> int:
        """The highest committed metadata offset the running controllers report (-1: none answers)."""
        c = self.cluster
        assert c is not None and c.quorum is not None
        marks = [int(h["high_watermark"]) for nid in c.quorum.running() if (h := c.quorum.health(nid))
                 and "high_watermark" in h]
        return max(marks, default=-1)

    def _session_s(self) -> float:
        assert self.cluster is not None
        return float(self.cluster.controller_overrides.get("session_timeout_ms", 4000)) / 1000

    async def _inject(self, e: FaultEvent, record: Applied) -> Heal:
        c = self.cluster
        assert c is not None and self.admin is not None
        if e.kind == "broker_kill":
            bid = int(e.target or 1)
            record.what = f"kill -9 broker {bid}"
            await asyncio.to_thread(c.kill_broker, bid)

            async def heal_kill() -> None:
                await asyncio.to_thread(c.start_broker, bid, False)
                await asyncio.to_thread(c.wait_brokers, [bid], self.o.heal_timeout_s)
            return heal_kill
        if e.kind == "controller_kill":
            leader = await asyncio.to_thread(c.controller_leader, 20.0)
            record.what = f"kill -9 controller {leader} (the active one)"
            await asyncio.to_thread(c.kill_controller, leader)

            async def heal_controller() -> None:
                assert c.quorum is not None
                await asyncio.to_thread(c.start_controller, leader)
                await asyncio.to_thread(c.quorum.wait_ready, leader, self.o.heal_timeout_s)
            return heal_controller
        if e.kind == "owner_pause":
            owner = await self._owner(TopicPartition(HTTP_TOPIC, int(e.partition or 0)))
            record.what = f"SIGSTOP broker {owner} (owner of {HTTP_TOPIC}-{e.partition})"
            await asyncio.to_thread(c.pause_broker, owner)

            async def heal_pause() -> None:
                await asyncio.to_thread(c.resume_broker, owner)
                await asyncio.to_thread(c.wait_brokers, [owner], self.o.heal_timeout_s)
            return heal_pause
        if e.kind == "disk_full":
            bid = int(e.target or 1)
            path = os.path.join(c.state_dir, f"broker-{bid}", "d0")
            filler = os.path.join(path, FILLER)
            free = shutil.disk_usage(path).free
            size = max(0, free - 64 * 1024)
            record.what = f"fill broker {bid}'s log dir ({size // (1024 * 1024)} MiB, leaving 64 KiB)"
            await asyncio.to_thread(fill, filler, size)

            async def heal_disk() -> None:
                os.remove(filler)
            return heal_disk
        raise ValueError(f"unknown process fault {e.kind}")

    async def _owner(self, tp: TopicPartition) -> int:
        assert self.admin is not None
        state = await self.admin.wait_for_leader(tp, timeout_s=20.0)
        return state.leader

    async def _reassign(self, e: FaultEvent) -> None:
        assert self.admin is not None and self.cluster is not None
        tp = self._moves.get(e, TopicPartition(HTTP_TOPIC, int(e.partition or 0)))
        start = self.state.now()
        record = Applied(e.kind, e.start_s, start, start, f"move {tp}")
        try:
            owner = await self._owner(tp)
            running = sorted(set(self.cluster.broker_procs) - self.cluster.stopped_brokers)
            candidates = [b for b in running if b != owner]
            target = int(e.target or 1)
            if target not in candidates:
                target = candidates[(target - 1) % len(candidates)] if candidates else owner
            record.what = f"move {tp} from broker {owner} to {target}"
            await self.admin.move_partition(tp, [target])
        except Exception as exc:  # noqa: BLE001 - a refused move (the cluster is mid-fault) is not a violation
            record.error = f"{type(exc).__name__}: {exc}"[:300]
        self.state.applied.append(record)

    async def _heal_everything(self) -> None:
        """Whatever is still broken (nothing, normally): S3 faults off, every process back."""
        assert self.cluster is not None and self.proxy is not None
        await asyncio.to_thread(self.proxy.set_faults, FaultSettings())
        async with self._process_lock:
            if self.net is not None:
                await asyncio.to_thread(self.net.heal_all)
            for bid in sorted(self.cluster.stopped_brokers):
                await asyncio.to_thread(self.cluster.resume_broker, bid)
            for bid in range(1, self.o.brokers + 1):
                if bid not in self.cluster.broker_procs:
                    await asyncio.to_thread(self.cluster.start_broker, bid, False)
            assert self.cluster.quorum is not None
            for nid in self.cluster.quorum.peers:
                if nid not in self.cluster.quorum.procs:
                    await asyncio.to_thread(self.cluster.start_controller, nid)
            try:
                await asyncio.to_thread(self.cluster.wait_brokers, None, self.o.heal_timeout_s)
            except (TimeoutError, RuntimeError) as exc:
                self.state.notes.append(f"not every broker served again after the run: {exc}"[:400])

    # ------------------------------------------------------------------ the verdict
    async def _check(self, events: list[FaultEvent], group_complete: bool) -> dict[str, Any]:
        assert self.cluster is not None and self.http is not None and self.kafka is not None and self.txn is not None
        bootstrap = self.cluster.bootstrap_servers
        http_tps = [TopicPartition(HTTP_TOPIC, p) for p in range(self.o.http_partitions)]
        kafka_tps = [TopicPartition(KAFKA_TOPIC, p) for p in range(self.o.kafka_partitions)]
        read: dict[str, list[tuple[int, bytes | None]]] = {}
        for tp in http_tps + kafka_tps:  # one at a time: a partition that cannot be read hides no other
            try:
                logs = await read_all(bootstrap, [tp], timeout_s=60.0)
                read[str(tp)] = [(r.offset, r.value) for r in logs[tp]]
            except (FerryError, OSError) as exc:
                self.state.notes.append(f"reading {tp} back failed: {exc}"[:400])
        acked: dict[str, list[Acked]] = {}
        for tp in http_tps:
            acked[str(tp)] = [Acked(a.seq, a.offset, self.http.value(tp, a.seq)) for a in self.http.acks[tp]]
        no_offset: list[str] = []
        for p, recs in self.kafka.acked.items():
            acked[str(TopicPartition(KAFKA_TOPIC, p))] = [Acked(int(v[1:]), off, v) for off, v in recs]
            no_offset += [f"{KAFKA_TOPIC}-{p}:{v.decode()}" for off, v in recs if off is None]
        if no_offset:  # a delivery report without an offset: the client cannot know where its record is
            self.state.notes.append(f"{len(no_offset)} Kafka deliveries were reported without an offset "
                                    f"(checked once and in order only), e.g. {', '.join(no_offset[:5])}")
        record_violations = check_records(acked, read)
        if not group_complete:
            missing = len({v for recs in self.kafka.acked.values() for _o, v in recs} - self.kafka.consumed)
            record_violations.append(Violation("records", f"the consumer group did not read {missing} "
                                                          f"acknowledged Kafka records"))
        txn_read, txn_lso, open_txn = await asyncio.to_thread(self.txn.final_read)
        txns = list(self.txn.txns) + ([open_txn] if open_txn is not None else [])
        record_violations += check_transactions(txns, txn_read, txn_lso)
        # the live reader, read_committed while faults happened: no aborted record, in order, never past the LSO
        record_violations += check_transactions([t for t in txns if t.outcome is Outcome.ABORTED],
                                                self.txn.live_read, self.txn.live_lso)
        metadata, meta_from = await self._metadata_log()
        metadata_violations = check_metadata(metadata)
        clock_violations, clock_judged = clock_faults.check_clock_steps(self.clock_spans, metadata, meta_from)
        metadata_violations += clock_violations
        controllers, brokers = await asyncio.to_thread(self._health)
        down = [] if self.proxy is not None and self.proxy.alive() else ["the S3 fault proxy"]
        if self.s3 is None or self.s3.process is None or self.s3.process.poll() is not None:
            down.append("the S3 server")
        health_violations = check_health(controllers, brokers, down)
        heals = net_faults.heal_windows([(a.kind, a.what, a.start_s, a.end_s, a.error is None)
                                         for a in self.state.applied], self.state.load_stop_s)
        acks_s = {str(tp): sorted(a.time_s - self.state.t0 for a in acks) for tp, acks in self.http.acks.items()}
        session_s = self._session_s()
        availability, waits, interrupted = check_serve_again(heals, acks_s, session_s + 2.0)
        health_violations += availability
        lease_cuts = [LeaseCut(b, self.state.t0 + a.cut_s, self.state.t0 + a.end_s, a.what)
                      for a in self.state.applied if a.error is None for b in a.leaseless]
        timings = [AckTiming(str(tp), a.broker_id, a.sent_s, a.time_s) for tp, acks in self.http.acks.items() for a in acks]
        record_violations += check_leases(lease_cuts, timings, session_s)
        proxy_stats = await asyncio.to_thread(self.proxy.stats) if self.proxy and self.proxy.alive() else {}
        stats = {
            "acked_http": sum(len(a) for a in self.http.acks.values()),
            "failed_http": sum(self.http.failed.values()),
            "acked_kafka": self.kafka.acknowledged(),
            "kafka_errors": len(self.kafka.errors),
            "kafka_group_read_all": group_complete,
            "kafka_acks_without_offset": len(no_offset),
            "txn_committed": sum(1 for t in txns if t.outcome is Outcome.COMMITTED),
            "txn_aborted": sum(1 for t in txns if t.outcome is Outcome.ABORTED),
            "txn_unknown": sum(1 for t in txns if t.outcome is Outcome.UNKNOWN),
            "txn_records_committed": self.txn.committed(),
            "txn_producer_restarts": self.txn.restarts,
            "txn_live_lso_checks": self.txn.lso_checks,
            "txn_client_errors": len(self.txn.errors),
            "metadata_records": len(metadata),
            "metadata_checked_from_offset": meta_from,
            "faults_applied": len([a for a in self.state.applied if a.error is None]),
            "faults_failed_to_apply": len([a for a in self.state.applied if a.error is not None]),
            "s3_proxy": proxy_stats,
            "net_serve_again_s": waits,
            "net_heals_interrupted": interrupted,
            "lease_cuts_checked": len(lease_cuts),
            "clock_steps": len([a for a in self.state.applied if a.kind == "clock_step" and a.error is None]),
            "clock_steps_judged": clock_judged,
            "clock_spans": [dataclasses.asdict(span) for span in self.clock_spans],
        }
        result_verdict: Verdict = verdict(record_violations, metadata_violations, health_violations, stats)
        applied = sorted((dataclasses.asdict(a) for a in self.state.applied), key=lambda a: a["start_s"])
        png = os.path.join(self.out, "timeline.png")
        status = "PASS" if result_verdict.ok else "FAIL"
        try:
            draw(png, f"ferry chaos run --seed {self.o.seed}: {status}", self.state.samples, applied)
        except Exception as exc:  # noqa: BLE001 - a missing picture does not change the verdict
            self.state.notes.append(f"timeline not drawn: {exc}")
            png = ""
        return {
            "seed": self.o.seed,
            "duration_s": self.o.duration_s,
            "faults": sorted(self.faults),
            "verdict": status,
            "violations": [dataclasses.asdict(v) for v in result_verdict.violations],
            "violations_by_check": result_verdict.by_check(),
            "stats": stats,
            "schedule": [e.describe() for e in events],
            "applied": applied,
            "notes": self.state.notes,
            "timeline_png": png,
            "out_dir": self.out,
            "replay": self.o.replay_command(),
        }

    async def _metadata_log(self) -> tuple[list[tuple[int, dict[str, Any]]], int]:
        """The committed metadata log from the controller that keeps the longest history."""
        assert self.cluster is not None and self.cluster.quorum is not None
        best: tuple[list[tuple[int, dict[str, Any]]], int] = ([], -1)
        async with ControllerClient(self.cluster.controller_bootstrap, timeout_ms=30_000) as client:
            for nid in self.cluster.quorum.running():
                url = self.cluster.quorum.url(nid)
                records: list[tuple[int, dict[str, Any]]] = []
                offset, start = 0, 0
                try:
                    while True:
                        piece = await client.fetch_log(offset, 0, 10_000, url=url)
                        if "snapshot" in piece:
                            snap = piece["snapshot"]
                            start = offset = int(snap["offset"])
                            records = [(offset, r) for r in snap["records"]]
                        got = piece.get("records", [])
                        records += [(int(r["offset"]), r["record"]) for r in got]
                        if got:
                            offset = int(got[-1]["offset"]) + 1
                        if offset >= int(piece.get("high_watermark", 0)) or (not got and "snapshot" not in piece):
                            break
                except (FerryError, OSError) as exc:
                    self.state.notes.append(f"controller {nid}'s metadata log could not be read: {exc}"[:300])
                    continue
                if best[1] < 0 or start < best[1] or (start == best[1] and len(records) > len(best[0])):
                    best = (records, start)
        return best

    def _health(self) -> tuple[dict[int, dict[str, Any] | None], dict[int, dict[str, Any] | None]]:
        """Every process's /v1/health once the controllers agree on the committed log (or 20 s)."""
        c = self.cluster
        assert c is not None and c.quorum is not None
        deadline = time.monotonic() + 20
        while True:
            controllers = {nid: c.quorum.health(nid) for nid in sorted(c.quorum.peers)}
            marks = {h.get("high_watermark") for h in controllers.values() if h}
            if (len(marks) == 1 and all(controllers.values())) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        brokers = {bid: c.broker_health(bid) for bid in range(1, self.o.brokers + 1)}
        return controllers, brokers

    def _restore_env(self) -> None:
        if self.clock_dir is not None:
            if self._clock_env is None:
                os.environ.pop(CHAOS_CLOCK_ENV, None)
            else:
                os.environ[CHAOS_CLOCK_ENV] = self._clock_env

    def stop_everything(self) -> None:
        """Whatever still runs, killed, and the network removed (idempotent; no event loop needed)."""
        self._restore_env()
        if self.cluster is not None:
            self.cluster.stop(graceful=False)
        for path in self.state.tmpfs:
            unmount(path)
        if self.proxy is not None:
            self.proxy.stop()
        if self.s3 is not None:
            self.s3.stop()
        if self.net is not None:
            self.net.destroy()

    async def _tear_down(self) -> None:
        self._restore_env()
        if self.admin is not None:
            await self.admin.close()
        if self.http is not None:
            await self.http.stop()
        if self.kafka is not None:
            self.kafka._stop_producing.set()
            self.kafka._stop.set()
        if self.txn is not None:
            self.txn._stop.set()
            self.txn._stop_reading.set()
        if self.cluster is not None:
            await asyncio.to_thread(self.cluster.stop)
        for path in self.state.tmpfs:
            await asyncio.to_thread(save_and_unmount, path)
        if self.proxy is not None:
            self.proxy.stop()
        if self.s3 is not None:
            self.s3.stop()
        if self.net is not None:
            await asyncio.to_thread(self.net.destroy)


def move_plan(events: list[FaultEvent], txn_partitions: int) -> dict[FaultEvent, TopicPartition]:
    """Which partition each move of the schedule moves: in schedule order, every second move
    takes a transactional partition instead of the HTTP one it names, alternately one of the
    transactional topic's and the ``__transaction_state`` partition coordinating its producer."""
    out: dict[FaultEvent, TopicPartition] = {}
    moves = sorted((e for e in events if e.kind == "reassign"), key=lambda e: (e.start_s, e.partition or 0))
    for i, e in enumerate(moves):
        if i % 2 == 0:
            continue
        if i % 4 == 1:
            out[e] = TopicPartition(TXN_TOPIC, int(e.partition or 0) % txn_partitions)
        else:
            out[e] = TopicPartition(TXN_STATE_TOPIC, partition_for_group(TXN_ID, DEFAULT_TXN_PARTITIONS))
    return out


ACTIVE: list[ChaosRun] = []  # the run under way, for a SIGTERM handler to clean up after


def run_chaos(options: ChaosOptions) -> dict[str, Any]:
    run = ChaosRun(options)
    ACTIVE.append(run)
    try:
        return asyncio.run(run.run())
    finally:  # an interrupted run (Ctrl-C) may not have got through its own clean-up
        run.stop_everything()
        ACTIVE.remove(run)
