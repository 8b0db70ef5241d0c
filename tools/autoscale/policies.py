"""Autoscaling policies: pure decision functions over the brokers' load samples.

Each policy is ``decide(config, state, sample) -> (Decision, state)``: no clock, no I/O. The
harness calls it once a second with a :class:`LoadSample` (the live brokers and each one's
produce bytes in per second over the last second, as the brokers would report them), carries
the returned state to the next call, and carries out the decision (add brokers and rebalance
onto them, or drain one broker with the planner and remove it). While an action runs the policy
is not asked again; cooldowns count from the action's end.

- ``target-utilization`` keeps the mean per-broker network-in, smoothed over ``window_s``,
  inside ``[low, high] × capacity``: above, it adds the brokers that bring the mean back to
  ``target`` (all at once, as Kafka operators and AutoMQ's autoscaler size a scale-out); below,
  it removes one broker if the rest would stay under ``target``. ``min_brokers`` /
  ``max_brokers`` bound it; scale-out and scale-in have their own cooldowns.
- ``step`` adds ``step_brokers`` when the smoothed *max* per-broker utilization passes
  ``scale_out_at`` and removes ``step_brokers`` below ``scale_in_at`` (threshold rules, as
  cloud autoscalers' step scaling).
- ``scheduled`` follows a list of ``(at_s, brokers)``: capacity planned from a known daily curve.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable, Literal, Mapping, get_args

from metadata_quorum.kernel.errors import ErrorCode, FerryError
from metadata_quorum.kernel.strict_config import (Fraction, NonNegativeFloat, PositiveFloat, PositiveInt, build,
                                           invalid)

PolicyKind = Literal["target-utilization", "step", "scheduled"]
POLICIES: tuple[str, ...] = get_args(PolicyKind)


@dataclass(frozen=True)
class LoadSample:
    t_s: float
    live_brokers: tuple[int, ...]
    bytes_in_per_s: Mapping[int, float]  # per live broker, over the last second

    def utilizations(self, capacity_bytes_per_s: float) -> list[float]:
        return [self.bytes_in_per_s.get(b, 0.0) / capacity_bytes_per_s for b in self.live_brokers]


@dataclass(frozen=True)
class Decision:
    add: int = 0  # brokers to add (then rebalance onto them)
    remove: int = 0  # brokers to drain and remove
    reason: str = ""

    @property
    def acts(self) -> bool:
        return self.add > 0 or self.remove > 0


NOTHING = Decision()


@dataclass(frozen=True)
class ScheduleEntry:
    """From ``at_s`` on, a scheduled policy wants ``brokers`` brokers."""

    at_s: NonNegativeFloat
    brokers: PositiveInt


@dataclass(frozen=True)
class PolicyConfig:
    """A scenario's ``policy``; the annotations are what the strict loader accepts
    (metadata_quorum/kernel/strict_config.py)."""

    kind: PolicyKind
    capacity_bytes_per_s: PositiveFloat = 1_000_000.0  # per broker, network in
    min_brokers: PositiveInt = 1
    max_brokers: PositiveInt = 10
    window_s: PositiveInt = 5
    # target-utilization
    target: NonNegativeFloat = 0.6
    low: NonNegativeFloat = 0.4
    high: NonNegativeFloat = 0.8
    # step
    scale_out_at: NonNegativeFloat = 0.85
    scale_in_at: NonNegativeFloat = 0.35
    step_brokers: PositiveInt = 1
    cooldown_out_s: NonNegativeFloat = 10.0
    cooldown_in_s: NonNegativeFloat = 30.0
    # the planner's runs the actions start
    rebalance_window_ms: PositiveInt = 5_000
    balance_band: Fraction = 0.05
    # scheduled (in time order once parsed)
    schedule: tuple[ScheduleEntry, ...] = ()


# Settings only one kind of policy reads: given to another kind they would be silently ignored.
KIND_SETTINGS: dict[str, frozenset[str]] = {
    "target-utilization": frozenset({"target", "low", "high"}),
    "step": frozenset({"scale_out_at", "scale_in_at", "step_brokers"}),
    "scheduled": frozenset({"schedule"}),
}


@dataclass(frozen=True)
class PolicyState:
    history: tuple[LoadSample, ...] = ()
    last_out_s: float = -math.inf
    last_in_s: float = -math.inf


@dataclass(frozen=True)
class Smoothed:
    brokers: int
    mean_util: float
    max_util: float


def _smoothed(config: PolicyConfig, history: tuple[LoadSample, ...]) -> Smoothed | None:
    """Mean and max per-broker utilization averaged over the window (samples with the current broker set)."""
    if not history:
        return None
    current = history[-1].live_brokers
    same = [s for s in history if s.live_brokers == current]
    if not current or len(same) < min(config.window_s, 2):
        return None
    means = [sum(u) / len(u) for u in (s.utilizations(config.capacity_bytes_per_s) for s in same)]
    maxes = [max(s.utilizations(config.capacity_bytes_per_s)) for s in same]
    return Smoothed(len(current), sum(means) / len(means), sum(maxes) / len(maxes))


def _record(config: PolicyConfig, state: PolicyState, sample: LoadSample) -> PolicyState:
    return replace(state, history=(state.history + (sample,))[-config.window_s:])


def target_utilization(config: PolicyConfig, state: PolicyState, sample: LoadSample) -> tuple[Decision, PolicyState]:
    state = _record(config, state, sample)
    load = _smoothed(config, state.history)
    if load is None:
        return NOTHING, state
    n, t = load.brokers, sample.t_s
    if load.mean_util > config.high and n < config.max_brokers and t - state.last_out_s >= config.cooldown_out_s:
        wanted = min(config.max_brokers, math.ceil(n * load.mean_util / config.target))
        if wanted > n:
            return Decision(add=wanted - n, reason=f"mean utilization {load.mean_util:.2f} > {config.high} "
                                                   f"on {n} brokers: {wanted} bring it to {config.target}"), state
    if load.mean_util < config.low and n > config.min_brokers and t - state.last_in_s >= config.cooldown_in_s \
            and t - state.last_out_s >= config.cooldown_in_s:
        after = load.mean_util * n / (n - 1)
        if after <= config.target:
            return Decision(remove=1, reason=f"mean utilization {load.mean_util:.2f} < {config.low} on {n} brokers "
                                             f"({after:.2f} on {n - 1})"), state
    return NOTHING, state


def step(config: PolicyConfig, state: PolicyState, sample: LoadSample) -> tuple[Decision, PolicyState]:
    state = _record(config, state, sample)
    load = _smoothed(config, state.history)
    if load is None:
        return NOTHING, state
    n, t = load.brokers, sample.t_s
    if load.max_util > config.scale_out_at and n < config.max_brokers and t - state.last_out_s >= config.cooldown_out_s:
        k = min(config.step_brokers, config.max_brokers - n)
        return Decision(add=k, reason=f"max utilization {load.max_util:.2f} > {config.scale_out_at}"), state
    if load.max_util < config.scale_in_at and n > config.min_brokers and t - state.last_in_s >= config.cooldown_in_s \
            and t - state.last_out_s >= config.cooldown_in_s:
        k = min(config.step_brokers, n - config.min_brokers)
        return Decision(remove=k, reason=f"max utilization {load.max_util:.2f} < {config.scale_in_at}"), state
    return NOTHING, state


def scheduled(config: PolicyConfig, state: PolicyState, sample: LoadSample) -> tuple[Decision, PolicyState]:
    wanted = None
    for entry in config.schedule:
        if sample.t_s >= entry.at_s:
            wanted = entry.brokers
    n = len(sample.live_brokers)
    if wanted is None or wanted == n:
        return NOTHING, state
    wanted = max(config.min_brokers, min(config.max_brokers, wanted))
    if wanted > n:
        return Decision(add=wanted - n, reason=f"schedule: {wanted} brokers from t={sample.t_s:.0f} s"), state
    if wanted < n:
        return Decision(remove=n - wanted, reason=f"schedule: {wanted} brokers from t={sample.t_s:.0f} s"), state
    return NOTHING, state


DECIDE: dict[str, Callable[[PolicyConfig, PolicyState, LoadSample], tuple[Decision, PolicyState]]] = {
    "target-utilization": target_utilization, "step": step, "scheduled": scheduled}


def decide(config: PolicyConfig, state: PolicyState, sample: LoadSample) -> tuple[Decision, PolicyState]:
    return DECIDE[config.kind](config, state, sample)


def acted(state: PolicyState, decision: Decision, finished_s: float) -> PolicyState:
    """The state after an action finished at ``finished_s``: cooldowns start, the window restarts
    (samples from before the change describe another cluster)."""
    if decision.add:
        return PolicyState((), finished_s, state.last_in_s)
    if decision.remove:
        return PolicyState((), state.last_out_s, finished_s)
    return state


def pick_broker_to_remove(sample: LoadSample, protected: frozenset[int] = frozenset()) -> int:
    """The least-loaded live broker (ties: the highest id, the newest), never a protected one."""
    candidates = [b for b in sample.live_brokers if b not in protected]
    if not candidates:
        raise FerryError(ErrorCode.INVALID_REQUEST, "no broker may be removed")
    return min(candidates, key=lambda b: (sample.bytes_in_per_s.get(b, 0.0), -b))


def parse_policy(raw: Mapping[str, object], where: str = "policy") -> PolicyConfig:
    """The scenario's ``policy`` mapping, built by the strict loader: an unknown setting, a bad
    value or a setting of another kind of policy is INVALID_CONFIG naming ``where.setting``."""
    config = build(PolicyConfig, raw, "scenario", prefix=where + ".")
    others = {name for kind, names in KIND_SETTINGS.items() if kind != config.kind for name in names}
    foreign = sorted(set(raw) & others)
    if foreign:
        raise invalid(f"scenario setting '{where}.{foreign[0]}' does not apply to a {config.kind} policy")
    config = replace(config, schedule=tuple(sorted(config.schedule, key=lambda e: (e.at_s, e.brokers))))

    def bad(message: str) -> FerryError:
        return invalid(f"scenario setting '{where}': {message}")

    if config.min_brokers > config.max_brokers:
        raise bad(f"min_brokers {config.min_brokers} is above max_brokers {config.max_brokers}")
    if config.kind == "target-utilization" and not 0 < config.low < config.target < config.high:
        raise bad(f"needs 0 < low < target < high, got {config.low}, {config.target}, {config.high}")
    if config.kind == "step" and not 0 < config.scale_in_at < config.scale_out_at:
        raise bad(f"needs 0 < scale_in_at < scale_out_at, got {config.scale_in_at}, {config.scale_out_at}")
    if config.kind == "scheduled" and not config.schedule:
        raise bad("schedule is required for a scheduled policy")
    return config
