"""An autoscaling experiment's panels, live: its ``timeseries.csv`` and ``events.json`` (which
`ferry autoscale run` rewrites every few seconds while it runs) -> the series the page draws, the
same panels as its overview.png and balance.png.

Pure: the text in, the JSON out; :class:`RunDir` only reads the files when they changed.
"""
from __future__ import annotations

import csv
import io
import json
import os
from typing import Any

from tools.console.model import JsonDict

#: the balance panel's window and threshold, as tools/autoscale/summary.py has them
BALANCE_WINDOW_S = 3
BALANCE_THRESHOLD = 1.1
EVENT_KINDS = frozenset({"add_brokers", "rebalance_start", "set_rate", "remove_broker", "move"})
SERIES = ("offered_rps", "achieved_rps", "consumed_rps", "p50_ms", "p99_ms", "consumer_lag", "brokers",
          "errors", "retries", "moves")


def _number(text: str | None) -> float | None:
    if text is None or text.strip() == "":
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return value if value == value else None


def balance(per_broker: dict[int, list[float | None]], live: list[list[int]],
            window_s: int = BALANCE_WINDOW_S) -> list[float | None]:
    """max/mean of the live brokers' throughput, each summed over ``window_s`` seconds (as
    tools/autoscale/summary.py's balance_series)."""
    out: list[float | None] = []
    for i, brokers in enumerate(live):
        lo = max(0, i - window_s + 1)
        rates = [sum(v or 0.0 for v in per_broker[b][lo:i + 1]) for b in brokers if b in per_broker]
        mean = sum(rates) / len(rates) if rates else 0.0
        out.append(round(max(rates) / mean, 4) if mean > 0 else None)
    return out


def run_view(name: str, csv_text: str, events: list[dict[str, Any]]) -> JsonDict:
    """The columns of the time series (``t_s`` and SERIES, per broker acks/s, balance) and the
    events that the PNGs mark."""
    rows = list(csv.DictReader(io.StringIO(csv_text)))
    series: dict[str, list[float | None]] = {k: [_number(r.get(k)) for r in rows] for k in ("t_s", *SERIES)}
    brokers = sorted({int(c.split("_")[1]) for c in (rows[0] if rows else {}) if c.startswith("broker_")
                      and c.endswith("_rps") and c.split("_")[1].isdigit()})
    per_broker = {b: [_number(r.get(f"broker_{b}_rps")) for r in rows] for b in brokers}
    live = [[int(x) for x in (r.get("live_brokers") or "").split() if x.isdigit()] for r in rows]
    marks = [{"t_s": float(e["t_s"]), "kind": str(e["kind"])} for e in events
             if isinstance(e, dict) and e.get("kind") in EVENT_KINDS and isinstance(e.get("t_s"), (int, float))]
    return {"name": name, "series": series, "per_broker": {str(b): v for b, v in per_broker.items()},
            "balance": balance(per_broker, live), "balance_threshold": BALANCE_THRESHOLD, "events": marks}


class RunDir:
    """An experiment's output directory, read again only when its time series changed."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._stamp: tuple[float, float] | None = None
        self.view: JsonDict | None = None

    def read(self) -> JsonDict | None:
        csv_path, events_path = os.path.join(self.path, "timeseries.csv"), os.path.join(self.path, "events.json")
        try:
            stamp = (os.stat(csv_path).st_mtime, os.stat(events_path).st_mtime if os.path.exists(events_path) else 0.0)
            if stamp == self._stamp:
                return self.view
            with open(csv_path, encoding="utf-8") as f:
                text = f.read()
            events: Any = []
            if os.path.exists(events_path):
                with open(events_path, encoding="utf-8") as f:
                    events = json.load(f)
        except (OSError, ValueError):
            return self.view
        self._stamp = stamp
        self.view = run_view(os.path.basename(os.path.normpath(self.path)), text,
                             events if isinstance(events, list) else [])
        return self.view
