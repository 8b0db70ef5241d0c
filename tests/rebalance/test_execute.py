"""Following a submitted plan to completion, against an in-process stand-in for the admin client."""
from __future__ import annotations

from dataclasses import dataclass

import pytest

from metadata_quorum.kernel.errors import ErrorCode, FerryError
from tools.client import TopicPartition
from tools.rebalance.execute import execute_plan
from tools.rebalance.model import Move


@dataclass
class Part:
    partition: int
    leader: int


class MovingAdmin:
    """Accepts reassignments (refusing partitions of `bad`) and moves a leader after `polls` reads."""

    def __init__(self, leaders: dict[tuple[str, int], int], polls: int, bad: set[tuple[str, int]] = frozenset()):
        self.leaders = dict(leaders)
        self.polls = polls
        self.bad = bad
        self.submitted: list[dict] = []
        self.pending: dict[tuple[str, int], int] = {}

    async def pre_upload(self, partitions_by_broker):
        assert not self.submitted, "the old owners upload before the moves are submitted"
        self.pre_uploaded = partitions_by_broker
        return sum(len(v) for v in partitions_by_broker.values())

    async def alter_partition_reassignments(self, items):
        self.submitted += items
        out = {}
        for item in items:
            key = (item["topic"], item["partition"])
            tp = TopicPartition(*key)
            if key in self.bad:
                out[tp] = FerryError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{tp} does not exist")
            else:
                out[tp] = None
                self.pending[key] = item["replicas"][0]
        return out

    async def describe_topics(self, names):
        self.polls -= 1
        if self.polls <= 0:
            self.leaders.update(self.pending)
        return {name: [Part(p, leader) for (t, p), leader in sorted(self.leaders.items()) if t == name]
                for name in names}


async def test_follows_every_accepted_move_to_its_new_leader_and_reports_refusals():
    admin = MovingAdmin({("a", 0): 1, ("a", 1): 1, ("b", 0): 2}, polls=3, bad={("b", 0)})
    moves = [Move("a", 0, 1, 2), Move("a", 1, 1, 3), Move("b", 0, 2, 1)]
    result = await execute_plan(admin, moves, timeout_ms=10_000, poll_interval_ms=1, show_progress=True)
    assert (result.submitted, result.completed) == (2, 2)
    assert list(result.rejected) == ["b-0"] and "does not exist" in result.rejected["b-0"]
    assert admin.leaders[("a", 0)] == 2 and admin.leaders[("a", 1)] == 3
    assert [i["replicas"] for i in admin.submitted] == [[2], [3], [1]]
    assert admin.pre_uploaded == {1: [("a", 0), ("a", 1)], 2: [("b", 0)]}  # per old owner, before submitting


async def test_gives_up_after_the_timeout_naming_the_partitions_left():
    admin = MovingAdmin({("a", 0): 1}, polls=10**9)
    with pytest.raises(FerryError) as err:
        await execute_plan(admin, [Move("a", 0, 1, 2)], timeout_ms=50, poll_interval_ms=5, show_progress=False)
    assert err.value.error is ErrorCode.REQUEST_TIMED_OUT and "1 of 1 moves not finished" in err.value.message
    assert "a-0" in err.value.message
