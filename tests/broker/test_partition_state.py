"""The partition state machine: every rule of the six-step move, without processes."""
from __future__ import annotations

from broker.partition import (Action, PartitionState as S, PartitionStatus, on_closed, on_fenced, on_open_retry_due,
                              on_opened, on_target, stream_open_epoch)


def serving(epoch: int = 3) -> PartitionStatus:
    st, acts = on_target(PartitionStatus(), lead=True, leader_epoch=epoch)
    assert acts == (Action.OPEN,) and st.state is S.OPENING and not st.accepts_produce
    st, acts = on_opened(st)
    assert st.state is S.SERVING and st.accepts_produce and acts == ()
    return st


def test_gain_opens_then_serves() -> None:
    st = serving(3)
    assert st.leader_epoch == 3


def test_move_away_closes_stops_produce_then_elects() -> None:
    st, acts = on_target(serving(), lead=False, leader_epoch=4, elect_after_close=True)
    assert st.state is S.CLOSING and acts == (Action.CLOSE,)
    assert not st.accepts_produce  # step 2: NOT_LEADER_OR_FOLLOWER from here on
    st, acts = on_closed(st)
    assert st.state is S.CLOSED and acts == (Action.ELECT,)


def test_leader_changed_directly_closes_without_election() -> None:
    st, acts = on_target(serving(), lead=False, leader_epoch=4, elect_after_close=False)
    st, acts = on_closed(st)
    assert st.state is S.CLOSED and acts == ()


def test_lost_while_opening_closes_after_open() -> None:
    st, _ = on_target(PartitionStatus(), lead=True, leader_epoch=1)
    st, acts = on_target(st, lead=False, leader_epoch=2, elect_after_close=True)
    assert acts == () and st.state is S.OPENING
    st, acts = on_opened(st)
    assert st.state is S.CLOSING and acts == (Action.CLOSE,) and not st.accepts_produce
    st, acts = on_closed(st)
    assert acts == (Action.ELECT,)


def test_regained_while_closing_reopens_at_new_epoch() -> None:
    st, _ = on_target(serving(3), lead=False, leader_epoch=4, elect_after_close=True)
    st, acts = on_target(st, lead=True, leader_epoch=5)
    assert acts == () and st.state is S.CLOSING
    st, acts = on_closed(st)
    assert st.state is S.OPENING and st.leader_epoch == 5 and acts == (Action.OPEN,)


def test_epoch_bump_while_serving_needs_no_reopen() -> None:
    st, acts = on_target(serving(3), lead=True, leader_epoch=4)
    assert st.state is S.SERVING and st.leader_epoch == 4 and acts == (Action.SET_EPOCH,)
    st2, acts = on_target(st, lead=True, leader_epoch=4)
    assert st2 == st and acts == ()


def test_a_new_registration_reopens_what_the_ended_one_held() -> None:
    """Fenced, registered again (broker epoch 10 -> 20) and seen leading at e + 2 in one image:
    the streams are still held by the ended registration, so they are dropped and opened again
    under the new one (a newer leader epoch alone would leave every commit refused)."""
    st, _ = on_target(PartitionStatus(), lead=True, leader_epoch=3, broker_epoch=10)
    st, _ = on_opened(st)
    same, acts = on_target(st, lead=True, leader_epoch=4, broker_epoch=10)
    assert acts == (Action.SET_EPOCH,) and same.state is S.SERVING  # same registration: no reopen
    st, acts = on_target(same, lead=True, leader_epoch=5, broker_epoch=20)
    assert acts == (Action.DROP, Action.OPEN) and st.state is S.OPENING and not st.accepts_produce
    assert (st.leader_epoch, st.broker_epoch) == (5, 20)
    st, acts = on_opened(st)
    assert st.state is S.SERVING and acts == ()
    # fenced at the epoch it leads, then registered again: it opens again at that same epoch
    fenced, _ = on_fenced(st)
    again, acts = on_target(fenced, lead=True, leader_epoch=5, broker_epoch=20)
    assert acts == () and again.state is S.FENCED
    again, acts = on_target(fenced, lead=True, leader_epoch=5, broker_epoch=30)
    assert acts == (Action.OPEN,) and (again.state, again.broker_epoch) == (S.OPENING, 30)
    # an image without this broker's registration (-1) changes nothing
    unknown, acts = on_target(same, lead=True, leader_epoch=6, broker_epoch=-1)
    assert acts == (Action.SET_EPOCH,)


def test_epoch_bump_while_opening_applied_on_open() -> None:
    st, _ = on_target(PartitionStatus(), lead=True, leader_epoch=1)
    st, _ = on_target(st, lead=True, leader_epoch=2)
    st, acts = on_opened(st)
    assert st.state is S.SERVING and st.leader_epoch == 2 and acts == (Action.SET_EPOCH,)


def test_fenced_steps_down_and_stays_down_at_same_epoch() -> None:
    st, acts = on_fenced(serving(3))
    assert st.state is S.FENCED and acts == (Action.DROP,) and not st.accepts_produce
    st2, acts = on_target(st, lead=True, leader_epoch=3)
    assert st2.state is S.FENCED and acts == ()
    st3, acts = on_target(st, lead=True, leader_epoch=6)
    assert st3.state is S.OPENING and acts == (Action.OPEN,) and st3.leader_epoch == 6
    st4, acts = on_target(st, lead=False, leader_epoch=7)
    assert st4.state is S.CLOSED and acts == ()


def test_fenced_while_newer_epoch_wanted_reopens() -> None:
    st, _ = on_target(serving(3), lead=True, leader_epoch=3)
    st = st.__class__(state=S.SERVING, leader_epoch=3, want_lead=True, want_epoch=5)
    st, acts = on_fenced(st)
    assert acts == (Action.DROP, Action.OPEN) and st.leader_epoch == 5


def test_open_retry_runs_only_while_wanted() -> None:
    st, _ = on_target(PartitionStatus(), lead=True, leader_epoch=1)
    st2, acts = on_open_retry_due(st)
    assert acts == (Action.OPEN,) and st2.state is S.OPENING
    st3, acts = on_open_retry_due(on_target(st, lead=False, leader_epoch=2)[0])
    assert st3.state is S.CLOSED and acts == (Action.RELEASE,)


def test_completion_in_wrong_state_is_ignored() -> None:
    st = serving()
    assert on_closed(st) == (st, ())
    assert on_opened(st) == (st, ())
    assert on_fenced(PartitionStatus()) == (PartitionStatus(), ())


def test_stream_open_epoch_always_above_previous_owner() -> None:
    assert stream_open_epoch(leader_epoch=0, stream_epoch=0, stream_opened=False, stream_owner=-1, broker_id=1) == 1
    assert stream_open_epoch(leader_epoch=7, stream_epoch=3, stream_opened=False, stream_owner=2, broker_id=1) == 7
    assert stream_open_epoch(leader_epoch=7, stream_epoch=9, stream_opened=True, stream_owner=2, broker_id=1) == 10
    # re-open of a stream this incarnation holds (a retried open): same epoch = idempotent retry
    assert stream_open_epoch(leader_epoch=7, stream_epoch=7, stream_opened=True, stream_owner=1, broker_id=1) == 7
    # the same broker id restarted (kill -9): the stream belongs to the dead incarnation
    assert stream_open_epoch(leader_epoch=0, stream_epoch=0, stream_opened=True, stream_owner=1, broker_id=1,
                             owner_broker_epoch=5, broker_epoch=219) == 1
    assert stream_open_epoch(leader_epoch=2, stream_epoch=0, stream_opened=True, stream_owner=1, broker_id=1,
                             owner_broker_epoch=219, broker_epoch=219) == 0
