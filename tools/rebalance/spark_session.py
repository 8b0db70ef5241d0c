"""The Spark session Ferry's jobs run in: ``local[N]`` on this machine, or any Spark cluster.

On a local master (or a cluster on 127.0.0.1) Spark binds the loopback address only; its Python
workers run this interpreter, the web UI is off and shuffles use few partitions (the data is
small; the default 200 partitions would mostly add latency), and many small sample files share a
task. On a cluster master the executors need Ferry's code and S3 access:

- the project's packages are zipped and shipped with ``addPyFile`` (the executors need the
  dependencies installed — boto3, pyarrow, pandas, numpy — but not Ferry itself);
- S3 credentials: each ``AWS_*`` variable set in the driver's environment (access key, secret,
  session token, region, profile) is passed on as ``spark.executorEnv.*``; executors without
  them use boto3's own chain (instance profile, their own environment). The endpoint and bucket
  travel inside the job itself;
- the executors' Python is ``PYSPARK_PYTHON`` as the driver sees it (this interpreter by default):
  set it to the workers' interpreter when that path differs.
"""
from __future__ import annotations

import os
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Sequence
from urllib.parse import urlparse

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

ROOT = Path(__file__).resolve().parents[2]
PROJECT_PACKAGES = ("metadata_quorum", "stream_storage", "broker", "tools")
EXECUTOR_ENV_VARS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_REGION",
                     "AWS_DEFAULT_REGION", "AWS_PROFILE", "AWS_CA_BUNDLE")
LOOPBACK_HOSTS = ("127.0.0.1", "localhost")


def is_local_master(master: str) -> bool:
    return master == "local" or master.startswith("local[")


def is_loopback_master(master: str) -> bool:
    """A local master, or a cluster whose master listens on this machine's loopback."""
    return is_local_master(master) or (urlparse(master).hostname or "") in LOOPBACK_HOSTS


def executor_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The S3 settings of the driver's environment that executors on other machines need."""
    return {name: environ[name] for name in EXECUTOR_ENV_VARS if environ.get(name)}


def project_zip(dest_dir: str) -> str:
    """Ferry's Python packages (sources only) as one zip for ``SparkContext.addPyFile``."""
    path = Path(dest_dir) / "ferry-project.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for package in PROJECT_PACKAGES:
            for source in sorted((ROOT / package).rglob("*")):
                if source.is_file() and "__pycache__" not in source.parts and source.suffix in (".py", ".yaml", ".json"):
                    zf.write(source, source.relative_to(ROOT).as_posix())
    return str(path)


def spark_session(master: str = "local[2]", app_name: str = "ferry-rebalance",
                  shuffle_partitions: int = 4, executor_memory_mb: int | None = None,
                  jars: Sequence[Path] | None = None) -> "SparkSession":
    """Start (or reuse) the process's Spark session. ``jars``: local jar files for ``spark.jars``;
    by default those of Spark's own Kafka source and sink when ``make spark-kafka-jars`` has
    cached them (tools/peer/spark_kafka.py), so that every session of a process, whichever call
    starts it, reads and writes ``format("kafka")``. Jars only take effect when this call starts
    the session."""
    if jars is None:
        from tools.peer.spark_kafka import spark_kafka_jars

        jars = spark_kafka_jars() or ()
    if is_loopback_master(master):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = os.environ.get("PYSPARK_PYTHON") or sys.executable
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = (SparkSession.builder.master(master).appName(app_name)
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
               .config("spark.sql.execution.arrow.pyspark.enabled", "true")
               # sample objects are small (one broker's interval): pack many per task, not one each
               .config("spark.sql.files.openCostInBytes", str(256 * 1024))
               .config("spark.sql.session.timeZone", "UTC"))
    if jars:
        builder = builder.config("spark.jars", ",".join(str(path) for path in jars))
    if is_loopback_master(master):
        builder = builder.config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
    if not is_local_master(master):
        for name, value in executor_env(os.environ).items():
            builder = builder.config(f"spark.executorEnv.{name}", value)
        if executor_memory_mb:
            builder = builder.config("spark.executor.memory", f"{executor_memory_mb}m")
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    if not is_local_master(master):
        session.sparkContext.addPyFile(project_zip(tempfile.mkdtemp(prefix="ferry-pyfiles-")))
    return session


def timed_spark_session(master: str = "local[2]") -> tuple["SparkSession", float]:
    """The session and the seconds it took to start (reported apart from planning)."""
    started = time.perf_counter()
    session = spark_session(master)
    return session, time.perf_counter() - started
