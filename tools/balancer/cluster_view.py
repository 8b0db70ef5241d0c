"""The balancer's view of a cluster through the admin client (the ClusterView of loop.py)."""
from __future__ import annotations

from typing import Sequence

from metadata_quorum.kernel.errors import FerryError
from tools.admin import Admin
from tools.rebalance.execute import execute_plan
from tools.rebalance.execute import live_brokers as _live_brokers
from tools.rebalance.model import Move


class AdminView:
    def __init__(self, admin: Admin) -> None:
        self.admin = admin

    async def live_brokers(self) -> list[int]:
        return await _live_brokers(self.admin)

    async def leaders(self, topics: Sequence[str]) -> dict[tuple[str, int], int]:
        out: dict[tuple[str, int], int] = {}
        if not topics:
            return out
        for topic, parts in (await self.admin.describe_topics(list(topics))).items():
            if isinstance(parts, FerryError):
                continue
            for p in parts:
                out[(topic, p.partition)] = p.leader
        return out

    async def execute(self, moves: Sequence[Move], timeout_ms: int) -> tuple[int, int, dict[str, str]]:
        result = await execute_plan(self.admin, moves, timeout_ms=timeout_ms, show_progress=False)
        return result.submitted, result.completed, result.rejected
