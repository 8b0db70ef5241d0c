"""Submit a plan to the controllers and follow it to completion (``ferry rebalance --execute``).

The plan goes to ``alter_partition_reassignments`` in batches; then the partitions' leaders are
polled until each moved partition is led by its target broker, with a progress bar. Ferry's
partitions live on S3, so each move finishes in well under a second; the whole plan's time is
bounded by ``timeout_ms`` all the same.
"""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Sequence

from metadata_quorum.kernel.errors import ErrorCode, FerryError
from tools.rebalance.model import Move

SUBMIT_BATCH = 500


@dataclass
class ExecuteResult:
    submitted: int
    completed: int
    rejected: dict[str, str] = field(default_factory=dict)  # "topic-partition" -> error message
    elapsed_s: float = 0.0


async def live_brokers(admin: object) -> list[int]:
    """Registered, unfenced brokers (the ones a plan may target)."""
    brokers = await admin.describe_cluster()  # type: ignore[attr-defined]
    return sorted(b for b, info in brokers.items() if not info.fenced)


async def execute_plan(admin: object, moves: Sequence[Move], timeout_ms: int = 120_000,
                       poll_interval_ms: int = 200, show_progress: bool = True,
                       pre_upload: bool = True) -> ExecuteResult:
    """``pre_upload``: first ask each old owner to upload the moving partitions' buffered bytes
    while they serve (``Admin.pre_upload``, broker/pre_upload.py), so that each close uploads only
    what arrived since (the produce stall of a hot partition's move is mostly that upload)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    started = time.monotonic()
    if pre_upload and moves and hasattr(admin, "pre_upload"):
        by_broker: dict[int, list[tuple[str, int]]] = {}
        for m in moves:
            by_broker.setdefault(m.from_broker, []).append((m.topic, m.partition))
        await admin.pre_upload(by_broker)
    rejected: dict[str, str] = {}
    pending: dict[tuple[str, int], int] = {}
    for start in range(0, len(moves), SUBMIT_BATCH):
        batch = moves[start:start + SUBMIT_BATCH]
        answer = await admin.alter_partition_reassignments(  # type: ignore[attr-defined]
            [{"topic": m.topic, "partition": m.partition, "replicas": [m.to_broker]} for m in batch])
        for m in batch:
            err = next((e for tp, e in answer.items() if tp.topic == m.topic and tp.partition == m.partition), None)
            if err is not None:
                rejected[f"{m.topic}-{m.partition}"] = str(err)
            else:
                pending[(m.topic, m.partition)] = m.to_broker
    submitted = len(pending)
    deadline = started + timeout_ms / 1000.0
    with Progress(TextColumn("moving partitions"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  disable=not show_progress) as progress:
        task = progress.add_task("moves", total=submitted)
        while pending:
            topics = await admin.describe_topics(sorted({t for t, _p in pending}))  # type: ignore[attr-defined]
            for topic, parts in topics.items():
                if isinstance(parts, FerryError):
                    continue
                for p in parts:
                    target = pending.get((topic, p.partition))
                    if target is not None and p.leader == target:
                        del pending[(topic, p.partition)]
            progress.update(task, completed=submitted - len(pending))
            if not pending:
                break
            if time.monotonic() > deadline:
                left = ", ".join(f"{t}-{p}" for t, p in sorted(pending)[:10])
                raise FerryError(ErrorCode.REQUEST_TIMED_OUT,
                                 f"{len(pending)} of {submitted} moves not finished after {timeout_ms} ms "
                                 f"(first: {left}); check with `ferry reassign-partitions --list`")
            await asyncio.sleep(poll_interval_ms / 1000.0)
    return ExecuteResult(submitted, submitted - len(pending), rejected, time.monotonic() - started)
