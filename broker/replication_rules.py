"""Kafka's replication decisions for ``storage=local`` partitions, as pure functions.

The leader keeps, per follower, the offset it last fetched from (its log end offset) and when it
was last caught up; from these follow the high watermark (the smallest log end offset of the
ISR), which followers leave the ISR (not caught up for ``replica.lag.time.max.ms``), which join
it (caught up to the high watermark), whether an ``acks=all`` produce may be acknowledged or must
be refused (``min.insync.replicas``), and, on a follower's fetch, whether its log diverged from
the leader's (KIP-320: the fetch names the epoch of its last batch) and where it must truncate
(KIP-101/279). Nothing here reads a clock, a socket or a file: callers pass times and offsets.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterable, Mapping, Sequence

from broker import local_layout as lay
from metadata_quorum.kernel.errors import ErrorCode, FerryError

UNKNOWN_OFFSET = -1


@dataclass(frozen=True)
class FollowerState:
    """What the leader knows of one follower (Kafka's ReplicaState)."""

    log_end_offset: int = UNKNOWN_OFFSET
    last_caught_up_ms: int = 0
    last_fetch_ms: int = 0
    leader_end_at_last_fetch: int = UNKNOWN_OFFSET


def on_follower_fetch(state: FollowerState, fetch_offset: int, leader_end_offset: int, now_ms: int) -> FollowerState:
    """Kafka's updateFetchState: a follower that fetched from the leader's log end is caught up
    now; one that fetched from at least where the leader's log ended at its previous fetch was
    caught up then."""
    caught_up = state.last_caught_up_ms
    if fetch_offset >= leader_end_offset:
        caught_up = max(caught_up, now_ms)
    elif state.leader_end_at_last_fetch != UNKNOWN_OFFSET and fetch_offset >= state.leader_end_at_last_fetch:
        caught_up = max(caught_up, state.last_fetch_ms)
    return FollowerState(fetch_offset, caught_up, now_ms, leader_end_offset)


def reset_followers(followers: Iterable[int], now_ms: int) -> dict[int, FollowerState]:
    """On becoming leader: every follower's log end is unknown (the high watermark cannot move
    until each in-sync follower has fetched), and each has the lag time to catch up."""
    return {f: FollowerState(last_caught_up_ms=now_ms) for f in followers}


def high_watermark(current_hw: int, leader_id: int, leader_end_offset: int, isr: Iterable[int],
                   followers: Mapping[int, FollowerState]) -> int:
    """The smallest log end offset of the ISR, never below the current high watermark (it only
    moves forward on a leader; a follower of unknown end holds it where it is)."""
    ends = [leader_end_offset]
    for r in isr:
        if r == leader_id:
            continue
        state = followers.get(r)
        if state is None or state.log_end_offset == UNKNOWN_OFFSET:
            return current_hw
        ends.append(state.log_end_offset)
    return max(current_hw, min(ends))


def out_of_sync(leader_id: int, leader_end_offset: int, isr: Iterable[int], followers: Mapping[int, FollowerState],
                now_ms: int, lag_max_ms: int) -> set[int]:
    """Kafka's getOutOfSyncReplicas: ISR followers behind the leader's log end that have not been
    caught up within ``replica.lag.time.max.ms``."""
    out: set[int] = set()
    for r in isr:
        if r == leader_id:
            continue
        state = followers.get(r, FollowerState())
        if state.log_end_offset != leader_end_offset and now_ms - state.last_caught_up_ms > lag_max_ms:
            out.add(r)
    return out


def may_join_isr(state: FollowerState, high_watermark_offset: int, leader_epoch_start_offset: int) -> bool:
    """Kafka's isFollowerInSync: the follower has everything up to the high watermark and at least
    the first offset of the current leader's epoch (so it truncated any divergent suffix)."""
    return state.log_end_offset != UNKNOWN_OFFSET and state.log_end_offset >= high_watermark_offset and \
        state.log_end_offset >= leader_epoch_start_offset


def isr_after(isr: Sequence[int], leader_id: int, leader_end_offset: int, followers: Mapping[int, FollowerState],
              replicas: Sequence[int], hw: int, leader_epoch_start_offset: int, now_ms: int,
              lag_max_ms: int) -> tuple[int, ...]:
    """The ISR the leader should propose: the lagging ones removed, caught-up replicas added
    (in replica order, the leader first in neither sense: the controller's order is kept)."""
    drop = out_of_sync(leader_id, leader_end_offset, isr, followers, now_ms, lag_max_ms)
    join = {r for r in replicas if r not in isr and r != leader_id and
            may_join_isr(followers.get(r, FollowerState()), hw, leader_epoch_start_offset)}
    keep = [r for r in isr if r not in drop]
    return tuple(keep + [r for r in replicas if r in join])


def check_enough_replicas(isr_size: int, min_insync_replicas: int, topic: str, partition: int) -> None:
    """``acks=all`` is refused before the append when the ISR is below ``min.insync.replicas``."""
    if isr_size < min_insync_replicas:
        raise FerryError(ErrorCode.NOT_ENOUGH_REPLICAS,
                         f"the in-sync replicas of {topic}-{partition} are {isr_size}, below "
                         f"min.insync.replicas={min_insync_replicas}")


@dataclass(frozen=True)
class AckDecision:
    done: bool
    error: ErrorCode | None = None


def acks_all_decision(last_offset: int, hw: int, isr_size: int, min_insync_replicas: int) -> AckDecision:
    """Kafka's checkEnoughReplicasReachOffset: done once the high watermark passed the batch; if
    by then the ISR shrank below the minimum it is NOT_ENOUGH_REPLICAS_AFTER_APPEND."""
    if hw <= last_offset:
        return AckDecision(False)
    if isr_size < min_insync_replicas:
        return AckDecision(True, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND)
    return AckDecision(True)


@dataclass(frozen=True)
class Divergence:
    """The leader's answer to a follower whose log diverged: the epoch and where it ends here."""

    epoch: int
    end_offset: int


def diverging_epoch(leader_epochs: Sequence[tuple[int, int]], leader_end_offset: int, fetch_offset: int,
                    last_fetched_epoch: int) -> Divergence | None:
    """KIP-320 on the leader: the follower's last batch has ``last_fetched_epoch``; if this log's
    copy of that epoch ends before ``fetch_offset`` (or the epoch is unknown here), the follower
    holds records the leader does not: tell it where the epoch ends."""
    if last_fetched_epoch < 0:
        return None
    epoch, end = lay.end_offset_for_epoch(leader_epochs, last_fetched_epoch, leader_end_offset)
    if epoch < last_fetched_epoch or end < fetch_offset:
        return Divergence(epoch, end)
    return None


def truncation_offset(follower_epochs: Sequence[tuple[int, int]], follower_end_offset: int,
                      divergence: Divergence, high_watermark_offset: int) -> int:
    """Where a follower truncates on a divergence (Kafka's getOffsetTruncationState): to the end
    of the leader's copy of the epoch, or of its own copy of the largest epoch it shares with
    the leader, whichever is smaller; to its high watermark when the leader knows no epoch."""
    if divergence.end_offset < 0:
        return min(high_watermark_offset, follower_end_offset)
    if divergence.epoch < 0:
        return min(divergence.end_offset, follower_end_offset)
    epoch, end = lay.end_offset_for_epoch(follower_epochs, divergence.epoch, follower_end_offset)
    if epoch < 0:
        return min(divergence.end_offset, follower_end_offset)
    if epoch != divergence.epoch:
        return min(end, follower_end_offset)
    return min(divergence.end_offset, end, follower_end_offset)


def follower_high_watermark(leader_hw: int, follower_end_offset: int) -> int:
    """A follower's high watermark: the leader's, never beyond what it has."""
    return min(leader_hw, follower_end_offset)


def check_fetch_epoch(current_epoch: int, request_epoch: int, topic: str, partition: int) -> None:
    """A follower fetches at the leader epoch it learned from the metadata log."""
    if request_epoch < current_epoch:
        raise FerryError(ErrorCode.FENCED_LEADER_EPOCH, f"leader epoch {request_epoch} of {topic}-{partition} is "
                         f"older than the current {current_epoch}", {"leader_epoch": current_epoch})
    if request_epoch > current_epoch:
        raise FerryError(ErrorCode.UNKNOWN_LEADER_EPOCH, f"leader epoch {request_epoch} of {topic}-{partition} is "
                         f"newer than this broker's {current_epoch}", {"leader_epoch": current_epoch})


def with_end(state: FollowerState, log_end_offset: int) -> FollowerState:
    return replace(state, log_end_offset=log_end_offset)
