"""The experiment's verdict, computed from the time series CSV, the events and the read-back check.

- time to balance: from the scale-out request until the added brokers are live and the per-broker
  produce throughput's max/mean over the live brokers (each summed over a 3 s window, to smooth
  batching) is ≤ 1.1 and stays so for 3 s;
- produce stall per moved partition: the last acknowledgement by the old owner to the first by
  the new one (from the move events);
- p99 produce latency during moves (seconds in which a move was seen, and the next) against the
  steady state (before the first step), as the mean and max of the per-second p99s;
- records lost (acknowledged but not read back: must be 0) and duplicated.

The verdict also needs every step done, every submitted move done, removed brokers drained
before they stopped, the cluster's state recorded after the last step (``final_state``), and
no removed broker live in that last state: a time series that ends before the removal
completed cannot pass.
"""
from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from tools.autoscale.recorder import events_of
from tools.autoscale.stall_parts import summarize_parts

BALANCE_THRESHOLD = 1.1
BALANCE_WINDOW_S = 3
BALANCE_SUSTAIN_S = 3


def _broker_columns(frame: pd.DataFrame) -> dict[int, str]:
    return {int(c.split("_")[1]): c for c in frame.columns if c.startswith("broker_") and c.endswith("_rps")}


def _live(value: Any) -> list[int]:
    if isinstance(value, str):
        return [int(x) for x in value.split()]
    if isinstance(value, (int, float)) and value == value:  # a single id read back as a number
        return [int(value)]
    return []


def balance_series(frame: pd.DataFrame, window_s: int = BALANCE_WINDOW_S) -> pd.Series:
    """max/mean of the per-broker throughput over the live brokers, each summed over ``window_s``."""
    columns = _broker_columns(frame)
    sums = frame[list(columns.values())].rolling(window_s, min_periods=1).sum() if columns else frame[[]]
    out = []
    for i in range(len(frame)):
        live = [b for b in _live(frame["live_brokers"].iloc[i]) if b in columns]
        rates = [float(sums[columns[b]].iloc[i]) for b in live]
        mean = sum(rates) / len(rates) if rates else 0.0
        out.append(max(rates) / mean if mean > 0 else float("nan"))
    return pd.Series(out, index=frame["t_s"])


def time_to_balance_s(frame: pd.DataFrame, scale_out_s: float, until_s: float | None = None,
                      added: frozenset[int] = frozenset()) -> float | None:
    """Seconds from the scale-out until max/mean ≤ 1.1 holds for 3 s with every added broker live."""
    ratios = balance_series(frame)
    live = {int(t): set(_live(v)) for t, v in zip(frame["t_s"], frame["live_brokers"], strict=True)}
    times = [t for t in ratios.index if t >= int(scale_out_s) and (until_s is None or t < until_s)]
    run = 0
    for t in times:
        ok = added <= live.get(int(t), set()) and ratios[t] <= BALANCE_THRESHOLD
        run = run + 1 if ok else 0
        if run == BALANCE_SUSTAIN_S:
            return float(t - BALANCE_SUSTAIN_S + 1 - scale_out_s)
    return None


def _p99_stats(values: list[float]) -> dict[str, float | None]:
    return {"mean_ms": round(statistics.fmean(values), 3) if values else None,
            "max_ms": round(max(values), 3) if values else None, "seconds": len(values)}


def summarize_run(frame: pd.DataFrame, events: list[dict[str, Any]], verification: dict[str, Any],
                  first_step_s: float | None, steps: int = 0) -> dict[str, Any]:
    scale_outs = events_of(events, "add_brokers")
    removals = events_of(events, "remove_broker")
    removed = events_of(events, "broker_removed")
    scale_out_s = scale_outs[0]["t_s"] if scale_outs else None
    until_s = removals[0]["t_s"] if removals else None
    added = frozenset(b for e in events_of(events, "brokers_added") for b in e.get("brokers", []))
    balance = None if scale_out_s is None else time_to_balance_s(frame, scale_out_s, until_s, added)
    moves = events_of(events, "move")
    stalls = [float(m["stall_ms"]) for m in moves if m.get("stall_ms") is not None]
    p99 = pd.to_numeric(frame["p99_ms"], errors="coerce")
    move_seconds = set()
    for m in moves:
        move_seconds.update({int(m["t_s"]), int(m["t_s"]) + 1})
    steady_end = first_step_s if first_step_s is not None else float(frame["t_s"].max()) + 1
    steady = [float(v) for t, v in zip(frame["t_s"], p99, strict=True) if 3 <= t < steady_end and v == v]
    during = [float(v) for t, v in zip(frame["t_s"], p99, strict=True) if t in move_seconds and v == v]
    rebalances = events_of(events, "rebalance_done")
    final_states = events_of(events, "final_state")
    steps_ended = [e["t_s"] for e in events if e["kind"] in ("step_done", "step_failed", "step_timed_out")]
    last_step_s = max(steps_ended, default=0.0)
    removed_ids = {int(e["broker"]) for e in removals}
    final_live = frame["live_brokers"].iloc[-1] if len(frame) else ""
    lost, duplicated = int(verification.get("lost", -1)), int(verification.get("duplicated", -1))
    checks = {
        "zero_loss": lost == 0,
        "steps_completed": len(events_of(events, "step_done")) == steps,
        "balanced_after_scale_out": scale_out_s is None or balance is not None,
        "moves_completed": all(r.get("completed") == r.get("submitted") for r in rebalances),
        "removed_brokers_drained": len(removed) == len(removals)
        and all(r.get("partitions_left", 1) == 0 for r in removed),
        "final_state_recorded": bool(final_states) and final_states[-1]["t_s"] >= last_step_s,
        "removed_brokers_gone": not removed_ids & set(_live(final_live)),
    }
    steady_p99 = _p99_stats(steady)
    during_p99 = _p99_stats(during)
    ratio = (during_p99["mean_ms"] / steady_p99["mean_ms"]
             if during_p99["mean_ms"] is not None and steady_p99["mean_ms"] else None)
    return {
        "verdict": "pass" if all(checks.values()) else "fail",
        "checks": checks,
        "time_to_balance_s": balance,
        "balance_threshold": BALANCE_THRESHOLD,
        "scale_out_at_s": scale_out_s,
        "moves": len(moves),
        "stall_per_moved_partition_ms": {
            "p50": round(statistics.median(stalls), 1) if stalls else None,
            "p99": round(float(np.percentile(stalls, 99)), 1) if stalls else None,
            "max": round(max(stalls), 1) if stalls else None, "measured": len(stalls),
            # where it went: the moves whose brokers' timeline was found (tools/autoscale/stall_parts.py)
            "parts": summarize_parts([m["stall_parts_ms"] for m in moves if m.get("stall_parts_ms")]),
            "with_parts": sum(1 for m in moves if m.get("stall_parts_ms"))},
        "p99_steady": steady_p99, "p99_during_moves": during_p99,
        "p99_during_moves_over_steady": round(ratio, 3) if ratio is not None else None,
        "records": {"offered": int(frame["offered_rps"].sum()), "acknowledged": verification.get("acknowledged"),
                    "lost": lost, "duplicated": duplicated, "failed": int(frame["errors"].sum()),
                    "retries": int(frame["retries"].sum()), "read_back": verification.get("read_back")},
        "rebalances": rebalances,
        "timed_out_steps": events_of(events, "step_timed_out"),
        "final_live_brokers": _live(final_live),
    }


def write_summary(summary: dict[str, Any], path: str | Path) -> Path:
    out = Path(path)
    out.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return out
