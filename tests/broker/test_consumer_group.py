"""Consumer-protocol groups (KIP-848) driven without sockets: joins, revocation before
assignment, epochs, fencing, static members, assignors, offsets, and replay of the records."""
from __future__ import annotations

import json
from dataclasses import dataclass, field

import pytest

from broker.groups import GroupCoordinatorConfig, GroupRecordError, JoinProtocol, JoinRequest, OffsetCommitPartition
from broker.groups import OffsetCommitRequest, TopicPartition
from broker.groups.consumer_assignors import AssignorMember, range_assign, uniform_assign
from broker.groups.consumer_coordinator import ConsumerGroupConfig, ConsumerHeartbeat, ConsumerHeartbeatResult, TopicInfo
from broker.groups.consumer_records import (
    AnyGroupRecord,
    decode_any_group_record,
    encode_consumer_record,
)
from broker.groups.partition_coordinator import PartitionCoordinator
from broker.groups.records import encode_group_record
from metadata_quorum.kernel.errors import ErrorCode

G = "orders"
T1 = "AAAAAAAAAAAAAAAAAAAAAQ"
TOPICS = {"t": TopicInfo(T1, 6)}


def _encode(record: AnyGroupRecord) -> tuple[bytes, bytes | None]:
    try:
        return encode_consumer_record(record)  # type: ignore[arg-type]
    except KeyError:
        return encode_group_record(record)  # type: ignore[arg-type]


@dataclass
class Client:
    """A member as its client sees it: the epoch and partitions it was last told."""

    member_id: str
    epoch: int = 0
    owned: dict[str, frozenset[int]] = field(default_factory=dict)


class Harness:
    def __init__(self, config: ConsumerGroupConfig | None = None,
                 group_configs: dict[str, dict[str, str]] | None = None) -> None:
        self.now_ms = 1_000
        self.config = config or ConsumerGroupConfig()
        self.group_configs = group_configs if group_configs is not None else {}
        self.coordinator = PartitionCoordinator(GroupCoordinatorConfig(), self.now_ms, self.config,
                                                lambda g: self.group_configs.get(g, {}))
        self.log: list[tuple[bytes, bytes | None]] = []
        self.topics = dict(TOPICS)
        self.clients: dict[str, Client] = {}

    def _keep(self, records: tuple[AnyGroupRecord, ...]) -> None:
        self.log += [_encode(r) for r in records]

    def send(self, req: ConsumerHeartbeat, new_member_id: str = "generated") -> ConsumerHeartbeatResult:
        effects = self.coordinator.consumer_heartbeat(req, self.topics, new_member_id, self.now_ms)
        self._keep(effects.records)
        return effects.reply

    def join(self, member_id: str, topics: tuple[str, ...] = ("t",), assignor: str | None = None,
             instance_id: str | None = None) -> ConsumerHeartbeatResult:
        reply = self.send(ConsumerHeartbeat(G, member_id, 0, instance_id=instance_id, rebalance_timeout_ms=30_000,
                                            subscribed_topic_names=topics, server_assignor=assignor, owned={}))
        if reply.error is ErrorCode.NONE:
            self.clients[member_id] = Client(member_id)
            self._apply(member_id, reply)
        return reply

    def beat(self, member_id: str) -> ConsumerHeartbeatResult:
        c = self.clients[member_id]
        reply = self.send(ConsumerHeartbeat(G, member_id, c.epoch, owned=dict(c.owned)))
        if reply.error is ErrorCode.NONE:
            self._apply(member_id, reply)
        return reply

    def leave(self, member_id: str) -> ConsumerHeartbeatResult:
        reply = self.send(ConsumerHeartbeat(G, member_id, -1))
        self.clients.pop(member_id)
        return reply

    def _apply(self, member_id: str, reply: ConsumerHeartbeatResult) -> None:
        c = self.clients[member_id]
        c.epoch = reply.member_epoch
        if reply.assignment is not None:
            c.owned = dict(reply.assignment)  # the client revokes what is gone and takes what is new
        self.check_disjoint()

    def check_disjoint(self) -> None:
        """No partition is owned twice: by the coordinator's records of members (assigned or
        pending revocation), nor by clients that are still members. (A client whose session
        expired learns it at its next heartbeat; its partitions are already someone else's.)"""
        group = self.coordinator.consumer_groups.group(G)
        members = set(group.metas) if group is not None else set()
        if group is not None:
            server: dict[tuple[str, int], str] = {}
            for m in group.metas:
                c_ = group.current(m)
                for parts in (c_.assigned, c_.pending_revocation):
                    for t, ps in parts.items():
                        for p in ps:
                            assert (t, p) not in server, f"{t}-{p} is {server[(t, p)]}'s and {m}'s"
                            server[(t, p)] = m
        seen: dict[tuple[str, int], str] = {}
        for c in self.clients.values():
            if c.member_id not in members:
                continue
            for t, ps in c.owned.items():
                for p in ps:
                    assert (t, p) not in seen, f"{t}-{p} owned by {seen[(t, p)]} and {c.member_id}"
                    seen[(t, p)] = c.member_id

    def settle(self, rounds: int = 6) -> None:
        for _ in range(rounds):
            for member_id in sorted(self.clients):
                assert self.beat(member_id).error is ErrorCode.NONE

    def owned_counts(self) -> dict[str, int]:
        return {m: sum(len(ps) for ps in c.owned.values()) for m, c in self.clients.items()}

    def reload(self) -> PartitionCoordinator:
        records = [decode_any_group_record(k, v) for k, v in self.log]
        return PartitionCoordinator.load_partition(records, GroupCoordinatorConfig(), self.now_ms, self.config)


def test_three_members_join_and_every_partition_is_owned_once() -> None:
    h = Harness()
    first = h.join("a")
    assert (first.error, first.member_epoch, first.heartbeat_interval_ms) == (ErrorCode.NONE, 1, 5_000)
    assert first.assignment == {T1: frozenset(range(6))}
    second = h.join("b")
    assert second.member_epoch == 2 and second.assignment == {}  # its partitions are still a's
    desc = h.coordinator.consumer_describe(G)
    assert desc.state == "Reconciling" and desc.group_epoch == 2 and desc.assignment_epoch == 2
    revoking = h.beat("a")
    assert revoking.member_epoch == 1, "a keeps its epoch until it has revoked"
    assert revoking.assignment is not None and len(revoking.assignment[T1]) == 3
    assert h.beat("b").assignment in (None, {}), "b gets nothing while a still owns them"
    assert h.beat("a").member_epoch == 2  # a reports it revoked
    assert len(h.beat("b").assignment[T1]) == 3  # type: ignore[index]
    h.join("c")
    h.settle()
    assert h.owned_counts() == {"a": 2, "b": 2, "c": 2}
    assert {c.epoch for c in h.clients.values()} == {3}
    desc = h.coordinator.consumer_describe(G)
    assert desc.state == "Stable" and desc.assignor == "uniform"
    assert sorted(m.member_id for m in desc.members) == ["a", "b", "c"]


def test_leave_and_session_expiry_hand_partitions_over() -> None:
    h = Harness()
    for m in ("a", "b", "c"):
        h.join(m)
    h.settle()
    assert h.leave("c").member_epoch == -1
    h.settle()
    assert h.owned_counts() == {"a": 3, "b": 3}
    epoch = h.coordinator.consumer_describe(G).group_epoch
    assert epoch == 4
    # b dies: a keeps heartbeating, b's session (45 s) runs out
    h.clients.pop("b")
    for _ in range(8):
        h.now_ms += 5_000
        h.beat("a")
        h._keep(h.coordinator.tick(h.now_ms).records)
    assert h.owned_counts() == {"a": 3}, "not before b's session has expired"
    h.now_ms += 5_000
    h._keep(h.coordinator.tick(h.now_ms).records)
    h.settle()
    assert h.owned_counts() == {"a": 6}
    assert h.coordinator.consumer_describe(G).group_epoch == epoch + 1


def test_a_groups_own_session_timeout_and_heartbeat_interval_are_enforced() -> None:
    """consumer.session.timeout.ms / consumer.heartbeat.interval.ms of the group (KIP-848 group
    configs) replace the coordinator's defaults: the interval members are told, and how long a
    silent member keeps its partitions; a change applies from each member's next heartbeat."""
    h = Harness(group_configs={G: {"consumer.session.timeout.ms": "50000",
                                   "consumer.heartbeat.interval.ms": "7000"}})
    assert h.join("a").heartbeat_interval_ms == 7_000
    h.join("b")
    h.settle()
    assert h.owned_counts() == {"a": 3, "b": 3}
    h.clients.pop("b")  # b dies; a keeps heartbeating
    for _ in range(9):  # 45 s: the default session would have ended, the group's 50 s has not
        h.now_ms += 5_000
        h.beat("a")
        h._keep(h.coordinator.tick(h.now_ms).records)
    assert "b" in h.coordinator.consumer_groups.group(G).metas  # type: ignore[union-attr]
    h.now_ms += 5_000
    h._keep(h.coordinator.tick(h.now_ms).records)
    assert "b" not in h.coordinator.consumer_groups.group(G).metas  # type: ignore[union-attr]
    h.group_configs[G] = {}  # deleted: back to the defaults at the next heartbeat
    assert h.beat("a").heartbeat_interval_ms == 5_000
    other = Harness()
    assert other.join("a").heartbeat_interval_ms == 5_000


def test_fencing_and_epoch_errors() -> None:
    h = Harness()
    h.join("a")
    assert h.send(ConsumerHeartbeat(G, "a", 5, owned={})).error is ErrorCode.FENCED_MEMBER_EPOCH
    assert h.send(ConsumerHeartbeat(G, "zz", 1)).error is ErrorCode.UNKNOWN_MEMBER_ID
    assert h.send(ConsumerHeartbeat("nope", "a", 1)).error is ErrorCode.GROUP_ID_NOT_FOUND
    h.join("b")
    h.settle()
    # a response lost: a member one epoch behind that owns no more than it has is accepted
    stale = h.send(ConsumerHeartbeat(G, "a", 1, owned=dict(h.clients["a"].owned)))
    assert stale.error is ErrorCode.NONE and stale.member_epoch == 2
    assert h.send(ConsumerHeartbeat(G, "a", 1, owned={T1: frozenset(range(6))})).error is \
        ErrorCode.FENCED_MEMBER_EPOCH
    assert h.send(ConsumerHeartbeat(G, "a", 0, rebalance_timeout_ms=1, subscribed_topic_names=("t",),
                                    server_assignor="sticky", owned={})).error is \
        ErrorCode.UNSUPPORTED_ASSIGNOR
    bad = h.send(ConsumerHeartbeat(G, "x", 0, subscribed_topic_names=("t",), owned={}))
    assert bad.error is ErrorCode.INVALID_REQUEST and "RebalanceTimeoutMs" in (bad.message or "")
    assert h.send(ConsumerHeartbeat(G, "", 3)).error is ErrorCode.INVALID_REQUEST
    assert h.coordinator.consumer_describe(G).group_epoch == 2, "refused requests change nothing"


def test_group_max_size_and_static_members() -> None:
    h = Harness(ConsumerGroupConfig(max_size=2))
    h.join("a", instance_id="i-a")
    h.join("b")
    assert h.join("c").error is ErrorCode.GROUP_MAX_SIZE_REACHED
    h.settle()
    owned_by_a = dict(h.clients["a"].owned)
    assert h.join("a2", instance_id="i-a").error is ErrorCode.UNRELEASED_INSTANCE_ID
    epoch = h.coordinator.consumer_describe(G).group_epoch
    left = h.send(ConsumerHeartbeat(G, "a", -2, instance_id="i-a"))
    assert left.member_epoch == -2
    h.clients.pop("a")
    h.settle()
    assert h.coordinator.consumer_describe(G).group_epoch == epoch, "a static member's -2 leave keeps its place"
    assert h.owned_counts() == {"b": 3}
    back = h.join("a2", instance_id="i-a")
    assert back.error is ErrorCode.NONE and back.assignment == owned_by_a
    assert h.coordinator.consumer_describe(G).group_epoch == epoch


def test_revocation_timeout_fences_a_member_that_holds_on() -> None:
    h = Harness()
    h.join("a")
    h.join("b")
    assert h.beat("a").member_epoch == 1  # told to revoke, never does
    h.now_ms += 30_001
    h._keep(h.coordinator.tick(h.now_ms).records)
    assert h.coordinator.consumer_describe(G).members[0].member_id == "b"
    h.clients.pop("a")
    h.settle()
    assert h.owned_counts() == {"b": 6}


def test_range_assignor_and_uniform_stickiness() -> None:
    members = {m: AssignorMember(frozenset({T1}), {}) for m in ("b", "a")}
    assert range_assign(members, {T1: 5}) == {"a": {T1: frozenset({0, 1, 2})}, "b": {T1: frozenset({3, 4})}}
    first = uniform_assign(members, {T1: 6})
    members2 = {m: AssignorMember(frozenset({T1}), first[m]) for m in first}
    members2["c"] = AssignorMember(frozenset({T1}), {})
    second = uniform_assign(members2, {T1: 6})
    assert sorted(len(second[m][T1]) for m in second) == [2, 2, 2]
    assert second["a"][T1] <= first["a"][T1] and second["b"][T1] <= first["b"][T1], "only moves to the new member"
    h = Harness()
    h.join("a", assignor="range")
    h.join("b", assignor="range")
    h.settle()
    assert h.clients["a"].owned == {T1: frozenset({0, 1, 2})}
    assert h.coordinator.consumer_describe(G).assignor == "range"


def test_replay_after_reload_gives_the_same_state() -> None:
    h = Harness()
    for m in ("a", "b", "c"):
        h.join(m)
    h.beat("a")
    h.leave("c")
    h.beat("b")
    h.topics["u"] = TopicInfo("AAAAAAAAAAAAAAAAAAAAAg", 2)
    h.send(ConsumerHeartbeat(G, "b", h.clients["b"].epoch, subscribed_topic_names=("t", "u"),
                             owned=dict(h.clients["b"].owned)))
    before = h.coordinator.consumer_groups.groups
    loaded = h.reload()
    assert loaded.consumer_groups.groups == before
    assert loaded.consumer_describe(G) == h.coordinator.consumer_describe(G)
    # and the loaded coordinator carries on where the old one stopped
    h.coordinator = loaded
    h.settle()
    assert sum(h.owned_counts().values()) == 8


def test_protocols_do_not_mix_and_offsets_follow_member_epochs() -> None:
    h = Harness()
    h.join("a")
    join = JoinRequest(G, "", "consumer", (JoinProtocol("range", b""),), 10_000, 10_000)
    joined = h.coordinator.join(join, "tok", "m-1", h.now_ms)
    assert joined.completed["tok"].error is ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    commit = OffsetCommitRequest(G, (OffsetCommitPartition("t", 0, 42),), "a", 0)
    assert h.coordinator.commit_offsets(commit, h.now_ms).reply.partitions[0].error is \
        ErrorCode.STALE_MEMBER_EPOCH
    ok = h.coordinator.commit_offsets(OffsetCommitRequest(G, (OffsetCommitPartition("t", 0, 42),), "a", 1), h.now_ms)
    assert ok.reply.partitions[0].error is ErrorCode.NONE
    h._keep(ok.records)
    assert h.coordinator.fetch_offsets(G, [TopicPartition("t", 0)]).partitions[0].offset == 42
    assert h.reload().fetch_offsets(G, [TopicPartition("t", 0)]).partitions[0].offset == 42
    listed = h.coordinator.list_all_groups(types=frozenset({"consumer"}))
    assert [(x.group_id, x.group_type, x.state) for x in listed] == [(G, "consumer", "Stable")]
    assert h.coordinator.list_all_groups(types=frozenset({"classic"})) == ()
    assert h.coordinator.delete_groups([G], h.now_ms).reply[0].error is ErrorCode.NON_EMPTY_GROUP
    h.leave("a")
    deleted = h.coordinator.delete_groups([G], h.now_ms)
    assert deleted.reply[0].error is ErrorCode.NONE and h.coordinator.list_all_groups() == ()
    # a classic group with members refuses the consumer protocol
    classic = JoinRequest("classic-g", "", "consumer", (JoinProtocol("range", b""),), 10_000, 10_000,
                          require_known_member_id=False)
    h.coordinator.join(classic, "tok2", "m-2", h.now_ms)
    refused = h.coordinator.consumer_heartbeat(ConsumerHeartbeat("classic-g", "x", 0, rebalance_timeout_ms=1,
                                                                 subscribed_topic_names=("t",), owned={}),
                                               h.topics, "x", h.now_ms)
    assert refused.reply.error is ErrorCode.INCONSISTENT_GROUP_PROTOCOL and not refused.records


def test_records_round_trip_and_decoding_is_strict() -> None:
    h = Harness()
    h.join("a")
    for key, value in h.log:
        record = decode_any_group_record(key, value)
        assert _encode(record) == (key, value)
    key, value = h.log[0]
    assert value is not None
    tampered = json.loads(value)
    tampered["surprise"] = 1
    with pytest.raises(GroupRecordError):
        decode_any_group_record(key, json.dumps(tampered).encode())
    with pytest.raises(GroupRecordError):
        decode_any_group_record(b'{"kind":"consumer_nope","version":1,"group":"g"}', None)


def test_offsets_of_a_group_with_members_do_not_expire_and_an_empty_group_goes_with_its_offsets() -> None:
    h = Harness()
    h.coordinator = PartitionCoordinator(GroupCoordinatorConfig(offsets_retention_ms=60_000,
                                                                offsets_retention_check_interval_ms=10_000),
                                         h.now_ms, h.config)
    h.join("a")
    h._keep(h.coordinator.commit_offsets(OffsetCommitRequest(G, (OffsetCommitPartition("t", 0, 7),), "a", 1),
                                         h.now_ms).records)
    for _ in range(10):  # 100 s of heartbeats, no commit
        h.now_ms += 10_000
        h.beat("a")
        h._keep(h.coordinator.tick(h.now_ms).records)
    assert h.coordinator.fetch_offsets(G, [TopicPartition("t", 0)]).partitions[0].offset == 7
    h.leave("a")
    h.now_ms += 70_000
    h._keep(h.coordinator.tick(h.now_ms).records)
    assert h.coordinator.fetch_offsets(G, [TopicPartition("t", 0)]).partitions[0].offset == -1
    assert h.coordinator.consumer_describe(G).error is ErrorCode.GROUP_ID_NOT_FOUND
    assert h.reload().consumer_describe(G).error is ErrorCode.GROUP_ID_NOT_FOUND


def test_offset_delete_keeps_offsets_of_subscribed_topics() -> None:
    h = Harness()
    h.join("a")
    commit = OffsetCommitRequest(G, (OffsetCommitPartition("t", 0, 5), OffsetCommitPartition("old", 0, 9)), "a", 1)
    h._keep(h.coordinator.commit_offsets(commit, h.now_ms).records)
    result = h.coordinator.delete_offsets(G, [TopicPartition("t", 0), TopicPartition("old", 0)], h.now_ms)
    assert [(r.topic, r.error) for r in result.reply.partitions] == [
        ("t", ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC), ("old", ErrorCode.NONE)]
    h._keep(result.records)
    loaded = h.reload()
    assert [f.offset for f in loaded.fetch_offsets(G, [TopicPartition("t", 0), TopicPartition("old", 0)]).partitions] \
        == [5, -1]


@pytest.mark.parametrize("seed", range(20))
def test_random_joins_leaves_expiries_and_reloads_never_give_a_partition_twice(seed: int) -> None:
    """Seeded random runs: members join (some with another assignor), heartbeat at random,
    change subscriptions, leave, die, and the coordinator is reloaded from its records now and
    then. At every step no partition is owned twice; once the dead are gone and everyone has
    heartbeated enough, the group is Stable, every partition of the subscribed topics is owned,
    and the state replays identically."""
    import random
    rng = random.Random(seed)
    h = Harness()
    h.topics["u"] = TopicInfo("AAAAAAAAAAAAAAAAAAAAAg", 3)
    next_id = 0

    def beat(m: str) -> None:
        if h.beat(m).error is not ErrorCode.NONE:
            h.clients.pop(m)  # fenced or expired: this client is gone (a new one would rejoin)
    for _ in range(150):
        action = rng.random()
        live = sorted(h.clients)
        if action < 0.15 and len(live) < 5:
            next_id += 1
            h.join(f"m{next_id}", topics=rng.choice([("t",), ("t", "u"), ("u",)]),
                   assignor=rng.choice([None, "uniform", "range"]))
        elif action < 0.2 and live:
            h.leave(rng.choice(live))
        elif action < 0.25 and live:
            h.clients.pop(rng.choice(live))  # dies: its session will expire
        elif action < 0.3:
            h.coordinator = h.reload()
        elif action < 0.35 and live:
            m = rng.choice(live)
            c = h.clients[m]
            reply = h.send(ConsumerHeartbeat(G, m, c.epoch, subscribed_topic_names=rng.choice([("t",), ("t", "u")]),
                                             owned=dict(c.owned)))
            if reply.error is ErrorCode.NONE:
                h._apply(m, reply)
        for m in sorted(h.clients):
            if rng.random() < 0.5:
                beat(m)
        h.now_ms += rng.choice([100, 1_000, 3_000])
        h._keep(h.coordinator.tick(h.now_ms).records)
        h.check_disjoint()
    h.join("last", topics=("t", "u"))
    for _ in range(12):  # the dead's sessions end while the living heartbeat every 5 s
        for m in sorted(h.clients):
            beat(m)
        h.now_ms += 5_000
        h._keep(h.coordinator.tick(h.now_ms).records)
        h.check_disjoint()
    desc = h.coordinator.consumer_describe(G)
    assert sorted(m.member_id for m in desc.members) == sorted(h.clients)
    h.settle(rounds=8)
    desc = h.coordinator.consumer_describe(G)
    assert desc.state == "Stable"
    subscribed = {t for m in desc.members for t in m.subscribed_topic_names}
    assert sum(h.owned_counts().values()) == sum(h.topics[t].partitions for t in subscribed)
    assert h.reload().consumer_groups.groups == h.coordinator.consumer_groups.groups


def test_regex_subscription_follows_the_topics() -> None:
    h = Harness()
    bad = h.send(ConsumerHeartbeat(G, "a", 0, rebalance_timeout_ms=1_000, subscribed_topic_regex="(", owned={}))
    assert bad.error is ErrorCode.INVALID_REQUEST and h.coordinator.consumer_describe(G).error is \
        ErrorCode.GROUP_ID_NOT_FOUND
    joined = h.send(ConsumerHeartbeat(G, "a", 0, rebalance_timeout_ms=1_000, subscribed_topic_regex="t.*", owned={}))
    assert joined.assignment == {T1: frozenset(range(6))}
    h.clients["a"] = Client("a", joined.member_epoch, dict(joined.assignment))
    h.topics["tx"] = TopicInfo("AAAAAAAAAAAAAAAAAAAAAw", 2)  # a new matching topic bumps the epoch
    h.topics["other"] = TopicInfo("AAAAAAAAAAAAAAAAAAAAAA", 2)
    grown = h.beat("a")
    assert grown.member_epoch == 2 and grown.assignment == {T1: frozenset(range(6)),
                                                            "AAAAAAAAAAAAAAAAAAAAAw": frozenset({0, 1})}


def test_a_static_member_that_does_not_come_back_is_removed_at_its_session_end() -> None:
    h = Harness()
    h.join("a", instance_id="i-a")
    h.join("b")
    h.settle()
    epoch = h.coordinator.consumer_describe(G).group_epoch
    h.clients.pop("a")
    assert h.send(ConsumerHeartbeat(G, "a", -2, instance_id="i-a")).member_epoch == -2
    for _ in range(8):  # 40 s: a's partitions wait for it
        h.now_ms += 5_000
        h.beat("b")
        h._keep(h.coordinator.tick(h.now_ms).records)
    assert h.owned_counts() == {"b": 3} and h.coordinator.consumer_describe(G).group_epoch == epoch
    h.now_ms += 6_000
    h._keep(h.coordinator.tick(h.now_ms).records)
    h.settle()
    assert h.owned_counts() == {"b": 6} and h.coordinator.consumer_describe(G).group_epoch == epoch + 1
