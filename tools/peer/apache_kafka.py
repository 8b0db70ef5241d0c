"""Apache Kafka with KRaft, started from its Maven jars as the peer Ferry is measured against.

One controller and ``brokers`` brokers, each a JVM with an explicit heap, on loopback ports,
with the settings Kafka documents for production durability (replication factor 3,
``min.insync.replicas=2``, unclean election off) unless a benchmark overrides them. Like
``tools.cluster.LocalCluster`` for Ferry, the cluster is a set of real processes in a state
directory; every log goes to a file there. Nothing is downloaded here: the jars come from
``make kafka-jars``.
"""
from __future__ import annotations

import base64
import os
import signal
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

CONTROLLER_ID = 1000

#: Kafka's documented production durability, for topics the benchmarks create
PRODUCTION_BROKER_PROPS: dict[str, str] = {
    "default.replication.factor": "3",
    "min.insync.replicas": "2",
    "offsets.topic.replication.factor": "3",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    "unclean.leader.election.enable": "false",
    "auto.create.topics.enable": "false",
    "group.initial.rebalance.delay.ms": "0",
    "num.partitions": "1",
}

LOG4J2 = """<?xml version="1.0" encoding="UTF-8"?>
<Configuration status="WARN">
  <Appenders><Console name="out" target="SYSTEM_OUT"><PatternLayout pattern="[%d] %p %m (%c)%n"/></Console></Appenders>
  <Loggers><Root level="INFO"><AppenderRef ref="out"/></Root>
    <Logger name="kafka.request.logger" level="WARN"/><Logger name="state.change.logger" level="WARN"/>
  </Loggers>
</Configuration>
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def random_cluster_id() -> str:
    """Kafka's cluster id: 16 random bytes, URL-safe base64 without padding (it may start with
    ``-``, so it is passed as ``--cluster-id=ID``, never as a separate argument)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def raise_open_files_limit() -> None:
    """A broker keeps a log, an offset index and a time index open per partition replica: 10,000
    partitions need ~30,000 descriptors, above this machine's default soft limit. Raised to the
    hard limit (or further when allowed) in the child before the JVM starts."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    for want in (1 << 20, hard):
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, max(want, hard)))
            return
        except (ValueError, OSError):
            continue


def java_command(jars_dir: Path, main_class: str, args: list[str], heap_mb: int,
                 log4j_file: Path | None = None) -> list[str]:
    """A JVM running ``main_class`` from the jars, with a fixed heap (by default a JVM takes up
    to a quarter of the machine's memory)."""
    cmd = ["java", f"-Xmx{heap_mb}m", f"-Xms{min(heap_mb, 256)}m", "-XX:+UseG1GC", "-Djava.awt.headless=true"]
    if log4j_file is not None:
        cmd.append(f"-Dlog4j2.configurationFile={log4j_file}")
    return cmd + ["-cp", f"{jars_dir}/*", main_class, *args]


@dataclass
class KafkaNode:
    node_id: int
    roles: str
    port: int
    props_file: Path
    log_file: Path
    proc: subprocess.Popen[bytes] | None = None


@dataclass
class ApacheKafkaCluster:
    """``start()`` formats the nodes' storage (first start only) and starts them; ``stop()``
    ends them (SIGTERM, a controlled shutdown; ``graceful=False``: SIGKILL)."""

    state_dir: Path
    jars_dir: Path
    brokers: int = 3
    broker_heap_mb: int = 1024
    controller_heap_mb: int = 512
    broker_props: dict[str, str] = field(default_factory=lambda: dict(PRODUCTION_BROKER_PROPS))
    nodes: dict[int, KafkaNode] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.state_dir = Path(self.state_dir)
        self.jars_dir = Path(self.jars_dir)
        if not any(self.jars_dir.glob("kafka_2.13-*.jar")):
            raise FileNotFoundError(f"no Apache Kafka jars in {self.jars_dir}: run `make kafka-jars`")

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{n.port}" for n in self.nodes.values() if n.roles == "broker")

    @property
    def version(self) -> str:
        jar = next(self.jars_dir.glob("kafka_2.13-*.jar"))
        return jar.name[len("kafka_2.13-"):-len(".jar")]

    def _write_configs(self) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        (self.state_dir / "log4j2.xml").write_text(LOG4J2)
        cport = free_port()
        voters = f"{CONTROLLER_ID}@127.0.0.1:{cport}"
        common = {"controller.quorum.voters": voters, "controller.listener.names": "CONTROLLER",
                  "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT"}
        specs = [(CONTROLLER_ID, "controller", cport)] + [(b, "broker", free_port()) for b in range(1, self.brokers + 1)]
        for node_id, roles, port in specs:
            props = {**common, "process.roles": roles, "node.id": str(node_id),
                     "log.dirs": str(self.state_dir / f"node-{node_id}" / "data")}
            if roles == "controller":
                props["listeners"] = f"CONTROLLER://127.0.0.1:{port}"
            else:
                props.update({"listeners": f"PLAINTEXT://127.0.0.1:{port}",
                              "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
                              "inter.broker.listener.name": "PLAINTEXT", **self.broker_props})
            props_file = self.state_dir / f"node-{node_id}.properties"
            props_file.write_text("".join(f"{k}={v}\n" for k, v in sorted(props.items())))
            self.nodes[node_id] = KafkaNode(node_id, roles, port, props_file, self.state_dir / f"node-{node_id}.log")

    def _format(self) -> None:
        cluster_id = random_cluster_id()
        for node in self.nodes.values():
            if (Path(self._log_dir(node)) / "meta.properties").exists():
                continue
            out = subprocess.run(java_command(self.jars_dir, "kafka.tools.StorageTool",
                                              ["format", f"--cluster-id={cluster_id}", "-c", str(node.props_file)], 256,
                                              self.state_dir / "log4j2.xml"),
                                 capture_output=True, text=True, timeout=120)
            if out.returncode != 0:
                raise RuntimeError(f"kafka-storage format of node {node.node_id} failed: {out.stderr or out.stdout}")

    def _log_dir(self, node: KafkaNode) -> str:
        return str(self.state_dir / f"node-{node.node_id}" / "data")

    def start(self, timeout_s: float = 120.0) -> None:
        if not self.nodes:
            self._write_configs()
        self._format()
        for node_id in self.nodes:
            self.start_node(node_id, wait=False)
        self.wait_ready(timeout_s)

    def start_node(self, node_id: int, wait: bool = True, timeout_s: float = 60.0) -> None:
        node = self.nodes[node_id]
        heap = self.controller_heap_mb if node.roles == "controller" else self.broker_heap_mb
        log = open(node.log_file, "ab")
        node.proc = subprocess.Popen(java_command(self.jars_dir, "kafka.Kafka", [str(node.props_file)], heap,
                                                  self.state_dir / "log4j2.xml"),
                                     stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                     preexec_fn=raise_open_files_limit)
        log.close()
        if wait:
            self._wait_port(node, time.monotonic() + timeout_s)

    def _wait_port(self, node: KafkaNode, deadline: float) -> None:
        while time.monotonic() < deadline:
            if node.proc is not None and node.proc.poll() is not None:
                raise RuntimeError(f"Kafka node {node.node_id} exited ({node.proc.returncode}); see {node.log_file}")
            try:
                with socket.create_connection(("127.0.0.1", node.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.2)
        raise TimeoutError(f"Kafka node {node.node_id} did not listen within the timeout; see {node.log_file}")

    def wait_ready(self, timeout_s: float = 120.0) -> None:
        """Every node listens and every broker is registered (Metadata lists them all)."""
        from confluent_kafka.admin import AdminClient

        deadline = time.monotonic() + timeout_s
        for node in self.nodes.values():
            self._wait_port(node, deadline)
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        while time.monotonic() < deadline:
            try:
                if len(admin.list_topics(timeout=5).brokers) == self.brokers:
                    return
            except Exception:  # noqa: BLE001 - not up yet
                pass
            time.sleep(0.3)
        raise TimeoutError(f"Apache Kafka brokers not all registered within {timeout_s} s")

    def pid(self, node_id: int) -> int | None:
        proc = self.nodes[node_id].proc
        return proc.pid if proc is not None and proc.poll() is None else None

    def kill_node(self, node_id: int) -> None:
        """kill -9: no controlled shutdown."""
        proc = self.nodes[node_id].proc
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)

    def stop_node(self, node_id: int, timeout_s: float = 60.0) -> None:
        """SIGTERM: a controlled shutdown (the broker moves its leaderships away first)."""
        proc = self.nodes[node_id].proc
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(30)

    def stop(self, graceful: bool = True) -> None:
        brokers = [n for n in self.nodes if self.nodes[n].roles == "broker"]
        for node_id in brokers + [CONTROLLER_ID]:
            if graceful:
                self.stop_node(node_id)
            else:
                self.kill_node(node_id)
