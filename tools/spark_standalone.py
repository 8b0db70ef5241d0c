"""A Spark standalone cluster on loopback, started from the installed pyspark.

The pyspark package carries ``bin/spark-class``, so a real master and worker (separate JVMs, the
executors in processes of their own) run without a Spark download. Tests and benchmarks use it to
run the same jobs as ``local[2]`` on a real cluster: the driver talks to the master over RPC,
tasks are serialized to executors, and nothing is shared with the driver but what Spark ships
(or, for Ferry's jobs, what the executors read from S3 themselves).

Both daemons bind 127.0.0.1 on free ports; their web UIs and the master's REST submission server
are off. Each runs in its own process group and is stopped as a group.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tools.proc import LOOPBACK, free_ports, stop_process

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
MASTER_READY = re.compile(r"I have been elected leader|New state: ALIVE")
WORKER_READY = re.compile(r"Successfully registered with master")


def spark_home() -> Path:
    """The installed pyspark package (it is a Spark distribution: jars/ and bin/)."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


class StandaloneSparkCluster:
    """One master and one worker; ``master_url`` is what ``--master`` takes."""

    def __init__(self, worker_cores: int = 2, worker_memory_mb: int = 1536, work_dir: str | None = None) -> None:
        self.worker_cores = worker_cores
        self.worker_memory_mb = worker_memory_mb
        self._own_dir = work_dir is None
        self.work_dir = Path(work_dir or tempfile.mkdtemp(prefix="ferry-spark-"))
        self.master_port, self.worker_port = free_ports(2)
        self.master_url = f"spark://{LOOPBACK}:{self.master_port}"
        self._procs: list[subprocess.Popen[bytes]] = []

    def _env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        env = dict(os.environ)
        env.update({"SPARK_HOME": str(spark_home()), "SPARK_LOCAL_IP": LOOPBACK,
                    "PYSPARK_PYTHON": env.get("PYSPARK_PYTHON") or sys.executable,
                    "SPARK_LOG_DIR": str(self.work_dir), "SPARK_NO_DAEMONIZE": "1"})
        env.update(extra or {})
        return env

    def _spawn(self, name: str, args: list[str], opts: str) -> tuple[subprocess.Popen[bytes], Path]:
        log = self.work_dir / f"{name}.log"
        env = self._env({"SPARK_DAEMON_JAVA_OPTS": opts})
        # spark-class's launcher adds SPARK_DAEMON_JAVA_OPTS to a master's or worker's JVM
        with open(log, "ab") as out:
            proc = subprocess.Popen([str(spark_home() / "bin" / "spark-class"), *args], stdout=out,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                    cwd=str(self.work_dir), start_new_session=True)
        self._procs.append(proc)
        return proc, log

    @staticmethod
    def _wait(proc: subprocess.Popen[bytes], log: Path, ready: re.Pattern[str], what: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            text = log.read_text(errors="replace") if log.exists() else ""
            if ready.search(text):
                return
            if proc.poll() is not None:
                raise RuntimeError(f"Spark {what} exited with {proc.returncode}:\n{text[-3000:]}")
            time.sleep(0.2)
        raise RuntimeError(f"Spark {what} not ready after {timeout_s} s:\n{log.read_text(errors='replace')[-3000:]}")

    def start(self, timeout_s: float = 90.0) -> "StandaloneSparkCluster":
        quiet = "-Dspark.ui.enabled=false -Dspark.master.rest.enabled=false"
        try:
            master, master_log = self._spawn("master", [MASTER_CLASS, "--host", LOOPBACK, "--port",
                                                        str(self.master_port), "--webui-port", "0"], quiet)
            self._wait(master, master_log, MASTER_READY, "master", timeout_s)
            worker, worker_log = self._spawn("worker", [
                WORKER_CLASS, "--host", LOOPBACK, "--port", str(self.worker_port), "--webui-port", "0",
                "--cores", str(self.worker_cores), "--memory", f"{self.worker_memory_mb}m",
                "--work-dir", str(self.work_dir / "work"), self.master_url], quiet)
            self._wait(worker, worker_log, WORKER_READY, "worker", timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for proc in reversed(self._procs):
            stop_process(proc, timeout_s=10.0)
        self._procs.clear()

    def cleanup(self) -> None:
        self.stop()
        if self._own_dir:
            import shutil

            shutil.rmtree(self.work_dir, ignore_errors=True)

    def logs(self, size: int = 3000) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-size:]}"
                         for p in sorted(self.work_dir.glob("*.log")))

    def __enter__(self) -> "StandaloneSparkCluster":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.cleanup()
