"""The `ferry` command: one sub-command per tool, each in its own module, loaded on demand.

Kafka's tool names and flags where Kafka has them (`reassign-partitions`, `log-dirs`,
`metadata-quorum`, `leader-election`, `topics`), plus Ferry's own (`cluster`, `demo`, `perf`, ...).
"""
from __future__ import annotations

import importlib
import sys

COMMANDS: dict[str, tuple[str, str]] = {
    "controller": ("metadata_quorum.server", "run a controller process (Raft node + HTTP API)"),
    "broker": ("broker.server", "run a broker process"),
    "s3": ("stream_storage.s3_server", "run the embedded S3 endpoint (moto server): `ferry s3 serve`"),
    "metadata-quorum": ("tools.metadata_quorum_cmd", "describe the metadata quorum (--status, --replication)"),
    "topics": ("tools.topics_cmd", "create, delete, list and describe topics"),
    "reassign-partitions": ("tools.reassign_cmd", "generate, execute, verify, cancel and list reassignments"),
    "leader-election": ("tools.leader_election_cmd", "elect preferred or unclean leaders"),
    "log-dirs": ("tools.log_dirs_cmd", "describe brokers' log dirs"),
    "cluster": ("tools.cluster", "start, stop or inspect a local cluster (moto, controllers, brokers)"),
    "produce": ("tools.console_producer", "produce lines from stdin"),
    "consume": ("tools.console_consumer", "consume records to stdout"),
    "demo": ("tools.demo", "the seconds-scale reassignment demo"),
    "perf": ("tools.perf", "benchmarks: quorum, streams, move, rebalance"),
    "rebalance": ("tools.rebalance.cli", "plan (and execute) a load-balanced reassignment with PySpark"),
    "autoscale": ("tools.autoscale.cli", "run an autoscaling experiment"),
}


def usage() -> str:
    width = max(len(name) for name in COMMANDS)
    lines = ["usage: ferry COMMAND [ARGS...]", "", "commands:"]
    lines += [f"  {name.ljust(width)}  {desc}" for name, (_mod, desc) in COMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print(usage())
        return 0
    name, rest = args[0], args[1:]
    if name not in COMMANDS:
        print(f"ferry: unknown command {name!r}\n\n{usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(COMMANDS[name][0])
    result = module.main(rest)
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
