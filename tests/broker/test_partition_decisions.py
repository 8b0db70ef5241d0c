"""What a failed open or close does next (``broker/partition.py``), for every kind of failure,
driven without sockets, threads or clocks: the error, the status's counters and the random draw
are all inputs."""
from __future__ import annotations

from dataclasses import replace

import pytest

from broker.partition import (CLOSE_ATTEMPTS, OPEN_FENCED_RETRIES, Action, ClosePhase, Decision, OpenContext,
                              PartitionState as S, PartitionStatus, StepError, Verdict, on_close_failed, on_closed,
                              on_fenced, on_meta_persisted, on_open_failed, on_open_retry_due, on_opened, on_target,
                              on_unfenced_released)
from metadata_quorum.kernel.backoff import STEP_BACKOFF
from metadata_quorum.kernel.errors import ErrorCode, FerryError

LEADS = OpenContext(leads_at_epoch=True, broker_fenced=False)
FENCED = StepError(ErrorCode.STREAM_FENCED, retriable=False)


def opening(epoch: int = 3) -> PartitionStatus:
    return on_target(PartitionStatus(), lead=True, leader_epoch=epoch)[0]


def closing(epoch: int = 3, elect: bool = True) -> PartitionStatus:
    st = on_opened(opening(epoch))[0]
    st, acts = on_target(st, lead=False, leader_epoch=epoch + 1, elect_after_close=elect)
    assert acts == (Action.CLOSE,)
    return st


def test_step_error_of_an_exception() -> None:
    exc = FerryError(ErrorCode.STREAM_NOT_CLOSED, "closing", details={"retry_after_ms": 250})
    err = StepError.of(exc)
    assert err.code is ErrorCode.STREAM_NOT_CLOSED and err.retry_after_ms == 250 and not err.fenced
    assert StepError.of(FerryError(ErrorCode.STALE_BROKER_EPOCH, "old")).fenced
    assert StepError.of(OSError("disk")) == StepError(None, True, None)  # not ours: always worth another try


# ------------------------------------------------------------------ open


@pytest.mark.parametrize("error", [StepError(None), StepError(ErrorCode.REQUEST_TIMED_OUT, True),
                                   StepError(ErrorCode.STREAM_NOT_CLOSED, retriable=False)])
def test_a_retriable_open_failure_is_retried_after_a_growing_backoff(error: StepError) -> None:
    st = opening()
    delays = []
    for attempt in range(1, 5):
        st, decision, acts = on_open_failed(st, error, LEADS, draw=0.5)
        assert decision == Decision(Verdict.RETRY, STEP_BACKOFF.delay_ms(attempt - 1, 0.5), attempt) and acts == ()
        assert st.state is S.OPENING and st.open_failures == attempt
        delays.append(decision.after_ms)
        st, acts = on_open_retry_due(st)
        assert acts == (Action.OPEN,)
    assert delays == sorted(delays) and delays[0] < delays[-1]


def test_a_server_asked_wait_is_a_floor() -> None:
    _st, decision, _ = on_open_failed(opening(), StepError(ErrorCode.NOT_CONTROLLER, True, retry_after_ms=900), LEADS,
                                      draw=0.0)
    assert decision.verdict is Verdict.RETRY and decision.after_ms >= 900


def test_a_fatal_open_failure_gives_up_and_releases() -> None:
    st, decision, acts = on_open_failed(opening(), StepError(ErrorCode.INVALID_REQUEST, False), LEADS, draw=0.5)
    assert decision.verdict is Verdict.RELEASE and acts == (Action.RELEASE,) and st.state is S.CLOSED


@pytest.mark.parametrize("code", [ErrorCode.STREAM_NOT_EXIST, ErrorCode.BROKER_ID_NOT_REGISTERED])
def test_a_refusal_the_image_contradicts_is_retried_while_still_leader(code: ErrorCode) -> None:
    """A controller behind the image (a cut-off old leader) may answer that the stream or this
    broker does not exist; given up, the partition would stay unserved on the broker the metadata
    names its leader (found by the simulation, seeds 1211 and 5586 at 40 steps)."""
    missing = StepError(code, retriable=False)
    _st, decision, _ = on_open_failed(opening(), missing, LEADS, draw=0.5)
    assert decision.verdict is Verdict.RETRY
    st, decision, acts = on_open_failed(opening(), missing, OpenContext(False, False), draw=0.5)
    assert decision.verdict is Verdict.RELEASE and st.state is S.CLOSED and acts == (Action.RELEASE,)


def test_no_retry_while_stopping() -> None:
    st, decision, acts = on_open_failed(opening(), StepError(None), replace(LEADS, stopping=True), draw=0.5)
    assert decision.verdict is Verdict.RELEASE and st.state is S.CLOSED and acts == (Action.RELEASE,)


def test_fenced_open_while_still_leader_is_retried_a_few_times() -> None:
    st = opening()
    for n in range(OPEN_FENCED_RETRIES):
        st, decision, acts = on_open_failed(st, FENCED, LEADS, draw=0.0)
        assert decision == Decision(Verdict.RETRY, STEP_BACKOFF.delay_ms(n, 0.0), n + 1) and acts == ()
        st = on_open_retry_due(st)[0]
    st, decision, acts = on_open_failed(st, FENCED, LEADS, draw=0.0)
    assert decision.verdict is Verdict.FENCED and st.state is S.FENCED and st.fenced_epoch == 3
    assert acts == (Action.RELEASE,)


def test_fenced_open_of_a_fenced_broker_is_retried_until_it_is_unfenced() -> None:
    st = replace(opening(), open_fenced_retries=50)
    st, decision, _ = on_open_failed(st, FENCED, replace(LEADS, broker_fenced=True), draw=0.0)
    assert decision.verdict is Verdict.RETRY and st.open_fenced_retries == 51


def test_fenced_open_when_no_longer_leader_steps_down() -> None:
    """Stepping down releases the stream the open may have taken before the other was refused:
    held under this broker's registration, the new owner's open of it is answered
    STREAM_NOT_CLOSED for as long as this broker lives (30,000 partitions moved while a broker was
    fenced and registered again: 111 partitions stayed OPENING on their new owner)."""
    st, decision, acts = on_open_failed(opening(), FENCED, OpenContext(False, False), draw=0.0)
    assert decision.verdict is Verdict.FENCED and st.state is S.FENCED and acts == (Action.RELEASE,)
    # a newer epoch is wanted already: open at it (no DROP: a failed open holds no replica)
    newer = on_target(opening(3), lead=True, leader_epoch=5)[0]
    st, decision, acts = on_open_failed(newer, FENCED, OpenContext(False, False), draw=0.0)
    assert st.state is S.OPENING and st.leader_epoch == 5 and acts == (Action.OPEN,)


def test_a_retry_due_after_the_target_moved_away_gives_up() -> None:
    st, decision, _ = on_open_failed(opening(), StepError(None), LEADS, draw=0.5)
    st = on_target(st, lead=False, leader_epoch=4)[0]
    st, acts = on_open_retry_due(st)
    assert st.state is S.CLOSED and acts == (Action.RELEASE,)


def test_a_retry_opens_at_the_newest_wanted_epoch_and_success_resets_the_counters() -> None:
    st, _d, _ = on_open_failed(opening(3), StepError(None), LEADS, draw=0.5)
    st = on_target(st, lead=True, leader_epoch=6)[0]
    st, acts = on_open_retry_due(st)
    assert st.leader_epoch == 6 and acts == (Action.OPEN,)
    st, _ = on_opened(st)
    assert st.state is S.SERVING and st.open_failures == 0 and st.open_fenced_retries == 0


def test_an_open_failure_in_another_state_only_releases() -> None:
    serving = on_opened(opening())[0]
    st, decision, acts = on_open_failed(serving, StepError(None), LEADS, draw=0.5)
    assert st == serving and decision.verdict is Verdict.RELEASE and acts == (Action.RELEASE,)


# ------------------------------------------------------------------ close


def test_close_phases_persist_the_meta_once() -> None:
    st = closing()
    assert st.close_phase is ClosePhase.DRAIN_AND_PERSIST
    st = on_meta_persisted(st)
    assert st.close_phase is ClosePhase.UPLOAD_AND_CLOSE
    st, decision, _ = on_close_failed(st, StepError(None), closed_here=False, draw=0.5)
    assert decision.verdict is Verdict.RETRY and st.close_phase is ClosePhase.UPLOAD_AND_CLOSE  # resumes at step 4
    st, acts = on_closed(st)
    assert st.state is S.CLOSED and st.close_phase is ClosePhase.NONE and st.close_failures == 0
    assert acts == (Action.ELECT,)


def test_a_failed_close_is_retried_a_bounded_number_of_times_then_given_up() -> None:
    st = closing()
    for attempt in range(1, CLOSE_ATTEMPTS + 1):
        st, decision, acts = on_close_failed(st, StepError(ErrorCode.REQUEST_TIMED_OUT), False, draw=1.0)
        assert decision == Decision(Verdict.RETRY, STEP_BACKOFF.delay_ms(attempt - 1, 1.0), attempt) and acts == ()
    st, decision, acts = on_close_failed(st, StepError(ErrorCode.REQUEST_TIMED_OUT), False, draw=1.0)
    assert decision.verdict is Verdict.GIVE_UP and decision.attempt == CLOSE_ATTEMPTS + 1
    assert st.state is S.CLOSING  # the shell abandons the replica and finishes the close (on_closed)
    assert on_closed(st)[0].close_failures == 0


def test_a_close_applied_after_its_answer_was_lost_is_done() -> None:
    st, decision, acts = on_close_failed(closing(), StepError(ErrorCode.REQUEST_TIMED_OUT), True, draw=0.5)
    assert decision.verdict is Verdict.CLOSED_ALREADY and st.close_failures == 0 and acts == ()


def test_a_fenced_close_releases_what_is_still_ours_then_steps_down() -> None:
    st, decision, acts = on_close_failed(closing(), FENCED, closed_here=True, draw=0.5)
    assert decision.verdict is Verdict.RELEASE_UNFENCED and st.state is S.CLOSING and acts == ()
    st2, decision, acts = on_unfenced_released(st, None, closed_here=False, draw=0.5)
    assert decision.verdict is Verdict.FENCED and st2.state is S.FENCED and acts == (Action.DROP,)
    assert st2.close_phase is ClosePhase.NONE
    # a stream still ours did not close: retried like any failed close
    st3, decision, _ = on_unfenced_released(st, StepError(ErrorCode.REQUEST_TIMED_OUT), closed_here=False, draw=0.5)
    assert decision.verdict is Verdict.RETRY and st3.close_failures == 1


def test_a_fenced_close_while_wanted_back_at_a_newer_epoch_reopens() -> None:
    st = on_target(closing(3), lead=True, leader_epoch=7)[0]
    st, decision, acts = on_unfenced_released(st, None, closed_here=False, draw=0.5)
    assert decision.verdict is Verdict.FENCED and st.state is S.OPENING and acts == (Action.DROP, Action.OPEN)


def test_fenced_from_produce_mid_close_resets_the_close() -> None:
    st = on_meta_persisted(closing())
    st, _ = on_fenced(replace(st, close_failures=4))
    assert st.state is S.FENCED and st.close_phase is ClosePhase.NONE and st.close_failures == 0



