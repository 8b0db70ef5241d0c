"""Against a real cluster: samples written by real brokers are read by the Spark job, and the plan
executes through the controllers while producers run, losing nothing."""
from __future__ import annotations

import asyncio
import json
import time

import pytest

from tools.admin import Admin
from tools.client import TopicPartition
from tools.cluster import LocalCluster
from tools.move_workload import ProduceLoad, check_read_back
from tools.rebalance import cli
from tools.rebalance.samples import METRICS_PREFIX, S3SampleSource, decode_samples, keys_in_window, parse_sample_key

pytestmark = [pytest.mark.integration, pytest.mark.spark]


@pytest.fixture
def cluster(tmp_path):
    c = LocalCluster(str(tmp_path / "cluster"), brokers=3, broker_overrides={"metrics_interval_ms": 500})
    c.start()
    yield c
    c.stop(graceful=False)


async def wait_for_loaded_window(source: S3SampleSource, brokers: set[int], partitions: set[tuple[str, int]],
                                 window_ms: int, timeout_s: float) -> int:
    """The end of the newest window that every broker has published samples through and in which
    every partition took records in: the planner then reads the load the test offers, whatever
    the machine's load did to the first seconds of sending."""
    deadline = time.monotonic() + timeout_s
    while True:
        keys = await asyncio.to_thread(source.list, METRICS_PREFIX)
        newest: dict[int, int] = {}
        for key in keys:
            parsed = parse_sample_key(key)
            if parsed and parsed[0] in brokers:
                newest[parsed[0]] = max(newest.get(parsed[0], 0), parsed[1])
        if set(newest) == brokers:
            end_ms = min(newest.values())  # every broker has published up to here
            chosen, _ = keys_in_window(keys, window_ms, end_ms)
            bytes_in: dict[tuple[str, int], int] = {}
            for key in chosen:
                for sample in decode_samples(await asyncio.to_thread(source.get, key)):
                    tp = (sample.topic, sample.partition)
                    bytes_in[tp] = bytes_in.get(tp, 0) + sample.bytes_in
            if all(bytes_in.get(tp, 0) > 0 for tp in partitions):
                return end_ms
        assert time.monotonic() < deadline, f"no {window_ms} ms window of samples shows load on every partition"
        await asyncio.sleep(0.5)


async def test_rebalance_plans_from_real_samples_and_executes_under_load(spark, cluster, capsys):
    hot = [TopicPartition("hot", p) for p in range(6)]
    cold = [TopicPartition("cold", p) for p in range(3)]
    async with Admin(bootstrap_controllers=cluster.controller_bootstrap) as admin:
        await admin.create_topic("hot", 6, assignments={p: [1] for p in range(6)})
        await admin.create_topic("cold", 3, assignments={0: [1], 1: [2], 2: [3]})
        for tp in hot + cold:
            await admin.wait_for_leader(tp, timeout_s=30)
    hot_load = await ProduceLoad(cluster.bootstrap_servers, hot, rate_per_s=100.0, value_bytes=200).start()
    cold_load = await ProduceLoad(cluster.bootstrap_servers, cold, rate_per_s=5.0, value_bytes=200).start()
    try:
        async with Admin(bootstrap_controllers=cluster.controller_bootstrap) as admin:
            # the hot partitions' buffered bytes uploaded while they serve (broker 1 leads them; broker 2
            # refuses). Best effort by design: until broker 1 has opened them all (a leader in the
            # metadata comes first) or while an upload outlasts the call, fewer are counted
            uploaded = 0
            deadline = time.monotonic() + 30
            while uploaded < len(hot) and time.monotonic() < deadline:
                uploaded = await admin.pre_upload({1: [(tp.topic, tp.partition) for tp in hot], 2: [("hot", 0)]},
                                                  timeout_ms=10_000)
                if uploaded < len(hot):
                    await asyncio.sleep(0.5)
            assert uploaded == len(hot)
        end_ms = await wait_for_loaded_window(S3SampleSource(cluster.s3_endpoint, cluster.bucket), {1, 2, 3},
                                              {(tp.topic, tp.partition) for tp in hot + cold}, 2_000, timeout_s=60)
        argv = ["--s3-endpoint", cluster.s3_endpoint, "--bucket", cluster.bucket, "--window-ms", "2000",
                "--end-ms", str(end_ms), "--json",
                "--execute", "--bootstrap-controller", ",".join(cluster.controller_bootstrap), "--timeout-ms", "30000"]
        code = await asyncio.to_thread(cli.main, argv)
        await asyncio.sleep(0.5)  # acknowledgements from the new owners
    finally:
        await hot_load.stop()
        await cold_load.stop()
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    summary, plan = report["summary"], report["plan"]
    net_in = summary["resources"]["net_in"]
    # broker 1 led every hot partition: it held most of the traffic the brokers sampled
    assert summary["brokers_before"] == [1, 2, 3] and summary["partitions"] == 9
    assert net_in["before"]["max_over_mean"] > 2.0 and net_in["before"]["min"] > 0
    assert net_in["after"]["max_over_mean"] < net_in["before"]["max_over_mean"]
    moved = {(p["topic"], p["partition"]): p["replicas"][0] for p in plan["partitions"]}
    assert moved and all(topic == "hot" for topic, _p in moved) and set(moved.values()) <= {2, 3}
    assert report["executed"]["completed"] == report["executed"]["submitted"] == len(moved)
    async with Admin(bootstrap_controllers=cluster.controller_bootstrap) as admin:
        topics = await admin.describe_topics(["hot"])
    leaders = {("hot", p.partition): p.leader for p in topics["hot"]}
    assert all(leaders[key] == target for key, target in moved.items())
    for load in (hot_load, cold_load):
        result = await check_read_back(cluster.bootstrap_servers, load)
        assert result.ok, result.summary()
        assert result.acknowledged > 0 and sum(load.failed.values()) == 0
