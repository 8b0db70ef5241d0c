"""What a `ferry perf scale` round checks: which broker serves each partition of its topic, and
that every acknowledged record is read back exactly once, at its offset.

"Serving" is stricter than a leader in the metadata: the partition is open on its leader (the
broker's log-dirs answer lists it), on no other broker, and no broker is still opening or closing
a partition (its ``/v1/health`` counts). A move or a restart is over only then.
"""
from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Iterable

import aiohttp

from metadata_quorum.kernel.errors import ErrorCode, FerryError
from tools.admin import Admin
from tools.client import Producer, TopicPartition, read_all

POLL_INTERVAL_S = 0.25

#: partition -> [(offset, value)] acknowledged
Acked = dict[int, list[tuple[int, bytes]]]


async def served_by(admin: Admin, brokers: dict[int, str], topic: str) -> dict[int, set[int]]:
    """Partition numbers of ``topic`` each broker holds open (its log-dirs answer)."""
    out: dict[int, set[int]] = {}
    for bid, url in brokers.items():
        try:
            body = await admin.http_get(f"{url}/v1/log-dirs", {"topics": topic}, timeout_ms=10_000)
        except (FerryError, aiohttp.ClientError, asyncio.TimeoutError, OSError):
            out[bid] = set()
            continue
        parts = {int(p["partition"].rsplit("-", 1)[1]) for b in body["brokers"] for d in b["logDirs"]
                 for p in d["partitions"] if not p["isFuture"]}
        out[bid] = parts
    return out


async def unsettled_by(admin: Admin, brokers: dict[int, str]) -> dict[int, int]:
    """Each broker's partitions still opening or closing (its ``/v1/health`` counts); a broker that
    does not answer counts as unsettled. A replica listed by log-dirs may still be opening there
    (a slot keeps its replica while it is opened again at a newer epoch), so placement alone is
    not "serving"."""
    out: dict[int, int] = {}
    for bid, url in brokers.items():
        try:
            body = await admin.http_get(f"{url}/v1/health", {}, timeout_ms=10_000)
        except (FerryError, aiohttp.ClientError, asyncio.TimeoutError, OSError):
            out[bid] = -1
            continue
        counts = body.get("partitions") or {}
        out[bid] = int(counts.get("OPENING", 0)) + int(counts.get("CLOSING", 0))
    return out


async def wait_served(admin: Admin, brokers: dict[int, str], topic: str, partitions: Iterable[int],
                      timeout_s: float, targets: dict[int, int] | None = None) -> dict[int, int]:
    """Until every partition is led by one of ``brokers`` (by its target, when ``targets`` names
    one), open there and on no other of them, and none of them has a partition opening or
    closing; returns partition -> leader.

    ``brokers`` are the live ones: a stopped broker is left out (it answers nothing, and would
    count as unsettled). Without targets this is the check after a restart, where the partitions
    of the stopped broker legitimately end on whichever live broker the controller chose."""
    wanted = list(partitions)
    deadline = time.monotonic() + timeout_s
    leaders: dict[int, int] = {}
    while True:
        # a follower's image: polling a large topic on the leader would take its time from the move
        asked = time.monotonic()
        described = (await admin.describe_topics([topic], leader=False)).get(topic)
        # a describe of thousands of partitions is a large answer: poll at most a third of the time,
        # so that the measurement does not load the controllers it measures
        poll_s = max(POLL_INTERVAL_S, 2 * (time.monotonic() - asked))
        leaders = {p.partition: p.leader for p in described} if isinstance(described, list) else {}
        if wanted and all(leaders.get(p) in brokers and (targets is None or leaders[p] == targets[p])
                          for p in wanted):
            held = await served_by(admin, brokers, topic)
            if all(p in held[leaders[p]] and not any(p in held[b] for b in held if b != leaders[p])
                   for p in wanted) and not any((await unsettled_by(admin, brokers)).values()):
                return {p: leaders[p] for p in wanted}
        if time.monotonic() > deadline:
            if targets is not None:
                wrong = sum(1 for p in wanted if leaders.get(p) != targets[p])
                what = "led by their target"
            else:
                wrong = sum(1 for p in wanted if leaders.get(p) not in brokers)
                what = f"led by a live broker (of {sorted(brokers)})"
            raise FerryError(ErrorCode.REQUEST_TIMED_OUT,
                             f"{wrong} of {len(wanted)} partitions of {topic} not {what} and served there after "
                             f"{timeout_s:.0f} s")
        await asyncio.sleep(poll_s)


async def wait_all_at(admin: Admin, brokers: dict[int, str], topic: str, targets: dict[int, int],
                      timeout_s: float) -> float:
    """Seconds until every partition has its target as leader and is open there (and nowhere
    else), and no broker has a partition still opening or closing."""
    started = time.monotonic()
    await wait_served(admin, brokers, topic, targets, timeout_s, targets)
    return time.monotonic() - started


async def produce_keyed(bootstrap: list[str], topic: str, partitions: int, per_partition: int,
                        tag: str) -> Acked:
    """``per_partition`` records to each partition; returns partition -> [(offset, value)] acknowledged."""
    acked: Acked = {p: [] for p in range(partitions)}
    async with Producer(bootstrap, linger_ms=5, delivery_timeout_ms=120_000) as producer:
        futures = []
        for p in range(partitions):
            for i in range(per_partition):
                value = f"{topic}-{p}:{tag}{i}".encode()
                futures.append((p, value, await producer.send(topic, value, key=f"k{i}".encode(), partition=p)))
        for p, value, fut in futures:
            meta = await fut
            acked[p].append((meta.offset, value))
    return acked


async def read_back(bootstrap: list[str], topic: str, partitions: int, acked: list[Acked],
                    timeout_s: float = 300) -> dict[str, int]:
    """Read every partition from its start and count the acknowledged records (of every batch in
    ``acked``) missing, read more than once, or read at another offset than acknowledged."""
    logs = await read_all(bootstrap, [TopicPartition(topic, p) for p in range(partitions)], timeout_s=timeout_s)
    missing = duplicated = misplaced = 0
    for p in range(partitions):
        got = [(r.offset, r.value) for r in logs[TopicPartition(topic, p)]]
        values = Counter(v for _o, v in got)
        by_offset = dict(got)
        for batch in acked:
            for offset, value in batch[p]:
                if values[value] == 0:
                    missing += 1
                elif values[value] > 1:
                    duplicated += 1
                elif by_offset.get(offset) != value:
                    misplaced += 1
    return {"acknowledged": sum(len(v) for batch in acked for v in batch.values()),
            "missing": missing, "duplicated": duplicated, "misplaced": misplaced}
