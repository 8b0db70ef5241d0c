"""`ferry rebalance` on a real Spark standalone cluster: a master and a worker started from the
installed pyspark, the executors reading the samples straight from the S3 endpoint. The plan must
be the one ``local[2]`` makes from the same samples."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from stream_storage.s3_server import S3Server
from tools.rebalance import cli
from tools.rebalance.samples import S3SampleSource, sample_key
from tools.rebalance.synthetic import SyntheticSpec, synthetic_cluster, synthetic_samples
from tools.spark_standalone import StandaloneSparkCluster

pytestmark = [pytest.mark.spark, pytest.mark.integration]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUCKET = "ferry-metrics"


def put_samples(source: S3SampleSource) -> int:
    cluster = synthetic_cluster(SyntheticSpec(600, 6, partitions_per_topic=20, seed=21))
    frame = synthetic_samples(cluster, intervals=3)
    objects = 0
    for (ts_ms, broker_id), rows in frame.groupby(["ts_ms", "broker_id"], sort=True):
        source.put(sample_key(int(broker_id), int(ts_ms)), rows.to_json(orient="records", lines=True).encode())
        objects += 1
    return objects


def test_rebalance_on_a_standalone_cluster_plans_what_local_mode_plans(spark, capsys, tmp_path):
    cluster = StandaloneSparkCluster(worker_cores=2, worker_memory_mb=1024)
    with S3Server(bucket=BUCKET) as s3, ThreadPoolExecutor(1) as pool:
        starting = pool.submit(cluster.start)  # the JVMs start while local mode plans
        try:
            assert put_samples(S3SampleSource(s3.endpoint_url, BUCKET)) == 18
            argv = ["--s3-endpoint", s3.endpoint_url, "--bucket", BUCKET, "--window-ms", "60000", "--json"]
            assert cli.main(argv) == 0
            local = json.loads(capsys.readouterr().out)
            starting.result()
            remote = plan_on(cluster, argv, tmp_path)
        finally:
            starting.exception()
            cluster.cleanup()
    assert local["summary"]["window"]["sample_rows"] == remote["summary"]["window"]["sample_rows"] == 3 * 600
    assert remote["plan"] == local["plan"] and len(local["plan"]["partitions"]) > 0
    for resource in ("net_in", "net_out", "partition_count"):
        assert remote["summary"]["resources"][resource] == local["summary"]["resources"][resource]
    assert local["summary"]["resources"]["net_in"]["after"]["max_over_mean"] <= 1.10


def plan_on(cluster: StandaloneSparkCluster, argv: list[str], cwd: object) -> dict:
    """The same command in another process (one SparkContext per process), started away from the
    source tree: the executors get Ferry's code from the driver (addPyFile)."""
    env = dict(os.environ, PYTHONPATH=ROOT)
    proc = subprocess.run([sys.executable, "-m", "tools.cli", "rebalance", *argv, "--master", cluster.master_url],
                          capture_output=True, text=True, env=env, cwd=cwd, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:] + cluster.logs()
    # the application really ran on the worker: it launched an executor for it
    assert any(cluster.work_dir.joinpath("work").glob("app-*/*/stderr")), cluster.logs()
    return json.loads(proc.stdout)
