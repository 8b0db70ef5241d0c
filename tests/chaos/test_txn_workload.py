"""The transactional chaos workload's pure parts: what to do after a client error, what a
transaction's outcome is as its client knows it, and which partitions the schedule's moves take."""
from __future__ import annotations

from broker.groups import partition_for_group
from broker.kafka.txn_apis import DEFAULT_TXN_PARTITIONS
from tools.chaos.runner import HTTP_TOPIC, TXN_ID, TXN_TOPIC, move_plan
from tools.chaos.schedule import FaultEvent
from tools.chaos.txn_checker import Outcome
from tools.chaos.txn_workload import Step, after_error, outcome_of


def test_fatal_needs_a_new_producer_abortable_an_abort_retriable_the_same_call_until_the_deadline() -> None:
    assert after_error(retriable=True, requires_abort=False, fatal=True, deadline_passed=False) is Step.RESTART
    assert after_error(retriable=True, requires_abort=True, fatal=False, deadline_passed=False) is Step.ABORT
    assert after_error(retriable=True, requires_abort=False, fatal=False, deadline_passed=False) is Step.RETRY
    assert after_error(retriable=True, requires_abort=False, fatal=False, deadline_passed=True) is Step.RESTART
    assert after_error(retriable=False, requires_abort=False, fatal=False, deadline_passed=False) is Step.RESTART


def test_only_a_commit_asked_for_and_unanswered_is_of_unknown_outcome() -> None:
    assert outcome_of(commit_called=True, committed=True, aborted=False) is Outcome.COMMITTED
    assert outcome_of(commit_called=True, committed=False, aborted=True) is Outcome.ABORTED
    assert outcome_of(commit_called=True, committed=False, aborted=False) is Outcome.UNKNOWN
    # a producer lost before its commit was asked for: its coordinator can only abort it
    assert outcome_of(commit_called=False, committed=False, aborted=False) is Outcome.ABORTED


def test_every_second_move_takes_a_transactional_partition_alternately_the_topics_and_the_coordinators() -> None:
    moves = [FaultEvent(float(i), float(i), "reassign", target=1, partition=i) for i in range(6)]
    other = FaultEvent(0.5, 0.5, "broker_kill", target=2)
    plan = move_plan([other, *reversed(moves)], txn_partitions=3)
    assert other not in plan and all(e not in plan for e in moves[0::2])  # these move the HTTP partition they name
    assert plan[moves[1]].topic == TXN_TOPIC and plan[moves[1]].partition == 1
    assert plan[moves[5]].topic == TXN_TOPIC and plan[moves[5]].partition == 5 % 3
    coordinator = partition_for_group(TXN_ID, DEFAULT_TXN_PARTITIONS)
    assert (plan[moves[3]].topic, plan[moves[3]].partition) == ("__transaction_state", coordinator)
    assert HTTP_TOPIC not in {tp.topic for tp in plan.values()}
