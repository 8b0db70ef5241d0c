"""Apache Kafka's own command-line tools and Java client, run unmodified as a peer.

``make kafka-jars`` puts the pinned Kafka jars (``tools/peer/kafka-pom.xml``) in
``.cache/kafka-<version>/``; each tool is its main class run on the JVM with every jar of that
directory on the class path, as Kafka's ``bin/kafka-*.sh`` scripts run them. Nothing here
downloads anything: a missing JVM or jar directory is a :class:`PeerMissing` whose message says
why and how to install it.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from tools.peer.jars import KAFKA_VERSION, kafka_jars_dir

LOG4J_CONFIG = Path(__file__).resolve().parent / "log4j2.properties"
DEFAULT_HEAP_MB = 256
DEFAULT_TIMEOUT_S = 120.0

#: each ``bin/kafka-*.sh`` script of Kafka 4.4 and the main class it runs
TOOL_CLASSES: dict[str, str] = {
    "kafka-topics": "org.apache.kafka.tools.TopicCommand",
    "kafka-console-producer": "org.apache.kafka.tools.ConsoleProducer",
    "kafka-console-consumer": "org.apache.kafka.tools.consumer.ConsoleConsumer",
    "kafka-consumer-groups": "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
    "kafka-groups": "org.apache.kafka.tools.GroupsCommand",
    "kafka-reassign-partitions": "org.apache.kafka.tools.reassign.ReassignPartitionsCommand",
    "kafka-configs": "org.apache.kafka.tools.ConfigCommand",
    "kafka-producer-perf-test": "org.apache.kafka.tools.ProducerPerformance",
    "kafka-consumer-perf-test": "org.apache.kafka.tools.ConsumerPerformance",
    "kafka-verifiable-producer": "org.apache.kafka.tools.VerifiableProducer",
    "kafka-verifiable-consumer": "org.apache.kafka.tools.VerifiableConsumer",
    "kafka-broker-api-versions": "org.apache.kafka.tools.BrokerApiVersionsCommand",
    "kafka-get-offsets": "org.apache.kafka.tools.GetOffsetShell",
    "kafka-delete-records": "org.apache.kafka.tools.DeleteRecordsCommand",
    "kafka-log-dirs": "org.apache.kafka.tools.LogDirsCommand",
    "kafka-leader-election": "org.apache.kafka.tools.LeaderElectionCommand",
    "kafka-metadata-quorum": "org.apache.kafka.tools.MetadataQuorumCommand",
    "kafka-features": "org.apache.kafka.tools.FeatureCommand",
    "kafka-acls": "org.apache.kafka.tools.AclCommand",
    "kafka-e2e-latency": "org.apache.kafka.tools.EndToEndLatency",
    "kafka-transactions": "org.apache.kafka.tools.TransactionsCommand",
    # the consume-transform-produce copier of Kafka's own transaction system tests (kafka-run-class)
    "transactional-message-copier": "org.apache.kafka.tools.TransactionalMessageCopier",
}


class PeerMissing(Exception):
    """The JVM or Kafka's jars are not installed; the message says which and how to install them."""


@dataclass(frozen=True)
class ToolRun:
    """One finished run of a tool."""

    tool: str
    args: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    elapsed_s: float

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    @property
    def output(self) -> str:
        """stdout then stderr: some tools print their errors on one, some on the other."""
        return self.stdout + self.stderr

    def describe(self, tail_chars: int = 1500) -> str:
        """The command and what it printed, for a failure message."""
        out = self.output.strip()
        if len(out) > tail_chars:
            out = "…" + out[-tail_chars:]
        return f"{self.tool} {' '.join(self.args)} -> exit {self.returncode} in {self.elapsed_s:.1f} s:\n{out}"


def jars_dir(path: str | os.PathLike[str] | None = None) -> Path:
    """The directory of Kafka's jars: ``path``, else :func:`tools.peer.jars.kafka_jars_dir` (the
    cache ``make kafka-jars`` fills, or ``$FERRY_KAFKA_JARS``). Raises :class:`PeerMissing` when it
    holds no Kafka tools jar."""
    where = Path(path) if path is not None else kafka_jars_dir()
    if where is None or not (where / f"kafka-tools-{KAFKA_VERSION}.jar").is_file():
        raise PeerMissing(f"Kafka {KAFKA_VERSION} jars not installed in {where or 'the cache'} (run `make kafka-jars`)")
    return where


def java_binary() -> str:
    """The ``java`` to run (``$JAVA_HOME/bin/java`` when set, else the one on PATH)."""
    home = os.environ.get("JAVA_HOME")
    candidate = os.path.join(home, "bin", "java") if home else shutil.which("java")
    if not candidate or not os.access(candidate, os.X_OK):
        raise PeerMissing("no Java runtime: Kafka's tools need java 17 or newer on PATH (or JAVA_HOME)")
    return candidate


class KafkaTools:
    """Runs Kafka's tools from one jar directory (see :func:`jars_dir`).

    Starting the JVM costs more than most tool runs here, so a tool run to its end (:meth:`run`)
    gets the flags of a short-lived JVM, the client compiler only and the serial collector: a
    ``kafka-topics --list`` then takes ~0.75 instead of ~1.1 s of CPU. :meth:`start` (tools that
    run until stopped, or measure) keeps the JVM's defaults."""

    def __init__(self, jars: Path | None = None, java: str | None = None, heap_mb: int = DEFAULT_HEAP_MB) -> None:
        self.jars = jars if jars is not None else jars_dir()
        self.java = java or java_binary()
        self.heap_mb = heap_mb

    def command(self, tool: str, args: list[str] | tuple[str, ...], short_lived: bool = False) -> list[str]:
        """The command line of ``tool`` (a key of :data:`TOOL_CLASSES`) with ``args``."""
        try:
            main_class = TOOL_CLASSES[tool]
        except KeyError:
            raise ValueError(f"unknown Kafka tool {tool!r}; known: {', '.join(sorted(TOOL_CLASSES))}") from None
        jvm = [self.java, f"-Xmx{self.heap_mb}m"]
        if short_lived:
            jvm += ["-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"]
        # Kafka's scripts' logging: warnings and errors on stderr (stdout is the tool's output)
        return [*jvm, f"-Dlog4j2.configurationFile={LOG4J_CONFIG}", "-cp", f"{self.jars}/*", main_class, *args]

    def run(self, tool: str, *args: str, input_text: str | None = None, timeout_s: float = DEFAULT_TIMEOUT_S,
            short_lived: bool = True) -> ToolRun:
        """Run ``tool`` to its end (killed after ``timeout_s``, then exit code -9) and return what it
        printed; ``short_lived=False`` for a run whose speed is measured (the perf tests)."""
        started = time.monotonic()
        proc = subprocess.Popen(self.command(tool, args, short_lived),
                                stdin=subprocess.PIPE if input_text is not None else subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, encoding="utf-8", errors="replace")
        try:
            stdout, stderr = proc.communicate(input_text, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, stderr = proc.communicate()
            stderr += f"\n(killed after {timeout_s:.0f} s)"
        return ToolRun(tool, tuple(args), proc.returncode, stdout, stderr, time.monotonic() - started)

    def start(self, tool: str, *args: str, stdout: int | IO[str] = subprocess.PIPE,
              stderr: int | IO[str] = subprocess.PIPE) -> subprocess.Popen[str]:
        """Start ``tool`` and return its process (for tools that run until stopped)."""
        return subprocess.Popen(self.command(tool, args), stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr,
                                text=True, encoding="utf-8", errors="replace")


def properties_file(path: Path, props: dict[str, str]) -> Path:
    """Write a Java properties file (the ``--command-config`` of a tool) and return its path."""
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()), encoding="utf-8")
    return path
