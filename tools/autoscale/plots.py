"""PNG plots of an experiment's time series, every panel on one shared time axis (matplotlib, Agg)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd

from tools.autoscale.summary import BALANCE_THRESHOLD, balance_series

_EVENT_STYLE = {"add_brokers": ("tab:green", "scale out"), "rebalance_start": ("tab:purple", "rebalance"),
                "set_rate": ("tab:gray", "rate"), "remove_broker": ("tab:red", "remove broker")}


def _mark_events(ax: Any, events: list[dict[str, Any]], label: bool) -> None:
    labelled: set[str] = set()
    for e in events:
        style = _EVENT_STYLE.get(e["kind"])
        if style is not None:
            first = label and e["kind"] not in labelled
            labelled.add(e["kind"])
            ax.axvline(e["t_s"], color=style[0], linestyle="--", linewidth=1, label=style[1] if first else None)
    moves = [e["t_s"] for e in events if e["kind"] == "move"]
    if moves:
        ax.plot(moves, [0] * len(moves), "|", color="tab:orange", markersize=12, label="moves" if label else None)


def plot_overview(frame: pd.DataFrame, events: list[dict[str, Any]], path: str | Path, title: str) -> Path:
    t = frame["t_s"]
    fig, axes = plt.subplots(5, 1, sharex=True, figsize=(11, 13))
    ax = axes[0]
    ax.plot(t, frame["offered_rps"], label="offered", color="tab:gray")
    ax.plot(t, frame["achieved_rps"], label="acknowledged", color="tab:blue")
    ax.plot(t, frame["consumed_rps"], label="consumed", color="tab:cyan", alpha=0.7)
    ax.set_ylabel("records/s")
    _mark_events(ax, events, label=True)
    ax.legend(loc="upper left", fontsize=8, ncol=3)
    ax = axes[1]
    for column in sorted(c for c in frame.columns if c.startswith("broker_") and c.endswith("_rps")):
        ax.plot(t, frame[column], label=column.split("_")[1])
    ax.set_ylabel("acks/s per broker")
    ax.legend(loc="upper left", fontsize=8, ncol=6, title="broker", title_fontsize=8)
    _mark_events(ax, events, label=False)
    ax = axes[2]
    ax.plot(t, pd.to_numeric(frame["p50_ms"], errors="coerce"), label="p50")
    ax.plot(t, pd.to_numeric(frame["p99_ms"], errors="coerce"), label="p99")
    ax.set_yscale("log")
    ax.set_ylabel("produce latency ms")
    ax.legend(loc="upper left", fontsize=8)
    _mark_events(ax, events, label=False)
    ax = axes[3]
    ax.plot(t, frame["consumer_lag"], color="tab:brown")
    ax.set_ylabel("consumer lag (records)")
    _mark_events(ax, events, label=False)
    ax = axes[4]
    ax.step(t, frame["brokers"], where="post", label="live brokers", color="black")
    ax.bar(t, frame["errors"], label="failed records", color="tab:red", alpha=0.6)
    ax.bar(t, frame["retries"], bottom=frame["errors"], label="retries", color="tab:orange", alpha=0.6)
    ax.set_ylabel("count")
    ax.set_xlabel("time since start (s)")
    ax.legend(loc="upper left", fontsize=8)
    _mark_events(ax, events, label=False)
    fig.suptitle(title)
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, dpi=90)
    plt.close(fig)
    return out


def plot_balance(frame: pd.DataFrame, events: list[dict[str, Any]], path: str | Path, title: str) -> Path:
    t = frame["t_s"]
    fig, axes = plt.subplots(2, 1, sharex=True, figsize=(11, 6))
    ax = axes[0]
    ax.plot(t, balance_series(frame).to_numpy(), color="tab:blue", label="max/mean (3 s window)")
    ax.axhline(BALANCE_THRESHOLD, color="tab:green", linestyle=":", label=f"{BALANCE_THRESHOLD}")
    ax.set_ylabel("per-broker throughput max/mean")
    ax.legend(loc="upper right", fontsize=8)
    _mark_events(ax, events, label=False)
    ax = axes[1]
    ax.step(t, frame["brokers"], where="post", color="black", label="live brokers")
    ax.bar(t, frame["moves"], color="tab:orange", label="moves seen")
    ax.set_ylabel("count")
    ax.set_xlabel("time since start (s)")
    ax.legend(loc="upper left", fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, dpi=90)
    plt.close(fig)
    return out
