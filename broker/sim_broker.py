"""A simulated broker (``simulation.py``) following the metadata log through the production
partition state machine (``partition.py``), so that the simulation exercises the decisions the
brokers run, never a model of them.

Each sync the broker reads what the log committed since it last looked, record by record, as
``partition_manager.py`` reads its deltas: each change of an s3 partition's leadership here is
fed to ``on_target``; the actions
that come back are run as the real shell runs them, only with controller calls instead of stream
storage (an open is ``open_stream`` of both streams at ``stream_open_epoch``, step 4 is
``close_stream`` of both, step 5 ``elect_leaders``). A failed call goes to ``on_open_failed`` /
``on_close_failed`` and their decision is applied: a retry waits on the simulated clock, a
release closes what the attempt opened, a fenced close releases what is still ours first.

One thing the real shell does not do: the simulated broker also closes streams the image says
its incarnation holds but none of its partitions accounts for (an open whose answer was lost,
then given up; a stale broker's retried open). Without it such a stream would be held by a live
broker for good and its partition's next leader refused with STREAM_NOT_CLOSED.
"""
from __future__ import annotations

import math
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from broker import partition as sm
from metadata_quorum.delta import MetadataDelta, TopicIdPartition
from metadata_quorum.image import MetadataImage
from metadata_quorum.kernel import messages as msg
from metadata_quorum.kernel.errors import ErrorCode, FerryError
from metadata_quorum.records import NO_LEADER, STORAGE_S3, STREAM_OPENED, Record, partition_stream_key

ACCOUNTED = (sm.PartitionState.OPENING, sm.PartitionState.SERVING, sm.PartitionState.CLOSING)


@dataclass
class SimPartition:
    """One partition on one simulated broker: its production status, the stream epochs its last
    open used, and a retry waiting on the clock (an open's or a close's)."""

    status: sm.PartitionStatus = field(default_factory=sm.PartitionStatus)
    stream_epochs: dict[int, int] = field(default_factory=dict)
    retry_at_ms: int | None = None
    retry_action: sm.Action | None = None


@dataclass
class SimBroker:
    broker_id: int
    incarnation: int = 0
    broker_epoch: int = -1
    alive: bool = False
    #: stream id -> the epoch this broker believes it opened the stream with (may be stale).
    opened: dict[int, int] = field(default_factory=dict)
    #: its partitions as the production state machine has them
    partitions: dict[TopicIdPartition, SimPartition] = field(default_factory=dict)
    #: the image this incarnation followed last (None: none yet)
    seen: MetadataImage | None = None
    #: it asked for a controlled shutdown and keeps asking until told to shut down
    shutting_down: bool = False
    #: dir id -> "saturated" / "offline" as its heartbeats report them (others are online)
    bad_dirs: dict[str, str] = field(default_factory=dict)
    #: broker epoch -> until when that incarnation may acknowledge writes: its last answered
    #: heartbeat's send time plus the session timeout
    lease_until_ms: dict[int, int] = field(default_factory=dict)
    #: its process is gone (killed), not just silent: a peer may prove it (its WAL lock is free)
    gone: bool = False
    #: paused (SIGSTOP) at this time with a heartbeat stamped and not yet sent; None when running
    paused_at_ms: int | None = None


class SimEnv(Protocol):
    """What a simulated broker needs of the simulation: the committed image, the clock, the
    random source, and controller calls (a refused call returns None; ``last_exc`` says why)."""

    rng: random.Random
    last_exc: FerryError | None
    moves_completed: int
    ops: Counter[str]

    @property
    def image(self) -> MetadataImage: ...

    def now_ms(self) -> int: ...

    def records_after(self, offset: int) -> list[tuple[int, Record]]: ...

    def call(self, op: str, args: dict[str, Any],
             must_succeed: Callable[[MetadataImage], bool] | None = None) -> dict[str, Any] | None: ...


def streams_of(image: MetadataImage, tp: TopicIdPartition) -> list[int]:
    return [int(v) for kind in ("data", "meta")
            if (v := image.kv.get(partition_stream_key(tp.topic_id, tp.partition, kind))) is not None]


class BrokerShell:
    """Runs one simulated broker's partitions through the state machine (the partition manager's
    part, synchronously: every action completes before the next is run)."""

    def __init__(self, env: SimEnv, b: SimBroker) -> None:
        self.env = env
        self.b = b

    # ------------------------------------------------------------------ following the image
    def follow(self) -> None:
        """Apply what the log committed since this broker last looked (each record a delta, as
        the partition manager's ``on_delta``), run the retries that are due, close streams
        nobody accounts for."""
        image = self.env.image
        b = self.b
        for stream_id, st in image.streams.streams.items():  # an open whose answer was lost may have committed
            if st.state == STREAM_OPENED and st.owner == b.broker_id and st.owner_epoch == b.broker_epoch:
                b.opened.setdefault(stream_id, st.epoch)
        for tp, lead, epoch, elect in self._targets(image):
            p = b.partitions.get(tp)
            if p is None:
                if not lead:
                    continue
                p = b.partitions[tp] = SimPartition()
            me = image.cluster.brokers.get(b.broker_id)
            p.status, actions = sm.on_target(p.status, lead, epoch, elect_after_close=elect,
                                             broker_epoch=me.broker_epoch if me is not None else -1)
            self._run(tp, p, actions)
        for tp in sorted(set(b.partitions)):
            if image.topics.partition(tp.topic_id, tp.partition) is None:  # deleted: its streams are gone
                self._forget_streams(b.partitions.pop(tp))
        for tp in sorted(b.partitions):
            p = b.partitions[tp]
            if p.retry_at_ms is None or p.retry_at_ms > self.env.now_ms():
                continue
            action, p.retry_at_ms, p.retry_action = p.retry_action, None, None
            if action is sm.Action.OPEN:
                p.status, actions = sm.on_open_retry_due(p.status)
                self._run(tp, p, actions)
            else:
                self._run(tp, p, (sm.Action.CLOSE,))
        self._close_unaccounted()

    def _targets(self, image: MetadataImage) -> list[tuple[TopicIdPartition, bool, int, bool]]:
        """(partition, lead, leader epoch, elect after close) for each change of an s3 partition's
        leadership here, in log order: from every record committed since the image this broker
        saw last (``MetadataDelta.local_changes``, as ``partition_manager.on_delta``). A new
        incarnation starts from the image as it is, as a broker starts from a snapshot."""
        b = self.b
        seen, b.seen = b.seen, image
        out: list[tuple[TopicIdPartition, bool, int, bool]] = []
        if seen is None:
            for _topic, part in image.topics.all_partitions():
                if part.leader == b.broker_id and part.storage == STORAGE_S3:
                    out.append((TopicIdPartition(part.topic_id, part.partition), True, part.leader_epoch, False))
            return out
        for offset, record in self.env.records_after(seen.offset):
            if offset > image.offset:
                break
            delta = MetadataDelta(seen)
            delta.replay(record, offset)
            changes = delta.local_changes(b.broker_id)
            seen = delta.apply()
            for tp, reg in [*changes.gained.items(), *changes.reopen.items()]:
                if reg.storage == STORAGE_S3:
                    out.append((tp, True, reg.leader_epoch, False))
            for tp, old in changes.lost.items():
                new = seen.topics.partition(tp.topic_id, tp.partition)
                if (new or old).storage == STORAGE_S3:
                    out.append((tp, False, (new or old).leader_epoch, new is not None and new.leader == NO_LEADER))
        return out

    def _close_unaccounted(self) -> None:
        b = self.b
        image = self.env.image
        accounted = {sid for tp, p in b.partitions.items() if p.status.state in ACCOUNTED
                     for sid in streams_of(image, tp)}
        for stream_id in sorted(b.opened):
            if image.streams.streams.get(stream_id) is None:
                b.opened.pop(stream_id)
            elif stream_id not in accounted:
                self._close_stream(stream_id)

    # ------------------------------------------------------------------ actions
    def _run(self, tp: TopicIdPartition, p: SimPartition, actions: tuple[sm.Action, ...]) -> None:
        for action in actions:
            if action is sm.Action.OPEN:
                self._open(tp, p)
            elif action is sm.Action.CLOSE:
                self._close(tp, p)
            elif action is sm.Action.ELECT:
                self._elect(tp)
            elif action is sm.Action.DROP:
                self._forget_streams(p)
            elif action is sm.Action.RELEASE:  # an open given up: close what the attempt opened
                self._forget_streams(p, close=True)
            # SET_EPOCH: the streams stay as they are

    def _open(self, tp: TopicIdPartition, p: SimPartition) -> None:
        """Step 6: open both streams at the epoch ``stream_open_epoch`` picks (as
        ``partition_manager._stream_plan`` does); the decisions of a failure are the state
        machine's."""
        env, b = self.env, self.b
        epoch = p.status.leader_epoch
        p.stream_epochs = {}
        failed: FerryError | None = None
        for stream_id in streams_of(env.image, tp):
            meta = env.image.streams.streams.get(stream_id)
            if meta is None:
                failed = FerryError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"stream {stream_id} is gone")
                break
            me = env.image.cluster.brokers.get(b.broker_id)
            open_epoch = sm.stream_open_epoch(epoch, meta.epoch, meta.state == STREAM_OPENED, meta.owner,
                                              b.broker_id, meta.owner_epoch, me.broker_epoch if me else -1)
            reply = env.call(msg.OPEN_STREAM.name, {"stream_id": stream_id, "epoch": open_epoch, "broker_id": b.broker_id,
                                             "broker_epoch": b.broker_epoch},
                             must_succeed=may_open(b, tp, stream_id, epoch, open_epoch))
            if reply is None:
                failed = env.last_exc or FerryError(ErrorCode.UNKNOWN_SERVER_ERROR, "open refused")
                break
            b.opened[stream_id] = open_epoch
            p.stream_epochs[stream_id] = open_epoch
        if failed is None:
            env.ops["partition_opened"] += 1
            p.status, actions = sm.on_opened(p.status)
            self._run(tp, p, actions)
            return
        part = env.image.topics.partition(tp.topic_id, tp.partition)
        me = env.image.cluster.brokers.get(b.broker_id)
        context = sm.OpenContext(leads_at_epoch=part is not None and part.leader == b.broker_id and
                                 part.leader_epoch == epoch, broker_fenced=me is None or me.fenced)
        p.status, decision, actions = sm.on_open_failed(p.status, sm.StepError.of(failed), context, env.rng.random())
        env.ops[f"open_failed:{decision.verdict.value}"] += 1
        if decision.verdict is sm.Verdict.RETRY:
            p.retry_at_ms, p.retry_action = env.now_ms() + math.ceil(decision.after_ms), sm.Action.OPEN
        self._run(tp, p, actions)

    def _close(self, tp: TopicIdPartition, p: SimPartition) -> None:
        """Steps 2-4: nothing to drain or persist here, then both streams closed."""
        env = self.env
        p.status = sm.on_meta_persisted(p.status)
        error = self._close_streams(tp, fenced_ok=False)
        if error is not None:
            closed_here = self._closed_here(tp, p)
            p.status, decision, actions = sm.on_close_failed(p.status, sm.StepError.of(error), closed_here,
                                                             env.rng.random())
            env.ops[f"close_failed:{decision.verdict.value}"] += 1
            if decision.verdict is sm.Verdict.RELEASE_UNFENCED:
                held = self._close_streams(tp, fenced_ok=True)
                p.status, decision, actions = sm.on_unfenced_released(
                    p.status, sm.StepError.of(held) if held is not None else None, self._closed_here(tp, p),
                    env.rng.random())
                env.ops[f"close_failed:{decision.verdict.value}"] += 1
            if decision.verdict is sm.Verdict.FENCED:
                self._run(tp, p, actions)
                return
            if decision.verdict is sm.Verdict.RETRY:
                p.retry_at_ms, p.retry_action = env.now_ms() + math.ceil(decision.after_ms), sm.Action.CLOSE
                return
        self._forget_streams(p)  # closed, closed already, or given up to the next owner's recovery
        env.ops["partition_closed"] += 1
        p.status, actions = sm.on_closed(p.status)
        self._run(tp, p, actions)

    def _close_streams(self, tp: TopicIdPartition, fenced_ok: bool) -> FerryError | None:
        """Close each of the partition's streams this broker holds; the first error (a fenced
        one skipped with ``fenced_ok``: that stream is another broker's now)."""
        for stream_id in streams_of(self.env.image, tp):
            if stream_id not in self.b.opened:
                continue
            error = self._close_stream(stream_id)
            if error is not None and not (fenced_ok and sm.StepError.of(error).fenced):
                return error
        return None

    def _close_stream(self, stream_id: int) -> FerryError | None:
        b = self.b
        if self.env.call(msg.CLOSE_STREAM.name, {"stream_id": stream_id, "epoch": b.opened[stream_id],
                                          "broker_id": b.broker_id, "broker_epoch": b.broker_epoch}) is not None:
            b.opened.pop(stream_id, None)
            return None
        error = self.env.last_exc or FerryError(ErrorCode.UNKNOWN_SERVER_ERROR, "close refused")
        if sm.StepError.of(error).fenced:
            b.opened.pop(stream_id, None)  # another broker's now
        return error

    def _closed_here(self, tp: TopicIdPartition, p: SimPartition) -> bool:
        """As ``partition_manager._closed_here``: both streams closed, last held by this broker at
        the epochs it opened them with."""
        for stream_id in streams_of(self.env.image, tp):
            meta = self.env.image.streams.streams.get(stream_id)
            if meta is None or meta.state == STREAM_OPENED or meta.owner != self.b.broker_id or \
                    meta.epoch != p.stream_epochs.get(stream_id):
                return False
        return True

    def _forget_streams(self, p: SimPartition, close: bool = False) -> None:
        for stream_id in sorted(p.stream_epochs):
            if close and stream_id in self.b.opened:
                self._close_stream(stream_id)
            self.b.opened.pop(stream_id, None)
        p.stream_epochs = {}

    def _elect(self, tp: TopicIdPartition) -> None:
        """Step 5 (the controller's deadline elects it later if this is refused). A move is
        complete once its partition has a leader again: elected now, or already (as the partition
        manager counts ELECTION_NOT_NEEDED for t5)."""
        topic = self.env.image.topics.by_id.get(tp.topic_id)
        if topic is None:
            return
        reply = self.env.call(msg.ELECT_LEADERS.name, {"partitions": [{"topic": topic.name, "partition": tp.partition}]})
        if reply and reply["results"][0].get("error") in (None, "NONE", "ELECTION_NOT_NEEDED"):
            self.env.moves_completed += 1


def may_open(b: SimBroker, tp: TopicIdPartition, stream_id: int, leader_epoch: int,
             open_epoch: int) -> Callable[[MetadataImage], bool]:
    """In ``image``, the partition's leader opening its closed stream above the stream's epoch
    (or at it, when this incarnation closed it) must succeed."""
    def rightful(image: MetadataImage) -> bool:
        stream = image.streams.streams.get(stream_id)
        part = image.topics.partition(tp.topic_id, tp.partition)
        reg = image.cluster.brokers.get(b.broker_id)
        if stream is None or part is None or reg is None:
            return False
        reopen = open_epoch == stream.epoch and (stream.owner, stream.owner_epoch) == (b.broker_id, b.broker_epoch)
        return (part.leader, part.leader_epoch) == (b.broker_id, leader_epoch) and \
            stream.state != STREAM_OPENED and (open_epoch > stream.epoch or reopen) and \
            reg.broker_epoch == b.broker_epoch and not reg.fenced
    return rightful
