"""The re-plan decision, driven without Spark, sockets or a clock."""
from __future__ import annotations

from tools.rebalance.replan import LastPlan, ReplanPolicy, imbalance, load_shift, should_replan

POLICY = ReplanPolicy(imbalance_threshold=1.10, load_change=0.10, cooldown_s=10.0)
BALANCED = {1: 100.0, 2: 100.0, 3: 100.0}
SKEWED = {1: 200.0, 2: 50.0, 3: 50.0}


def test_imbalance_and_shift():
    assert imbalance(BALANCED) == 1.0
    assert imbalance(SKEWED) == 2.0
    assert imbalance({1: 0.0, 2: 0.0}) == 0.0
    assert load_shift(BALANCED, BALANCED) == 0.0
    assert abs(load_shift(BALANCED, SKEWED) - 1 / 3) < 1e-12  # 100 of 300 moved onto broker 1, 50 off each other
    assert load_shift({1: 100.0}, {1: 50.0, 2: 50.0}) == 0.5


def test_first_sample_plans_only_when_out_of_balance():
    assert should_replan(POLICY, None, 0.0, SKEWED).reason == "first"
    assert should_replan(POLICY, None, 0.0, SKEWED).replan
    d = should_replan(POLICY, None, 0.0, BALANCED)
    assert (d.replan, d.reason) == (False, "balanced")
    assert should_replan(POLICY, None, 0.0, {1: 0.0, 2: 0.0}).reason == "no_load"


def test_a_new_broker_bypasses_the_cooldown():
    last = LastPlan(finished_s=100.0, brokers=frozenset(BALANCED), loads=BALANCED)
    d = should_replan(POLICY, last, 101.0, {**BALANCED, 4: 0.0})
    assert (d.replan, d.reason) == (True, "brokers_changed")
    d = should_replan(POLICY, last, 101.0, {1: 150.0, 2: 150.0})
    assert (d.replan, d.reason) == (True, "brokers_changed")


def test_cooldown_then_imbalance_then_fixed_point():
    last = LastPlan(finished_s=100.0, brokers=frozenset(BALANCED), loads=BALANCED)
    assert should_replan(POLICY, last, 105.0, SKEWED).reason == "cooldown"
    d = should_replan(POLICY, last, 111.0, SKEWED)
    assert (d.replan, d.reason) == (True, "imbalanced")
    assert should_replan(POLICY, last, 111.0, {1: 104.0, 2: 98.0, 3: 98.0}).reason == "balanced"
    # the last plan could not do better than this (a giant partition): the same load is not planned again
    stuck = LastPlan(finished_s=100.0, brokers=frozenset(SKEWED), loads=SKEWED)
    assert should_replan(POLICY, stuck, 200.0, {1: 205.0, 2: 48.0, 3: 47.0}).reason == "unchanged"
    assert should_replan(POLICY, stuck, 200.0, {1: 50.0, 2: 200.0, 3: 50.0}).replan
