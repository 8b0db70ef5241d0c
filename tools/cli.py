"""The `ferry` command: one sub-command per tool, each in its own module, loaded on demand.

Kafka's tool names and flags where Kafka has them (`reassign-partitions`, `log-dirs`,
`metadata-quorum`, `leader-election`, `topics`), plus Ferry's own (`cluster`, `demo`, `perf`, ...).
A tool that fails prints one line, `Error: MESSAGE (ERROR_NAME)`, and exits non-zero; set
`FERRY_DEBUG=1` to see the Python traceback as well. Server processes (`controller`, `broker`,
`s3`) keep their tracebacks: they go to their logs.
"""
from __future__ import annotations

import importlib
import os
import sys
import traceback

from metadata_quorum.kernel.clock import install_chaos_clock

COMMANDS: dict[str, tuple[str, str]] = {
    "controller": ("metadata_quorum.server", "run a controller process (Raft node + HTTP API)"),
    "broker": ("broker.server", "run a broker process"),
    "s3": ("tools.s3_cmd", "run the embedded S3 endpoint (moto server): `ferry s3 serve`"),
    "metadata-quorum": ("tools.metadata_quorum_cmd", "describe the metadata quorum (describe --status, --replication)"),
    "topics": ("tools.topics_cmd", "create, delete, list and describe topics"),
    "reassign-partitions": ("tools.reassign_cmd", "generate, execute, verify, cancel and list reassignments"),
    "leader-election": ("tools.leader_election_cmd", "elect preferred or unclean leaders"),
    "log-dirs": ("tools.log_dirs_cmd", "describe brokers' log dirs"),
    "delete-records": ("tools.delete_records_cmd", "delete partitions' records below offsets (Kafka's offset JSON file)"),
    "cluster": ("tools.cluster", "start, stop or inspect a local cluster (moto, controllers, brokers)"),
    "produce": ("tools.console_producer", "produce lines from stdin (Kafka's console producer)"),
    "consume": ("tools.console_consumer", "consume records to stdout (Kafka's console consumer)"),
    "console": ("tools.console.app", "serve the live web console on loopback (brokers, partition map, moves, quorum)"),
    "demo": ("tools.demo", "the seconds-scale reassignment demo (= make demo)"),
    "perf": ("tools.perf", "benchmarks: quorum, streams, move, rebalance"),
    "chaos": ("tools.chaos.cli", "seeded fault campaigns against a local cluster, with a verdict (chaos run)"),
    "rebalance": ("tools.rebalance.cli", "plan (and execute) a load-balanced reassignment with PySpark"),
    "balancer": ("tools.balancer.cli", "keep a cluster's partitions balanced, continuously (balancer run [--dry-run])"),
    "autoscale": ("tools.autoscale.cli", "run an autoscaling experiment"),
    "key-counts": ("tools.spark_read.key_counts", "per-key record counts of a topic, read from S3 by Spark"),
}
SERVERS = frozenset({"controller", "broker", "s3"})


def usage() -> str:
    width = max(len(name) for name in COMMANDS)
    lines = ["usage: ferry COMMAND [ARGS...]", "", "commands:"]
    lines += [f"  {name.ljust(width)}  {desc}" for name, (_mod, desc) in COMMANDS.items()]
    lines += ["", "`ferry COMMAND --help` describes a command's flags."]
    return "\n".join(lines)


def error_line(exc: BaseException) -> str:
    """One line for a failure: Kafka's message and error name, never a traceback."""
    from metadata_quorum.kernel.errors import FerryError

    if isinstance(exc, FerryError):
        return f"Error: {exc.message} ({exc.error.name})"
    if isinstance(exc, TimeoutError):
        return f"Error: timed out{': ' + str(exc) if str(exc) else ''} (REQUEST_TIMED_OUT)"
    if isinstance(exc, (ConnectionError, OSError)) or type(exc).__module__.startswith("aiohttp"):
        return f"Error: cannot reach the cluster: {exc or type(exc).__name__} (NETWORK_EXCEPTION)"
    return f"Error: {type(exc).__name__}: {exc} (UNKNOWN_SERVER_ERROR)"


def run_tool(name: str, rest: list[str]) -> int:
    """Run a tool's `main`, turning anything it lets escape into one line and an exit code."""
    module = importlib.import_module(COMMANDS[name][0])
    try:
        return int(module.main(rest) or 0)
    except KeyboardInterrupt:
        print("Interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `ferry consume ... | head`: the reader left; not an error of the tool
        try:
            sys.stdout = open(os.devnull, "w")  # no flush error at exit
        except OSError:
            pass
        return 0
    except Exception as exc:  # noqa: BLE001 - the last resort: one line instead of a traceback
        if os.environ.get("FERRY_DEBUG"):
            traceback.print_exc()
        print(error_line(exc), file=sys.stderr)
        return 1


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        if len(args) >= 2 and args[0] == "help" and args[1] in COMMANDS:
            return main([args[1], "--help"])
        print(usage())
        return 0
    name, rest = args[0], args[1:]
    if name not in COMMANDS:
        print(f"ferry: unknown command {name!r}\n\n{usage()}", file=sys.stderr)
        return 2
    if name in SERVERS:
        install_chaos_clock()  # a chaos run may step this process's wall clock (kernel/clock.py)
        module = importlib.import_module(COMMANDS[name][0])
        return int(module.main(rest) or 0)
    return run_tool(name, rest)


if __name__ == "__main__":
    sys.exit(main())
