"""Operations over many independent partitions, run by the controller as bounded slices.

An operation runs on the controller's event loop from start to end: a reassignment of 10,000
partitions was ~0.3 s of it (the operation and its records' replay), during which no heartbeat
was read. Kafka's AlterPartitionReassignments and ElectLeaders answer each partition on its own
(one may fail while others proceed), so nothing is lost by running them in pieces: the core
queues one operation per ``SLICE_ITEMS`` items, each its own atomic batch, heartbeats may run
between them, and the caller gets one reply, the pieces' replies joined in order.

Creating a topic stays one operation (its partitions appear together, as in Kafka); tools split
a creation above ``max_partitions_per_request`` into a creation and CreatePartitions requests.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from metadata_quorum.kernel import messages as ops

#: items (partitions) one slice of an operation carries, at most: ~20 ms of the loop for a reassignment
SLICE_ITEMS = 1000


@dataclass(frozen=True)
class Sliceable:
    """Which list of an operation's arguments may be cut, and which list of its reply joins."""

    args_list: str
    reply_list: str


SLICEABLE: dict[str, Sliceable] = {
    ops.ALTER_PARTITION_REASSIGNMENTS.name: Sliceable("reassignments", "responses"),
}


def split(name: str, args: dict[str, Any], max_items: int = SLICE_ITEMS) -> list[dict[str, Any]] | None:
    """The pieces ``args`` runs as, or None when it runs whole (not sliceable, or small enough)."""
    rule = SLICEABLE.get(name)
    if rule is None:
        return None
    items = args.get(rule.args_list)
    if not isinstance(items, list) or len(items) <= max_items:
        return None
    return [{**args, rule.args_list: items[start:start + max_items]} for start in range(0, len(items), max_items)]


def join(name: str, replies: list[dict[str, Any]]) -> dict[str, Any]:
    """One reply from the pieces' replies, in the order of the pieces."""
    rule = SLICEABLE[name]
    joined: list[Any] = []
    for reply in replies:
        joined.extend(reply.get(rule.reply_list, []))
    return {**replies[0], rule.reply_list: joined} if replies else {rule.reply_list: joined}
