"""One consumer-protocol group (KIP-848) and the reconciliation of one member toward its target.

The group is plain data rebuilt from its records: the group epoch with the subscribed topics'
metadata, each member's subscription, each member's target assignment with the target's epoch,
and each member's current assignment (epoch, state, owned partitions, partitions pending
revocation). Any order of those records replays to the same group, because compaction of
``__consumer_offsets`` may reorder records of different keys.

:func:`reconcile` is Kafka's CurrentAssignmentBuilder: a member moves to the target epoch only
once it has given up every partition the target takes from it (it stays at its epoch with its
revocations pending meanwhile), and it is handed a partition only once no other member still
owns it (assigned or pending revocation); until then it waits in ``unreleased_partitions``.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from broker.groups.consumer_records import (
    ConsumerMemberValue,
    CurrentAssignmentValue,
    Partitions,
    SubscribedTopic,
    normalize,
)

STABLE = "stable"
UNREVOKED_PARTITIONS = "unrevoked_partitions"
UNRELEASED_PARTITIONS = "unreleased_partitions"
MEMBER_STATES = frozenset({STABLE, UNREVOKED_PARTITIONS, UNRELEASED_PARTITIONS})

JOIN_EPOCH = 0
LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2
NO_PREVIOUS_EPOCH = -1

NEW_MEMBER = CurrentAssignmentValue(JOIN_EPOCH, NO_PREVIOUS_EPOCH, STABLE, {}, {})

# Kafka's ConsumerGroupState names, as ConsumerGroupDescribe and ListGroups report them
EMPTY = "Empty"
ASSIGNING = "Assigning"
RECONCILING = "Reconciling"
STABLE_GROUP = "Stable"
DEAD = "Dead"
GROUP_STATES = frozenset({EMPTY, ASSIGNING, RECONCILING, STABLE_GROUP, DEAD})


@dataclass
class ConsumerGroup:
    group_id: str
    epoch: int = 0
    topics: Mapping[str, SubscribedTopic] = field(default_factory=dict)
    assignment_epoch: int = 0
    metas: dict[str, ConsumerMemberValue] = field(default_factory=dict)
    currents: dict[str, CurrentAssignmentValue] = field(default_factory=dict)
    targets: dict[str, Partitions] = field(default_factory=dict)

    def current(self, member_id: str) -> CurrentAssignmentValue:
        return self.currents.get(member_id, NEW_MEMBER)

    def target(self, member_id: str) -> Partitions:
        return self.targets.get(member_id, {})

    def static_member(self, instance_id: str) -> str | None:
        for member_id, meta in self.metas.items():
            if meta.instance_id == instance_id:
                return member_id
        return None

    def state(self) -> str:
        if not self.metas:
            return EMPTY
        if self.epoch != self.assignment_epoch:
            return ASSIGNING
        for member_id in self.metas:
            c = self.current(member_id)
            if c.member_epoch != self.assignment_epoch or c.state != STABLE:
                return RECONCILING
        return STABLE_GROUP

    def owners(self, excluding: str) -> dict[tuple[str, int], str]:
        """Who owns each partition now (assigned or still pending revocation), but ``excluding``."""
        owned: dict[tuple[str, int], str] = {}
        for member_id in self.metas:
            if member_id == excluding:
                continue
            c = self.current(member_id)
            for parts in (c.assigned, c.pending_revocation):
                for topic_id, ps in parts.items():
                    for p in ps:
                        owned[(topic_id, p)] = member_id
        return owned


def owns_any(owned: Partitions | None, partitions: Partitions) -> bool:
    """Whether the member still owns one of ``partitions``; unknown (``None``) counts as yes."""
    if owned is None:
        return bool(partitions)
    return any(owned.get(t, frozenset()) & ps for t, ps in partitions.items())


def is_subset(owned: Partitions, of: Partitions) -> bool:
    return all(ps <= of.get(t, frozenset()) for t, ps in owned.items())


def reconcile(current: CurrentAssignmentValue, target_epoch: int, target: Partitions, owned: Partitions | None,
              owners: Mapping[tuple[str, int], str]) -> CurrentAssignmentValue:
    """The member's next current assignment. ``owned`` is what the member reports owning in this
    heartbeat (``None`` when it did not say)."""
    if current.member_epoch < 0:
        return current
    if current.state == UNREVOKED_PARTITIONS:
        if owns_any(owned, current.pending_revocation):
            return current
        current = _next(current, target_epoch, target, owners)
        if current.state == UNREVOKED_PARTITIONS and not owns_any(owned, current.pending_revocation):
            return _next(replace(current, pending_revocation={}, state=STABLE), target_epoch, target, owners)
        return current
    if current.state == UNRELEASED_PARTITIONS or current.member_epoch != target_epoch:
        nxt = _next(current, target_epoch, target, owners)
        if nxt.state == UNREVOKED_PARTITIONS and owned is not None and not owns_any(owned, nxt.pending_revocation):
            # it already gave them up (e.g. it left them before rejoining): go straight on
            return _next(replace(nxt, pending_revocation={}, state=STABLE), target_epoch, target, owners)
        return nxt
    return current


def _next(current: CurrentAssignmentValue, target_epoch: int, target: Partitions,
          owners: Mapping[tuple[str, int], str]) -> CurrentAssignmentValue:
    kept: dict[str, frozenset[int]] = {}
    grown: dict[str, frozenset[int]] = {}
    revoke: dict[str, frozenset[int]] = {}
    unreleased = False
    for topic_id in sorted(set(current.assigned) | set(target)):
        cur = current.assigned.get(topic_id, frozenset())
        tgt = target.get(topic_id, frozenset())
        kept[topic_id] = cur & tgt
        revoke[topic_id] = cur - tgt
        free = frozenset(p for p in tgt - cur if (topic_id, p) not in owners)
        unreleased = unreleased or len(free) < len(tgt - cur)
        grown[topic_id] = kept[topic_id] | free
    if any(revoke.values()):
        # revocation first: the member keeps its epoch and gets nothing new until it has let go
        return CurrentAssignmentValue(current.member_epoch, current.previous_member_epoch, UNREVOKED_PARTITIONS,
                                      normalize(kept), normalize(revoke))
    previous = current.member_epoch if current.member_epoch != target_epoch else current.previous_member_epoch
    return CurrentAssignmentValue(target_epoch, previous, UNRELEASED_PARTITIONS if unreleased else STABLE,
                                  normalize(grown), {})
