"""Admin.describe_topics asks in pages and puts a topic cut between pages back together."""
from __future__ import annotations

from typing import Any

import pytest

import tools.admin as admin_module
from metadata_quorum.operations import READ_OPERATIONS
from tests.quorum.quorum_helpers import controller
from tools.admin import Admin


class ImageReads:
    """Reads answered by the production read operations on an in-process image."""

    def __init__(self) -> None:
        self.c = controller(3)
        self.c.write("create_topics", {"topics": [{"name": "big", "num_partitions": 23},
                                                  {"name": "small", "num_partitions": 2}]})
        self.asked: list[dict[str, Any]] = []

    async def read(self, op: str, args: dict[str, Any], *, leader: bool = True) -> Any:
        self.asked.append(dict(args))
        return READ_OPERATIONS[op](self.c.image, args)

    async def write(self, op: str, args: dict[str, Any]) -> Any:
        raise AssertionError(op)


@pytest.mark.asyncio
async def test_describe_topics_pages_and_merges(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(admin_module, "DESCRIBE_PAGE_PARTITIONS", 5)
    reads = ImageReads()
    admin = Admin(bootstrap_controllers="127.0.0.1:1", controller=reads)
    for leader in (True, False):
        reads.asked.clear()
        got = await admin.describe_topics(["small", "big", "nope"], leader=leader)
        assert [p.partition for p in got["big"]] == list(range(23))  # type: ignore[union-attr]
        assert [p.partition for p in got["small"]] == [0, 1]  # type: ignore[union-attr]
        assert getattr(got["nope"], "error", None) is not None
        assert len(reads.asked) == 5 and all(a["partition_limit"] == 5 for a in reads.asked)
        assert reads.asked[1]["cursor"] == {"name": "big", "partition": 3}
    everything = await admin.describe_topics()
    assert sorted(everything) == ["big", "small"] and len(everything["big"]) == 23  # type: ignore[arg-type]


class ReassignWrites(ImageReads):
    async def write(self, op: str, args: dict[str, Any]) -> Any:
        assert op == "alter_partition_reassignments"
        self.asked.append(dict(args))
        return {"responses": [{"topic": r["topic"], "partition": r["partition"],
                               **({"error": "UNKNOWN_TOPIC_OR_PARTITION", "message": "no"} if r["topic"] == "nope" else {})}
                              for r in args["reassignments"]]}


@pytest.mark.asyncio
async def test_reassignments_go_in_pieces_and_every_answer_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(admin_module, "REASSIGN_REQUEST_PARTITIONS", 4)
    writes = ReassignWrites()
    admin = Admin(bootstrap_controllers="127.0.0.1:1", controller=writes)
    asked = [{"topic": "big", "partition": p, "replicas": [1]} for p in range(9)] + \
        [{"topic": "nope", "partition": 0, "replicas": [1]}]
    result = await admin.alter_partition_reassignments(asked)  # type: ignore[arg-type]
    assert [len(a["reassignments"]) for a in writes.asked] == [4, 4, 2]
    assert len(result) == 10 and sum(e is not None for e in result.values()) == 1
