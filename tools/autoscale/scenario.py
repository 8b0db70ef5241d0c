"""Scenario files: the cluster, the load, and the timed steps of an autoscaling experiment.

A scenario is YAML::

    name: default
    duration_s: 110
    cluster: {brokers: 3, metrics_interval_ms: 1000}
    topic: {name: load, partitions: 24}
    load: {rate_per_s: 300, value_bytes: 512, skew: 1.0}
    steps:
      - {at_s: 15, action: set_rate, rate_per_s: 800}
      - {at_s: 30, action: add_brokers, count: 2}
      - {at_s: 40, action: rebalance, window_ms: 8000}
      - {at_s: 65, action: set_rate, rate_per_s: 300, ramp_s: 10}
      - {at_s: 80, action: remove_broker, broker: 1, window_ms: 5000}

``cluster`` takes ``brokers``, ``controllers``, ``metrics_interval_ms`` (the brokers' load
samples) and ``upload_interval_ms`` (the brokers' upload cap; left out, the brokers' default of
10 s, which is also how long the end-of-run read-back from S3 may wait). ``topic`` takes ``name``
and ``partitions``.

Actions: ``set_rate`` (``rate_per_s``, optional ``ramp_s``), ``add_brokers`` (``count``),
``rebalance`` (``window_ms``; with new brokers since the last rebalance it runs in add-broker
mode, moving partitions only onto them), ``remove_broker`` (``broker``: drain it with the
planner's remove-broker mode, then stop it). Both take ``balance_band`` (default 0.05): the
planner aims inside ±5 % so that the measured throughput, noisier than the samples' averages,
lands within the verdict's 1.1. ``skew`` spreads the partitions' rates linearly
from 1 to 1 + skew times the coldest's.

Load shapes (``load``): ``diurnal: {period_s, min_rate_per_s, max_rate_per_s}`` replaces the
step rate by a day compressed into ``period_s`` (a cosine from the trough at t=0 to the peak at
half the period); ``bursts: [{at_s, duration_s, factor}]`` multiply the rate; ``zipf_s`` gives
partition ranks Zipf weights ``1 / rank^s`` (key skew; ranks shuffled by ``seed``);
``hot: {partitions, factor, move_every_s}`` makes that many partitions ``factor`` times hotter
and moves the heat to other partitions every ``move_every_s`` (chosen by ``seed``).

``policy`` (tools/autoscale/policies.py) lets a policy decide when to add and remove brokers,
from the brokers' per-second load; ``slo_p99_ms`` is the produce p99 a comparison counts
seconds above (default 250).

The file is read by the strict config loader (metadata_quorum/kernel/strict_config.py) through the
``*Section`` dataclasses below: an unknown key anywhere (a step's key its action does not take
included) or a value out of range is INVALID_CONFIG naming it by its path (``steps[2].count``,
``load.hot.factor``).
"""
from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

import yaml

from metadata_quorum.kernel.strict_config import (Fraction, NonNegativeFloat, NonNegativeInt, PositiveInt, Range, build,
                                           check, invalid)
from tools.autoscale.policies import PolicyConfig, parse_policy

Action = Literal["set_rate", "add_brokers", "rebalance", "remove_broker"]
ACTIONS: tuple[str, ...] = get_args(Action)
DEFAULT_SCENARIO = Path(__file__).resolve().parent.parent / "scenarios" / "default.yaml"


@dataclass(frozen=True)
class Step:
    at_s: float
    action: str
    rate_per_s: float | None = None
    ramp_s: float = 0.0
    count: int = 1
    broker: int | None = None
    window_ms: int = 8_000
    balance_band: float = 0.05


@dataclass(frozen=True)
class Scenario:
    name: str
    duration_s: float
    brokers: int = 3
    controllers: int = 3
    metrics_interval_ms: int = 1_000
    # The brokers' storage.upload_interval_ms (None: the brokers' default). A shorter cap makes the
    # end-of-run read-back from S3 wait less, at more PUTs per GiB.
    upload_interval_ms: int | None = None
    topic: str = "load"
    partitions: int = 24
    rate_per_s: float = 300.0
    value_bytes: int = 512
    skew: float = 0.0
    drain_timeout_s: float = 20.0
    steps: tuple[Step, ...] = field(default_factory=tuple)
    diurnal: tuple[float, float, float] | None = None  # period_s, min and max rate
    bursts: tuple[tuple[float, float, float], ...] = ()  # at_s, duration_s, factor
    zipf_s: float = 0.0
    hot: tuple[int, float, float] | None = None  # partitions, factor, move_every_s
    seed: int = 0
    policy: PolicyConfig | None = None
    slo_p99_ms: float = 250.0

    def with_seed(self, seed: int) -> "Scenario":
        return replace(self, seed=seed)

    def partition_weights(self, t_s: float = 0.0) -> list[float]:
        """Each partition's share of the rate at time t_s (sums to 1): linear skew, Zipf ranks,
        and the hot partitions of the current period."""
        n = self.partitions
        raw = [1.0 + self.skew * (p / (n - 1) if n > 1 else 0.0) for p in range(n)]
        if self.zipf_s > 0:
            ranks = list(range(1, n + 1))
            random.Random(self.seed).shuffle(ranks)
            raw = [w / ranks[p] ** self.zipf_s for p, w in enumerate(raw)]
        if self.hot is not None:
            count, factor, every_s = self.hot
            period = int(t_s // every_s) if every_s > 0 else 0
            hot = set(random.Random(self.seed * 1_000_003 + period).sample(range(n), min(count, n)))
            raw = [w * (factor if p in hot else 1.0) for p, w in enumerate(raw)]
        total = sum(raw)
        return [w / total for w in raw]

    def rate_at(self, t_s: float) -> float:
        """The offered rate (records/s) at time t_s: the steps' rates and ramps (or the diurnal
        curve), times any burst."""
        rate = self._base_rate(t_s)
        for at_s, duration_s, factor in self.bursts:
            if at_s <= t_s < at_s + duration_s:
                rate *= factor
        return rate

    def _base_rate(self, t_s: float) -> float:
        if self.diurnal is not None:
            period_s, low, high = self.diurnal
            return low + (high - low) * (1 - math.cos(2 * math.pi * t_s / period_s)) / 2
        rate = self.rate_per_s
        for step in self.steps:
            if step.action != "set_rate" or step.rate_per_s is None or t_s < step.at_s:
                continue
            if step.ramp_s > 0 and t_s < step.at_s + step.ramp_s:
                rate = rate + (step.rate_per_s - rate) * (t_s - step.at_s) / step.ramp_s
            else:
                rate = step.rate_per_s
        return rate


Seconds = Annotated[float, Range(at_least=1.0)]
Rate = Annotated[float, Range(at_least=1.0)]  # records per second


@dataclass(frozen=True)
class ClusterSection:
    brokers: PositiveInt = 3
    controllers: PositiveInt = 3
    metrics_interval_ms: Annotated[int, Range(at_least=100)] = 1_000
    upload_interval_ms: PositiveInt | None = None


@dataclass(frozen=True)
class TopicSection:
    name: str = "load"
    partitions: PositiveInt = 24


@dataclass(frozen=True)
class DiurnalSection:
    period_s: Seconds
    min_rate_per_s: NonNegativeFloat
    max_rate_per_s: Rate


@dataclass(frozen=True)
class BurstSection:
    at_s: NonNegativeFloat
    duration_s: Annotated[float, Range(at_least=0.001)]
    factor: NonNegativeFloat


@dataclass(frozen=True)
class HotSection:
    partitions: PositiveInt
    factor: Annotated[float, Range(at_least=1.0)]
    move_every_s: NonNegativeFloat = 0.0


@dataclass(frozen=True)
class LoadSection:
    rate_per_s: Rate = 300.0
    value_bytes: Annotated[int, Range(at_least=32)] = 512
    skew: NonNegativeFloat = 0.0
    diurnal: DiurnalSection | None = None
    bursts: tuple[BurstSection, ...] = ()
    zipf_s: NonNegativeFloat = 0.0
    hot: HotSection | None = None


# One section per action: a key the action does not take is refused like any unknown key.
@dataclass(frozen=True)
class SetRateSection:
    at_s: NonNegativeFloat
    action: Literal["set_rate"]
    rate_per_s: Rate
    ramp_s: NonNegativeFloat = 0.0


@dataclass(frozen=True)
class AddBrokersSection:
    at_s: NonNegativeFloat
    action: Literal["add_brokers"]
    count: PositiveInt = 1


@dataclass(frozen=True)
class RebalanceSection:
    at_s: NonNegativeFloat
    action: Literal["rebalance"]
    window_ms: PositiveInt = 8_000
    balance_band: Fraction = 0.05


@dataclass(frozen=True)
class RemoveBrokerSection:
    at_s: NonNegativeFloat
    action: Literal["remove_broker"]
    broker: PositiveInt
    window_ms: PositiveInt = 5_000
    balance_band: Fraction = 0.05


STEP_SECTIONS: dict[str, type] = {"set_rate": SetRateSection, "add_brokers": AddBrokersSection,
                                  "rebalance": RebalanceSection, "remove_broker": RemoveBrokerSection}


@dataclass(frozen=True)
class ScenarioSection:
    """The whole file; ``steps`` and ``policy`` are objects checked further by their own sections."""

    duration_s: Seconds
    name: str = "scenario"
    cluster: ClusterSection = field(default_factory=ClusterSection)
    topic: TopicSection = field(default_factory=TopicSection)
    load: LoadSection = field(default_factory=LoadSection)
    steps: tuple[dict[str, Any], ...] = ()
    drain_timeout_s: Seconds = 20.0
    policy: dict[str, Any] | None = None
    slo_p99_ms: Annotated[float, Range(at_least=1.0)] = 250.0
    seed: NonNegativeInt = 0


def parse_scenario(text: str) -> Scenario:
    """Parse and check a scenario; a mistake is INVALID_CONFIG naming the field by its path."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise invalid(f"the scenario is not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise invalid("the scenario must be a YAML mapping")
    raw = build(ScenarioSection, data, "scenario")
    if not raw.name or "/" in raw.name:
        raise invalid(f"scenario setting 'name' must be non-empty and without '/', got {raw.name!r}")
    steps = _steps(raw.steps, raw.duration_s, raw.cluster.brokers)
    load = raw.load
    if load.diurnal is not None and load.diurnal.min_rate_per_s > load.diurnal.max_rate_per_s:
        raise invalid(f"scenario setting 'load.diurnal.min_rate_per_s' ({load.diurnal.min_rate_per_s}) "
                      f"is above max_rate_per_s ({load.diurnal.max_rate_per_s})")
    d, h = load.diurnal, load.hot
    return Scenario(
        name=raw.name, duration_s=raw.duration_s, brokers=raw.cluster.brokers, controllers=raw.cluster.controllers,
        metrics_interval_ms=raw.cluster.metrics_interval_ms, upload_interval_ms=raw.cluster.upload_interval_ms,
        topic=raw.topic.name, partitions=raw.topic.partitions, rate_per_s=load.rate_per_s,
        value_bytes=load.value_bytes, skew=load.skew, drain_timeout_s=raw.drain_timeout_s, steps=steps,
        diurnal=None if d is None else (d.period_s, d.min_rate_per_s, d.max_rate_per_s),
        bursts=tuple((b.at_s, b.duration_s, b.factor) for b in load.bursts), zipf_s=load.zipf_s,
        hot=None if h is None else (h.partitions, h.factor, h.move_every_s), seed=raw.seed,
        policy=_policy(raw.policy, raw.cluster.brokers), slo_p99_ms=raw.slo_p99_ms)


def _steps(raw_steps: tuple[dict[str, Any], ...], duration_s: float, brokers: int) -> tuple[Step, ...]:
    """Each step built by the section of its action, then checked against the scenario: in time
    order, before its end, never removing a broker twice or the last one."""
    steps: list[Step] = []
    removed: set[int | None] = set()
    live = brokers
    for k, raw in enumerate(raw_steps):
        where = f"steps[{k}]"
        action = check(Action, raw.get("action"), "scenario", f"{where}.action")
        step = Step(**asdict(build(STEP_SECTIONS[action], raw, "scenario", prefix=where + ".")))
        if step.at_s >= duration_s:
            raise invalid(f"scenario setting '{where}.at_s' ({step.at_s}) is not before the end of the scenario "
                          f"({duration_s} s)")
        if steps and step.at_s < steps[-1].at_s:
            raise invalid(f"scenario setting '{where}.at_s' ({step.at_s}) is before the previous step's "
                          f"({steps[-1].at_s}): keep steps in order")
        if action == "add_brokers":
            live += step.count
        elif action == "remove_broker":
            if step.broker in removed:
                raise invalid(f"scenario setting '{where}.broker': broker {step.broker} is already removed")
            if live <= 1:
                raise invalid(f"scenario setting '{where}.broker': removing broker {step.broker} would leave no broker")
            removed.add(step.broker)
            live -= 1
        steps.append(step)
    return tuple(steps)


def _policy(raw: dict[str, Any] | None, brokers: int) -> PolicyConfig | None:
    if raw is None:
        return None
    config = parse_policy(raw)
    if not config.min_brokers <= brokers <= config.max_brokers:
        raise invalid(f"scenario setting 'cluster.brokers' ({brokers}) is outside the policy's "
                      f"min_brokers..max_brokers ({config.min_brokers}..{config.max_brokers})")
    return config


def load_scenario(path: str | Path | None) -> Scenario:
    target = Path(path) if path else DEFAULT_SCENARIO
    try:
        text = target.read_text(encoding="utf-8")
    except OSError as exc:
        raise invalid(f"cannot read scenario {str(target)!r}: {exc.strerror}") from None
    return parse_scenario(text)
