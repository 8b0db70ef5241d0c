"""One local Spark session, configured for a small loopback-only machine.

Spark binds the loopback address only, its workers run this interpreter, the web UI is off and
shuffles use few partitions (the data is small; default 200 partitions would mostly add latency),
and many small sample files share a task.
"""
from __future__ import annotations

import os
import sys
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def spark_session(master: str = "local[2]", app_name: str = "ferry-rebalance",
                  shuffle_partitions: int = 4) -> "SparkSession":
    """Start (or reuse) the process's Spark session."""
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
    if master.startswith("local"):
        builder = builder.config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


def timed_spark_session(master: str = "local[2]") -> tuple["SparkSession", float]:
    """The session and the seconds it took to start (reported apart from planning)."""
    started = time.perf_counter()
    session = spark_session(master)
    return session, time.perf_counter() - started
