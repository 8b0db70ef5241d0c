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
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from metadata_quorum.errors import ErrorCode, FerryError
from tools.autoscale.policies import PolicyConfig, parse_policy

ACTIONS = ("set_rate", "add_brokers", "rebalance", "remove_broker")
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


def _bad(message: str) -> FerryError:
    return FerryError(ErrorCode.INVALID_CONFIG, message)


def _number(obj: dict[str, Any], key: str, default: Any, kind: type, where: str, minimum: float = 0) -> Any:
    value = obj.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (kind is int and not float(value).is_integer()):
        raise _bad(f"{where}.{key} must be {'an integer' if kind is int else 'a number'}, got {value!r}")
    if value < minimum:
        raise _bad(f"{where}.{key} must be at least {minimum}, got {value!r}")
    return kind(value)


def _optional_int(obj: dict[str, Any], key: str, where: str, minimum: int) -> int | None:
    return _number(obj, key, None, int, where, minimum) if key in obj else None


def _only(obj: dict[str, Any], fields: set[str], where: str) -> None:
    """A field the section does not know is a mistake, not something to ignore."""
    unknown = sorted(set(obj) - fields)
    if unknown:
        raise _bad(f"unknown {where} field(s): {', '.join(unknown)}")


def _band(raw: dict[str, Any], where: str) -> float:
    band = _number(raw, "balance_band", 0.05, float, where)
    if not 0 < band < 1:
        raise _bad(f"{where}.balance_band must be between 0 and 1, got {band}")
    return band


def _section(data: dict[str, Any], key: str) -> dict[str, Any]:
    value = data.get(key, {})
    if not isinstance(value, dict):
        raise _bad(f"{key} must be a mapping, got {type(value).__name__}")
    return value


def parse_scenario(text: str) -> Scenario:
    """Parse and check a scenario; a mistake is INVALID_CONFIG naming the field."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise _bad(f"the scenario is not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise _bad("the scenario must be a YAML mapping")
    known = {"name", "duration_s", "cluster", "topic", "load", "steps", "drain_timeout_s", "policy", "slo_p99_ms",
             "seed"}
    _only(data, known, "scenario")
    cluster, topic, load = _section(data, "cluster"), _section(data, "topic"), _section(data, "load")
    _only(cluster, CLUSTER_FIELDS, "cluster")
    _only(topic, TOPIC_FIELDS, "topic")
    duration_s = _number(data, "duration_s", None, float, "scenario", 1)
    brokers = _number(cluster, "brokers", 3, int, "cluster", 1)
    steps: list[Step] = []
    raw_steps = data.get("steps", [])
    if not isinstance(raw_steps, list):
        raise _bad("steps must be a list")
    removed: set[int] = set()
    live = brokers
    for k, raw in enumerate(raw_steps):
        where = f"steps[{k}]"
        if not isinstance(raw, dict):
            raise _bad(f"{where} must be a mapping")
        action = raw.get("action")
        if action not in ACTIONS:
            raise _bad(f"{where}.action must be one of {', '.join(ACTIONS)}, got {action!r}")
        at_s = _number(raw, "at_s", None, float, where)
        if at_s >= duration_s:
            raise _bad(f"{where}.at_s ({at_s}) is not before the end of the scenario ({duration_s} s)")
        if steps and at_s < steps[-1].at_s:
            raise _bad(f"{where}.at_s ({at_s}) is before the previous step's ({steps[-1].at_s}): keep steps in order")
        step = Step(at_s=at_s, action=action)
        if action == "set_rate":
            step = Step(at_s, action, rate_per_s=_number(raw, "rate_per_s", None, float, where, 1),
                        ramp_s=_number(raw, "ramp_s", 0.0, float, where))
        elif action == "add_brokers":
            step = Step(at_s, action, count=_number(raw, "count", 1, int, where, 1))
            live += step.count
        elif action == "rebalance":
            step = Step(at_s, action, window_ms=_number(raw, "window_ms", 8_000, int, where, 1),
                        balance_band=_band(raw, where))
        elif action == "remove_broker":
            broker = _number(raw, "broker", None, int, where, 1)
            if broker in removed:
                raise _bad(f"{where}: broker {broker} is already removed")
            if live <= 1:
                raise _bad(f"{where}: removing broker {broker} would leave no broker")
            removed.add(broker)
            live -= 1
            step = Step(at_s, action, broker=broker, window_ms=_number(raw, "window_ms", 5_000, int, where, 1),
                        balance_band=_band(raw, where))
        steps.append(step)
    name = data.get("name", "scenario")
    if not isinstance(name, str) or not name or "/" in name:
        raise _bad(f"name must be a non-empty string without '/', got {name!r}")
    return Scenario(
        name=name, duration_s=duration_s, brokers=brokers,
        controllers=_number(cluster, "controllers", 3, int, "cluster", 1),
        metrics_interval_ms=_number(cluster, "metrics_interval_ms", 1_000, int, "cluster", 100),
        upload_interval_ms=_optional_int(cluster, "upload_interval_ms", "cluster", 1),
        topic=str(topic.get("name", "load")), partitions=_number(topic, "partitions", 24, int, "topic", 1),
        rate_per_s=_number(load, "rate_per_s", 300.0, float, "load", 1),
        value_bytes=_number(load, "value_bytes", 512, int, "load", 32),
        skew=_number(load, "skew", 0.0, float, "load"),
        drain_timeout_s=_number(data, "drain_timeout_s", 20.0, float, "scenario", 1),
        steps=tuple(steps), **_shapes(load), seed=_number(data, "seed", 0, int, "scenario"),
        policy=_policy(data, brokers), slo_p99_ms=_number(data, "slo_p99_ms", 250.0, float, "scenario", 1))


CLUSTER_FIELDS = {"brokers", "controllers", "metrics_interval_ms", "upload_interval_ms"}
TOPIC_FIELDS = {"name", "partitions"}
LOAD_FIELDS = {"rate_per_s", "value_bytes", "skew", "diurnal", "bursts", "zipf_s", "hot"}


def _shapes(load: dict[str, Any]) -> dict[str, Any]:
    _only(load, LOAD_FIELDS, "load")
    out: dict[str, Any] = {"zipf_s": _number(load, "zipf_s", 0.0, float, "load")}
    if "diurnal" in load:
        d = load["diurnal"]
        if not isinstance(d, dict):
            raise _bad("load.diurnal must be a mapping {period_s, min_rate_per_s, max_rate_per_s}")
        low = _number(d, "min_rate_per_s", None, float, "load.diurnal", 0)
        high = _number(d, "max_rate_per_s", None, float, "load.diurnal", 1)
        if low > high:
            raise _bad(f"load.diurnal.min_rate_per_s ({low}) is above max_rate_per_s ({high})")
        out["diurnal"] = (_number(d, "period_s", None, float, "load.diurnal", 1), low, high)
    bursts = load.get("bursts", [])
    if not isinstance(bursts, list) or not all(isinstance(b, dict) for b in bursts):
        raise _bad("load.bursts must be a list of {at_s, duration_s, factor}")
    out["bursts"] = tuple((_number(b, "at_s", None, float, f"load.bursts[{k}]"),
                           _number(b, "duration_s", None, float, f"load.bursts[{k}]", 0.001),
                           _number(b, "factor", None, float, f"load.bursts[{k}]", 0)) for k, b in enumerate(bursts))
    if "hot" in load:
        h = load["hot"]
        if not isinstance(h, dict):
            raise _bad("load.hot must be a mapping {partitions, factor, move_every_s}")
        out["hot"] = (_number(h, "partitions", None, int, "load.hot", 1), _number(h, "factor", None, float, "load.hot", 1),
                      _number(h, "move_every_s", 0.0, float, "load.hot"))
    return out


def _policy(data: dict[str, Any], brokers: int) -> PolicyConfig | None:
    if "policy" not in data:
        return None
    raw = data["policy"]
    if not isinstance(raw, dict):
        raise _bad("policy must be a mapping with a kind")
    config = parse_policy(raw)
    if not config.min_brokers <= brokers <= config.max_brokers:
        raise _bad(f"cluster.brokers ({brokers}) is outside the policy's min_brokers..max_brokers "
                   f"({config.min_brokers}..{config.max_brokers})")
    return config


def load_scenario(path: str | Path | None) -> Scenario:
    target = Path(path) if path else DEFAULT_SCENARIO
    try:
        text = target.read_text(encoding="utf-8")
    except OSError as exc:
        raise FerryError(ErrorCode.INVALID_CONFIG, f"cannot read scenario {str(target)!r}: {exc.strerror}") from None
    return parse_scenario(text)
