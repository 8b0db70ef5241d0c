"""The autoscaling policies as pure functions: fed load samples, they decide when to add or remove."""
from __future__ import annotations

import pytest

from metadata_quorum.kernel.errors import ErrorCode, FerryError
from tools.autoscale.policies import (
    Decision, LoadSample, PolicyConfig, PolicyState, acted, decide, parse_policy, pick_broker_to_remove,
)

CAP = 1_000_000.0


def sample(t: float, per_broker: dict[int, float]) -> LoadSample:
    return LoadSample(t, tuple(sorted(per_broker)), {b: u * CAP for b, u in per_broker.items()})


def run(config: PolicyConfig, samples: list[LoadSample], state: PolicyState | None = None
        ) -> list[tuple[float, Decision]]:
    state = state or PolicyState()
    out = []
    for s in samples:
        d, state = decide(config, state, s)
        if d.acts:
            out.append((s.t_s, d))
            state = acted(state, d, s.t_s)
    return out


def test_target_utilization_sizes_a_scale_out_to_the_target_after_a_full_window():
    config = PolicyConfig("target-utilization", CAP, min_brokers=2, max_brokers=8, window_s=3, target=0.6,
                          low=0.3, high=0.8)
    calm = [sample(t, {1: 0.5, 2: 0.5, 3: 0.5}) for t in range(5)]
    hot = [sample(5 + t, {1: 1.2, 2: 1.2, 3: 1.2}) for t in range(5)]
    actions = run(config, calm + hot)
    # t=6: the 3 s window means (0.5, 1.2, 1.2) = 0.97 > 0.8 -> ceil(3 * 0.97 / 0.6) = 5 brokers: add 2
    assert [(t, d.add, d.remove) for t, d in actions] == [(6, 2, 0)]
    # at t=5 the window (0.5, 0.5, 1.2) = 0.73 was still inside the band: one hot second is not a trend


def test_target_utilization_respects_max_brokers_cooldowns_and_scales_in_one_at_a_time():
    config = PolicyConfig("target-utilization", CAP, min_brokers=2, max_brokers=4, window_s=2, target=0.6,
                          low=0.3, high=0.8, cooldown_out_s=10, cooldown_in_s=20)
    hot = [sample(t, {1: 2.0, 2: 2.0}) for t in range(6)]
    first = run(config, hot)
    assert [(t, d.add) for t, d in first] == [(1, 2)]  # capped at max_brokers (4 wanted 7)
    cold = [sample(t, {1: 0.1, 2: 0.1, 3: 0.1, 4: 0.1}) for t in range(30, 80)]
    state = acted(PolicyState(), Decision(add=2), 1)
    removes = run(config, cold, state)
    # one at a time, 20 s apart; never below min_brokers (the sample keeps 4 ids: each removal counts)
    assert [t for t, d in removes if d.remove == 1] == [31, 51, 71]
    assert all(d.add == 0 for _t, d in removes)


def test_target_utilization_does_not_remove_when_the_rest_would_pass_the_target():
    config = PolicyConfig("target-utilization", CAP, min_brokers=1, window_s=2, target=0.6, low=0.35, high=0.8)
    # mean 0.34 on 2 brokers would be 0.68 on 1: above the target, keep both
    assert run(config, [sample(t, {1: 0.34, 2: 0.34}) for t in range(100, 140)]) == []


def test_step_policy_adds_and_removes_k_on_thresholds_of_the_hottest_broker():
    config = PolicyConfig("step", CAP, min_brokers=2, max_brokers=6, window_s=2, scale_out_at=0.85,
                          scale_in_at=0.3, step_brokers=2, cooldown_out_s=5, cooldown_in_s=10)
    skewed = [sample(t, {1: 0.95, 2: 0.2, 3: 0.2}) for t in range(12)]  # mean 0.45: only the max counts
    # the samples keep showing 3 brokers: k = 2 each time, 5 s apart (the scale-out cooldown)
    assert [(t, d.add) for t, d in run(config, skewed)] == [(1, 2), (6, 2), (11, 2)]
    low = run(config, [sample(t, {1: 0.1, 2: 0.1, 3: 0.1}) for t in range(50, 70)])
    assert [(t, d.remove) for t, d in low] == [(51, 1), (61, 1)]  # k capped by min_brokers (3 - 2 = 1)


def test_scheduled_policy_follows_its_table():
    config = parse_policy({"kind": "scheduled", "schedule": [{"at_s": 10, "brokers": 5}, {"at_s": 0, "brokers": 3},
                                                             {"at_s": 30, "brokers": 2}], "min_brokers": 2})
    assert decide(config, PolicyState(), sample(5, {1: 0.5, 2: 0.5, 3: 0.5}))[0] == Decision()
    assert decide(config, PolicyState(), sample(12, {1: 0.5, 2: 0.5, 3: 0.5}))[0].add == 2
    assert decide(config, PolicyState(), sample(31, {b: 0.1 for b in range(1, 6)}))[0].remove == 3


def test_the_least_loaded_broker_is_removed_newest_first_on_ties():
    s = sample(0, {1: 0.5, 2: 0.1, 3: 0.1, 4: 0.9})
    assert pick_broker_to_remove(s) == 3
    assert pick_broker_to_remove(s, frozenset({3})) == 2
    with pytest.raises(FerryError):
        pick_broker_to_remove(s, frozenset({1, 2, 3, 4}))


@pytest.mark.parametrize("raw, message", [
    ({"kind": "magic"}, "'policy.kind' must be one of"),
    ({"kind": "step", "speed": 3}, "unknown scenario setting 'policy.speed'"),
    ({"kind": "step", "window_s": 1.5}, "'policy.window_s' must be an integer"),
    ({"kind": "step", "capacity_bytes_per_s": 0}, "'policy.capacity_bytes_per_s' must be > 0"),
    ({"kind": "step", "min_brokers": 5, "max_brokers": 3}, "min_brokers 5 is above max_brokers 3"),
    ({"kind": "target-utilization", "low": 0.7, "target": 0.6}, "needs 0 < low < target < high"),
    ({"kind": "step", "scale_in_at": 0.9}, "needs 0 < scale_in_at < scale_out_at"),
    ({"kind": "scheduled"}, "schedule is required"),
    ({"kind": "scheduled", "schedule": [{"at": 1}]}, "unknown scenario setting 'policy.schedule[0].at'"),
    # formerly accepted: extra keys of a schedule entry, bad values in it, another kind's settings
    ({"kind": "scheduled", "schedule": [{"at_s": 1, "brokers": 2, "note": "x"}]},
     "unknown scenario setting 'policy.schedule[0].note'"),
    ({"kind": "scheduled", "schedule": [{"at_s": 0, "brokers": 2}, {"at_s": -5, "brokers": 3}]},
     "'policy.schedule[1].at_s' must be >= 0"),
    ({"kind": "scheduled", "schedule": [{"at_s": 1, "brokers": "four"}]},
     "'policy.schedule[0].brokers' must be an integer"),
    ({"kind": "scheduled", "schedule": [{"at_s": 1, "brokers": 0}]}, "'policy.schedule[0].brokers' must be >= 1"),
    ({"kind": "target-utilization", "scale_out_at": 0.9}, "'policy.scale_out_at' does not apply to a target-utilization"),
    ({"kind": "step", "balance_band": 1.5}, "'policy.balance_band' must be > 0 and < 1"),
    ({"kind": "step", "cooldown_in_s": -1}, "'policy.cooldown_in_s' must be >= 0"),
])
def test_bad_policies_are_invalid_config_naming_the_field(raw, message):
    with pytest.raises(FerryError) as err:
        parse_policy(raw)
    assert err.value.error == ErrorCode.INVALID_CONFIG and message in err.value.message
