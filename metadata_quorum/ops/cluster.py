"""Broker lifecycle: registration, heartbeats, controlled shutdown and session expiry (KRaft's
ClusterControlManager and ReplicationControlManager's fencing paths).

A broker's epoch is the log offset of its registration record, so a newer incarnation always
has a higher epoch and every request carrying an older one is refused. Heartbeat times are not
records: the active controller keeps them in memory and passes them in ``OpContext``.

A broker with no recorded heartbeat is one this controller has not heard from since it became
active; it counts as heard at ``ctx.active_since_ms`` (as KRaft seeds its heartbeat tracker on
activation). Without that time, ``tick`` does not fence it (a new active controller must not
fence every broker before their first heartbeats arrive), but a new incarnation may replace it
and another broker may take over its streams.
"""
from __future__ import annotations

import heapq
import os
from typing import Any

from metadata_quorum.controller_result import ControllerResult, OpContext
from metadata_quorum.kernel.errors import ErrorCode, FerryError
from metadata_quorum.kernel.messages.cluster import (BrokerDescription, BrokerHeartbeatReply, DescribeClusterReply,
                                                     ElectedLeader, RegisterBrokerReply, ReportBrokerDeadReply,
                                                     TickReply, UnregisterBrokerReply)
from metadata_quorum.image import BrokerRegistration, MetadataImage, PartitionRegistration, TopicIdPartition
from metadata_quorum.ops.placement import Placement, RecordBuilder, election_candidate, elect, evacuate, move_s3_partition
from metadata_quorum.ops.saturation import hand_off_saturated
from metadata_quorum.kernel.validation import (
    INT32_MAX,
    as_mapping,
    invalid,
    opt_bool,
    opt_int,
    opt_str,
    req_int,
    req_str,
    str_list,
)
from metadata_quorum.records import (
    NO_LEADER,
    STORAGE_S3,
    STREAM_OPENED,
    BrokerRegistrationChangeRecord,
    KVRecord,
    partition_stream_key,
    LogDirSpec,
    RegisterBrokerRecord,
    UnregisterBrokerRecord,
)


def heartbeat_expired(ctx: OpContext, broker_id: int, unknown_is_expired: bool = True) -> bool:
    """Silent past the session timeout, judged when the operation was queued (``OpContext``). A
    broker this controller has not heard from counts as heard at its activation
    (``ctx.active_since_ms``) or, when that is unknown, as ``unknown_is_expired`` says."""
    last = ctx.last_heartbeat_ms.get(broker_id, ctx.active_since_ms)
    if last is None:
        return unknown_is_expired
    return judged_at_ms(ctx) - last > ctx.session_timeout_ms


def judged_at_ms(ctx: OpContext) -> int:
    """When sessions are judged: when the operation was queued (see ``OpContext``)."""
    return ctx.now_ms if ctx.queued_ms is None else min(ctx.now_ms, ctx.queued_ms)


def session_end_ms(ctx: OpContext, broker_id: int) -> int:
    """The last time at which this controller does not yet count the broker's session expired
    (``heartbeat_expired`` turns true just after it). The broker's own lease ends no later: it
    runs from the *send* time of a heartbeat this controller counted at its *arrival*. A broker
    not heard from counts as heard at activation, or now when that is unknown (it may have
    heartbeated to the previous controller a moment ago)."""
    last = ctx.last_heartbeat_ms.get(broker_id, ctx.active_since_ms)
    return (ctx.now_ms if last is None else last) + ctx.session_timeout_ms


def unregistered_session_key(broker_id: int) -> str:
    """KV key holding ``session_end_ms`` of an incarnation unregistered while its session was
    live: durable (a new active controller knows nothing of the old one's heartbeats) and read by
    ``held_by_live_owner``, ``register_broker`` and ``streams.open_stream``."""
    return f"broker/{broker_id}/unregistered_session_end_ms"


def dead_incarnation_key(broker_id: int) -> str:
    """KV key holding the broker epoch of an incarnation reported dead (``report_broker_dead``):
    a heartbeat it sent before it died and that arrives late must not bring it back."""
    return f"broker/{broker_id}/dead_epoch"


def expired_incarnation_key(broker_id: int) -> str:
    """KV key holding the broker epoch of an incarnation fenced because its session expired
    (``tick``). Its heartbeats are refused from then on: it must register again.

    A heartbeat answered "not fenced" renews the broker's write lease from the heartbeat's *send*
    time. A broker paused (SIGSTOP, a stall) just after stamping a heartbeat sends it only when
    it resumes, after the fence; had that heartbeat unfenced the incarnation, the broker would hold
    a lease running from before the fence, and acknowledge writes to the WAL that the partition's
    new owner had already read. A new registration is answered after the fence, so every
    heartbeat of the new incarnation is sent after it, and the broker is unfenced only once its
    image holds the registration, and with it the leaders that replaced it."""
    return f"broker/{broker_id}/expired_epoch"


def incarnation_ended(image: MetadataImage, reg: BrokerRegistration) -> bool:
    """This incarnation was fenced without its consent (reported dead, or its session expired):
    it is over, and the broker must register again."""
    epoch = str(reg.broker_epoch)
    return image.kv.get(dead_incarnation_key(reg.broker_id)) == epoch or \
        image.kv.get(expired_incarnation_key(reg.broker_id)) == epoch


def unregistered_session_live(raw: str | None, now_ms: int) -> bool:
    """An unregistered incarnation of the broker may still hold a write lease at wall time
    ``now_ms`` (``raw``: the value under ``unregistered_session_key``, None when there is none)."""
    return raw is not None and now_ms <= int(raw)


def session_end_wall_ms(ctx: OpContext, broker_id: int) -> int:
    """``session_end_ms`` as wall time, to be written into the log: a controller elected later
    has none of this one's session clock, only its own wall clock."""
    return ctx.wall_now_ms + (session_end_ms(ctx, broker_id) - ctx.now_ms)


def unregistered_lease_live(ctx: OpContext, broker_id: int, raw: str | None) -> bool:
    """``unregistered_session_live`` on the wall clock, or — while this controller still has the
    broker's last heartbeat — on its session clock: a forward step of the wall clock must not end
    the old incarnation's lease early (a backward one only makes the wait longer)."""
    if raw is None:
        return False
    if unregistered_session_live(raw, ctx.wall_now_ms):
        return True
    return broker_id in ctx.last_heartbeat_ms and not heartbeat_expired(ctx, broker_id)


def reelection_pending(deadline_ms: int, ctx: OpContext) -> bool:
    """A partition waits for its re-election deadline (wall time in the log: another controller
    may judge it after a failover) only while it lies ahead by at most ``reelection_timeout_ms``,
    its length when set. A deadline further ahead was set before a backward step of the wall
    clock: waiting it out would keep the partition offline as long as the step, so it counts as
    passed; a forward step passes it early. Both only elect sooner, which ``held_by_live_owner``
    keeps safe: a stream still open on a live owner is never given to another broker."""
    return 0 < deadline_ms - ctx.wall_now_ms <= ctx.reelection_timeout_ms


def check_broker_epoch(image: MetadataImage, broker_id: int, broker_epoch: int) -> BrokerRegistration:
    """The broker's registration, or BROKER_ID_NOT_REGISTERED / STALE_BROKER_EPOCH."""
    reg = image.cluster.brokers.get(broker_id)
    if reg is None:
        raise FerryError(ErrorCode.BROKER_ID_NOT_REGISTERED, f"broker {broker_id} is not registered")
    if reg.broker_epoch != broker_epoch:
        raise FerryError(
            ErrorCode.STALE_BROKER_EPOCH,
            f"broker {broker_id} sent epoch {broker_epoch}, but its current registration has epoch "
            f"{reg.broker_epoch}",
            {"broker_epoch": reg.broker_epoch},
        )
    return reg


def _log_dirs(value: Any) -> tuple[LogDirSpec, ...]:
    if value is None:
        return ()
    if not isinstance(value, (list, tuple)):
        raise invalid(f"log_dirs must be a list of {{dir_id, path}}, got {value!r}")
    dirs: list[LogDirSpec] = []
    for item in value:
        item = as_mapping(item, "log_dirs[]")
        dir_id, path = item.get("dir_id"), item.get("path")
        if not isinstance(dir_id, str) or not dir_id or not isinstance(path, str) or not os.path.isabs(path):
            raise invalid(f"each log dir needs a non-empty dir_id and an absolute path, got {dict(item)!r}")
        dirs.append(LogDirSpec(dir_id=dir_id, path=path))
    if len({d.dir_id for d in dirs}) != len(dirs) or len({d.path for d in dirs}) != len(dirs):
        raise invalid("log dir ids and paths must be unique")
    return tuple(dirs)


def register_broker(image: MetadataImage, args: dict[str, Any], ctx: OpContext) -> ControllerResult:
    broker_id = req_int(args, "broker_id", 0)
    incarnation_id = req_str(args, "incarnation_id")
    endpoints = str_list(args.get("endpoints"), "endpoints")
    rack = opt_str(args, "rack")
    log_dirs = _log_dirs(args.get("log_dirs"))
    existing = image.cluster.brokers.get(broker_id)
    if existing is not None and existing.incarnation_id == incarnation_id and not incarnation_ended(image, existing):
        # A retry of a registration that already committed: same epoch, nothing new.
        retried: RegisterBrokerReply = {"broker_epoch": existing.broker_epoch,
                                        "session_timeout_ms": ctx.session_timeout_ms}
        return ControllerResult((), retried)
    if existing is not None and not existing.fenced and not heartbeat_expired(ctx, broker_id):
        raise FerryError(
            ErrorCode.DUPLICATE_BROKER_REGISTRATION,
            f"another incarnation of broker {broker_id} ({existing.incarnation_id}) is still alive; "
            f"retry after its session expires ({ctx.session_timeout_ms} ms without heartbeats)",
        )
    departed = image.kv.get(unregistered_session_key(broker_id))
    if existing is None and unregistered_lease_live(ctx, broker_id, departed):
        raise FerryError(
            ErrorCode.DUPLICATE_BROKER_REGISTRATION,
            f"broker {broker_id} was unregistered while its session was live; its old incarnation may "
            f"still serve until {departed} (epoch ms): retry after that",
            {"retry_after_ms": max(1, int(departed or 0) - ctx.wall_now_ms + 1)},
        )
    builder = RecordBuilder(image)
    if departed is not None:
        builder.add(KVRecord(key=unregistered_session_key(broker_id), value=None))
    for key in (dead_incarnation_key(broker_id), expired_incarnation_key(broker_id)):
        if image.kv.get(key) is not None:
            builder.add(KVRecord(key=key, value=None))
    epoch = ctx.next_offset
    builder.add(RegisterBrokerRecord(
        broker_id=broker_id, incarnation_id=incarnation_id, broker_epoch=epoch, endpoints=endpoints,
        rack=rack, log_dirs=log_dirs, fenced=True, in_controlled_shutdown=False,
    ))
    if existing is not None:
        # The old incarnation is gone: it must lead nothing (its partitions wait for a leader).
        evacuate(builder, Placement(image), broker_id, "restart", ctx)
    registered: RegisterBrokerReply = {"broker_epoch": epoch, "session_timeout_ms": ctx.session_timeout_ms}
    return ControllerResult(tuple(builder.records), registered)


def _holds_open_streams(image: MetadataImage, reg: BrokerRegistration) -> bool:
    """This incarnation still has a stream OPENED: it has not finished closing what it led."""
    return any(st.state == STREAM_OPENED and st.owner == reg.broker_id and st.owner_epoch == reg.broker_epoch
               for st in image.streams.streams.values())


def broker_heartbeat(image: MetadataImage, args: dict[str, Any], ctx: OpContext) -> ControllerResult:
    """KRaft's heartbeat state machine. ``want_shutdown`` from an active broker starts a controlled
    shutdown (its leaderships move away); once it leads nothing and has closed its streams the
    shutdown is complete: it is fenced at once (so the same broker id can register again without
    waiting for the session to expire) and told ``should_shut_down``. A fenced broker asking to
    shut down may do so at once. The reply's ``metadata_high_watermark`` is this controller's log
    end once the heartbeat's records are in: everything committed before the heartbeat was handled
    lies below it, and all of it is committed when the reply is sent."""
    broker_id = req_int(args, "broker_id", 0)
    broker_epoch = req_int(args, "broker_epoch")
    metadata_offset = req_int(args, "metadata_offset", -1)
    want_shutdown = opt_bool(args, "want_shutdown")
    saturated = str_list(args.get("saturated_log_dirs"), "saturated_log_dirs")
    offline = str_list(args.get("offline_log_dirs"), "offline_log_dirs")
    reg = check_broker_epoch(image, broker_id, broker_epoch)
    if reg.fenced and incarnation_ended(image, reg):
        raise FerryError(ErrorCode.STALE_BROKER_EPOCH,
                         f"broker {broker_id}'s incarnation with epoch {broker_epoch} was fenced (its session "
                         "expired, or it was reported dead); register again", {"broker_epoch": reg.broker_epoch})
    builder = RecordBuilder(image)
    caught_up = metadata_offset >= reg.broker_epoch
    reported = reg.with_log_dir_changes(None, saturated, offline)
    if (reported.saturated_log_dirs, reported.offline_log_dirs) != (reg.saturated_log_dirs, reg.offline_log_dirs):
        builder.add(BrokerRegistrationChangeRecord(
            broker_id=broker_id, broker_epoch=broker_epoch,
            saturated_log_dirs=reported.saturated_log_dirs, offline_log_dirs=reported.offline_log_dirs,
        ))
        hand_off_saturated(builder, broker_id, reg.saturated_log_dirs, reported.saturated_log_dirs)
    should_shut_down = False
    if want_shutdown and reg.fenced:
        should_shut_down = True  # nothing to move: it leads nothing and may not open streams
    elif want_shutdown:
        if not reg.in_controlled_shutdown:
            builder.add(BrokerRegistrationChangeRecord(
                broker_id=broker_id, broker_epoch=broker_epoch, in_controlled_shutdown=True,
            ))
        evacuate(builder, Placement(image), broker_id, "shutdown", ctx)
        leads = builder.result_image().topics.leader_counts.get(broker_id, 0) > 0
        if not leads and not _holds_open_streams(image, reg):
            builder.add(BrokerRegistrationChangeRecord(
                broker_id=broker_id, broker_epoch=broker_epoch, fenced=True, in_controlled_shutdown=False,
            ))
            should_shut_down = True
    elif reg.fenced and caught_up and not reg.in_controlled_shutdown:
        builder.add(BrokerRegistrationChangeRecord(broker_id=broker_id, broker_epoch=broker_epoch, fenced=False))
    after = builder.view.broker(broker_id)
    assert after is not None
    reply: BrokerHeartbeatReply = {
        "is_fenced": after.fenced,
        "is_caught_up": caught_up,
        "should_shut_down": should_shut_down,
        "metadata_high_watermark": ctx.next_offset + len(builder.records),
        # the broker's lease must not outlive the session this controller fences on
        "session_timeout_ms": ctx.session_timeout_ms,
    }
    return ControllerResult(tuple(builder.records), reply)


def tick(image: MetadataImage, args: dict[str, Any], ctx: OpContext) -> ControllerResult:
    """Fence brokers silent past the session timeout and give their partitions away; elect
    leaders for leaderless partitions whose re-election deadline passed.

    The second part looks at leaderless partitions (~40 us each): during a move of 10,000
    partitions all of them would be 0.4 s a tick, on the loop that reads heartbeats. So the
    controller asks for it only now and then (``elect_leaderless``, see
    ``LEADERLESS_SCAN_INTERVAL_MS``), and a scan looks at ``leaderless_max`` partitions at most,
    going on after ``leaderless_after``; its reply says where the next one goes on
    (``leaderless_next``). A tick that fences a broker needs no scan for the dead broker's own
    partitions: they are led elsewhere in the same batch whichever way (``evacuate``).
    """
    elect_leaderless = opt_bool(args, "elect_leaderless", True)
    scan_max = opt_int(args, "leaderless_max", INT32_MAX, 1, INT32_MAX)
    after_raw = args.get("leaderless_after")
    after: TopicIdPartition | None = None
    if after_raw is not None:
        if not isinstance(after_raw, list) or len(after_raw) != 2 or not isinstance(after_raw[0], str) \
                or not isinstance(after_raw[1], int) or isinstance(after_raw[1], bool):
            raise FerryError(ErrorCode.INVALID_REQUEST, "'leaderless_after' must be [topic_id, partition]")
        after = TopicIdPartition(after_raw[0], after_raw[1])
    builder = RecordBuilder(image)
    placement = Placement(image)
    fenced: list[int] = []
    for broker_id in sorted(image.cluster.brokers):
        reg = image.cluster.brokers[broker_id]
        if reg.fenced or not heartbeat_expired(ctx, broker_id, unknown_is_expired=False):
            continue
        builder.add(BrokerRegistrationChangeRecord(
            broker_id=broker_id, broker_epoch=reg.broker_epoch, fenced=True, in_controlled_shutdown=False,
        ))
        builder.add(KVRecord(key=expired_incarnation_key(broker_id), value=str(reg.broker_epoch)))
        fenced.append(broker_id)
    for broker_id in fenced:
        evacuate(builder, placement, broker_id, "dead", ctx)
    elected: list[ElectedLeader] = []
    if not elect_leaderless and not fenced:
        quiet: TickReply = {"fenced_brokers": fenced, "silent_ms": {}, "elected": elected}
        return ControllerResult(tuple(builder.records), quiet)
    leaderless = set(image.topics.leaderless) | {
        tp for tp in builder.view.changed_partitions()
        if (p := builder.view.partition(*tp)) is not None and p.leader == NO_LEADER}
    scanned = 0
    next_after: TopicIdPartition | None = None
    last: TopicIdPartition | None = None
    # the next ``scan_max`` after the cursor, without sorting them all: a move of 30,000
    # partitions leaves most of them leaderless for a while, and a tick comes every few ms
    ahead = leaderless if after is None else [tp for tp in leaderless if tp > after]
    for tp in heapq.nsmallest(scan_max + 1, ahead):
        if scanned >= scan_max:
            next_after = last
            break
        scanned += 1
        last = tp
        part = builder.view.partition(tp.topic_id, tp.partition)
        if part is None or part.leader != NO_LEADER:
            continue
        if reelection_pending(part.reelection_deadline_ms, ctx):
            continue
        candidate = election_candidate(builder, part)
        if part.storage == STORAGE_S3 and held_by_live_owner(builder, part, candidate, ctx):
            continue  # with no candidate too: a broker it would move to could not open the streams yet
        if candidate != NO_LEADER:
            elect(builder, part, candidate)
        elif part.storage == STORAGE_S3:
            candidate = move_s3_partition(builder, placement, part, set(), ctx.wall_now_ms, True, ctx)
        if candidate != NO_LEADER:
            elected.append({"topic_id": part.topic_id, "partition": part.partition, "leader": candidate})
    silent_ms = {b: judged_at_ms(ctx) - ctx.last_heartbeat_ms.get(b, ctx.active_since_ms or 0) for b in fenced}
    reply: TickReply = {"fenced_brokers": fenced, "silent_ms": silent_ms, "elected": elected}
    if next_after is not None:
        reply["leaderless_next"] = [next_after.topic_id, next_after.partition]
    return ControllerResult(tuple(builder.records), reply)


def report_broker_dead(image: MetadataImage, args: dict[str, Any], ctx: OpContext) -> ControllerResult:
    """A broker proved another broker's incarnation dead (broker/peer_liveness.py: it could take
    that broker's WAL lock, which the kernel drops only when the process holding it is gone): fence
    it now and give its partitions away in one batch, as ``tick`` does when a session expires.

    The session timeout is there because a silent broker may still acknowledge writes until its
    lease runs out; a broker whose process is gone acknowledges nothing, so waiting out its session
    protects nothing. A report about an older incarnation, or one already fenced, changes nothing.
    """
    broker_id = req_int(args, "broker_id", 0)
    broker_epoch = req_int(args, "broker_epoch")
    check_broker_epoch(image, req_int(args, "reporter_id", 0), req_int(args, "reporter_epoch"))
    reg = image.cluster.brokers.get(broker_id)
    if reg is None or reg.broker_epoch != broker_epoch:
        newer: ReportBrokerDeadReply = {"fenced": False, "why": "a newer incarnation is registered (or none)"}
        return ControllerResult((), newer)
    if reg.fenced:
        already: ReportBrokerDeadReply = {"fenced": False, "why": "already fenced"}
        return ControllerResult((), already)
    builder = RecordBuilder(image)
    builder.add(BrokerRegistrationChangeRecord(
        broker_id=broker_id, broker_epoch=broker_epoch, fenced=True, in_controlled_shutdown=False))
    builder.add(KVRecord(key=dead_incarnation_key(broker_id), value=str(broker_epoch)))
    evacuate(builder, Placement(image), broker_id, "dead", ctx)
    reply: ReportBrokerDeadReply = {"fenced": True, "why": "its process is gone"}
    return ControllerResult(tuple(builder.records), reply)


def held_by_live_owner(builder: RecordBuilder, part: PartitionRegistration, candidate: int, ctx: OpContext) -> bool:
    """One of an s3 partition's streams is still open on a live broker other than ``candidate``.

    Its owner is closing it (a move): the owner elects the new leader itself when done, or is
    fenced when it dies, and until then the new leader could not open the stream anyway
    (``STREAM_NOT_CLOSED``). Electing at the re-election deadline regardless sent thousands of new
    leaders of a large move into open retries against streams still being closed, and their
    backoff kept partitions offline long after the closes were done.
    """
    for kind in ("data", "meta"):
        raw = builder.view.kv(partition_stream_key(part.topic_id, part.partition, kind))
        stream = builder.view.stream(int(raw)) if raw is not None else None
        if stream is None or stream.state != STREAM_OPENED or stream.owner == candidate:
            continue
        if unregistered_lease_live(ctx, stream.owner, builder.view.kv(unregistered_session_key(stream.owner))):
            return True  # unregistered, but its lease may still let it acknowledge
        reg = builder.view.broker(stream.owner)
        if reg is not None and not reg.fenced and not heartbeat_expired(ctx, stream.owner) and \
                stream.owner_epoch in (-1, reg.broker_epoch):
            return True
    return False


def unregister_broker(image: MetadataImage, args: dict[str, Any], ctx: OpContext) -> ControllerResult:
    """Remove a broker for good (Kafka's UnregisterBroker, for scaling in), at once, as Kafka does
    even for a live broker: it is fenced, leaves every ISR, its s3 partitions get new replicas,
    and its registration is removed (its heartbeats and stream calls now fail).

    Who may take its streams over depends on whether it may still acknowledge writes. If it was
    fenced (a completed controlled shutdown: it closed its streams; or a session expiry) or is
    silent past the session timeout, its s3 partitions are led elsewhere at once. Otherwise — a
    live broker, or one paused (SIGSTOP, a GC pause) or cut off that resumes within its session
    — its write lease may still hold: its s3 partitions wait leaderless, their streams stay its
    own, and the end of its session as this controller counts it is recorded
    (``unregistered_session_key``). Until then ``tick`` elects no leader for them, a new leader
    elected otherwise gets ``STREAM_NOT_CLOSED`` on open, and the broker id may not register
    again; then ``tick`` elects, as after a session expiry.
    """
    broker_id = req_int(args, "broker_id", 0)
    reg = image.cluster.brokers.get(broker_id)
    if reg is None:
        raise FerryError(ErrorCode.BROKER_ID_NOT_REGISTERED, f"broker {broker_id} is not registered")
    builder = RecordBuilder(image)
    may_acknowledge = not reg.fenced and not heartbeat_expired(ctx, broker_id, unknown_is_expired=False)
    if not reg.fenced:
        builder.add(BrokerRegistrationChangeRecord(broker_id=broker_id, broker_epoch=reg.broker_epoch, fenced=True))
    # "shutdown": new replicas, no leader until tick finds the streams free; "dead": led at once
    evacuate(builder, Placement(image), broker_id, "shutdown" if may_acknowledge else "dead", ctx)
    if may_acknowledge:
        builder.add(KVRecord(key=unregistered_session_key(broker_id), value=str(session_end_wall_ms(ctx, broker_id))))
    builder.add(UnregisterBrokerRecord(broker_id=broker_id, broker_epoch=reg.broker_epoch))
    reply: UnregisterBrokerReply = {}
    return ControllerResult(tuple(builder.records), reply)


def describe_broker(reg: BrokerRegistration) -> BrokerDescription:
    return {
        "broker_id": reg.broker_id,
        "incarnation_id": reg.incarnation_id,
        "broker_epoch": reg.broker_epoch,
        "endpoints": list(reg.endpoints),
        "rack": reg.rack,
        "log_dirs": [{"dir_id": d.dir_id, "path": d.path} for d in reg.log_dirs],
        "fenced": reg.fenced,
        "in_controlled_shutdown": reg.in_controlled_shutdown,
        "online_log_dirs": list(reg.online_log_dirs),
        "saturated_log_dirs": list(reg.saturated_log_dirs),
        "offline_log_dirs": list(reg.offline_log_dirs),
    }


def describe_cluster(image: MetadataImage, args: dict[str, Any]) -> DescribeClusterReply:
    return {
        "brokers": [describe_broker(image.cluster.brokers[b]) for b in sorted(image.cluster.brokers)],
        "metadata_offset": image.offset,
    }


__all__ = ["register_broker", "unregister_broker", "broker_heartbeat", "report_broker_dead", "tick", "describe_cluster", "check_broker_epoch",
           "heartbeat_expired", "reelection_pending", "session_end_ms", "session_end_wall_ms", "unregistered_lease_live",
           "unregistered_session_key", "unregistered_session_live"]
