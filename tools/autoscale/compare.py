"""`ferry autoscale compare A.yaml B.yaml ... [--seeds K]`: the same seeded load under each
scenario's policy, side by side.

Per run (pure, from the time series, the events and the summary — :func:`run_metrics`):

- **broker-seconds** — the live brokers summed over the seconds of the run (cost);
- **seconds above SLO** — seconds whose produce p99 exceeds the scenario's ``slo_p99_ms``;
- **time from overload to balance** — an overload starts at the first second some live broker
  takes more than its capacity (``policy.capacity_bytes_per_s``); it ends when, for 3 s in a
  row, no broker is above capacity and the per-broker max/mean (3 s windows) is ≤ 1.1. Mean and
  max over the run's overloads, and how many never ended;
- **moves**, **stall per moved partition** (p50 and max), **records lost / duplicated** (must be
  0), and the **peak acknowledged MB/s** over 5 s (what the machine carried).

The report (``--out``): ``runs.csv`` (one row per scenario and seed), ``comparison.md`` (the
mean over seeds per scenario, and every run), ``comparison.png`` (per scenario: throughput,
live brokers and p99 against the SLO, on one time axis), and each run's own outputs.
"""
from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import pandas as pd

from metadata_quorum.kernel.errors import ErrorCode, FerryError
from tools.autoscale.summary import BALANCE_SUSTAIN_S, BALANCE_THRESHOLD, _broker_columns, _live, balance_series

METRICS = ("broker_seconds", "seconds_above_slo", "overloads", "overload_to_balance_mean_s",
           "overload_to_balance_max_s", "overloads_unresolved", "moves", "stall_p50_ms", "stall_p99_ms", "stall_max_ms", "lost",
           "duplicated", "peak_mb_s", "verdict")
PEAK_WINDOW_S = 5


def overload_episodes(frame: pd.DataFrame, value_bytes: int, capacity_bytes_per_s: float | None
                      ) -> list[tuple[int, int | None]]:
    """``(start_s, balanced_s or None)`` of each overload (see the module doc)."""
    if capacity_bytes_per_s is None or frame.empty:
        return []
    columns = _broker_columns(frame)
    ratios = balance_series(frame)
    episodes: list[tuple[int, int | None]] = []
    start: int | None = None
    calm = 0
    for i in range(len(frame)):
        t = int(frame["t_s"].iloc[i])
        live = [b for b in _live(frame["live_brokers"].iloc[i]) if b in columns]
        hot = any(float(frame[columns[b]].iloc[i]) * value_bytes > capacity_bytes_per_s for b in live)
        if start is None:
            if hot:
                start, calm = t, 0
            continue
        ratio = ratios.iloc[i]
        calm = calm + 1 if not hot and ratio == ratio and ratio <= BALANCE_THRESHOLD else 0
        if calm == BALANCE_SUSTAIN_S:
            episodes.append((start, t - BALANCE_SUSTAIN_S + 1))
            start = None
    if start is not None:
        episodes.append((start, None))
    return episodes


def run_metrics(frame: pd.DataFrame, summary: dict[str, Any], value_bytes: int,
                capacity_bytes_per_s: float | None, slo_p99_ms: float) -> dict[str, Any]:
    p99 = pd.to_numeric(frame["p99_ms"], errors="coerce")
    episodes = overload_episodes(frame, value_bytes, capacity_bytes_per_s)
    durations = [float(end - start) for start, end in episodes if end is not None]
    stall = summary.get("stall_per_moved_partition_ms", {})
    records = summary.get("records", {})
    return {
        "broker_seconds": int(pd.to_numeric(frame["brokers"], errors="coerce").fillna(0).sum()),
        "seconds_above_slo": int((p99 > slo_p99_ms).sum()),
        "overloads": len(episodes),
        "overload_to_balance_mean_s": round(statistics.fmean(durations), 1) if durations else None,
        "overload_to_balance_max_s": max(durations) if durations else None,
        "overloads_unresolved": sum(1 for _s, end in episodes if end is None),
        "moves": summary.get("moves", 0),
        "stall_p50_ms": stall.get("p50"), "stall_p99_ms": stall.get("p99"), "stall_max_ms": stall.get("max"),
        "lost": records.get("lost"), "duplicated": records.get("duplicated"),
        # sustained, not a burst of acknowledgements released after a stall
        "peak_mb_s": round(float(frame["achieved_rps"].rolling(PEAK_WINDOW_S, min_periods=1).mean().max() or 0)
                           * value_bytes / 1e6, 4) if len(frame) else 0.0,
        "verdict": summary.get("verdict"),
    }


def mean_row(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The mean of each numeric metric over seeds (None when no run has it)."""
    out: dict[str, Any] = {}
    for name in METRICS:
        values = [r[name] for r in rows if isinstance(r.get(name), (int, float)) and not isinstance(r.get(name), bool)]
        if name == "verdict":
            out[name] = "pass" if all(r.get("verdict") == "pass" for r in rows) else "fail"
        else:
            out[name] = round(statistics.fmean(values), 2) if values else None
    return out


# Student's t, two-sided 95 %, by degrees of freedom (1..30); the normal 1.96 beyond
_T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
        2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def interval95(values: list[float]) -> tuple[float, float] | None:
    """(mean, half-width) of the 95 % confidence interval of the mean (Student's t over the seeds);
    the half-width is 0 with one value (no spread measured: report it as a single run)."""
    if not values:
        return None
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, 0.0
    t = _T95[len(values) - 2] if len(values) - 1 <= len(_T95) else 1.96
    return mean, t * statistics.stdev(values) / len(values) ** 0.5


def interval_row(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per numeric metric: {mean, ci95 (half-width), n} over the seeds."""
    out: dict[str, Any] = {}
    for name in METRICS:
        if name == "verdict":
            continue
        values = [float(r[name]) for r in rows
                  if isinstance(r.get(name), (int, float)) and not isinstance(r.get(name), bool)]
        iv = interval95(values)
        out[name] = None if iv is None else {"mean": round(iv[0], 2), "ci95": round(iv[1], 2), "n": len(values)}
    return out


def render_markdown(per_scenario: dict[str, list[dict[str, Any]]], seeds: int) -> str:
    names = list(per_scenario)
    lines = [f"# Autoscaling comparison: {' vs '.join(names)}", "",
             f"Mean ± 95 % interval (Student's t) over {seeds} seed(s); every run below. Lost and duplicated "
             "must be 0.", "",
             "| metric | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    means = {n: mean_row(rows) for n, rows in per_scenario.items()}
    intervals = {n: interval_row(rows) for n, rows in per_scenario.items()}

    def cell(n: str, metric: str) -> str:
        iv = intervals[n].get(metric)
        if metric == "verdict" or iv is None:
            return str(means[n][metric])
        return f"{iv['mean']:g} ± {iv['ci95']:g}" if iv["n"] > 1 else f"{iv['mean']:g}"
    for metric in METRICS:
        lines.append(f"| {metric} | " + " | ".join(cell(n, metric) for n in names) + " |")
    lines += ["", "## Runs", "", "| scenario | seed | " + " | ".join(METRICS) + " |",
              "|---|---|" + "---|" * len(METRICS)]
    for name, rows in per_scenario.items():
        for row in rows:
            lines.append(f"| {name} | {row['seed']} | " + " | ".join(str(row[m]) for m in METRICS) + " |")
    return "\n".join(lines) + "\n"


def plot_comparison(frames: dict[str, pd.DataFrame], slos: dict[str, float], value_bytes: dict[str, int],
                    path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(3, len(frames), sharex=True, sharey="row", figsize=(6 * len(frames), 9), squeeze=False)
    for col, (name, frame) in enumerate(frames.items()):
        t = frame["t_s"]
        ax = axes[0][col]
        ax.plot(t, frame["offered_rps"] * value_bytes[name] / 1e6, color="tab:gray", label="offered")
        ax.plot(t, frame["achieved_rps"] * value_bytes[name] / 1e6, color="tab:blue", label="acknowledged")
        ax.set_title(name)
        ax.set_ylabel("MB/s")
        ax.legend(loc="upper left")
        axes[1][col].step(t, frame["brokers"], where="post", color="tab:green")
        axes[1][col].set_ylabel("live brokers")
        ax = axes[2][col]
        ax.plot(t, pd.to_numeric(frame["p99_ms"], errors="coerce"), color="tab:red", label="p99")
        ax.axhline(slos[name], color="black", linestyle="--", linewidth=1, label="SLO")
        ax.set_yscale("log")
        ax.set_ylabel("produce p99 ms")
        ax.set_xlabel("s")
        ax.legend(loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def run_isolated(path: str, seed: int, run_dir: Path, wal_mode: str, s3_profile: str = "local") -> dict[str, Any]:
    """One run in a process of its own: a run's Spark read-back collects every record on the
    driver, and runs sharing one process (and JVM heap) ran out of it by the second run."""
    import os
    import subprocess

    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, PYTHONPATH=str(root) + (os.pathsep + os.environ["PYTHONPATH"]
                                                   if os.environ.get("PYTHONPATH") else ""))
    subprocess.run([sys.executable, "-m", "tools.cli", "autoscale", "run", path, "--seed", str(seed), "--out",
                    str(run_dir), "--no-progress", "--wal", wal_mode, "--s3-profile", s3_profile], cwd=root, env=env, check=False,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    summary_path = run_dir / "summary.json"
    if not summary_path.exists():
        raise FerryError(ErrorCode.UNKNOWN_SERVER_ERROR, f"the run of {path} (seed {seed}) wrote no summary "
                                                         f"(logs in {run_dir / 'cluster'})")
    return dict(json.loads(summary_path.read_text(encoding="utf-8")))


def targets(rows: list[dict[str, Any]], stalls: list[float]) -> dict[str, Any]:
    """The figures the autoscaler is held to, over every run of every scenario."""
    overloads = [float(r["overload_to_balance_mean_s"]) for r in rows if r.get("overload_to_balance_mean_s") is not None]
    ordered = sorted(stalls)
    p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] if ordered else None
    return {"overload_to_balance_s_mean": round(statistics.fmean(overloads), 2) if overloads else None,
            "overloads_unresolved": sum(int(r.get("overloads_unresolved") or 0) for r in rows),
            "stall_per_moved_partition_p99_ms": p99, "moves_measured": len(stalls),
            "lost": sum(int(r.get("lost") or 0) for r in rows),
            "duplicated": sum(int(r.get("duplicated") or 0) for r in rows)}


def compare(paths: list[str], seeds: int, out_dir: Path, progress: bool = False,
            wal_mode: str = "local", plan_warm: bool = False, s3_profile: str = "local") -> dict[str, Any]:
    from tools.autoscale.scenario import load_scenario

    scenarios = [load_scenario(p) for p in paths]
    path_of = {s.name: p for s, p in zip(scenarios, paths, strict=True)}
    names = [s.name for s in scenarios]
    if len(set(names)) != len(names):
        raise FerryError(ErrorCode.INVALID_CONFIG,
                         f"scenario names must differ to be compared, got {names}")
    out_dir.mkdir(parents=True, exist_ok=True)
    per_scenario: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
    frames: dict[str, pd.DataFrame] = {}
    stalls: list[float] = []  # every moved partition's stall, every run
    for seed in range(seeds):
        for scenario in scenarios:
            run_dir = out_dir / scenario.name / f"seed-{seed}"
            if progress:
                print(f"running {scenario.name} (seed {seed}) -> {run_dir}", file=sys.stderr, flush=True)
            summary = run_isolated(path_of[scenario.name], seed, run_dir, wal_mode, s3_profile)
            stalls += [float(e["stall_ms"]) for e in json.loads((run_dir / "events.json").read_text(encoding="utf-8"))
                       if e.get("kind") == "move" and e.get("stall_ms") is not None]
            frame = pd.read_csv(run_dir / "timeseries.csv", dtype={"live_brokers": str})
            capacity = scenario.policy.capacity_bytes_per_s if scenario.policy else None
            row = {"scenario": scenario.name, "seed": seed,
                   **run_metrics(frame, summary, scenario.value_bytes, capacity, scenario.slo_p99_ms)}
            per_scenario[scenario.name].append(row)
            if seed == 0:
                frames[scenario.name] = frame
    rows = [r for name in names for r in per_scenario[name]]
    with (out_dir / "runs.csv").open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=["scenario", "seed", *METRICS])
        writer.writeheader()
        writer.writerows(rows)
    (out_dir / "comparison.md").write_text(render_markdown(per_scenario, seeds), encoding="utf-8")
    plot_comparison(frames, {s.name: s.slo_p99_ms for s in scenarios}, {s.name: s.value_bytes for s in scenarios},
                    out_dir / "comparison.png")
    report: dict[str, Any] = {"scenarios": names, "seeds": seeds, "wal_mode": wal_mode, "s3_profile": s3_profile,
              "runs": rows,
              "mean": {n: mean_row(per_scenario[n]) for n in names},
              "interval95": {n: interval_row(per_scenario[n]) for n in names},
              "targets": targets(rows, stalls), "out_dir": str(out_dir)}
    if plan_warm:
        from tools.rebalance.warm_bench import measure_plan_warm

        bench = measure_plan_warm(1_000)
        report["targets"]["plan_warm_s_1000"] = bench["plan_warm_s"]
        report["plan_warm"] = bench
    (out_dir / "comparison.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return report


def add_parser(sub: Any) -> None:
    p = sub.add_parser("compare", help="run scenarios on the same seeded load and compare their policies")
    p.add_argument("scenarios", nargs="+", help="scenario YAML files (two or more)")
    p.add_argument("--seeds", type=int, default=1, help="runs per scenario, seeds 0..K-1 (default 1)")
    p.add_argument("--out", help="report directory (default .ferry/autoscale/compare-<time>)")
    p.add_argument("--json", action="store_true", help="print comparison.json instead of the table")
    p.add_argument("--plan-warm", action="store_true",
                   help="also measure plan_warm_s_1000 (a warm re-plan of 1,000 partitions; ~30 s more)")
    from tools.autoscale.cli import add_storage_arguments

    add_storage_arguments(p)


def main_compare(args: argparse.Namespace) -> int:
    warnings.filterwarnings("ignore", category=FutureWarning)
    if len(args.scenarios) < 2 or args.seeds < 1:
        print("Error: INVALID_REQUEST: give two or more scenarios and --seeds >= 1", file=sys.stderr)
        return 2
    out_dir = Path(args.out or Path(".ferry") / "autoscale" / f"compare-{time.strftime('%Y%m%d-%H%M%S')}")
    try:
        report = compare(args.scenarios, args.seeds, out_dir, progress=True, wal_mode=args.wal,
                         plan_warm=args.plan_warm, s3_profile=args.s3_profile)
    except FerryError as exc:
        print(f"Error: {exc.error.name}: {exc.message}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(report, indent=2))
        return 0 if all(r["lost"] == 0 and r["duplicated"] == 0 for r in report["runs"]) else 1
    print((out_dir / "comparison.md").read_text(encoding="utf-8"))
    print(f"report in {out_dir} (comparison.md, runs.csv, comparison.png, comparison.json)")
    ok = all(r["lost"] == 0 and r["duplicated"] == 0 for r in report["runs"])
    return 0 if ok else 1
