"""Where the console's observations come from: the live cluster's existing APIs, through Admin.

One :meth:`LiveSource.observe` asks, concurrently: the controllers' ``describe_cluster`` and
``describe_topics`` (from any controller, which takes nothing from the leader; see
TOPICS_DUTY_FACTOR), every broker's
``/v1/health`` and ``/v1/moves``, every controller's ``/v1/health``, and, at most once per
``metrics_interval_ms``, every broker's ``/metrics``. A broker or controller that does not answer
within ``timeout_ms`` is shown as down; the next poll asks again. Consumer groups' lag comes from the
brokers' Kafka listeners (tools/console/groups.py), read in a thread every ``groups_interval_ms``
while the polls go on with the last answer.
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Awaitable, Protocol, TypeVar

import aiohttp

from tools.admin import Admin, BrokerInfo, PartitionState, parse_brokers
from tools.client import RETRIABLE_CONNECTION_ERRORS, TopicPartition, normalize_url
from tools.console.groups import GroupLagReader
from tools.console.model import MetricsSample, Observation, parse_metrics
from tools.console.runs import RunDir
from metadata_quorum.kernel.errors import FerryError

T = TypeVar("T")
log = logging.getLogger("ferry.console")
MOVES_PER_BROKER = 20
#: a large cluster's topics (10,000 partitions: a reply of ~1 MB) are read again only after this
#: many times the last read took, so the console keeps a controller at most ~1/9 busy; a small
#: cluster's are read every poll. Moves show at once anyway: they come from the brokers' /v1/moves.
TOPICS_DUTY_FACTOR = 9


class ConsoleSource(Protocol):
    """What the console needs of a cluster: an observation per poll, and a way to move."""

    async def observe(self) -> Observation: ...
    async def move(self, tp: TopicPartition, replicas: list[int]) -> None: ...
    async def execute_plan(self, plan_json: str) -> list[str]: ...


async def _or_none(call: Awaitable[T]) -> T | None:
    try:
        return await call
    except (FerryError, asyncio.TimeoutError, aiohttp.ClientError, *RETRIABLE_CONNECTION_ERRORS):
        return None


class LiveSource:
    """A live cluster, read through an started :class:`Admin`."""

    def __init__(self, admin: Admin, timeout_ms: int = 1000, metrics_interval_ms: int = 1000,
                 groups_interval_ms: int = 2000, run_dir: str | None = None) -> None:
        self.admin = admin
        self.run_dir = RunDir(run_dir) if run_dir else None
        self.timeout_ms = timeout_ms
        self.metrics_interval_ms = metrics_interval_ms
        self.groups_interval_ms = groups_interval_ms
        self._metrics_at_ms = 0
        self._topics: dict[str, list[PartitionState] | FerryError] | None = None
        self._topics_next_s = 0.0
        self._topics_at_ms = 0
        self._groups_at_ms = 0
        self._groups: dict[str, dict[str, int]] = {}
        self._groups_task: asyncio.Task[None] | None = None
        self._groups_reader: GroupLagReader | None = None

    def _refresh_groups(self, now_ms: int, kafka_bootstrap: list[str]) -> None:
        """Start a read of the groups' lag when the last one is done and old enough."""
        if not kafka_bootstrap or (self._groups_task is not None and not self._groups_task.done()):
            return
        if now_ms - self._groups_at_ms < self.groups_interval_ms:
            return
        self._groups_at_ms = now_ms
        if self._groups_reader is None:
            self._groups_reader = GroupLagReader(",".join(kafka_bootstrap))
        reader = self._groups_reader

        async def read() -> None:
            try:
                self._groups = await asyncio.to_thread(reader.read)
            except Exception as exc:  # noqa: BLE001 - kafka-python's errors; the panel keeps its last answer
                log.debug("consumer groups not read: %s", exc)
        self._groups_task = asyncio.create_task(read())

    async def close(self) -> None:
        if self._groups_task is not None:
            await asyncio.gather(self._groups_task, return_exceptions=True)
        if self._groups_reader is not None:
            await asyncio.to_thread(self._groups_reader.close)

    async def _get(self, url: str, params: dict[str, str] | None = None) -> Any:
        return await self.admin.http_get(url, params, timeout_ms=self.timeout_ms)

    async def _brokers(self) -> dict[int, BrokerInfo]:
        """The registered brokers, from any controller: the page goes on while the quorum elects."""
        return parse_brokers(await self.admin.any_controller_api.describe_cluster({}))

    async def _text(self, url: str) -> str:
        return await self.admin.http_get_text(url, timeout_ms=self.timeout_ms)

    async def observe(self) -> Observation:
        now_ms = int(time.time() * 1000)
        read_topics = self._topics is None or time.monotonic() >= self._topics_next_s
        if read_topics:
            started = time.monotonic()
            self._topics_at_ms = now_ms
            cluster, topics = await asyncio.gather(self._brokers(), self.admin.describe_topics(leader=False))
            took_s = time.monotonic() - started
            self._topics, self._topics_next_s = topics, time.monotonic() + TOPICS_DUTY_FACTOR * took_s
        else:
            cluster, topics = await self._brokers(), self._topics or {}
        ids = sorted(cluster)
        urls = {b: cluster[b].url for b in ids}
        read_metrics = now_ms - self._metrics_at_ms >= self.metrics_interval_ms
        if read_metrics:
            self._metrics_at_ms = now_ms
        controllers = [normalize_url(c) for c in self.admin.bootstrap_controllers]
        health, moves, metrics, ctl = await asyncio.gather(
            asyncio.gather(*(_or_none(self._get(f"{urls[b]}/v1/health")) for b in ids)),
            asyncio.gather(*(_or_none(self._get(f"{urls[b]}/v1/moves", {"limit": str(MOVES_PER_BROKER)}))
                             for b in ids)),
            asyncio.gather(*(_or_none(self._text(f"{urls[b]}/metrics")) for b in (ids if read_metrics else []))),
            asyncio.gather(*(_or_none(self._get(f"{c}/v1/health")) for c in controllers)),
        )
        self._refresh_groups(now_ms, [e.removeprefix("kafka://") for b in ids for e in cluster[b].endpoints
                                      if e.startswith("kafka://")])
        partitions: dict[str, list[tuple[int, int, list[int]]]] = {}
        for name, parts in topics.items():
            if isinstance(parts, list):
                partitions[name] = [(p.partition, p.leader, list(p.replicas)) for p in parts]
        sampled = {b: parse_metrics(text, now_ms) for b, text in zip(ids if read_metrics else [], metrics, strict=True)
                   if text is not None}
        return Observation(
            at_ms=now_ms,
            brokers={b: {"fenced": cluster[b].fenced, "endpoints": cluster[b].endpoints, "rack": cluster[b].rack}
                     for b in ids},
            broker_health=dict(zip(ids, health, strict=True)),
            partitions=partitions,
            moves={b: list(a.get("moves", [])) for b, a in zip(ids, moves, strict=True) if isinstance(a, dict)},
            metrics=sampled,
            controllers={_node_id(h, i): h for i, h in enumerate(ctl)},
            group_lag=self._groups,
            run=self.run_dir.read() if self.run_dir is not None else None,
            partitions_at_ms=self._topics_at_ms,
        )

    async def move(self, tp: TopicPartition, replicas: list[int]) -> None:
        await self.admin.move_partition(tp, replicas)

    async def execute_plan(self, plan_json: str) -> list[str]:
        """Kafka's reassignment JSON, run as `ferry reassign-partitions --execute` runs it (the same
        checks and errors); the lines it prints."""
        return await execute_plan(self.admin, plan_json)


async def execute_plan(admin: Admin, plan_json: str) -> list[str]:
    from tools.reassign_cmd import CommandError, run_execute

    out: list[str] = []
    try:
        await run_execute(admin, plan_json, additional=False, out=out)
    except CommandError as exc:
        raise FerryError(exc.error, str(exc)) from None
    return out


def _node_id(health: dict[str, Any] | None, index: int) -> int:
    """A controller's node id as it says, or its place in the list (from 1) when it did not answer."""
    if isinstance(health, dict) and isinstance(health.get("node_id"), int):
        return int(health["node_id"])
    return index + 1


__all__ = ["ConsoleSource", "LiveSource", "MetricsSample"]
