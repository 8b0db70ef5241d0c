"""The life of one partition on one broker, as a pure state machine (no I/O, no asyncio).

The metadata log says whether this broker should lead the partition and at which leader epoch
(the *target*); the I/O shell (partition_manager.py) reports what its stream operations did.
Each input returns the new status and the actions the shell must run, so every rule of the
six-step move (DESIGN.md §3) can be tested without processes:

    CLOSED --lead(e)--> OPENING --opened--> SERVING --lose--> CLOSING --closed--> CLOSED (+ELECT)

Only SERVING accepts produce; every other state answers NOT_LEADER_OR_FOLLOWER. A stream op that
fails with STREAM_FENCED moves the partition to FENCED at once: it never writes again at that
epoch and only a newer leader epoch (or losing the partition) brings it out.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum


class PartitionState(Enum):
    OPENING = "OPENING"
    SERVING = "SERVING"
    CLOSING = "CLOSING"
    CLOSED = "CLOSED"
    FENCED = "FENCED"


class Action(Enum):
    OPEN = "OPEN"  # open the streams at status.leader_epoch, read meta, recover, serve
    CLOSE = "CLOSE"  # stop produce, persist meta, force-upload, close streams at the controller
    ELECT = "ELECT"  # ask the controller to elect the partition's new leader (step 5)
    SET_EPOCH = "SET_EPOCH"  # still the leader at a newer leader epoch: no stream change needed
    DROP = "DROP"  # forget local state without touching the streams (they are fenced)


@dataclass(frozen=True)
class PartitionStatus:
    """What the broker does with the partition now and what the metadata log wants.

    ``leader_epoch`` is the epoch the broker serves (or opens) at; ``want_lead`` and
    ``want_epoch`` are the latest target from the metadata log; ``fenced_epoch`` is the leader
    epoch at which a stream op was fenced (-1 = never).
    """

    state: PartitionState = PartitionState.CLOSED
    leader_epoch: int = -1
    want_lead: bool = False
    want_epoch: int = -1
    fenced_epoch: int = -1
    elect_after_close: bool = False

    @property
    def accepts_produce(self) -> bool:
        return self.state is PartitionState.SERVING

    @property
    def busy(self) -> bool:
        """An open or close is running in the shell; its completion will be reported."""
        return self.state in (PartitionState.OPENING, PartitionState.CLOSING)


Transition = tuple[PartitionStatus, tuple[Action, ...]]


def on_target(status: PartitionStatus, lead: bool, leader_epoch: int, elect_after_close: bool = False) -> Transition:
    """The metadata log changed: this broker should (not) lead at ``leader_epoch``.

    ``elect_after_close`` is true when the partition is left without a leader (a reassignment's
    step 1: leader = -1); the old owner then asks for the election once its streams are closed.
    """
    s = replace(status, want_lead=lead, want_epoch=leader_epoch if lead else status.want_epoch,
                elect_after_close=elect_after_close if not lead else False)
    st = s.state
    if lead:
        if st is PartitionState.CLOSED:
            return replace(s, state=PartitionState.OPENING, leader_epoch=leader_epoch), (Action.OPEN,)
        if st is PartitionState.FENCED:
            if leader_epoch > s.fenced_epoch:
                return replace(s, state=PartitionState.OPENING, leader_epoch=leader_epoch), (Action.OPEN,)
            return s, ()
        if st is PartitionState.SERVING:
            if leader_epoch > s.leader_epoch:
                return replace(s, leader_epoch=leader_epoch), (Action.SET_EPOCH,)
            return s, ()
        return s, ()  # OPENING / CLOSING: decided when the running op completes
    if st is PartitionState.SERVING:
        return replace(s, state=PartitionState.CLOSING), (Action.CLOSE,)
    if st is PartitionState.FENCED:
        return replace(s, state=PartitionState.CLOSED), ()
    return s, ()  # CLOSED: nothing to do; OPENING/CLOSING: decided on completion


def on_opened(status: PartitionStatus) -> Transition:
    """The streams are open and the partition recovered."""
    if status.state is not PartitionState.OPENING:
        return status, ()
    if not status.want_lead:
        return replace(status, state=PartitionState.CLOSING), (Action.CLOSE,)
    s = replace(status, state=PartitionState.SERVING)
    if status.want_epoch > status.leader_epoch:
        return replace(s, leader_epoch=status.want_epoch), (Action.SET_EPOCH,)
    return s, ()


def on_open_failed(status: PartitionStatus, retriable: bool) -> Transition:
    """Opening failed; a retriable failure is retried while the target still says lead."""
    if status.state is not PartitionState.OPENING:
        return status, ()
    if retriable and status.want_lead:
        return replace(status, leader_epoch=max(status.leader_epoch, status.want_epoch)), (Action.OPEN,)
    return replace(status, state=PartitionState.CLOSED), ()


def on_closed(status: PartitionStatus, elected: bool = False) -> Transition:
    """The streams are closed at the controller (steps 3 and 4 done). ``elected``: the election
    that went with the closing commit (``on_close_committing``) was done, none is asked again."""
    if status.state is not PartitionState.CLOSING:
        return status, ()
    closed = replace(status, state=PartitionState.CLOSED)
    if status.want_lead:
        epoch = max(status.want_epoch, status.leader_epoch)
        return replace(closed, state=PartitionState.OPENING, leader_epoch=epoch), (Action.OPEN,)
    if status.elect_after_close and not elected:
        return replace(closed, elect_after_close=False), (Action.ELECT,)
    return replace(closed, elect_after_close=False), ()


def on_close_committing(status: PartitionStatus) -> Transition:
    """The last upload's commit, which also closes both streams, is being sent: ask for the
    election in the same controller request, right behind it, on the condition that the streams
    are closed by then (``require_closed_streams``: the controller runs a request's operations in
    order, so it elects only if that commit closed them). Step 5 then costs no round trip of its
    own. Whether it was done is told to ``on_closed``, which asks again if it was not."""
    if status.state is PartitionState.CLOSING and status.elect_after_close and not status.want_lead:
        return status, (Action.ELECT,)
    return status, ()


def on_fenced(status: PartitionStatus) -> Transition:
    """A stream op answered STREAM_FENCED: stop writing now and step down."""
    if status.state in (PartitionState.CLOSED, PartitionState.FENCED):
        return status, ()
    s = replace(status, state=PartitionState.FENCED, fenced_epoch=max(status.leader_epoch, status.fenced_epoch))
    if s.want_lead and s.want_epoch > s.fenced_epoch:
        return replace(s, state=PartitionState.OPENING, leader_epoch=s.want_epoch), (Action.DROP, Action.OPEN)
    return s, (Action.DROP,)


def stream_open_epoch(leader_epoch: int, stream_epoch: int, stream_opened: bool, stream_owner: int, broker_id: int,
                      owner_broker_epoch: int = -1, broker_epoch: int = -1) -> int:
    """The epoch to open a partition's stream with: always above the previous owner's.

    The leader epoch grows with every leadership change, so it is the natural choice; the
    stream's own epoch may already be ahead (streams created at epoch 0, or opened by a
    broker that was later fenced) and then the next epoch above it is used. A stream this very
    incarnation of the broker already holds open (a retried open) is re-opened at its epoch,
    which the controller treats as an idempotent retry. A stream the same broker id held open
    before a kill -9 and restart belongs to the dead incarnation (another broker epoch): the new
    one must open above it, or the controller fences it at the old epoch forever.
    """
    if stream_opened and stream_owner == broker_id and owner_broker_epoch == broker_epoch:
        return stream_epoch
    return max(leader_epoch, stream_epoch + 1)
