"""The console in a real browser (Debian's chromium, headless, driven by selenium) on a real cluster.

A move made with the tool (Admin.move_partition) must appear on the page within 1 s of completing:
the page notes when it first drew the move complete (``ferryStats.seen``), and the move's own t6 (the
new owner serves) is on the same clock. A bad move typed into the form must show the controller's
error. The screenshots go to docs/console-*.png.
"""
from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from typing import Any, Callable, Coroutine, TypeVar

import pytest

from tools.admin import Admin
from tools.client import TopicPartition
from tools.cluster import ROOT, LocalCluster
from tools.console.browser import find_browser, headless_chromium
from tools.move_workload import ProduceLoad

pytestmark = pytest.mark.integration
T = TypeVar("T")
MOVE_TO_PAGE_LIMIT_MS = 1000
DOCS = os.path.join(ROOT, "docs")


class LoopThread:
    """An event loop in a thread: the produce load and the admin calls, beside the sync driver."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout_s: float = 60.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


def wait_for(check: Callable[[], T], timeout_s: float, what: str, every_s: float = 0.02) -> T:
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(every_s)


@pytest.fixture(scope="module")
def browser_or_skip() -> tuple[str, str]:
    found = find_browser()
    if isinstance(found, str):
        print(f"SKIPPED: the console's browser test: {found}")
        pytest.skip(found)
    return found


def write_run(run_dir: str, seconds: int) -> None:
    """An autoscaling run's files as the experiment rewrites them while it runs: two brokers at
    capacity, a third added at 20 s, a rebalance moving partitions onto it."""
    rows = ["t_s,offered_rps,achieved_rps,p50_ms,p99_ms,consumed_rps,consumer_lag,brokers,max_over_mean,moves,"
            "errors,retries,broker_1_rps,broker_2_rps,broker_3_rps,live_brokers"]
    events: list[dict[str, Any]] = [{"t_s": 20.0, "kind": "add_brokers"}, {"t_s": 24.0, "kind": "rebalance_start"}]
    for t in range(seconds):
        three = t >= 26
        acked = 3000 if three else min(2000, 1000 + 50 * t)
        per = [acked / 3] * 3 if three else [acked * 0.55, acked * 0.45, 0]
        moves = 4 if 24 <= t < 26 else 0
        events += [{"t_s": t + i / 4, "kind": "move"} for i in range(moves)]
        rows.append(f"{t},{1000 + 60 * t if t < 30 else 3000},{acked},{2 + t % 3},{12 + (40 if 24 <= t < 26 else t % 5)},"
                    f"{acked},{200 if three else 100 + 30 * t},{3 if t >= 20 else 2},1.0,{moves},0,{2 if 24 <= t < 26 else 0},"
                    f"{per[0]:.0f},{per[1]:.0f},{per[2]:.0f},{'1 2 3' if t >= 20 else '1 2'}")
    with open(os.path.join(run_dir, "timeseries.csv"), "w", encoding="utf-8") as f:
        f.write("\n".join(rows) + "\n")
    with open(os.path.join(run_dir, "events.json"), "w", encoding="utf-8") as f:
        json.dump([e for e in events if e["t_s"] < seconds], f)


def start_console(cluster: LocalCluster, run_dir: str) -> tuple[subprocess.Popen[str], str]:
    """`ferry console` as a process on an ephemeral port; its first line names the URL."""
    proc = subprocess.Popen([sys.executable, "-m", "tools.cli", "console", "--bootstrap-controller",
                             ",".join(cluster.controller_bootstrap), "--port", "0", "--run-dir", run_dir],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.startswith("Ferry console: http://127.0.0.1:"), line
    return proc, line.split(": ", 1)[1].strip()


def commit_group_offsets(bootstrap: str, topic: str, group: str, partitions: int) -> None:
    """A group that committed offset 1 on every partition (kafka-python, assigned: no join needed)."""
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KafkaTP
    from kafka.structs import OffsetAndMetadata

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    try:
        consumer.commit({KafkaTP(topic, p): OffsetAndMetadata(1, "", -1) for p in range(partitions)})
    finally:
        consumer.close()


def answer_of(driver: Any, element_id: str) -> str:
    """The console's answer shown in a form's result line, once there is one ("" before)."""
    element = driver.find_element("id", element_id)
    return str(element.text) if element.get_attribute("class") in ("ok", "error") else ""


def page_move(driver: Any, topic: str, partition: int, to: int, after_ms: int) -> dict[str, Any] | None:
    """The page's row of a complete move of topic/partition to `to` that finished after `after_ms`."""
    found: dict[str, Any] | None = driver.execute_script(
        """const [topic, p, to, after] = arguments;
           for (const tr of document.querySelectorAll('#moves tr.move')) {
             const key = tr.dataset.key, id = Number(key.split('/').pop());
             if (tr.dataset.topic === topic && Number(tr.dataset.partition) === p && Number(tr.dataset.to) === to
                 && tr.dataset.complete === 'true' && id >= after) {
               return {key: key, seen_ms: ferryStats.seen[key] || null};
             }
           }
           return null;""", topic, partition, to, after_ms)
    return found


def test_console_shows_a_move_within_a_second_and_the_forms_errors(browser_or_skip: tuple[str, str], tmp_path: Any) -> None:
    cluster = LocalCluster(str(tmp_path / "cluster"))
    cluster.start()
    loop = LoopThread()
    console: subprocess.Popen[str] | None = None
    driver: Any = None
    load: ProduceLoad | None = None
    admin = Admin(bootstrap_controllers=cluster.controller_bootstrap)
    try:
        loop.run(admin.start())
        brokers = sorted(cluster.broker_ports)
        topic = "console"
        tps = [TopicPartition(topic, p) for p in range(6)]
        loop.run(admin.create_topic(topic, len(tps), assignments={p: [brokers[p % len(brokers)]] for p in range(len(tps))}))
        for tp in tps:
            loop.run(admin.wait_for_leader(tp))
        load = loop.run(ProduceLoad(cluster.bootstrap_servers, tps, rate_per_s=100.0).start())
        commit_group_offsets(cluster.kafka_bootstrap, topic, "console-readers", len(tps))
        run_dir = str(tmp_path / "autoscale-run")
        os.makedirs(run_dir)
        write_run(run_dir, 20)
        console, url = start_console(cluster, run_dir)
        driver = headless_chromium()
        opened = time.monotonic()
        driver.get(url)
        wait_for(lambda: driver.execute_script("return ferryStats.firstPaintMs"), 10, "the first paint")
        first_paint_ms = driver.execute_script("return ferryStats.firstPaintMs")
        print(f"first paint: {first_paint_ms:.0f} ms after navigation ({(time.monotonic() - opened) * 1000:.0f} ms wall)")
        rows = driver.execute_script("return [...document.querySelectorAll('#brokers tbody tr')].map(r => r.innerText)")
        assert len(rows) == len(brokers) and all("alive" in r for r in rows), rows
        assert driver.execute_script("return Object.keys(document.querySelector('#quorum tbody').rows).length") == 3
        # the consumer group's lag, read through Kafka's APIs, behind the produce load
        groups = wait_for(lambda: driver.execute_script(
            "return [...document.querySelectorAll('#topics tbody tr')].map(r => r.innerText).join('\\n')")
            if "console-readers (" in driver.find_element("id", "topics").text else "", 10, "the group's lag")
        lag = int(groups.split("console-readers (")[1].split(")")[0])
        print(f"consumer group console-readers: lag {lag} on the page")
        assert lag > 0

        # a move made with the tool
        tp = tps[0]
        src = loop.run(admin.wait_for_leader(tp)).leader
        dst = brokers[(brokers.index(src) + 1) % len(brokers)]
        started_ms = int(time.time() * 1000)
        loop.run(admin.move_partition(tp, [dst]))
        loop.run(admin.wait_for_leader(tp, dst, timeout_s=30))
        acknowledged = time.monotonic()
        row = wait_for(lambda: page_move(driver, tp.topic, tp.partition, dst, started_ms - 1), 5, "the move on the page")
        on_page_s = time.monotonic() - acknowledged
        timeline = loop.run(admin.moves([dst]))[dst]["moves"]
        done_ms = next(m["t_ms"]["t6"] for m in timeline if f"{m['topic']}/{m['partition']}/{m['move_id']}" == row["key"])
        latency_ms = row["seen_ms"] - done_ms
        print(f"move {tp} {src}->{dst}: on the page {latency_ms} ms after it completed (t6); "
              f"{on_page_s * 1000:.0f} ms after the controller named the new leader")
        assert 0 <= latency_ms <= MOVE_TO_PAGE_LIMIT_MS, latency_ms
        assert driver.execute_script("return ferryView().partitions[arguments[0]][arguments[1]]", topic, tp.partition) == dst
        time.sleep(1.2)  # a throughput point after the move, for the screenshot
        driver.save_screenshot(os.path.join(DOCS, "console-overview.png"))

        # a bad move in the form: the controller's error on the page, nothing changed
        before = loop.run(admin.describe_topics([topic]))[topic]
        driver.find_element("id", "move-topic").send_keys(topic)
        driver.find_element("id", "move-partition").send_keys("1")
        driver.find_element("id", "move-replicas").send_keys("99")
        driver.find_element("id", "move-button").click()
        driver.find_element("id", "move-yes").click()
        text = wait_for(lambda: answer_of(driver, "move-result"), 10, "the form's answer")
        print(f"bad move in the form: {text}")
        assert text.startswith("INVALID_REPLICA_ASSIGNMENT: ") and "99" in text, text
        driver.save_screenshot(os.path.join(DOCS, "console-form-error.png"))
        assert loop.run(admin.describe_topics([topic]))[topic] == before

        # a good move through the form appears too
        p2 = tps[2]
        src2 = loop.run(admin.wait_for_leader(p2)).leader
        dst2 = brokers[(brokers.index(src2) + 1) % len(brokers)]
        for field, value in (("move-partition", "2"), ("move-replicas", str(dst2))):
            driver.find_element("id", field).clear()
            driver.find_element("id", field).send_keys(value)
        started_ms = int(time.time() * 1000)
        driver.find_element("id", "move-button").click()
        driver.find_element("id", "move-yes").click()
        wait_for(lambda: page_move(driver, topic, 2, dst2, started_ms - 1), 10, "the form's move on the page")
        assert "started" in answer_of(driver, "move-result")
        assert loop.run(admin.wait_for_leader(p2, dst2, timeout_s=10)).leader == dst2

        # the autoscaling run's panels follow its files
        assert driver.find_element("id", "run-name").text.endswith(": 20 s")
        write_run(run_dir, 60)
        wait_for(lambda: driver.find_element("id", "run-name").text.endswith(": 60 s"), 3, "the run's new seconds")
        captions = [e.text for e in driver.find_elements("css selector", "#run-charts figcaption")]
        assert len(captions) == 7 and captions[0].startswith("records/s: offered 3000.0, acknowledged 3000.0"), captions
        panel = driver.find_element("id", "runs-panel")
        driver.execute_script("arguments[0].scrollIntoView()", panel)
        panel.screenshot(os.path.join(DOCS, "console-autoscale.png"))

        # a reassignment plan of Kafka's format: the tool's error for an unknown broker, then a good one
        driver.find_element("css selector", "#plan summary").click()
        p3 = loop.run(admin.wait_for_leader(tps[3])).leader
        dst3 = brokers[(brokers.index(p3) + 1) % len(brokers)]
        for replicas, expect in (([99], "BROKER_ID_NOT_REGISTERED: Unknown broker id 99"),
                                 ([dst3], "Successfully started partition reassignment for console-3")):
            text_area = driver.find_element("id", "plan-text")
            text_area.clear()
            text_area.send_keys(json.dumps({"version": 1, "partitions": [
                {"topic": topic, "partition": 3, "replicas": replicas}]}))
            started_ms = int(time.time() * 1000)
            driver.find_element("id", "plan-button").click()
            driver.find_element("id", "plan-yes").click()
            answer = wait_for(lambda: answer_of(driver, "plan-result"), 10, "the plan's answer")
            assert expect in answer, answer
        wait_for(lambda: page_move(driver, topic, 3, dst3, started_ms - 1), 10, "the plan's move on the page")

        updates, full = driver.execute_script("return [ferryStats.applyMs, ferryStats.fullMs]")
        print(f"updates applied: {len(updates)}, max {max(updates):.1f} ms; the whole view: {full[0]:.1f} ms")
        assert len(full) == 1 and max(updates) < 100, (updates, full)
    finally:
        if driver is not None:
            driver.quit()
        if load is not None:
            loop.run(load.stop())
        loop.run(admin.close())
        loop.close()
        if console is not None:
            console.terminate()
            console.wait(10)
        cluster.stop(graceful=False)
