"""`ferry chaos run --seed N --duration S [--faults LIST] [--json] [--out DIR]`.

``--seed`` takes one seed, a list (``1,5,9``) or a range (``1-20``); the runs go one after the
other. Each prints its verdict, the violations found, its timeline PNG and the command that
replays it; the exit code is 0 only when every run passes.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import traceback
from typing import Any

from tools.chaos.schedule import ALL_FAULTS, NET_FAULTS, parse_faults


def parse_seeds(text: str) -> list[int]:
    seeds: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if "-" in part[1:]:
            low, high = part.split("-", 1)
            if int(high) < int(low):
                raise ValueError(f"seed range {part} is empty")
            seeds += list(range(int(low), int(high) + 1))
        elif part:
            seeds.append(int(part))
    if not seeds:
        raise ValueError("no seed given")
    return seeds


def summary(r: dict[str, Any]) -> str:
    s = r["stats"]
    lines = [f"seed {r['seed']}: {r['verdict']} — {s['acked_http']:,} HTTP and {s['acked_kafka']:,} Kafka acknowledged "
             f"records checked; {s['txn_committed']:,} transactions committed ({s['txn_records_committed']:,} records), "
             f"{s['txn_aborted']:,} aborted, {s['txn_unknown']} of unknown outcome; "
             f"{s['faults_applied']} faults applied ({s['faults_failed_to_apply']} could not be); "
             f"{s['metadata_records']:,} metadata records checked; {r['wall_s']} s"]
    for v in r["violations"]:
        lines.append(f"  ✗ [{v['check']}] {v['message']}")
    for note in r["notes"]:
        lines.append(f"  note: {note}")
    lines.append(f"  timeline {r['timeline_png']}  report {r['out_dir']}/report.json")
    lines.append(f"  replay: {r['replay']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ferry chaos", description="Seeded fault campaigns against a local cluster, "
                                     "checked afterwards (docs/chaos.md).")
    sub = parser.add_subparsers(dest="action", required=True)
    run = sub.add_parser("run", help="run the schedule of one or more seeds and print each verdict")
    run.add_argument("--seed", required=True, help="a seed, a list 1,5,9 or a range 1-20")
    run.add_argument("--duration", type=float, default=60.0, help="seconds of faults and load per seed (default 60)")
    run.add_argument("--faults", help=f"comma-separated subset of: {', '.join(ALL_FAULTS)}, and with --net "
                     f"{', '.join(NET_FAULTS)} (default: all)")
    run.add_argument("--net", action="store_true", help="every node in its own network namespace, with the "
                     "network faults and clock steps (needs `ip netns`; docs/chaos.md)")
    run.add_argument("--out", default="chaos-out", help="where reports, timelines and logs go (default ./chaos-out)")
    run.add_argument("--json", action="store_true", help="print one JSON object per seed instead of the summary")
    args = parser.parse_args(argv)
    try:
        seeds = parse_seeds(args.seed)
        faults = parse_faults(args.faults)
        if args.net and args.faults is None:
            faults = faults | frozenset(NET_FAULTS)
        if not args.net and faults & set(NET_FAULTS):
            raise ValueError(f"network faults ({', '.join(sorted(faults & set(NET_FAULTS)))}) need --net")
    except ValueError as exc:
        print(f"Error: {exc} (INVALID_REQUEST)", file=sys.stderr)
        return 2
    if args.duration <= 0:
        print("Error: --duration must be positive (INVALID_REQUEST)", file=sys.stderr)
        return 2
    from tools.chaos.runner import ACTIVE, ChaosOptions, run_chaos

    def stop(_signum: int, _frame: object) -> None:
        """Kill the run's processes and remove its tmpfs and network namespaces, then exit at once
        (unwinding the event loop waits for threads blocked in their own timeouts)."""
        for run in list(ACTIVE):
            run.stop_everything()
        os._exit(143)

    signal.signal(signal.SIGTERM, stop)

    failed = 0
    for seed in seeds:
        options = ChaosOptions(seed=seed, duration_s=args.duration, faults=faults, out_dir=args.out, net=args.net)
        try:
            result = run_chaos(options)
        except Exception as exc:  # noqa: BLE001 - one broken run must not end a campaign of many seeds
            failed += 1
            error = f"{type(exc).__name__}: {exc}"
            print(json.dumps({"seed": seed, "verdict": "ERROR", "error": error, "replay": options.replay_command()})
                  if args.json else f"seed {seed}: ERROR — the run itself failed: {error}\n  replay: "
                  f"{options.replay_command()}", flush=True)
            if os.environ.get("FERRY_DEBUG"):
                traceback.print_exc()
            continue
        failed += result["verdict"] != "PASS"
        print(json.dumps(result) if args.json else summary(result), flush=True)
    if len(seeds) > 1 and not args.json:
        print(f"{len(seeds) - failed}/{len(seeds)} seeds passed")
    return 1 if failed else 0
