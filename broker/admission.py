"""The broker's decisions about a client request, as pure functions both front ends call.

The HTTP API and the Kafka listener ask the same questions — does this broker serve the
partition, is the client's leader epoch current, may a synced write be acknowledged — and must
answer them identically, or a Kafka client and an HTTP client would see different guarantees
for the same partition. Each function takes plain values (the image's view, the replica's
state, the lease) and returns a decision or raises the Kafka error the client gets; none reads
a clock or touches I/O, so the tests drive every branch directly.
"""
from __future__ import annotations

from dataclasses import dataclass

from metadata_quorum.kernel.errors import ErrorCode, FerryError
from metadata_quorum.records import NO_LEADER


@dataclass(frozen=True)
class LeaderView:
    """What the broker's metadata image says about a partition."""

    leader: int
    leader_epoch: int
    # the owner-to-be of a partition changing hands (image ``named_leader``): the leader clients
    # are told about while ``leader`` is NO_LEADER, at the epoch its election will give it
    next_leader: int = NO_LEADER
    next_leader_epoch: int = -1

    @property
    def named(self) -> tuple[int, int]:
        """The leader (and epoch) a client is told about: the leader, or else the owner-to-be."""
        if self.leader == NO_LEADER and self.next_leader != NO_LEADER:
            return self.next_leader, self.next_leader_epoch
        return self.leader, self.leader_epoch


@dataclass(frozen=True)
class ServingState:
    """What the broker's own slot for the partition says (None fields: no slot here)."""

    accepts_requests: bool
    state_name: str
    replica_closed: bool
    replica_leader_epoch: int


def not_leader(topic: str, partition: int, broker_id: int, view: LeaderView, state_name: str | None,
               leader_url: str | None) -> FerryError:
    """``NOT_LEADER_OR_FOLLOWER`` naming who leads now (Kafka clients refresh metadata on it;
    the details carry the leader so newer clients skip the refresh, as KIP-951 does)."""
    leader, epoch = view.named
    if view.leader == broker_id:
        why = f"partition {topic}-{partition} is {(state_name or 'CLOSED').lower()} on broker {broker_id}"
    elif leader == NO_LEADER:
        why = f"partition {topic}-{partition} is moving and has no leader right now"
    elif leader == broker_id:
        why = f"partition {topic}-{partition} is moving to broker {broker_id}, which does not serve it yet"
    elif view.leader == NO_LEADER:
        why = f"partition {topic}-{partition} is moving to broker {leader}"
    else:
        why = f"broker {broker_id} does not lead {topic}-{partition}; broker {leader} does"
    return FerryError(ErrorCode.NOT_LEADER_OR_FOLLOWER, why,
                      {"leader_id": leader, "leader_url": leader_url, "leader_epoch": epoch})


def check_serving(topic: str, partition: int, broker_id: int, view: LeaderView | None,
                  state: ServingState | None, leader_url: str | None) -> None:
    """The partition exists in the image and is open for requests here."""
    if view is None:
        raise FerryError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                         f"this broker does not know partition {topic}-{partition}")
    if state is None or not state.accepts_requests or state.replica_closed:
        raise not_leader(topic, partition, broker_id, view, state.state_name if state else None, leader_url)


def handoff_pending(broker_id: int, view: LeaderView | None, state: ServingState | None) -> bool:
    """Whether a request that finds the partition not served here is held for a hand-off under
    way instead of being refused at once: this broker is the owner-to-be (named before it is
    elected: it serves once the old owner has closed the streams), or opens it as the elected
    leader (it serves in a moment), or it is closing it (or has just closed it) and no owner-to-be
    is named (then the answer waits for one).

    A refused client backs off exponentially (Kafka's ``retry.backoff.ms`` doubling), so a
    refusal during a ~0.1 s move lands its retry well after the move ended; a request held
    here is answered the moment the hand-off settles: appended when the partition serves, or
    ``NOT_LEADER_OR_FOLLOWER`` naming the new leader. The caller bounds the wait."""
    if view is None or (state is not None and state.accepts_requests and not state.replica_closed):
        return False
    if view.leader == NO_LEADER and view.next_leader == broker_id:
        return state is None or state.state_name != "FENCED"
    if state is None:
        return False
    if view.leader == broker_id:
        return state.state_name == "OPENING"
    if view.leader == NO_LEADER and view.next_leader == NO_LEADER:
        return state.state_name in ("CLOSING", "CLOSED")
    return False


def check_leader_epoch(topic: str, partition: int, client_epoch: int | None, current_epoch: int) -> None:
    """Kafka's fencing of a client's stale (or too new) view: ``-1``/None means the client
    does not say."""
    if client_epoch is None or client_epoch == -1:
        return
    if client_epoch < current_epoch:
        raise FerryError(ErrorCode.FENCED_LEADER_EPOCH, f"leader epoch {client_epoch} of {topic}-{partition} "
                         f"is older than the current {current_epoch}", {"leader_epoch": current_epoch})
    if client_epoch > current_epoch:
        raise FerryError(ErrorCode.UNKNOWN_LEADER_EPOCH, f"leader epoch {client_epoch} of {topic}-{partition} "
                         f"is newer than this broker's {current_epoch}", {"leader_epoch": current_epoch})


def check_write_lease(broker_id: int, lease_valid: bool) -> None:
    if not lease_valid:
        raise FerryError(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"broker {broker_id} has not heard from the "
                         "controllers within its session timeout and may have been fenced")


def check_acks(acks: int) -> None:
    if acks not in (-1, 0, 1):
        raise FerryError(ErrorCode.INVALID_REQUIRED_ACKS, f"acks={acks}; use -1 (all), 1 or 0")


def may_acknowledge(topic: str, partition: int, broker_id: int, *, lease_valid: bool, now_mono_s: float,
                    lease_until_mono_s: float | None, replica_fenced: bool, replica_leader_epoch: int,
                    same_replica: bool, view: LeaderView | None) -> None:
    """May a write the WAL has synced be acknowledged? Raises ``NOT_LEADER_OR_FOLLOWER`` if not.

    Checked after the sync with no await before the answer. If the lease held at the start of
    the write still holds, no controller can have fenced this broker, so no other owner can
    open the streams before this broker closes them — and its close uploads every synced
    write: the write is in the log and is acknowledged (refusing it would make a retry write it
    twice). Otherwise the (fresh) image must still name this broker leader at the epoch the
    write was made with.

    The heartbeat lease that covered the whole write decides before the image's freshness: an
    image that fell behind during the write (a controller failover) says nothing about where
    the write is, and refusing a write that is in the log is what duplicates records. An
    idempotent producer retries the refused batch with its sequence, which the log would answer
    as a duplicate; but if it bumps its epoch first (librdkafka does, for every partition, when
    any partition reports a sequence gap) the batch is renumbered and appended a second time."""
    if lease_until_mono_s is not None and now_mono_s < lease_until_mono_s and not replica_fenced:
        return
    if not lease_valid:
        raise FerryError(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"broker {broker_id} lost its lease while "
                         "writing; the write is not acknowledged (retry)")
    if view is None or view.leader != broker_id or view.leader_epoch != replica_leader_epoch or \
            replica_fenced or not same_replica:
        raise FerryError(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"{topic}-{partition} moved away from broker "
                         f"{broker_id} while the write was in flight; it is not acknowledged (retry)",
                         {"leader_id": view.leader if view is not None else NO_LEADER,
                          "leader_epoch": view.leader_epoch if view is not None else -1})


def fetch_wait_ms(requested_max_wait_ms: int, limit_ms: int) -> int:
    """A long poll never outlasts the broker's limit (it must end well within a session)."""
    if requested_max_wait_ms < 0:
        raise FerryError(ErrorCode.INVALID_REQUEST, f"max_wait_ms={requested_max_wait_ms} is negative")
    return min(requested_max_wait_ms, limit_ms)
