"""``make conformance``: every check of Kafka's tools and the Java client against a fresh local
cluster, printed as one table (tool, check, result, seconds, what it saw).

    python -m tools.peer.conformance [--quick] [--java-records N] [--no-java-client] [--state-dir DIR]

Exits 1 when a check fails, 0 otherwise (a check that fails for an API the brokers do not
advertise is listed as such and does not fail the run); 2 when Java or Kafka's jars are missing.
"""
from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

from tools.cluster import LocalCluster
from tools.peer.checks import AUTHORIZER_ON, Outcome, Peer, Row, run_check
from tools.peer.java_client import JavaClientPlan, run as run_java_client
from tools.peer.kafka_tools import KAFKA_VERSION, KafkaTools, PeerMissing
from tools.peer.tool_checks import ALL, QUICK


def format_table(rows: list[Row], detail_chars: int = 110) -> str:
    """Rows as an aligned text table; a detail is cut to its first line and ``detail_chars``."""
    header = ("tool", "check", "result", "s", "detail")
    cells = [(r.tool, r.check, r.outcome.value, f"{r.elapsed_s:.1f}", _first_line(r.detail, detail_chars))
             for r in rows]
    widths = [max(len(str(c[i])) for c in [header, *cells]) for i in range(4)]
    lines = []
    for c in [header, *cells]:
        lines.append("  ".join(str(c[i]).ljust(widths[i]) for i in range(4)) + "  " + c[4])
    lines.insert(1, "  ".join("-" * w for w in widths) + "  " + "-" * 6)
    return "\n".join(lines)


def _first_line(text: str, limit: int) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.peer.conformance", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="only the checks make test runs")
    parser.add_argument("--no-java-client", action="store_true", help="skip the Java client through moves and a kill")
    parser.add_argument("--java-records", type=int, default=12000, help="records of the Java client run (12000)")
    parser.add_argument("--state-dir", help="the cluster's state dir (default: a temporary one)")
    args = parser.parse_args(argv)
    try:
        tools = KafkaTools()
    except PeerMissing as exc:
        print(f"conformance: {exc}", file=sys.stderr)
        return 2
    workdir = Path(args.state_dir or tempfile.mkdtemp(prefix="ferry-conformance-"))
    cluster = LocalCluster(str(workdir / "cluster"), broker_overrides=AUTHORIZER_ON)
    started = time.monotonic()
    cluster.start()
    rows: list[Row] = []
    try:
        peer = Peer(tools, cluster.kafka_bootstrap, workdir, tuple(sorted(cluster.kafka_ports)))
        for check in QUICK if args.quick else ALL:
            row = run_check(peer, check)
            rows.append(row)
            print(f"{row.outcome.value:<26} {row.tool} {row.check} ({row.elapsed_s:.1f} s)", file=sys.stderr, flush=True)
        if not args.no_java_client:
            plan = JavaClientPlan(records=args.java_records, rate_per_s=300, moves=6, consumers=2)
            t0 = time.monotonic()
            report = asyncio.run(run_java_client(cluster, tools, workdir / "java-client", plan))
            rows.append(Row("Java client (verifiable producer/consumer)",
                            f"{plan.moves} moves + kill -9, {plan.consumers} consumers",
                            Outcome.WORKS if report.ok else Outcome.FAILS, report.summary(), time.monotonic() - t0))
    finally:
        cluster.stop(graceful=False)
    print(f"\nApache Kafka {KAFKA_VERSION} tools against Ferry ({time.monotonic() - started:.0f} s; logs in {workdir})\n")
    print(format_table(rows))
    long_details = [r for r in rows if r.outcome is not Outcome.WORKS or r.tool.startswith("Java client")]
    for r in long_details:
        print(f"\n{r.tool} — {r.check}: {r.outcome.value}\n  {r.detail}")
    return 1 if any(r.outcome is Outcome.FAILS for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
