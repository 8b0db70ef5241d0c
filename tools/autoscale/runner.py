"""Runs one autoscaling experiment against a real local cluster (the I/O shell around the pure parts).

Open-loop producers offer the scenario's rate over every partition, whatever the acknowledgements
do (each partition gets its share at evenly spaced times, so a stall shows up as latency, not as
a slower sender); one consumer follows every partition. A monitor samples the cluster once a
second (live brokers, partition leaders: a leader change is a move), the steps run at their times
(scale out, rebalance with the PySpark planner, ramp, drain and remove a broker), and at the end
every acknowledged record is read back.

The experiment records until every step has finished: the load runs for the scenario's
``duration_s`` and then on until the last step is done (at most ``drain_timeout_s`` more), and
the state of the cluster is sampled once more after the last step, so the time series always
ends with what the steps did (a removed broker is gone from the last row). A step that does not
finish in time is recorded as timed out, and the verdict fails.
"""
from __future__ import annotations

import asyncio
import shutil
import time
from collections import Counter
from itertools import pairwise
from pathlib import Path
from typing import Any, Callable

import pandas as pd

from metadata_quorum.kernel.errors import ErrorCode, FerryError
from tools.admin import Admin
from tools.autoscale.plots import plot_balance, plot_overview
from tools.autoscale.policies import LoadSample, PolicyState, acted, decide, pick_broker_to_remove
from tools.autoscale.recorder import Recorder
from tools.autoscale.scenario import Scenario, Step
from tools.autoscale.stall_parts import stall_parts
from tools.rebalance.warm import WarmPlanner
from tools.autoscale.summary import summarize_run, write_summary
from tools.client import Consumer, Producer, RecordMetadata, TopicPartition
from tools.cluster import LocalCluster

MAX_IN_FLIGHT = 50_000  # records offered but not yet acknowledged; above it offers are shed (and counted)
TICK_S = 0.01


#: how often a run followed by the console rewrites its time series
LIVE_WRITE_INTERVAL_S = 2.0

class Experiment:
    def __init__(self, scenario: Scenario, out_dir: Path, s3_endpoint: str | None = None, bucket: str = "ferry",
                 on_progress: Callable[[float, str], None] | None = None, wal_mode: str = "local",
                 on_console: Callable[[str], None] | None = None, s3_profile: str = "local") -> None:
        """``on_console``: serve the web console on the experiment's cluster, following this run's
        panels live, and tell this callback its URL."""
        """``wal_mode``: the brokers' WAL, ``local`` files or WAL objects in S3 (``wal.mode = s3``).
        ``s3_profile``: the latencies the object store adds (``aws-standard``: S3 Standard's)."""
        self.scn = scenario
        self.wal_mode = wal_mode
        self.s3_profile = s3_profile
        self.out_dir = out_dir
        self.s3_endpoint = s3_endpoint
        self.bucket = bucket
        self.on_progress = on_progress or (lambda _t, _msg: None)
        self.on_console = on_console
        self._live_written_s = 0.0
        self.rec = Recorder()
        self.tps = [TopicPartition(scenario.topic, p) for p in range(scenario.partitions)]
        self.acks: dict[int, list[tuple[int, int, int, float]]] = {p: [] for p in range(scenario.partitions)}
        self.end_offsets = [0] * scenario.partitions  # one past the highest acknowledged offset
        self.in_flight = 0
        self.shed = 0
        self.t0 = 0.0
        self.new_brokers: list[int] = []
        self.status = "starting"
        self.cluster: LocalCluster | None = None
        self.admin: Admin | None = None
        self.producer: Producer | None = None
        self.consumer: Consumer | None = None
        self._producing = True
        self._consuming = True
        self._leaders: dict[int, int] = {}
        self._step_index = -1
        self._live: list[int] = []
        self._deciding = True
        self._removed: set[int] = set()
        self._planner: WarmPlanner | None = None  # kept for the run: re-plans read only new samples
        self._timelines: list[dict[str, Any]] = []  # the brokers' six-step move timelines, read at the end
        self._wall_minus_mono_s = time.time() - time.monotonic()

    def now(self) -> float:
        return time.monotonic() - self.t0

    def _t(self, monotonic_s: float) -> float:
        return monotonic_s - self.t0

    # -- the whole run ----------------------------------------------------------------------------

    async def run(self) -> dict[str, Any]:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.cluster = LocalCluster(str(self.out_dir / "cluster"), controllers=self.scn.controllers,
                                    brokers=self.scn.brokers, s3_endpoint=self.s3_endpoint, bucket=self.bucket,
                                    broker_overrides=broker_overrides(self.scn),
                                    wal_mode=self.wal_mode, s3_profile=self.s3_profile)
        if self.s3_endpoint:
            await asyncio.to_thread(_ensure_bucket, self.s3_endpoint, self.bucket)
        try:
            self.on_progress(0.0, "starting the cluster and Spark")
            # One after the other: two threads spawning processes at once (the cluster's and Spark's
            # JVM) once failed the exec with EFAULT.
            await asyncio.to_thread(self.cluster.start)
            if self.on_console is not None:
                self.on_console(await asyncio.to_thread(self.cluster.start_console, None, str(self.out_dir)))
            await asyncio.to_thread(_warm_spark, str(self.out_dir / "spark-warm-up"))
            verification = await self._run_load()
        finally:
            await self._close_clients()
            self.cluster.stop(graceful=False)
            _keep_only_logs(self.out_dir / "cluster")
        return self._write_outputs(verification)

    async def _run_load(self) -> dict[str, Any]:
        assert self.cluster is not None
        self.admin = await Admin(bootstrap_controllers=self.cluster.controller_bootstrap).start()
        await self.admin.create_topic(self.scn.topic, self.scn.partitions)
        for tp in self.tps:
            await self.admin.wait_for_leader(tp, timeout_s=60)
        self.producer = await Producer(self.cluster.bootstrap_servers, linger_ms=5, delivery_timeout_ms=60_000,
                                       request_timeout_ms=5_000).start()
        self.consumer = await Consumer(self.cluster.bootstrap_servers, max_wait_ms=200).start()
        self.consumer.assign(self.tps)
        self.t0 = time.monotonic()
        tasks = [asyncio.create_task(self._produce()), asyncio.create_task(self._consume()),
                 asyncio.create_task(self._monitor()), asyncio.create_task(self._steps())]
        if self.scn.policy is not None:
            tasks.append(asyncio.create_task(self._autoscale()))
        try:
            await asyncio.sleep(self.scn.duration_s)
            self._deciding = False
            if len(tasks) > 4:  # an action in progress finishes under load (bounded)
                await asyncio.wait([tasks[4]], timeout=self.scn.drain_timeout_s)
            if not tasks[3].done():  # the load goes on until the last step is done (bounded)
                self.status = "finishing the last step"
                await asyncio.wait([tasks[3]], timeout=self.scn.drain_timeout_s)
            if not tasks[3].done():
                step = self.scn.steps[self._step_index] if 0 <= self._step_index < len(self.scn.steps) else None
                self.rec.event(self.now(), "step_timed_out", step=self._step_index,
                               action=step.action if step else None, waited_s=self.scn.drain_timeout_s)
                tasks[3].cancel()
                await asyncio.gather(tasks[3], return_exceptions=True)
            self._producing = False
            await tasks[0]
            self.rec.event(self.now(), "load_stopped")
            self.status = "draining"
            await self._drain()
            self._consuming = False  # let the poll in progress finish and count what it read
            await asyncio.wait([tasks[1]], timeout=5.0)
            tasks[2].cancel()
            await asyncio.gather(tasks[2], return_exceptions=True)
            await self._final_sample()
            await self._read_timelines()
        finally:
            self._producing = self._consuming = False
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        self.on_progress(self.now(), "reading every acknowledged record back")
        return await self._verify()

    # -- load -------------------------------------------------------------------------------------

    async def _produce(self) -> None:
        assert self.producer is not None
        weights = self.scn.partition_weights()
        credits = [0.0] * len(weights)
        seqs = [0] * len(weights)
        last = time.monotonic()
        while self._producing:
            now = time.monotonic()
            rate = self.scn.rate_at(self._t(now))
            if self.scn.hot is not None:  # the hot partitions move over time
                weights = self.scn.partition_weights(self._t(now))
            dt, last = now - last, now
            for p, w in enumerate(weights):
                credits[p] += rate * w * dt
                while credits[p] >= 1.0:
                    credits[p] -= 1.0
                    await self._send(p, seqs[p], now)
                    seqs[p] += 1
            await asyncio.sleep(TICK_S)

    async def _send(self, p: int, seq: int, scheduled_s: float) -> None:
        assert self.producer is not None
        t = self._t(scheduled_s)
        self.rec.offered(t)
        if self.in_flight >= MAX_IN_FLIGHT:
            self.shed += 1
            self.rec.failed(t)
            return
        head = f"{p}:{seq}:".encode()
        value = head + b"x" * max(0, self.scn.value_bytes - len(head))
        fut = await self.producer.send(self.scn.topic, value, partition=p)
        self.in_flight += 1
        fut.add_done_callback(lambda f: self._acked(p, seq, scheduled_s, f))

    def _acked(self, p: int, seq: int, scheduled_s: float, fut: asyncio.Future[RecordMetadata]) -> None:
        self.in_flight -= 1
        if fut.cancelled() or fut.exception() is not None:
            self.rec.failed(self.now())
            return
        m = fut.result()
        self.rec.acked(self._t(m.ack_time_s), m.broker_id, (m.ack_time_s - scheduled_s) * 1000.0)
        self.acks[p].append((seq, m.offset, m.broker_id, m.ack_time_s))
        self.end_offsets[p] = max(self.end_offsets[p], m.offset + 1)

    async def _consume(self) -> None:
        assert self.consumer is not None
        while self._consuming:
            try:
                got = await self.consumer.poll(max_wait_ms=200)
            except (FerryError, OSError):
                await asyncio.sleep(0.1)
                continue
            self.rec.consumed(self.now(), len(got))

    def _lag(self) -> int:
        """Acknowledged records the consumer has not read yet (the producer's view of each log's end)."""
        assert self.consumer is not None
        return sum(max(0, self.end_offsets[tp.partition] - self.consumer.position(tp)) for tp in self.tps)

    async def _drain(self) -> None:
        """Wait for the acknowledgements and for the consumer to reach every partition's end (bounded)."""
        assert self.producer is not None
        deadline = time.monotonic() + self.scn.drain_timeout_s
        try:
            await asyncio.wait_for(self.producer.flush(), timeout=self.scn.drain_timeout_s)
        except asyncio.TimeoutError:
            pass
        # a scenario's last drain: counters of many tasks, polled to a deadline
        while time.monotonic() < deadline and (self.in_flight > 0 or self._lag() > 0):  # noqa: ASYNC110
            await asyncio.sleep(0.2)

    # -- the cluster, once a second -----------------------------------------------------------------

    async def _monitor(self) -> None:
        while True:
            t = self.now()
            try:
                await self._sample_cluster(t)
            except (FerryError, OSError):
                pass
            self.on_progress(t, self.status)
            if self.on_console is not None and t - self._live_written_s >= LIVE_WRITE_INTERVAL_S:
                self._live_written_s = t
                self._write_live()
            await asyncio.sleep(max(0.0, 1.0 - (self.now() - t)))

    def _write_live(self) -> None:
        """The time series and events so far, replaced atomically, for the console to draw live."""
        for name, write in (("timeseries.csv", self.rec.write_csv), ("events.json", self.rec.write_events)):
            tmp = self.out_dir / f".{name}.tmp"
            write(tmp)
            tmp.replace(self.out_dir / name)

    async def _final_sample(self, timeout_s: float = 15.0) -> None:
        """The cluster's state after the last step, recorded as the time series' last gauges (retried:
        a missing end state would let the last row show a stale broker set)."""
        deadline = time.monotonic() + timeout_s
        while True:
            t = self.now()
            try:
                live = await self._sample_cluster(t)
            except (FerryError, OSError) as exc:
                if time.monotonic() > deadline:
                    self.rec.event(self.now(), "final_state_unknown", error=str(exc))
                    return
                await asyncio.sleep(0.5)
                continue
            self.rec.event(t, "final_state", live_brokers=live)
            return

    async def _live_brokers(self) -> list[int]:
        """Registered brokers that are neither fenced nor in a controlled shutdown: the ones that take load."""
        assert self.admin is not None
        return live_broker_ids(await self.admin.api.describe_cluster({}))

    async def _sample_cluster(self, t: float) -> list[int]:
        """Live brokers, retries, lag, and partition leaders (a changed leader is a move)."""
        assert self.admin is not None and self.producer is not None
        live = await self._live_brokers()
        self._live = live
        topics = await self.admin.describe_topics([self.scn.topic])
        self.rec.gauge(t, "live_brokers", live)
        self.rec.gauge(t, "retries_total", self.producer.retries)
        self.rec.gauge(t, "consumer_lag", self._lag())
        parts = topics.get(self.scn.topic)
        if isinstance(parts, list):
            for part in parts:
                old = self._leaders.get(part.partition)
                if part.leader >= 0:
                    if old is not None and old != part.leader:
                        self.rec.event(t, "move", partition=part.partition, from_broker=old, to_broker=part.leader)
                    self._leaders[part.partition] = part.leader
        return live

    # -- the policy: a control loop over the brokers' load ---------------------------------------

    def _load_sample(self, t: float) -> LoadSample:
        """The last complete second: each live broker's acknowledged produce bytes."""
        acked = self.rec.acked_per_broker(int(t) - 1)
        return LoadSample(t, tuple(sorted(self._live)),
                          {b: float(acked.get(b, 0) * self.scn.value_bytes) for b in self._live})

    async def _autoscale(self) -> None:
        """Once a second, ask the policy (a pure function) and carry out what it decides; it is
        not asked again until the action is done."""
        config = self.scn.policy
        assert config is not None
        state = PolicyState()
        while self._deciding:
            await asyncio.sleep(1.0 - (self.now() % 1.0))
            if not self._deciding or not self._live:
                continue
            sample = self._load_sample(self.now())
            decision, state = decide(config, state, sample)
            if not decision.acts:
                continue
            self.rec.event(self.now(), "policy_decision", policy=config.kind, add=decision.add,
                           remove=decision.remove, reason=decision.reason, brokers=list(sample.live_brokers))
            self.status = f"policy: {decision.reason}"
            try:
                if decision.add:
                    await self._step(Step(self.now(), "add_brokers", count=decision.add))
                    await self._step(Step(self.now(), "rebalance", window_ms=config.rebalance_window_ms,
                                          balance_band=config.balance_band))
                for _ in range(decision.remove):
                    broker = pick_broker_to_remove(self._load_sample(self.now()), frozenset(self._removed))
                    self._removed.add(broker)
                    await self._step(Step(self.now(), "remove_broker", broker=broker,
                                          window_ms=config.rebalance_window_ms, balance_band=config.balance_band))
            except (FerryError, OSError, RuntimeError, ValueError) as exc:
                self.rec.event(self.now(), "policy_action_failed", error=str(exc))
            state = acted(state, decision, self.now())
            self.status = "steady"

    # -- the scenario's steps ---------------------------------------------------------------------

    async def _steps(self) -> None:
        for k, step in enumerate(self.scn.steps):
            self._step_index = k
            late_s = self.now() - step.at_s
            await asyncio.sleep(max(0.0, -late_s))
            try:
                await self._step(step)
            except (FerryError, OSError, RuntimeError, ValueError) as exc:
                self.rec.event(self.now(), "step_failed", step=k, action=step.action, error=str(exc))
            else:
                self.rec.event(self.now(), "step_done", step=k, action=step.action, late_s=round(max(0.0, late_s), 3))

    async def _step(self, step: Step) -> None:
        assert self.cluster is not None and self.admin is not None
        if step.action == "set_rate":
            self.status = f"rate -> {step.rate_per_s:g}/s"
            self.rec.event(self.now(), "set_rate", rate_per_s=step.rate_per_s, ramp_s=step.ramp_s)
        elif step.action == "add_brokers":
            self.status = f"adding {step.count} broker(s)"
            self.rec.event(self.now(), "add_brokers", count=step.count)
            ids = [await asyncio.to_thread(self.cluster.add_broker) for _ in range(step.count)]
            self.new_brokers += ids
            self.rec.event(self.now(), "brokers_added", brokers=ids)
        elif step.action == "rebalance":
            self.status = "rebalancing"
            mode = ["--add-broker", ",".join(map(str, self.new_brokers))] if self.new_brokers else []
            await self._rebalance(step.window_ms, step.balance_band, mode)
            self.new_brokers = []
        elif step.action == "remove_broker":
            assert step.broker is not None
            self.status = f"draining broker {step.broker}"
            self.rec.event(self.now(), "remove_broker", broker=step.broker)
            await self._rebalance(step.window_ms, step.balance_band, ["--remove-broker", str(step.broker)])
            topics = await self.admin.describe_topics([self.scn.topic])
            parts = topics.get(self.scn.topic)
            left = sum(1 for p in parts if p.leader == step.broker) if isinstance(parts, list) else -1
            await self._remove_broker(step.broker)
            self.rec.event(self.now(), "broker_removed", broker=step.broker, partitions_left=left)

    async def _remove_broker(self, broker_id: int, timeout_s: float = 20.0) -> None:
        """Stop a drained broker and take it out of the cluster for good, as Kafka scales in: a
        controlled shutdown (it uploads what it buffered and exits), then ``unregister_broker``.
        Waiting for the controllers to fence a stopped broker instead would take a session timeout
        or more (longer on a busy machine), and until then it would still count as registered.
        Returns once the controllers no longer list it; raises if they still do after ``timeout_s``."""
        assert self.cluster is not None and self.admin is not None
        code = await asyncio.to_thread(self.cluster.terminate_broker, broker_id)
        self.rec.event(self.now(), "broker_stopped", broker=broker_id, exit_code=code)
        deadline = time.monotonic() + timeout_s
        last_error = ""
        while True:
            try:
                await self.admin.api.unregister_broker({"broker_id": broker_id})
            except FerryError as exc:
                if exc.error != ErrorCode.BROKER_ID_NOT_REGISTERED:  # already gone is what we want
                    last_error = str(exc)
            except OSError as exc:
                last_error = str(exc)
            try:
                if broker_id not in await self.admin.describe_cluster():
                    break
            except (FerryError, OSError) as exc:
                last_error = str(exc)
            if time.monotonic() > deadline:
                raise RuntimeError(f"broker {broker_id} is still registered {timeout_s:g} s after it stopped"
                                   + (f" ({last_error})" if last_error else ""))
            await asyncio.sleep(0.3)
        try:  # the removal shows in the time series at the second it happened (the monitor samples again anyway)
            await self._sample_cluster(self.now())
        except (FerryError, OSError):
            pass

    async def _rebalance(self, window_ms: int, balance_band: float, mode: list[str]) -> None:
        """Plan with the run's warm planner (tools/rebalance/warm.py: one Spark session and the
        window's samples kept between plans, only new sample objects read) and execute."""
        assert self.cluster is not None and self.admin is not None
        from tools.rebalance.execute import execute_plan, live_brokers
        from tools.rebalance.planner import PlannerConfig
        from tools.rebalance.scale_out import plan_scale_out
        from tools.rebalance.summary import summarize
        from tools.rebalance.warm import S3Objects, with_owners

        flag, ids = (mode[0], tuple(int(b) for b in mode[1].split(","))) if mode else ("", ())
        add, remove = (ids, ()) if flag == "--add-broker" else ((), ids)
        self.rec.event(self.now(), "rebalance_start", args=" ".join(mode))
        if self._planner is None:
            self._planner = WarmPlanner(S3Objects(str(self.cluster.s3_endpoint), self.cluster.bucket), window_ms)
        self._planner.window_ms = window_ms
        live = [b for b in await live_brokers(self.admin) if b not in add]
        parts = await self.admin.describe_topics([self.scn.topic])
        topic_parts = parts.get(self.scn.topic)
        leaders = {(self.scn.topic, p.partition): p.leader for p in topic_parts} if isinstance(topic_parts, list) else {}
        config = PlannerConfig(balance_band=balance_band, add_brokers=add, remove_brokers=remove)
        planner = self._planner
        warm = await asyncio.to_thread(planner.plan, config, live, None, lambda c: with_owners(c, leaders),
                                       plan_scale_out)
        cluster, result = warm.cluster, warm.result
        brokers_before = sorted(set(cluster.brokers) | set(add))
        summary = summarize(cluster, result.owners_after, brokers_before, [b for b in brokers_before if b not in remove])
        executed = await execute_plan(self.admin, result.moves, timeout_ms=60_000, show_progress=False) \
            if result.moves else None
        self.rec.event(self.now(), "rebalance_done", mode="remove_broker" if remove else ("add_broker" if add else "balance"),
                       planned_moves=len(result.moves), submitted=executed.submitted if executed else 0,
                       completed=executed.completed if executed else 0, moves_by_goal=result.moves_by_goal,
                       net_in_max_over_mean_before=summary["resources"]["net_in"]["before"]["max_over_mean"],
                       net_in_max_over_mean_planned=summary["resources"]["net_in"]["after"]["max_over_mean"],
                       timings_s={"read": round(warm.read_s, 3), "aggregation": round(warm.aggregate_s, 3),
                                  "planning": round(warm.plan_s, 3), "new_objects": warm.new_objects,
                                  "spark_read": warm.spark_read,
                                  "execute": round(executed.elapsed_s, 3) if executed else 0.0})

    # -- the end ----------------------------------------------------------------------------------

    async def _verify(self) -> dict[str, Any]:
        """Every acknowledged record, read back by Spark straight from S3 (the ``ferry`` data
        source) once the acknowledged offsets are committed: once, at its offset."""
        assert self.cluster is not None
        from tools.rebalance.spark_session import spark_session
        from tools.spark_read.read_back import read_records, wait_committed

        options = {"topic": self.scn.topic, "bootstrap.controller": ",".join(self.cluster.controller_bootstrap),
                   "s3.endpoint": str(self.cluster.s3_endpoint), "s3.bucket": self.cluster.bucket}
        ends = {(self.scn.topic, tp.partition): max((a[1] for a in self.acks[tp.partition]), default=-1) + 1
                for tp in self.tps}
        visible_s, committed = await wait_committed(options, ends, timeout_s=30.0)
        # a record is identified by its "partition:seq:" header: only the first 32 bytes travel
        logs = await asyncio.to_thread(read_records, spark_session(), options, 32)
        lost = duplicated = misplaced = acknowledged = 0
        for tp in self.tps:
            stored = logs.get(tp.partition, [])
            counts: Counter[bytes] = Counter(value for _offset, value in stored if value is not None)
            by_offset = dict(stored)
            value_of: dict[tuple[int, int], bytes] = {}
            for value in counts:
                part_text, seq_text, _pad = value.split(b":", 2)
                value_of[(int(part_text), int(seq_text))] = value
            duplicated += sum(n - 1 for n in counts.values() if n > 1)
            for seq, offset, _broker, _t in self.acks[tp.partition]:
                acknowledged += 1
                wanted = value_of.get((tp.partition, seq))
                if wanted is None:
                    lost += 1
                elif by_offset.get(offset) != wanted:
                    misplaced += 1
        self.rec.event(self.now(), "read_back", source="spark data source (S3)", committed_after_s=visible_s,
                       uncommitted_partitions=sorted(p for (_t, p), end in ends.items()
                                                     if committed.get((self.scn.topic, p), 0) < end))
        return {"acknowledged": acknowledged, "lost": lost, "duplicated": duplicated, "misplaced": misplaced,
                "read_back": sum(len(v) for v in logs.values()), "shed": self.shed,
                "read_back_source": "spark", "committed_after_s": visible_s}

    async def _read_timelines(self) -> None:
        """Every live broker's move timelines (each side of a move reports it, so a removed broker's
        moves are still seen from the other side); best effort: a stall without one has no parts."""
        assert self.admin is not None
        try:
            answers = await self.admin.moves(timeout_ms=5_000)
        except (FerryError, OSError):
            return
        seen: set[tuple[int, int]] = set()
        for answer in answers.values():
            for m in answer.get("moves", []) if isinstance(answer, dict) else []:
                key = (int(m["partition"]), int(m["move_id"]))
                if m.get("topic") == self.scn.topic and m.get("complete") and key not in seen:
                    seen.add(key)
                    self._timelines.append(m)

    def _stalls(self) -> None:
        """Fill in each move's produce stall: last ack by the old owner to the first by the new one."""
        for event in self.rec.events:
            if event.kind != "move":
                continue
            acks = sorted(self.acks[event.detail["partition"]], key=lambda a: a[3])
            seen_s = event.t_s + self.t0
            best = None
            for prev, cur in pairwise(acks):
                if (prev[2] == event.detail["from_broker"] and cur[2] == event.detail["to_broker"]
                        and cur[3] <= seen_s + 1.0 and (best is None or cur[3] > best[1])):
                    best = (prev[3], cur[3])
            event.detail["stall_ms"] = None if best is None else round((best[1] - best[0]) * 1000.0, 1)
            if best is not None:
                event.detail["stall_parts_ms"] = self._stall_parts(event.detail, best)

    def _stall_parts(self, move: dict[str, Any], stall: tuple[float, float]) -> dict[str, float] | None:
        """The stall cut at the steps of the brokers' timeline of this move (tools/autoscale/stall_parts.py)."""
        a_ms, b_ms = ((x + self._wall_minus_mono_s) * 1000.0 for x in stall)
        candidates = [m for m in self._timelines if int(m["partition"]) == move["partition"]
                      and m.get("from_broker") == move["from_broker"] and m.get("to_broker") == move["to_broker"]
                      and m["t_ms"].get("t6") is not None and a_ms - 5_000 <= m["t_ms"]["t6"] <= b_ms + 1_000]
        if not candidates:
            return None
        nearest = min(candidates, key=lambda m: abs(float(m["t_ms"]["t6"]) - b_ms))
        return stall_parts(a_ms, b_ms, nearest["t_ms"])

    async def _close_clients(self) -> None:
        for client in (self.producer, self.consumer, self.admin):
            if client is not None:
                try:
                    await asyncio.wait_for(client.close(), timeout=10)
                except (asyncio.TimeoutError, FerryError, OSError):
                    pass

    def _write_outputs(self, verification: dict[str, Any]) -> dict[str, Any]:
        self._stalls()
        csv_path = self.rec.write_csv(self.out_dir / "timeseries.csv")
        events_path = self.rec.write_events(self.out_dir / "events.json")
        frame = pd.read_csv(csv_path, dtype={"live_brokers": str})
        events = [{"t_s": e.t_s, "kind": e.kind, **e.detail} for e in self.rec.events]
        first_step = self.scn.steps[0].at_s if self.scn.steps else None
        summary = summarize_run(frame, events, verification, first_step, steps=len(self.scn.steps))
        summary["scenario"] = self.scn.name
        summary["wal_mode"] = self.wal_mode
        summary["s3_profile"] = self.s3_profile
        summary["verification"] = verification
        title = f"ferry autoscale: {self.scn.name}"
        plots = [plot_overview(frame, events, self.out_dir / "overview.png", title),
                 plot_balance(frame, events, self.out_dir / "balance.png", title)]
        summary["files"] = {"csv": str(csv_path), "events": str(events_path), "plots": [str(p) for p in plots],
                            "summary": str(self.out_dir / "summary.json")}
        write_summary(summary, self.out_dir / "summary.json")
        return summary


def live_broker_ids(reply: Any) -> list[int]:
    """Ids of the brokers a ``describe_cluster`` reply shows as taking load: registered, not fenced
    and not in a controlled shutdown (a broker shutting down leads nothing and is about to exit)."""
    brokers = reply.get("brokers", []) if isinstance(reply, dict) else reply
    if isinstance(brokers, dict):
        brokers = [dict(v, broker_id=int(k)) for k, v in brokers.items()]
    return sorted(int(b["broker_id"]) for b in brokers
                  if not b.get("fenced", False) and not b.get("in_controlled_shutdown", False))


def broker_overrides(scn: Scenario) -> dict[str, Any]:
    """The scenario's settings in every broker's config."""
    overrides: dict[str, Any] = {"metrics_interval_ms": scn.metrics_interval_ms}
    if scn.upload_interval_ms is not None:
        overrides["storage"] = {"upload_interval_ms": scn.upload_interval_ms}
    return overrides


def _warm_spark(scratch_dir: str) -> None:
    """Start Spark and run a first small job while the cluster starts: the rebalance steps then run
    on a warm JVM (a cold first job takes tens of seconds on a busy two-core machine)."""
    from tools.rebalance.aggregate import warm_up
    from tools.rebalance.spark_session import spark_session

    try:
        warm_up(spark_session(), scratch_dir)
    finally:
        shutil.rmtree(scratch_dir, ignore_errors=True)


def _ensure_bucket(endpoint_url: str, bucket: str) -> None:
    from tools.rebalance.samples import S3SampleSource

    s3 = S3SampleSource(endpoint_url, bucket).s3
    try:
        s3.head_bucket(Bucket=bucket)
    except Exception:  # noqa: BLE001 - missing (or not ours): try to create it, which says what is wrong
        s3.create_bucket(Bucket=bucket)


def _keep_only_logs(state_dir: Path) -> None:
    """The cluster's WALs and log dirs are scratch; its process logs are worth keeping."""
    if not state_dir.is_dir():
        return
    for child in state_dir.iterdir():
        if child.is_dir():
            shutil.rmtree(child, ignore_errors=True)
