"""A synthetic cluster for the console's benchmark: N partitions, and moves at a fixed rate.

It answers :meth:`observe` as the live source does, from a seeded random walk: each call moves
``moves_per_s`` × (time since the last call) partitions to another broker, each with a six-step
timeline that completed at a random moment since the last call, and advances produce counters. The clock is injected
(``now_ms``) so the tests drive it without sleeping.
"""
from __future__ import annotations

import random
import time
from typing import Any, Callable

from tools.client import TopicPartition
from tools.console.model import JsonDict, MetricsSample, Observation
from metadata_quorum.kernel.errors import ErrorCode, FerryError


class SyntheticSource:
    def __init__(self, partitions: int = 10_000, topics: int = 10, brokers: int = 6, moves_per_s: float = 100.0,
                 seed: int = 1, now_ms: Callable[[], int] | None = None) -> None:
        if partitions < topics or topics < 1 or brokers < 2:
            raise ValueError("need at least one partition per topic, one topic and two brokers")
        self.rng = random.Random(seed)
        self.now_ms = now_ms or (lambda: int(time.time() * 1000))
        self.brokers = list(range(1, brokers + 1))
        self.moves_per_s = moves_per_s
        per_topic = partitions // topics
        sizes = [per_topic + (1 if t < partitions % topics else 0) for t in range(topics)]
        self.leaders: dict[str, list[int]] = {
            f"topic-{t:02d}": [self.brokers[(t + p) % brokers] for p in range(n)] for t, n in enumerate(sizes)}
        self.moves: dict[int, list[JsonDict]] = {b: [] for b in self.brokers}
        self.counters: dict[int, list[float]] = {b: [0.0, 0.0, 0.0, 0.0] for b in self.brokers}
        self.last_ms = self.now_ms()
        self._debt = 0.0
        self._move_id = self.last_ms

    def _one_move(self, at_ms: int) -> None:
        topic = self.rng.choice(list(self.leaders))
        p = self.rng.randrange(len(self.leaders[topic]))
        src = self.leaders[topic][p]
        dst = self.rng.choice([b for b in self.brokers if b != src])
        self.leaders[topic][p] = dst
        steps = [self.rng.randint(1, 4), self.rng.randint(0, 2), self.rng.randint(1, 4),
                 self.rng.randint(8, 30), self.rng.randint(1, 6), self.rng.randint(2, 12)]
        total = sum(steps)
        self._move_id = max(self._move_id + 1, at_ms - total)
        t = [at_ms - total]
        for s in steps:
            t.append(t[-1] + s)
        move = {"topic": topic, "partition": p, "from_broker": src, "to_broker": dst, "move_id": self._move_id,
                "complete": True, "clean": True, "t_ms": {f"t{i}": v for i, v in enumerate(t)},
                "steps_ms": {str(i + 1): s for i, s in enumerate(steps)}, "total_ms": total}
        for b in (src, dst):
            self.moves[b] = [move, *self.moves[b][:19]]

    async def observe(self) -> Observation:
        now = self.now_ms()
        self._debt += self.moves_per_s * max(now - self.last_ms, 0) / 1000
        done = sorted(self.rng.randint(min(self.last_ms + 1, now), now) for _ in range(int(self._debt)))
        for at_ms in done:  # each completed at a moment since the last poll, as a live cluster's would
            self._one_move(at_ms)
            self._debt -= 1
        dt_s = max(now - self.last_ms, 0) / 1000
        self.last_ms = now
        led = {b: 0 for b in self.brokers}
        for leaders in self.leaders.values():
            for b in leaders:
                led[b] += 1
        for b, c in self.counters.items():
            records = led[b] * 2.0 * dt_s
            c[0] += records
            c[1] += records * 100
            c[2] += records / 10 + 1
            c[3] += (records / 10 + 1) * 0.002
        health: dict[int, JsonDict | None] = {
            b: {"state": "RUNNING", "fenced": False, "partitions": {"SERVING": led[b]}} for b in self.brokers}
        controllers: dict[int, JsonDict | None] = {
            n: {"node_id": n, "is_leader": n == 1, "term": 3, "high_watermark": now // 10, "image_offset": now // 10 - 1,
                "queue_depth": 0, "loop_lag_max_ms": 1.0} for n in (1, 2, 3)}
        return Observation(
            at_ms=now,
            brokers={b: {"fenced": False, "endpoints": [], "rack": None} for b in self.brokers},
            broker_health=health,
            partitions={t: [(p, ld, [ld]) for p, ld in enumerate(ls)] for t, ls in self.leaders.items()},
            moves={b: list(ms) for b, ms in self.moves.items()},
            metrics={b: MetricsSample(now, c[0], c[1], c[2], c[3], c[2]) for b, c in self.counters.items()},
            controllers=controllers,
        )

    async def move(self, tp: TopicPartition, replicas: list[int]) -> None:
        leaders = self.leaders.get(tp.topic)
        if leaders is None or not 0 <= tp.partition < len(leaders):
            raise FerryError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{tp} does not exist")
        unknown = [r for r in replicas if r not in self.brokers]
        if unknown:
            raise FerryError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"no such broker: {unknown[0]}")
        leaders[tp.partition] = replicas[0]

    async def execute_plan(self, plan_json: str) -> list[str]:
        from tools.reassign_cmd import CommandError, parse_reassignment_json, validate_execute

        try:
            parts = validate_execute(parse_reassignment_json(plan_json))
        except CommandError as exc:
            raise FerryError(exc.error, str(exc)) from None
        for tp, replicas in parts.items():
            await self.move(tp, replicas)
        return [f"Successfully started partition reassignments for {','.join(str(tp) for tp in sorted(parts))}"]


def describe(source: SyntheticSource) -> dict[str, Any]:
    return {"partitions": sum(len(ls) for ls in source.leaders.values()), "topics": len(source.leaders),
            "brokers": len(source.brokers), "moves_per_s": source.moves_per_s}
