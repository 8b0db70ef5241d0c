"""Server-side assignors of consumer-protocol groups (KIP-848), named as Kafka's.

An assignor maps the members' subscriptions (topic ids) and the topics' partition counts to a
target assignment. It is a pure function of its inputs, so every coordinator that replays the
same records computes the same target.

- ``uniform`` (Kafka's default): as few moves as possible from the previous target, then
  balanced: every partition goes to a subscribed member, and no partition can move to a member
  subscribed to it that has two or more fewer partitions.
- ``range``: per topic, the subscribed members in member-id order each get a contiguous range,
  the first ``partitions % members`` one more (co-partitioned topics get aligned ranges).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from broker.groups.consumer_records import Partitions, normalize

UNIFORM = "uniform"
RANGE = "range"


@dataclass(frozen=True)
class AssignorMember:
    """What an assignor knows of a member: the topic ids it subscribes to, and its previous target."""

    subscribed_topic_ids: frozenset[str]
    previous: Partitions


Assignor = Callable[[Mapping[str, AssignorMember], Mapping[str, int]], dict[str, dict[str, frozenset[int]]]]


def uniform_assign(members: Mapping[str, AssignorMember], topics: Mapping[str, int]) -> dict[str, dict[str, frozenset[int]]]:
    owned: dict[str, set[tuple[str, int]]] = {m: set() for m in sorted(members)}
    taken: set[tuple[str, int]] = set()
    for m in sorted(members):
        sub = members[m].subscribed_topic_ids
        for topic_id, parts in sorted(members[m].previous.items()):
            if topic_id not in sub or topic_id not in topics:
                continue
            for p in sorted(parts):
                if p < topics[topic_id] and (topic_id, p) not in taken:
                    taken.add((topic_id, p))
                    owned[m].add((topic_id, p))
    subscribers: dict[str, list[str]] = {}
    for m in sorted(members):
        for topic_id in members[m].subscribed_topic_ids:
            if topic_id in topics:
                subscribers.setdefault(topic_id, []).append(m)
    for topic_id in sorted(subscribers):
        for p in range(topics[topic_id]):
            if (topic_id, p) not in taken:
                receiver = min(subscribers[topic_id], key=lambda x: (len(owned[x]), x))
                owned[receiver].add((topic_id, p))
                taken.add((topic_id, p))
    _balance(owned, members)
    return {m: normalize(_group(tps)) for m, tps in owned.items()}


def _balance(owned: dict[str, set[tuple[str, int]]], members: Mapping[str, AssignorMember]) -> None:
    """Move one partition at a time from the most loaded member to a member subscribed to it
    with two or more fewer, until none can move; each move narrows the spread, so it ends."""
    while True:
        moved = False
        for donor in sorted(owned, key=lambda x: (-len(owned[x]), x)):
            for tp in sorted(owned[donor], reverse=True):
                candidates = [m for m in owned if tp[0] in members[m].subscribed_topic_ids
                              and len(owned[donor]) - len(owned[m]) > 1]
                if candidates:
                    receiver = min(candidates, key=lambda x: (len(owned[x]), x))
                    owned[donor].discard(tp)
                    owned[receiver].add(tp)
                    moved = True
                    break
            if moved:
                break
        if not moved:
            return


def range_assign(members: Mapping[str, AssignorMember], topics: Mapping[str, int]) -> dict[str, dict[str, frozenset[int]]]:
    out: dict[str, dict[str, set[int]]] = {m: {} for m in members}
    for topic_id in sorted(topics):
        subs = sorted(m for m in members if topic_id in members[m].subscribed_topic_ids)
        if not subs:
            continue
        n = topics[topic_id]
        base, extra = divmod(n, len(subs))
        start = 0
        for i, m in enumerate(subs):
            count = base + (1 if i < extra else 0)
            if count:
                out[m][topic_id] = set(range(start, start + count))
            start += count
    return {m: normalize(parts) for m, parts in out.items()}


def _group(tps: set[tuple[str, int]]) -> dict[str, set[int]]:
    by_topic: dict[str, set[int]] = {}
    for topic_id, p in tps:
        by_topic.setdefault(topic_id, set()).add(p)
    return by_topic


ASSIGNORS: dict[str, Assignor] = {UNIFORM: uniform_assign, RANGE: range_assign}
