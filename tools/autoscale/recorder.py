"""The 1 s time series of an experiment, kept in memory and written as CSV (pure: no clock, no I/O but the write).

Everything is recorded against the experiment's clock (seconds since its start, given by the
caller): records offered and acknowledged (with the acknowledging broker and the latency from the
record's *scheduled* send time, so a stall shows up in full rather than being hidden by a paused
sender), failures, consumed records, and gauges sampled once a second (consumer lag, live brokers,
the producer's cumulative retries). Events (scale-out, rebalance, moves, removal) go beside.
"""
from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

BASE_COLUMNS = ("t_s", "offered_rps", "achieved_rps", "p50_ms", "p99_ms", "consumed_rps", "consumer_lag",
                "brokers", "max_over_mean", "moves", "errors", "retries")


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty list."""
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100.0 * len(ordered)))
    return ordered[rank - 1]


@dataclass
class _Second:
    offered: int = 0
    acked: int = 0
    failed: int = 0
    consumed: int = 0
    latencies_ms: list[float] = field(default_factory=list)
    per_broker: dict[int, int] = field(default_factory=dict)
    gauges: dict[str, Any] = field(default_factory=dict)
    moves: int = 0


@dataclass(frozen=True)
class Event:
    t_s: float
    kind: str
    detail: dict[str, Any]


class Recorder:
    def __init__(self) -> None:
        self._seconds: dict[int, _Second] = {}
        self.events: list[Event] = []
        self._brokers_seen: set[int] = set()

    def _at(self, t_s: float) -> _Second:
        key = max(0, int(t_s))
        sec = self._seconds.get(key)
        if sec is None:
            sec = self._seconds[key] = _Second()
        return sec

    # -- inputs
    def offered(self, t_s: float, n: int = 1) -> None:
        self._at(t_s).offered += n

    def acked(self, t_s: float, broker_id: int, latency_ms: float) -> None:
        sec = self._at(t_s)
        sec.acked += 1
        sec.latencies_ms.append(latency_ms)
        sec.per_broker[broker_id] = sec.per_broker.get(broker_id, 0) + 1
        self._brokers_seen.add(broker_id)

    def failed(self, t_s: float, n: int = 1) -> None:
        self._at(t_s).failed += n

    def consumed(self, t_s: float, n: int) -> None:
        self._at(t_s).consumed += n

    def gauge(self, t_s: float, name: str, value: Any) -> None:
        """consumer_lag (records), live_brokers (ids), retries_total (cumulative count)."""
        self._at(t_s).gauges[name] = value
        if name == "live_brokers":
            self._brokers_seen.update(value)

    def event(self, t_s: float, kind: str, **detail: Any) -> None:
        self.events.append(Event(round(t_s, 3), kind, detail))
        if kind == "move":
            self._at(t_s).moves += 1

    def acked_per_broker(self, second: int) -> dict[int, int]:
        """Records each broker acknowledged during ``second`` (a policy's load sample)."""
        sec = self._seconds.get(second)
        return dict(sec.per_broker) if sec else {}

    # -- outputs
    def broker_ids(self) -> list[int]:
        return sorted(self._brokers_seen)

    def rows(self) -> list[dict[str, Any]]:
        """One row per second from 0 to the last recorded second; gauges carry forward."""
        if not self._seconds:
            return []
        brokers = self.broker_ids()
        rows = []
        live: list[int] = []
        lag, retries_before, retries = 0, 0, 0
        for t in range(max(self._seconds) + 1):
            sec = self._seconds.get(t, _Second())
            lag = sec.gauges.get("consumer_lag", lag)
            live = list(sec.gauges.get("live_brokers", live))
            retries = sec.gauges.get("retries_total", retries)
            per_broker = {b: sec.per_broker.get(b, 0) for b in brokers}
            live_rates = [per_broker.get(b, 0) for b in live]
            mean = sum(live_rates) / len(live_rates) if live_rates else 0.0
            row: dict[str, Any] = {
                "t_s": t, "offered_rps": sec.offered, "achieved_rps": sec.acked,
                "p50_ms": round(percentile(sec.latencies_ms, 50), 3) if sec.latencies_ms else "",
                "p99_ms": round(percentile(sec.latencies_ms, 99), 3) if sec.latencies_ms else "",
                "consumed_rps": sec.consumed, "consumer_lag": lag, "brokers": len(live),
                "max_over_mean": round(max(live_rates) / mean, 4) if mean > 0 else "",
                "moves": sec.moves, "errors": sec.failed, "retries": max(0, retries - retries_before),
            }
            retries_before = retries
            for b in brokers:
                row[f"broker_{b}_rps"] = per_broker[b]
            row["live_brokers"] = " ".join(str(b) for b in sorted(live))
            rows.append(row)
        return rows

    def write_csv(self, path: str | Path) -> Path:
        rows = self.rows()
        columns = list(BASE_COLUMNS) + [f"broker_{b}_rps" for b in self.broker_ids()] + ["live_brokers"]
        out = Path(path)
        with out.open("w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, fieldnames=columns)
            writer.writeheader()
            writer.writerows(rows)
        return out

    def write_events(self, path: str | Path) -> Path:
        out = Path(path)
        out.write_text(json.dumps([{"t_s": e.t_s, "kind": e.kind, **e.detail} for e in self.events], indent=1) + "\n",
                       encoding="utf-8")
        return out


def read_events(path: str | Path) -> list[dict[str, Any]]:
    return list(json.loads(Path(path).read_text(encoding="utf-8")))


def events_of(events: Iterable[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e for e in events if e["kind"] == kind]
