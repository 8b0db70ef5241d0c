"""A seeded, deterministic simulation of the controller quorum with brokers that come, go and misbehave.

The controllers are three production state machines (``ControllerCore``) over a simulated
replicated log that drops, delays, duplicates and reorders messages and deposes leaders
(``sim_quorum.SimQuorum``), whose invariants are checked after every network event. One
``random.Random(seed)`` drives everything: brokers register, heartbeat, die, restart and
shut down; topics are created, deleted and reassigned; brokers follow the six-step move through
the production partition state machine (``sim_broker.py`` drives ``partition.py``: the loser
closes its streams and asks for the election, the winner opens them, failures retried, released
or fenced as the state machine decides) but also act on stale beliefs — opening with old epochs,
committing at wrong offsets, closing streams they no longer own. A manual clock advances and ``tick`` runs. After every step
the invariants are checked; a violation raises ``InvariantViolation`` naming the seed and step,
so a failing seed is a regression test (like Kafka's RaftEventSimulationTest or TigerBeetle's VOPR),
replayed alone with ``python -m broker.simulation --seed N``.
"""
from __future__ import annotations

import bisect
import random
from collections import Counter
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any, Callable

from broker.sim_broker import BrokerShell, SimBroker, streams_of
from metadata_quorum.controller_core import CoreConfig
from metadata_quorum.delta import MetadataDelta
from metadata_quorum.kernel import messages as msg
from metadata_quorum.kernel.errors import ErrorCode, FerryError
from metadata_quorum.image import EMPTY_IMAGE, STREAM_ID_COUNTER_KEY, MetadataImage
from metadata_quorum.operations import WRITE_OPERATIONS
from metadata_quorum.raft import advance_image
from metadata_quorum.delta import TopicIdPartition
from metadata_quorum.sim_quorum import Faults, InvariantViolation, SimQuorum
from metadata_quorum.records import NO_LEADER, STORAGE_LOCAL, STORAGE_S3, STREAM_OPENED, partition_stream_key

SESSION_TIMEOUT_MS = 3000
REELECTION_TIMEOUT_MS = 1000
COMMIT_TIMEOUT_MS = 1000
MAX_REQUEST_TRANSIT_MS = 30  # a request spends up to this long on its way to the controller
# The controller could not tell what became of these: the operation may or may not have committed.
INDETERMINATE = frozenset({ErrorCode.NOT_CONTROLLER, ErrorCode.REQUEST_TIMED_OUT})
__all__ = ["InvariantViolation", "Simulation", "SimulationResult", "run_seed", "main"]


class SimClock:
    def __init__(self) -> None:
        self.now_ms = 1_000_000

    def __call__(self) -> int:
        return self.now_ms


@dataclass
class SimulationResult:
    seed: int
    steps: int
    ops: Counter[str]
    errors: Counter[str]
    moves_completed: int
    log_length: int
    quorum: dict[str, int] = field(default_factory=dict)


class Simulation:
    def __init__(self, seed: int, steps: int = 200, max_brokers: int = 5, faults: Faults = Faults()) -> None:
        self.seed = seed
        self.steps = steps
        self.step = 0
        self.trace: list[str] = []
        #: (broker id, broker epoch) fenced other than by its own controlled shutdown (session, death)
        self.fenced_otherwise: set[tuple[int, int]] = set()
        #: (broker id, broker epoch) -> when it was fenced for silence or reported dead (the fencing
        #: command's records, as the first controller applied them)
        self.silence_fenced_at_ms: dict[tuple[int, int], int] = {}
        self.rng = random.Random(seed)
        self.clock = SimClock()
        config = CoreConfig(session_timeout_ms=SESSION_TIMEOUT_MS, reelection_timeout_ms=REELECTION_TIMEOUT_MS,
                            commit_timeout_ms=COMMIT_TIMEOUT_MS)
        self.controller = SimQuorum(self.rng, self.clock, self._advance, WRITE_OPERATIONS, config, faults,
                                    fail=self.fail)
        self.controller.on_owner_change = self.owner_changed
        self.controller.on_fenced_for_silence = self.fenced_for_silence
        self.controller.on_tick_fenced = lambda broker_id, epoch: self.fenced_otherwise.add((broker_id, epoch))
        self.brokers = {b: SimBroker(b) for b in range(max_brokers)}
        self.ops: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()
        self.moves_completed = 0
        self._topic_seq = 0
        self.indeterminate = False  # the last call's outcome is unknown (it may still commit)
        self.last_error: ErrorCode | None = None  # what the last call was refused with
        self.last_exc: FerryError | None = None

    def now_ms(self) -> int:
        return self.clock.now_ms

    def records_after(self, offset: int) -> list[tuple[int, Any]]:
        log = self.controller.log
        return log[bisect.bisect_right(log, offset, key=lambda item: item[0]):]

    def _advance(self, ms: int) -> None:
        self.clock.now_ms += ms

    # ------------------------------------------------------------------ driving
    def run(self) -> SimulationResult:
        actions: list[tuple[int, Callable[[], None]]] = [
            (6, self.register), (14, self.heartbeat), (2, self.die), (2, self.shutdown),
            (5, self.create_topic), (1, self.delete_topic), (6, self.reassign), (3, self.elect),
            (16, self.broker_sync), (10, self.produce), (4, self.rogue_stream_call), (2, self.trim),
            (4, self.report_isr), (1, self.controller_failover), (1, self.decommission),
            (10, self.advance_and_tick), (2, self.report_dead), (2, self.resume),
        ]
        weights = [w for w, _ in actions]
        for _ in range(3):
            self.register()
        for step in range(self.steps):
            self.step = step
            before = self.controller.image
            action = self.rng.choices([a for _, a in actions], weights)[0]
            action()
            self.check(before, self.controller.image)
        self.step = self.steps
        self.settle()
        self.check_log_replay()
        return SimulationResult(self.seed, self.steps, self.ops, self.errors, self.moves_completed,
                                len(self.controller.log), dict(self.controller.counts, events=self.controller.events))

    def call(self, op: str, args: dict[str, Any],
             must_succeed: Callable[[MetadataImage], bool] | None = None) -> dict[str, Any] | None:
        """Run a write; a FerryError is an expected outcome (counted), anything else a bug.

        ``must_succeed`` says whether the write is rightful in a committed image. A refusal is
        judged against the image its controller had committed when it answered
        (``answered_image``), not the one read before the call: other writes may commit meanwhile
        (the leader's own ``tick``, an earlier write whose fate was unknown), and the controller
        answers nothing from state that is not committed."""
        self.ops[op] += 1
        self.trace.append(f"{self.step}: {op} {args}")
        del self.trace[:-40]
        before, before_offset = self.controller.image, self.controller.next_offset
        self.indeterminate, self.last_error, self.last_exc = False, None, None
        try:
            return self.controller.write(op, args)
        except FerryError as e:
            self.last_error, self.last_exc = e.error, e
            self.errors[f"{op}:{e.error.name}"] += 1
            if e.error in INDETERMINATE:
                self.indeterminate = True
                return None  # it may yet commit: nothing to say about it
            if self.controller.next_offset == before_offset and not self.controller.image.same_content(before):
                self.fail(f"{op} failed with {e.error.name} but changed the image")
            if must_succeed is not None and must_succeed(self.controller.answered_image):
                self.fail(f"{op} {args} should have succeeded: {e}")
            return None

    def fail(self, message: str) -> None:
        raise InvariantViolation(f"seed {self.seed} step {self.step}: {message}\n  recent: " +
                                 "\n  ".join(self.trace[-12:]) +
                                 f"\n  replay: python -m broker.simulation --seed {self.seed} --steps {self.steps}")

    def owner_changed(self, stream_id: int, old_owner: int, old_epoch: int, new_owner: int) -> None:
        """A stream went from one open owner to another: the old incarnation's lease must have run out."""
        old = self.brokers.get(old_owner)
        until = old.lease_until_ms.get(old_epoch, 0) if old is not None else 0
        if until > self.clock.now_ms:
            self.fail(f"stream {stream_id} went from broker {old_owner} (epoch {old_epoch}) to {new_owner} at "
                      f"{self.clock.now_ms} while {old_owner} could still acknowledge (lease until {until})")

    def fenced_for_silence(self, broker_id: int, broker_epoch: int) -> None:
        """No broker is fenced for silence while its lease may still let it acknowledge: the
        fence is what lets another broker take its streams over."""
        self.fenced_otherwise.add((broker_id, broker_epoch))
        self.silence_fenced_at_ms.setdefault((broker_id, broker_epoch), self.clock.now_ms)
        until = self.brokers[broker_id].lease_until_ms.get(broker_epoch, 0)
        if until > self.clock.now_ms:
            self.fail(f"broker {broker_id} (epoch {broker_epoch}) fenced at {self.clock.now_ms} while it could "
                      f"still acknowledge (lease until {until})")

    @property
    def image(self) -> MetadataImage:
        return self.controller.image

    def alive(self) -> list[SimBroker]:
        return [b for b in self.brokers.values() if b.alive]

    # ------------------------------------------------------------------ broker lifecycle
    def register(self) -> None:
        dead = [b for b in self.brokers.values() if not b.alive]
        if not dead:
            return
        b = self.rng.choice(dead)
        b.incarnation += 1
        reply = self.call(msg.REGISTER_BROKER.name, self.registration(b))
        if reply is None:
            return
        b.broker_epoch, b.alive, b.opened, b.shutting_down, b.bad_dirs = int(reply["broker_epoch"]), True, {}, False, {}
        b.partitions, b.seen = {}, None
        b.gone, b.paused_at_ms = False, None  # a new process
        self.beat(b)

    @staticmethod
    def registration(b: SimBroker) -> dict[str, Any]:
        return {"broker_id": b.broker_id, "incarnation_id": f"{b.broker_id}-{b.incarnation}",
                "endpoints": [f"http://127.0.0.1:{9000 + b.broker_id}"],
                "log_dirs": [{"dir_id": f"{b.broker_id}-{i}", "path": f"/sim/{b.broker_id}/{i}"} for i in range(2)]}

    def beat(self, b: SimBroker, sent_ms: int | None = None) -> dict[str, Any] | None:
        """One heartbeat (stamped ``sent_ms``, by default a transit's time ago); a broker told to
        shut down closes what it still holds and stops; one whose incarnation was fenced (its
        session expired) registers again, as a broker refused with STALE_BROKER_EPOCH does."""
        was = self.image.cluster.brokers.get(b.broker_id)
        if sent_ms is None:
            sent_ms = self.clock.now_ms - self.rng.randint(0, MAX_REQUEST_TRANSIT_MS)
        reply = self.call(msg.BROKER_HEARTBEAT.name, {
            "broker_id": b.broker_id, "broker_epoch": b.broker_epoch, "metadata_offset": self.image.offset,
            "want_shutdown": b.shutting_down,
            "saturated_log_dirs": sorted(d for d, st in b.bad_dirs.items() if st == "saturated"),
            "offline_log_dirs": sorted(d for d, st in b.bad_dirs.items() if st == "offline")})
        reg = self.image.cluster.brokers.get(b.broker_id)
        if reply is None and reg is not None and b.broker_epoch == reg.broker_epoch and \
                self.last_error is ErrorCode.STALE_BROKER_EPOCH:
            self.register_again(b)
            return None
        if reply is None and (reg is None or b.broker_epoch != reg.broker_epoch):
            b.alive = False  # replaced by a newer incarnation or unregistered: a zombie now
        if reply is not None and reply["metadata_high_watermark"] > self.controller.next_offset:
            self.fail(f"heartbeat answered high watermark {reply['metadata_high_watermark']}, "
                      f"committed log end {self.controller.next_offset}")
        if reply is not None and not reply["is_fenced"]:
            # Unfenced, it would renew its lease from the heartbeat's send time, which may be before
            # the fence (stamped just before a pause), and acknowledge writes while its image still
            # names it leader of partitions given away: such an incarnation must register again.
            fenced_at = self.silence_fenced_at_ms.get((b.broker_id, b.broker_epoch))
            if fenced_at is not None:
                self.fail(f"broker {b.broker_id} (epoch {b.broker_epoch}) was fenced for silence at {fenced_at} "
                          f"and then unfenced by a heartbeat sent at {sent_ms}")
            self.fenced_otherwise.discard((b.broker_id, b.broker_epoch))  # unfenced again
            b.lease_until_ms[b.broker_epoch] = max(b.lease_until_ms.get(b.broker_epoch, 0), sent_ms + SESSION_TIMEOUT_MS)
        if reply is not None and reply["should_shut_down"] and b.shutting_down:
            held = [sid for sid, st in self.image.streams.streams.items() if st.state == STREAM_OPENED and
                    st.owner == b.broker_id and st.owner_epoch == b.broker_epoch]
            # its shutdown completed with this heartbeat, not a fence committed while it was under way
            # (a tick's or a death report's): the image read before the call can miss one in flight
            completed_now = was is not None and was.broker_epoch == b.broker_epoch and not was.fenced and \
                (b.broker_id, b.broker_epoch) not in self.fenced_otherwise
            if reg is None or not reg.fenced or (held and completed_now):
                self.fail(f"broker {b.broker_id} told to shut down while unfenced or holding open streams {held}")
            self.close_lost(b)
            b.alive = False
            b.lease_until_ms.pop(b.broker_epoch, None)  # it stopped: it acknowledges nothing more
            self.ops["shutdown_completed"] += 1
        return reply

    def heartbeat(self) -> None:
        live = self.alive()
        for b in self.rng.sample(live, k=min(len(live), self.rng.randint(1, 3))):
            if self.rng.random() < 0.15:  # a log dir fills up, fails, or recovers
                dir_id = f"{b.broker_id}-{self.rng.randint(0, 1)}"
                state = self.rng.choice(["online", "online", "saturated", "offline"])
                self.ops["log_dir_state_change"] += 1
                b.bad_dirs.pop(dir_id, None)
                if state != "online":
                    b.bad_dirs[dir_id] = state
            self.beat(b)

    def die(self) -> None:
        """kill -9 (no close, no goodbye: its process is gone, so it acknowledges nothing more) or
        a pause that never ends (it keeps its lease until that runs out)."""
        live = self.alive()
        if len(live) > 1:
            b = self.rng.choice(live)
            b.alive = False
            if self.rng.random() < 0.5:
                b.gone, b.paused_at_ms = True, None
                b.lease_until_ms.pop(b.broker_epoch, None)
            else:
                b.paused_at_ms = self.clock.now_ms

    def resume(self) -> None:
        """A paused broker resumes (SIGCONT): the heartbeat it had stamped just before its pause
        leaves now, maybe long after its session expired and its partitions were given away."""
        paused = [b for b in self.brokers.values() if b.paused_at_ms is not None and not b.alive and not b.gone]
        if not paused:
            return
        b = self.rng.choice(paused)
        stamped_ms, b.paused_at_ms, b.alive = b.paused_at_ms, None, True
        self.ops["resumed"] += 1
        self.beat(b, sent_ms=stamped_ms)

    def register_again(self, b: SimBroker) -> None:
        """The same incarnation registers again and gets a new epoch (its beliefs about the
        streams it opened stay as they were: it learns what changed from the log)."""
        reply = self.call(msg.REGISTER_BROKER.name, self.registration(b))
        if reply is not None:
            self.ops["registered_again"] += 1
            b.broker_epoch = int(reply["broker_epoch"])

    def report_dead(self) -> None:
        """A live broker proves a killed one's process gone (broker/peer_liveness.py: its WAL lock
        is free), naming the incarnation it last saw registered; a paused one is never reported."""
        live = self.alive()
        gone = [b for b in self.brokers.values() if b.gone]
        if not live or not gone:
            return
        b, reporter = self.rng.choice(gone), self.rng.choice(live)
        reply = self.call(msg.REPORT_BROKER_DEAD.name, {"broker_id": b.broker_id, "broker_epoch": b.broker_epoch,
                                                 "reporter_id": reporter.broker_id,
                                                 "reporter_epoch": reporter.broker_epoch})
        if reply is not None and reply["fenced"]:
            self.ops["reported_dead_fenced"] += 1

    def shutdown(self) -> None:
        live = self.alive()
        if len(live) <= 1:
            return
        b = self.rng.choice(live)
        b.shutting_down = True
        self.beat(b)
        if b.alive and self.rng.random() < 0.7:  # it closes what it lost, then asks again
            self.close_lost(b)
            self.beat(b)

    # ------------------------------------------------------------------ admin
    def create_topic(self) -> None:
        self._topic_seq += 1
        storage = STORAGE_S3 if self.rng.random() < 0.75 else STORAGE_LOCAL
        topic: dict[str, Any] = {"name": f"t{self._topic_seq}", "num_partitions": self.rng.randint(1, 4),
                                 "storage": storage}
        if storage == STORAGE_LOCAL:
            topic["replication_factor"] = self.rng.randint(1, 3)
        if self.rng.random() < 0.1:
            topic["name"] = self.rng.choice(["", "..", "bad name", f"t{self._topic_seq - 1}"])
        self.call(msg.CREATE_TOPICS.name, {"topics": [topic]})

    def delete_topic(self) -> None:
        names = sorted(self.image.topics.by_name)
        if names and self.rng.random() < 0.5:
            self.call(msg.DELETE_TOPICS.name, {"names": [self.rng.choice(names)]})

    def random_partition(self) -> tuple[str, int, Any] | None:
        parts = self.image.topics.all_partitions()
        if not parts:
            return None
        topic, part = self.rng.choice(parts)
        return topic.name, part.partition, part

    def reassign(self) -> None:
        picked = self.random_partition()
        if picked is None:
            return
        name, index, part = picked
        ids = sorted(self.brokers) + [99]
        if self.rng.random() < 0.15:
            replicas: list[int] | None = None
        elif part.storage == STORAGE_S3:
            replicas = [self.rng.choice(ids)]
        else:
            replicas = self.rng.sample(ids, k=min(len(ids), self.rng.randint(1, 3)))
        self.call(msg.ALTER_PARTITION_REASSIGNMENTS.name,
                  {"reassignments": [{"topic": name, "partition": index, "replicas": replicas}]})

    def elect(self) -> None:
        picked = self.random_partition()
        if picked is not None:
            name, index, _part = picked
            self.call(msg.ELECT_LEADERS.name, {"election_type": self.rng.choice(["preferred", "unclean"]),
                                        "partitions": [{"topic": name, "partition": index}]})

    def report_isr(self) -> None:
        """A storage=local leader reports which replicas caught up (completing reassignments)."""
        local = [(t, p) for t, p in self.image.topics.all_partitions()
                 if p.storage == STORAGE_LOCAL and p.leader != NO_LEADER and self.brokers[p.leader].alive]
        if not local:
            return
        topic, part = self.rng.choice(local)
        leader = self.brokers[part.leader]
        followers = [r for r in part.replicas if r != part.leader and self.image.cluster.is_active(r)]
        isr = [part.leader] + [r for r in followers if self.rng.random() < 0.7]
        sent = (part.leader, part.leader_epoch, part.partition_epoch)

        def rightful(image: MetadataImage) -> bool:
            reg = image.cluster.brokers.get(leader.broker_id)
            now = image.topics.partition(part.topic_id, part.partition)
            return reg is not None and reg.broker_epoch == leader.broker_epoch and now is not None and \
                (now.leader, now.leader_epoch, now.partition_epoch) == sent and set(isr) <= set(now.replicas)

        self.call(msg.ALTER_PARTITION.name, {
            "broker_id": leader.broker_id, "broker_epoch": leader.broker_epoch, "topic": topic.name,
            "partition": part.partition, "leader_epoch": part.leader_epoch, "partition_epoch": part.partition_epoch,
            "isr": isr}, must_succeed=rightful)

    def decommission(self) -> None:
        """An operator unregisters a broker (scaling in): mostly one that is down, sometimes one that
        is still up, or paused (SIGSTOP, a GC pause) with its write lease still running. Its
        registration goes at once; its streams must not change hands while its lease runs
        (``owner_changed``)."""
        registered = [b for b in self.brokers.values() if b.broker_id in self.image.cluster.brokers]
        now = self.clock.now_ms
        down = [b for b in registered if not b.alive and all(until <= now for until in b.lease_until_ms.values())]
        pool = down if down and self.rng.random() < 0.6 else registered
        if not pool:
            return
        b = self.rng.choice(pool)
        if self.call(msg.UNREGISTER_BROKER.name, {"broker_id": b.broker_id},
                     must_succeed=lambda image: b.broker_id in image.cluster.brokers) is not None or \
                b.broker_id not in self.image.cluster.brokers:
            self.ops["unregistered_live" if b.alive else "unregistered_down"] += 1
            b.alive = False  # a zombie now: it may still acknowledge until its lease runs out

    def controller_failover(self) -> None:
        """The leader is deposed: a new term begins (heartbeat times are lost, the log stays)."""
        self.ops["failover"] += 1
        self.controller.elect()

    def advance_and_tick(self) -> None:
        self.clock.now_ms += self.rng.choice([10, 200, 700, 1500, 3500])
        self.call(msg.TICK.name, {})

    # ------------------------------------------------------------------ brokers following the log
    def streams_of(self, topic_id: str, partition: int) -> list[int]:
        return streams_of(self.image, TopicIdPartition(topic_id, partition))

    def close_lost(self, b: SimBroker) -> None:
        """Steps 2-5 of a move on the old owner: what it no longer leads goes through the
        partition state machine's close (``sim_broker.BrokerShell``)."""
        BrokerShell(self, b).follow()

    def broker_sync(self) -> None:
        live = self.alive()
        if live:
            self.sync(self.rng.choice(live))

    def sync(self, b: SimBroker) -> None:
        """A live broker reacts to the metadata: closes what it lost, opens what it leads."""
        BrokerShell(self, b).follow()

    def produce(self) -> None:
        """An owner commits the next object of one of its streams (sometimes at a wrong offset)."""
        live = [b for b in self.alive() if b.opened]
        if not live:
            return
        b = self.rng.choice(live)
        stream_id = self.rng.choice(sorted(b.opened))
        stream = self.image.streams.streams.get(stream_id)
        if stream is None:
            b.opened.pop(stream_id)
            return
        start = stream.end_offset if self.rng.random() < 0.85 else stream.end_offset + self.rng.choice([-1, 1])
        start = max(start, 0)
        key = f"o-{self.seed}-{self.step}"
        epoch = b.opened[stream_id]

        def rightful(image: MetadataImage) -> bool:
            now = image.streams.streams.get(stream_id)
            reg = image.cluster.brokers.get(b.broker_id)
            return now is not None and reg is not None and now.owner == b.broker_id and now.epoch == epoch and \
                now.state == STREAM_OPENED and start == now.end_offset and reg.broker_epoch == b.broker_epoch and \
                now.owner_epoch == b.broker_epoch  # not one its earlier incarnation opened

        self.call(msg.COMMIT_OBJECT.name, {
            "object_key": key, "size": 100, "broker_id": b.broker_id, "broker_epoch": b.broker_epoch,
            "ranges": [{"stream_id": stream_id, "epoch": epoch, "start_offset": start,
                        "end_offset": start + self.rng.randint(1, 50)}]}, must_succeed=rightful)
        if self.rng.random() < 0.1:  # a retried commit is idempotent
            stream_now = self.image.streams.streams.get(stream_id)
            if stream_now is not None and any(o.object_key == key for o in stream_now.objects):
                self.call(msg.COMMIT_OBJECT.name, {
                    "object_key": key, "size": 100, "broker_id": b.broker_id, "broker_epoch": b.broker_epoch,
                    "ranges": [{"stream_id": stream_id, "epoch": epoch, "start_offset": start,
                                "end_offset": start + 1}]},
                    must_succeed=lambda image: stream_id in image.streams.streams and
                    any(o.object_key == key for o in image.streams.streams[stream_id].objects))

    def trim(self) -> None:
        live = [b for b in self.alive() if b.opened]
        if not live:
            return
        b = self.rng.choice(live)
        stream_id = self.rng.choice(sorted(b.opened))
        stream = self.image.streams.streams.get(stream_id)
        if stream is None:
            return
        target = self.rng.randint(stream.start_offset, stream.end_offset)
        self.call(msg.TRIM_STREAM.name, {"stream_id": stream_id, "epoch": b.opened[stream_id], "broker_id": b.broker_id,
                                  "broker_epoch": b.broker_epoch, "new_start_offset": target})

    def rogue_stream_call(self) -> None:
        """Stale beliefs: any broker (even a zombie) opens, commits or closes with a guessed epoch."""
        streams = sorted(self.image.streams.streams)
        if not streams:
            return
        b = self.rng.choice(list(self.brokers.values()))
        stream = self.image.streams.streams[self.rng.choice(streams)]
        epoch = max(0, stream.epoch + self.rng.choice([-1, 0, 0, 1]))
        base = {"stream_id": stream.stream_id, "epoch": epoch, "broker_id": b.broker_id, "broker_epoch": b.broker_epoch}
        kind = self.rng.choice(["open", "close", "commit"])
        if kind == "open":
            # Only partition leaders open with new epochs (their leader epoch); a stale broker
            # can only re-use an epoch it saw, which must be fenced unless it is a true retry.
            if stream.epoch < 0:
                return
            base["epoch"] = min(epoch, stream.epoch)
            retry = stream.owner == b.broker_id and stream.epoch == base["epoch"] and \
                stream.owner_epoch == b.broker_epoch  # a retried open, or a reopen after its own close
            if self.call(msg.OPEN_STREAM.name, base) is not None:
                if not retry:
                    self.fail(f"open of stream {stream.stream_id} at a used epoch succeeded: {base}")
                b.opened[stream.stream_id] = base["epoch"]
        elif kind == "close":
            if (stream.state, stream.owner, stream.owner_epoch, stream.epoch) == \
                    (STREAM_OPENED, b.broker_id, b.broker_epoch, epoch):
                return  # not a stale close: the owner's own, which only its partition state machine makes
            if self.call(msg.CLOSE_STREAM.name, base) is not None:
                b.opened.pop(stream.stream_id, None)
        else:
            self.call(msg.COMMIT_OBJECT.name, {"object_key": f"rogue-{self.step}", "size": 1, "broker_id": b.broker_id,
                                        "broker_epoch": b.broker_epoch,
                                        "ranges": [{"stream_id": stream.stream_id, "epoch": epoch,
                                                    "start_offset": stream.end_offset,
                                                    "end_offset": stream.end_offset + 1}]})

    def settle(self) -> None:
        """Liveness: with faults stopped, every s3 partition ends up led by a live broker that has
        opened its streams at the partition's leader epoch."""
        self.controller.faults = Faults(drop=0.0, duplicate=0.0, depose=0.0, stale_client=0.0, reorder=0.0, isolate=0.0)
        self.controller.isolated_until_ms.clear()  # cut-off controllers are heard again
        self.controller.cut_off_brokers.clear()
        for b in self.brokers.values():
            b.bad_dirs.clear()  # faults stopped: full or failed log dirs recover too
        for _round in range(8):
            # The second passes with the network at work: Raft delivers what is in flight before
            # the clock jumps (a jump alone would expire every command in flight, round after round).
            self.controller.quiesce()
            self.clock.now_ms += REELECTION_TIMEOUT_MS + 1
            for b in self.alive():
                self.close_lost(b)
                self.beat(b)
            before = self.image
            self.call(msg.TICK.name, {})
            self.check(before, self.image)
            for b in sorted(self.alive(), key=lambda x: x.broker_id):
                before = self.image
                self.sync(b)
                self.check(before, self.image)
        active = [b for b in self.alive() if self.image.cluster.is_active(b.broker_id)]
        if not active:
            return
        for topic, part in self.image.topics.all_partitions():
            if part.storage != STORAGE_S3:
                continue
            if part.leader == NO_LEADER:
                self.fail(f"{topic.name}-{part.partition} has no leader although brokers are alive")
            leader = self.brokers[part.leader]
            slot = leader.partitions.get(TopicIdPartition(part.topic_id, part.partition))
            status = slot.status if slot is not None else None
            if status is None or not status.accepts_produce or status.leader_epoch != part.leader_epoch:
                self.fail(f"{topic.name}-{part.partition} is {status} on its leader {part.leader} after settling, "
                          f"leader epoch {part.leader_epoch}")
            for stream_id in self.streams_of(part.topic_id, part.partition):
                stream = self.image.streams.streams[stream_id]
                held = (STREAM_OPENED, part.leader, leader.broker_epoch, leader.opened.get(stream_id))
                if (stream.state, stream.owner, stream.owner_epoch, stream.epoch) != held:
                    self.fail(f"{topic.name}-{part.partition} stream {stream_id} is {stream} after settling, "
                              f"leader {part.leader} (broker epoch {leader.broker_epoch}) believes it holds it at "
                              f"epoch {leader.opened.get(stream_id)}")

    # ------------------------------------------------------------------ invariants
    def check(self, before: MetadataImage, after: MetadataImage) -> None:
        """Every invariant, on everything that may have changed (an unchanged part of the image is
        the very same object, so it was checked at an earlier step)."""
        if after is before:
            return
        if after.cluster is not before.cluster or after.topics is not before.topics or after.kv is not before.kv:
            self.check_partitions(before, after)
        if after.streams is not before.streams or after.kv is not before.kv:
            self.check_streams(before, after)
        if self.step % 10 == 0:
            if not MetadataImage.from_records(after.to_records()).same_content(after):
                self.fail("to_records() does not rebuild the image")
            if not after.indexes_consistent():
                self.fail("the image's indexes differ from ones computed from scratch")

    def check_partitions(self, before: MetadataImage, after: MetadataImage) -> None:
        for broker_id, reg in after.cluster.brokers.items():
            old = before.cluster.brokers.get(broker_id)
            if old is not None and reg.broker_epoch < old.broker_epoch:
                self.fail(f"broker {broker_id} epoch went back {old.broker_epoch} -> {reg.broker_epoch}")
        placed = False
        for topic, part in after.topics.all_partitions():
            if part.leader != NO_LEADER:
                leader_reg = after.cluster.brokers.get(part.leader)
                if part.leader not in part.replicas:
                    self.fail(f"{topic.name}-{part.partition} leader {part.leader} not in replicas {part.replicas}")
                if leader_reg is None or not leader_reg.is_active:
                    self.fail(f"{topic.name}-{part.partition} led by fenced or departing broker {part.leader}")
                if part.storage == STORAGE_LOCAL and part.leader not in part.isr:
                    self.fail(f"{topic.name}-{part.partition} leader {part.leader} not in ISR {part.isr}")
            if not set(part.isr) <= set(part.replicas) or not part.isr:
                self.fail(f"{topic.name}-{part.partition} ISR {part.isr} not a non-empty subset of {part.replicas}")
            old_part = before.topics.partition(part.topic_id, part.partition)
            if old_part is None or old_part.directories != part.directories:
                placed = True
            if old_part is not None and old_part != part:
                if part.partition_epoch <= old_part.partition_epoch or part.leader_epoch < old_part.leader_epoch:
                    self.fail(f"{topic.name}-{part.partition} epochs went back: {old_part} -> {part}")
                if part.leader != old_part.leader and part.leader_epoch <= old_part.leader_epoch:
                    self.fail(f"{topic.name}-{part.partition} leader changed without a new leader epoch")
            if part.storage == STORAGE_S3:
                for stream_id in self.streams_of_image(after, part.topic_id, part.partition):
                    if stream_id not in after.streams.streams:
                        self.fail(f"{topic.name}-{part.partition} points at missing stream {stream_id}")
        if placed:
            self.check_placements(before, after)

    def check_placements(self, before: MetadataImage, after: MetadataImage) -> None:
        """Replay the step's records one at a time and check every new placement against the
        log dirs as they were just before it: a heartbeat in the same step may bring a dir back
        online (or take it offline) before (or after) the placement."""
        log = self.controller.log
        first = bisect.bisect_right(log, before.offset, key=lambda item: item[0])
        image = before
        for offset, record in log[first:]:
            if offset > after.offset:
                break
            nxt = advance_image(image, [record], offset, image.epoch)
            if nxt.topics is not image.topics:
                for topic, part in nxt.topics.all_partitions():
                    old_part = image.topics.partition(part.topic_id, part.partition)
                    if old_part is None or old_part.directories != part.directories:
                        self.check_new_dirs(image, topic.name, old_part, part)
            image = nxt

    def check_new_dirs(self, before: MetadataImage, name: str, old: Any, part: Any) -> None:
        """A replica newly placed on a log dir never lands on an offline one, nor on a saturated one
        while its broker has an online dir (KIP-928)."""
        old_pairs = set(zip(old.replicas, old.directories, strict=False)) if old is not None else set()
        for replica, dir_id in zip(part.replicas, part.directories, strict=False):
            reg = before.cluster.brokers.get(replica)
            if not dir_id or (replica, dir_id) in old_pairs or reg is None:
                continue
            if dir_id in reg.offline_log_dirs or (dir_id in reg.saturated_log_dirs and reg.usable_log_dirs()):
                self.fail(f"{name}-{part.partition} placed on broker {replica}'s {reg.log_dir_state(dir_id)} "
                          f"dir {dir_id}")

    def check_streams(self, before: MetadataImage, after: MetadataImage) -> None:
        next_id = int(after.kv.get(STREAM_ID_COUNTER_KEY, "0"))
        for stream_id, stream in after.streams.streams.items():
            if stream_id >= next_id:
                self.fail(f"stream {stream_id} not below the id counter {next_id}")
            old = before.streams.streams.get(stream_id)
            if old is not None:
                if stream.epoch < old.epoch or stream.end_offset < old.end_offset or stream.start_offset < old.start_offset:
                    self.fail(f"stream {stream_id} went back: {old} -> {stream}")
                if old.state == STREAM_OPENED and stream.owner != old.owner and stream.epoch <= old.epoch:
                    self.fail(f"stream {stream_id} changed owner without a new epoch")
            self.check_ranges(stream)
            if old is not None:
                known = {o.object_key for o in old.objects}
                for obj in stream.objects:
                    if obj.object_key not in known and (old.state != STREAM_OPENED or obj.epoch != old.epoch):
                        self.fail(f"stream {stream_id} accepted {obj} from a non-owner (stream was {old})")

    @staticmethod
    def streams_of_image(image: MetadataImage, topic_id: str, partition: int) -> list[int]:
        return [int(v) for kind in ("data", "meta")
                if (v := image.kv.get(partition_stream_key(topic_id, partition, kind))) is not None]

    def check_ranges(self, stream: Any) -> None:
        objects = stream.objects
        if stream.start_offset > stream.end_offset:
            self.fail(f"stream {stream.stream_id} start {stream.start_offset} beyond end {stream.end_offset}")
        if not objects:
            if stream.start_offset != stream.end_offset:
                self.fail(f"stream {stream.stream_id} has offsets [{stream.start_offset}, {stream.end_offset}) "
                          "but no objects")
            return
        for a, b in pairwise(objects):
            if a.end_offset != b.start_offset:
                self.fail(f"stream {stream.stream_id} has a gap or overlap: {a} then {b}")
        if objects[-1].end_offset != stream.end_offset:
            self.fail(f"stream {stream.stream_id} objects end at {objects[-1].end_offset}, stream at {stream.end_offset}")
        if not objects[0].start_offset <= stream.start_offset < objects[0].end_offset:
            self.fail(f"stream {stream.stream_id} start {stream.start_offset} outside its first object {objects[0]}")

    def check_log_replay(self) -> None:
        delta = MetadataDelta(EMPTY_IMAGE)
        for offset, record in self.controller.log:
            delta.replay(record, offset)
        if not delta.apply().same_content(self.image):
            self.fail("replaying the whole log does not give the controller's image")


def run_seed(seed: int, steps: int = 200) -> SimulationResult:
    return Simulation(seed, steps).run()


def main(argv: list[str] | None = None) -> int:
    """``python -m broker.simulation [FIRST_SEED] [COUNT] [STEPS]`` or ``--seed N [--count C]
    [--steps S]``: run seeds, print a summary and, for each failing seed, the command replaying it."""
    import argparse
    import traceback

    parser = argparse.ArgumentParser(prog="python -m broker.simulation")
    parser.add_argument("first", nargs="?", type=int, default=None, help="first seed (default 0)")
    parser.add_argument("count_pos", nargs="?", type=int, default=None, metavar="count")
    parser.add_argument("steps_pos", nargs="?", type=int, default=None, metavar="steps")
    parser.add_argument("--seed", type=int, default=None, help="the first (or only) seed")
    parser.add_argument("--count", type=int, default=None, help="how many seeds (default 1 with --seed, else 100)")
    parser.add_argument("--steps", type=int, default=None, help="actions per seed (default 200)")
    args = parser.parse_args(argv)
    first = args.seed if args.seed is not None else (args.first or 0)
    count = args.count if args.count is not None else args.count_pos if args.count_pos is not None else \
        (1 if args.seed is not None else 100)
    steps = args.steps if args.steps is not None else args.steps_pos if args.steps_pos is not None else 200
    totals: Counter[str] = Counter()
    failed: list[int] = []
    for seed in range(first, first + count):
        try:
            result = run_seed(seed, steps)
        except Exception as e:  # noqa: BLE001 - an invariant broken, or a crash: either way this seed fails
            failed.append(seed)
            print(f"FAILED seed {seed}: {type(e).__name__}: {e}")
            if not isinstance(e, InvariantViolation):
                traceback.print_exc()
                print(f"  replay: python -m broker.simulation --seed {seed} --steps {steps}")
            continue
        totals.update(result.errors)
        totals.update({f"quorum:{k}": v for k, v in result.quorum.items()})
        totals["moves_completed"] += result.moves_completed
    for key, value in sorted(totals.items()):
        print(f"{key:50s} {value}")
    print(f"{count - len(failed)} of {count} seeds passed ({steps} steps each)")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
