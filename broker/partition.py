"""The life of one partition on one broker, as a pure state machine (no I/O, no asyncio).

The metadata log says whether this broker should lead the partition and at which leader epoch
(the *target*); the I/O shell (partition_manager.py) reports what its stream operations did.
Each input returns the new status and the actions the shell must run, so every rule of the
six-step move (DESIGN.md §3) can be tested without processes:

    CLOSED --lead(e)--> OPENING --opened--> SERVING --lose--> CLOSING --closed--> CLOSED (+ELECT)

Only SERVING accepts produce; every other state answers NOT_LEADER_OR_FOLLOWER. A stream op that
fails with STREAM_FENCED moves the partition to FENCED at once: it never writes again at that
epoch and only a newer leader epoch (or losing the partition) brings it out.

A close runs in sub-phases (``ClosePhase``) so that a failed close resumes where it stopped; what
a failed open or close does next (retry after how long, release, give up, step down fenced) is
decided here too (``on_open_failed``, ``on_close_failed``), from the error, the attempt counters
the status carries and a random draw the shell passes in: the shell only sleeps and moves bytes.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum

from metadata_quorum.kernel.backoff import STEP_BACKOFF, retry_after_ms_of
from metadata_quorum.kernel.errors import ErrorCode, FerryError

# A close is retried this many times before its streams are left to the next owner's recovery.
CLOSE_ATTEMPTS = 20
# An open refused as fenced while this broker still leads at that epoch (its image was behind, or
# it is not unfenced yet) is retried this many times; while the broker is fenced, until it is not.
OPEN_FENCED_RETRIES = 3
FENCED_ERRORS = (ErrorCode.STREAM_FENCED, ErrorCode.STALE_BROKER_EPOCH)
# Refusals an image naming this broker the partition's leader contradicts (the image holds the
# stream and this broker's registration): the controller that answered was behind.
BEHIND_ERRORS = (ErrorCode.STREAM_NOT_EXIST, ErrorCode.BROKER_ID_NOT_REGISTERED)


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
    RELEASE = "RELEASE"  # an open that will not run again: close what the failed attempt holds


class ClosePhase(Enum):
    """Where a close stands (CLOSING only): a failed close is retried from its phase, so that the
    meta is persisted once however many times the last upload is tried."""

    NONE = "NONE"  # not closing
    DRAIN_AND_PERSIST = "DRAIN_AND_PERSIST"  # steps 2-3: drain appends under way, persist the meta (clean)
    UPLOAD_AND_CLOSE = "UPLOAD_AND_CLOSE"  # step 4: the last upload, whose commit closes both streams


@dataclass(frozen=True)
class PartitionStatus:
    """What the broker does with the partition now and what the metadata log wants.

    ``leader_epoch`` is the epoch the broker serves (or opens) at; ``want_lead`` and
    ``want_epoch`` are the latest target from the metadata log; ``fenced_epoch`` is the leader
    epoch at which a stream op was fenced (-1 = never). The counters bound the retries: opens
    refused as fenced (``open_fenced_retries``) and other failed opens (``open_failures``) until
    one succeeds, failed attempts of the close under way (``close_failures``).
    """

    state: PartitionState = PartitionState.CLOSED
    leader_epoch: int = -1
    want_lead: bool = False
    want_epoch: int = -1
    fenced_epoch: int = -1
    elect_after_close: bool = False
    close_phase: ClosePhase = ClosePhase.NONE
    open_fenced_retries: int = 0
    open_failures: int = 0
    close_failures: int = 0
    # the broker's registration (broker epoch) the streams were opened under, as the image had it
    # when the open began (-1: not known); a newer registration no longer owns them
    broker_epoch: int = -1

    @property
    def accepts_produce(self) -> bool:
        return self.state is PartitionState.SERVING

    @property
    def busy(self) -> bool:
        """An open or close is running in the shell; its completion will be reported."""
        return self.state in (PartitionState.OPENING, PartitionState.CLOSING)


Transition = tuple[PartitionStatus, tuple[Action, ...]]


def on_target(status: PartitionStatus, lead: bool, leader_epoch: int, elect_after_close: bool = False,
              broker_epoch: int = -1) -> Transition:
    """The metadata log changed: this broker should (not) lead at ``leader_epoch``.

    ``elect_after_close`` is true when the partition is left without a leader (a reassignment's
    step 1: leader = -1); the old owner then asks for the election once its streams are closed.
    ``broker_epoch`` is this broker's registration in the same image (-1: not known). A broker
    fenced and registered again may see itself lead at ``e`` and then at ``e + 2`` without the
    leaderless state between (one metadata fetch after a pause): its streams are still held by
    the ended registration, whose every commit the controller now refuses, so it opens them again
    under the new one instead of only taking the newer leader epoch.
    """
    s = replace(status, want_lead=lead, want_epoch=leader_epoch if lead else status.want_epoch,
                elect_after_close=elect_after_close if not lead else False)
    st = s.state
    reregistered = 0 <= s.broker_epoch != broker_epoch >= 0
    if lead:
        opening = replace(s, state=PartitionState.OPENING, leader_epoch=leader_epoch, broker_epoch=broker_epoch)
        if st is PartitionState.CLOSED:
            return opening, (Action.OPEN,)
        if st is PartitionState.FENCED:
            if leader_epoch > s.fenced_epoch or reregistered:
                return opening, (Action.OPEN,)
            return s, ()
        if st is PartitionState.SERVING:
            if reregistered:
                return replace(opening, leader_epoch=max(leader_epoch, s.leader_epoch)), (Action.DROP, Action.OPEN)
            if leader_epoch > s.leader_epoch:
                return replace(s, leader_epoch=leader_epoch), (Action.SET_EPOCH,)
            return s, ()
        return s, ()  # OPENING / CLOSING: decided when the running op completes
    if st is PartitionState.SERVING:
        return _closing(s), (Action.CLOSE,)
    if st is PartitionState.FENCED:
        return replace(s, state=PartitionState.CLOSED), ()
    return s, ()  # CLOSED: nothing to do; OPENING/CLOSING: decided on completion


def on_opened(status: PartitionStatus) -> Transition:
    """The streams are open and the partition recovered."""
    if status.state is not PartitionState.OPENING:
        return status, ()
    status = replace(status, open_fenced_retries=0, open_failures=0)
    if not status.want_lead:
        return _closing(status), (Action.CLOSE,)
    s = replace(status, state=PartitionState.SERVING)
    if status.want_epoch > status.leader_epoch:
        return replace(s, leader_epoch=status.want_epoch), (Action.SET_EPOCH,)
    return s, ()


def on_open_retry_due(status: PartitionStatus) -> Transition:
    """The wait before retrying a failed open is over: open again at the newest wanted epoch if
    this broker should still lead, else give the open up."""
    if status.state is not PartitionState.OPENING:
        return status, (Action.RELEASE,)
    if status.want_lead:
        return replace(status, leader_epoch=max(status.leader_epoch, status.want_epoch)), (Action.OPEN,)
    return replace(status, state=PartitionState.CLOSED), (Action.RELEASE,)


def on_meta_persisted(status: PartitionStatus) -> PartitionStatus:
    """Steps 2-3 of a close are done (appends drained, meta persisted clean): a retried close
    starts at step 4."""
    if status.state is not PartitionState.CLOSING:
        return status
    return replace(status, close_phase=ClosePhase.UPLOAD_AND_CLOSE)


def on_closed(status: PartitionStatus, elected: bool = False) -> Transition:
    """The streams are closed at the controller (steps 3 and 4 done). ``elected``: the election
    that went with the closing commit (``on_close_committing``) was done, none is asked again."""
    if status.state is not PartitionState.CLOSING:
        return status, ()
    closed = replace(status, state=PartitionState.CLOSED, close_phase=ClosePhase.NONE, close_failures=0)
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
    s = replace(status, state=PartitionState.FENCED, fenced_epoch=max(status.leader_epoch, status.fenced_epoch),
                close_phase=ClosePhase.NONE, close_failures=0)
    if s.want_lead and s.want_epoch > s.fenced_epoch:
        return replace(s, state=PartitionState.OPENING, leader_epoch=s.want_epoch), (Action.DROP, Action.OPEN)
    return s, (Action.DROP,)


def _closing(status: PartitionStatus) -> PartitionStatus:
    return replace(status, state=PartitionState.CLOSING, close_phase=ClosePhase.DRAIN_AND_PERSIST, close_failures=0)


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


# ---------------------------------------------------------------------------------------------
# What a failed open or close does next.


@dataclass(frozen=True)
class StepError:
    """A failed stream step as the decisions see it: the error code (None: not a FerryError, an
    I/O error or a bug, always worth another try), whether the error says a retry may succeed,
    and the wait a server asked for (``retry_after_ms``)."""

    code: ErrorCode | None
    retriable: bool = True
    retry_after_ms: int | None = None

    @property
    def fenced(self) -> bool:
        """Another broker (or a newer incarnation of this one) owns the stream now."""
        return self.code in FENCED_ERRORS

    @classmethod
    def of(cls, exc: BaseException) -> StepError:
        if isinstance(exc, FerryError):
            return cls(exc.error, exc.retriable, retry_after_ms_of(exc.details))
        return cls(None, True, retry_after_ms_of(getattr(exc, "details", None)))


class Verdict(Enum):
    RETRY = "RETRY"  # run the step again after ``after_ms``
    RELEASE = "RELEASE"  # open: given up; close what the attempt holds (Action.RELEASE)
    FENCED = "FENCED"  # another broker owns the streams now: stepped down at this epoch
    RELEASE_UNFENCED = "RELEASE_UNFENCED"  # close: close the streams still ours, then on_unfenced_released
    CLOSED_ALREADY = "CLOSED_ALREADY"  # close: an earlier attempt's close was applied; nothing is left
    GIVE_UP = "GIVE_UP"  # close: too many attempts; the next owner's recovery takes the streams over


@dataclass(frozen=True)
class Decision:
    """What the shell does after a failed step. ``attempt`` is the failed attempt's number among
    its kind (1 = the first), for the shell's log."""

    verdict: Verdict
    after_ms: float = 0.0
    attempt: int = 0


Decided = tuple[PartitionStatus, Decision, tuple[Action, ...]]


@dataclass(frozen=True)
class OpenContext:
    """What the image says when an open failed: this broker still leads the partition at the
    epoch it opened with, this broker is fenced (or not registered), the broker is stopping."""

    leads_at_epoch: bool
    broker_fenced: bool
    stopping: bool = False


def on_open_failed(status: PartitionStatus, error: StepError, context: OpenContext, draw: float) -> Decided:
    """Opening failed. Fenced while the image says this broker still leads at that epoch: its
    image was behind or it is not unfenced yet, so retry (a few times, or for as long as it is
    fenced). Fenced otherwise: another broker owns the streams, step down. A retriable error
    (STREAM_NOT_CLOSED included: the previous owner is closing; ``BEHIND_ERRORS`` while the image
    still names this broker leader at that epoch: the controller that answered was behind) is
    retried after a jittered backoff (``draw`` in [0, 1)) while not
    stopping; anything else gives the open up, and the partition stays closed here until its
    leadership changes again.
    On RETRY the shell waits ``after_ms`` and calls ``on_open_retry_due``."""
    if status.state is not PartitionState.OPENING:
        return status, Decision(Verdict.RELEASE), (Action.RELEASE,)
    if error.fenced and context.leads_at_epoch and not context.stopping and \
            (context.broker_fenced or status.open_fenced_retries < OPEN_FENCED_RETRIES):
        after_ms = STEP_BACKOFF.delay_ms(status.open_fenced_retries, draw)
        retries = status.open_fenced_retries + 1
        return replace(status, open_fenced_retries=retries), Decision(Verdict.RETRY, after_ms, retries), ()
    if error.fenced:
        fenced, actions = on_fenced(status)
        actions = tuple(a for a in actions if a is not Action.DROP)
        if Action.OPEN not in actions:
            # the other stream may have opened under this broker's registration: while it is
            # held, the new owner's open of it is answered STREAM_NOT_CLOSED, for ever
            actions = (Action.RELEASE,) + actions
        return fenced, Decision(Verdict.FENCED), actions
    failures = status.open_failures + 1
    s = replace(status, open_failures=failures)
    behind = error.code in BEHIND_ERRORS and context.leads_at_epoch
    if (error.retriable or error.code is ErrorCode.STREAM_NOT_CLOSED or behind) and not context.stopping:
        after_ms = STEP_BACKOFF.delay_ms(failures - 1, draw, error.retry_after_ms)
        return s, Decision(Verdict.RETRY, after_ms, failures), ()
    return replace(s, state=PartitionState.CLOSED), Decision(Verdict.RELEASE, 0.0, failures), (Action.RELEASE,)


def on_close_failed(status: PartitionStatus, error: StepError, closed_here: bool, draw: float) -> Decided:
    """A close (steps 2-4) failed. Fenced: only the streams whose own epoch was refused belong to
    another broker now; the other may still be ours (the new owner may have opened one of the
    two before this broker's lease came back), so close that first (RELEASE_UNFENCED, then
    ``on_unfenced_released``), or the new owner waits on STREAM_NOT_CLOSED for a stream nobody
    will ever close. Otherwise: done if an earlier attempt's close was applied after its answer
    was lost (``closed_here``: both streams closed in the image, last held by this broker at its
    epoch), else retried from its phase, a bounded number of times."""
    if error.fenced:
        return status, Decision(Verdict.RELEASE_UNFENCED), ()
    return _close_failed(status, error, closed_here, draw)


def on_unfenced_released(status: PartitionStatus, held: StepError | None, closed_here: bool,
                         draw: float) -> Decided:
    """After a fenced close, the streams still ours were closed (``held`` None: the partition
    steps down fenced), or one did not close for another reason (``held``): retried like any
    failed close."""
    if held is None or held.fenced:
        fenced, actions = on_fenced(status)
        return fenced, Decision(Verdict.FENCED), actions
    return _close_failed(status, held, closed_here, draw)


def _close_failed(status: PartitionStatus, error: StepError, closed_here: bool, draw: float) -> Decided:
    if closed_here:
        return status, Decision(Verdict.CLOSED_ALREADY), ()
    failures = status.close_failures + 1
    s = replace(status, close_failures=failures)
    if failures <= CLOSE_ATTEMPTS:
        return s, Decision(Verdict.RETRY, STEP_BACKOFF.delay_ms(failures - 1, draw, error.retry_after_ms),
                           failures), ()
    return s, Decision(Verdict.GIVE_UP, 0.0, failures), ()
