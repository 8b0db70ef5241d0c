"""The classic group coordinator, driven with a manual clock, and its record format."""
from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from broker.groups import (
    DescribedGroup,
    Effects,
    GroupCoordinator,
    GroupCoordinatorConfig,
    GroupMemberValue,
    GroupMetadataRecord,
    GroupMetadataValue,
    GroupRecord,
    GroupRecordError,
    GroupState,
    HeartbeatRequest,
    JoinProtocol,
    JoinRequest,
    JoinResult,
    LeaveMember,
    LeaveRequest,
    OffsetCommitPartition,
    OffsetCommitRecord,
    OffsetCommitRequest,
    OffsetDeleteResult,
    OffsetValue,
    SyncRequest,
    SyncResult,
    TopicPartition,
    decode_group_record,
    encode_group_record,
    java_string_hashcode,
    kafka_abs,
    kafka_member_id,
    partition_for_group,
)
from broker.groups.timers import DeadlineQueue
from metadata_quorum.kernel.errors import ErrorCode

E = ErrorCode
DELAY_MS = 100
SETTLE_MS = 2 * DELAY_MS  # the initial delay, extended once because more members arrived within it
SESSION_MS = 10_000
REBALANCE_MS = 30_000
CONFIG = GroupCoordinatorConfig(group_initial_rebalance_delay_ms=DELAY_MS, group_min_session_timeout_ms=1_000)
RANGE = (JoinProtocol("range", b"sub-a"),)


class Shell:
    """What the listener does around the coordinator: owns the clock, appends records to a log
    (as bytes, as they would be stored), and collects answers to parked requests by token."""

    def __init__(self, config: GroupCoordinatorConfig = CONFIG, now_ms: int = 1_000) -> None:
        self.config = config
        self.now_ms = now_ms
        self.coordinator = GroupCoordinator(config, now_ms)
        self.log: list[tuple[bytes, bytes | None]] = []
        self.answers: dict[Any, JoinResult | SyncResult] = {}
        self._ids = 0

    def _apply(self, effects: Effects[Any]) -> Effects[Any]:
        for record in effects.records:
            self.log.append(encode_group_record(record))
        for token, result in effects.completed.items():
            assert token not in self.answers, f"{token} answered twice"
            self.answers[token] = result
        assert effects.next_deadline_ms == self.coordinator.next_deadline_ms()
        return effects

    def records(self) -> list[GroupRecord]:
        return [decode_group_record(k, v) for k, v in self.log]

    def advance(self, ms: int) -> dict[Any, JoinResult | SyncResult]:
        """Let ``ms`` pass, ticking at every deadline on the way as the shell's timer does;
        returns what the ticks answered."""
        target_ms = self.now_ms + ms
        completed: dict[Any, JoinResult | SyncResult] = {}
        while True:
            deadline_ms = self.coordinator.next_deadline_ms()
            self.now_ms = target_ms if deadline_ms is None else max(self.now_ms, min(deadline_ms, target_ms))
            completed.update(self._apply(self.coordinator.tick(self.now_ms)).completed)
            if self.now_ms == target_ms:
                return completed

    def join(self, token: Any, member_id: str = "", group: str = "g", protocols: tuple[JoinProtocol, ...] = RANGE,
             **kw: Any) -> Effects[None]:
        self._ids += 1
        request = JoinRequest(
            group_id=group, member_id=member_id, protocol_type=kw.pop("protocol_type", "consumer"),
            protocols=protocols, session_timeout_ms=kw.pop("session_timeout_ms", SESSION_MS),
            rebalance_timeout_ms=kw.pop("rebalance_timeout_ms", REBALANCE_MS), client_id=f"client-{token}", **kw,
        )
        return self._apply(self.coordinator.join(request, token, f"m{self._ids}", self.now_ms))

    def sync(self, token: Any, member_id: str, generation_id: int, group: str = "g",
             assignments: dict[str, bytes] | None = None, **kw: Any) -> Effects[None]:
        request = SyncRequest(group, member_id, generation_id, assignments=assignments or {}, **kw)
        return self._apply(self.coordinator.sync(request, token, self.now_ms))

    def heartbeat(self, member_id: str, generation_id: int, group: str = "g", instance: str | None = None) -> ErrorCode:
        effects = self._apply(self.coordinator.heartbeat(
            HeartbeatRequest(group, member_id, generation_id, instance), self.now_ms))
        return effects.reply.error

    def leave(self, *member_ids: str, group: str = "g") -> Effects[Any]:
        return self._apply(self.coordinator.leave(
            LeaveRequest(group, tuple(LeaveMember(m) for m in member_ids)), self.now_ms))

    def commit(self, member_id: str, generation_id: int, offsets: dict[tuple[str, int], int], group: str = "g",
               metadata: str | None = None) -> list[ErrorCode]:
        request = OffsetCommitRequest(
            group, tuple(OffsetCommitPartition(t, p, o, metadata=metadata) for (t, p), o in offsets.items()),
            member_id=member_id, generation_id=generation_id,
        )
        effects = self._apply(self.coordinator.commit_offsets(request, self.now_ms))
        return [p.error for p in effects.reply.partitions]

    def joined(self, token: Any) -> JoinResult:
        result = self.answers[token]
        assert isinstance(result, JoinResult)
        return result

    def synced(self, token: Any) -> SyncResult:
        result = self.answers[token]
        assert isinstance(result, SyncResult)
        return result

    def new_member(self, name: str, group: str = "g", **kw: Any) -> str:
        """JoinGroup v4+ dance, first half: the member learns its id."""
        self.join(f"{name}-0", group=group, **kw)
        result = self.joined(f"{name}-0")
        assert result.error is E.MEMBER_ID_REQUIRED
        return result.member_id

    def stable_group(self, *names: str, group: str = "g", **kw: Any) -> dict[str, str]:
        """Members join within the initial delay, the leader assigns; returns name -> member id.
        ``kw`` goes to every JoinGroup (``protocols``, ``protocol_type``)."""
        ids = {n: self.new_member(n, group=group, **kw) for n in names}
        for n in names:
            self.join(f"{n}-1", ids[n], group=group, **kw)
        self.advance(SETTLE_MS)
        leader = self.joined(f"{names[0]}-1")
        assert leader.error is E.NONE and leader.leader == ids[names[0]]
        for n in names[1:]:
            self.sync(f"{n}-sync", ids[n], leader.generation_id, group=group)
        self.sync(f"{names[0]}-sync", ids[names[0]], leader.generation_id, group=group,
                  assignments={ids[n]: n.encode() for n in names})
        assert self.coordinator.group_state(group) is GroupState.STABLE
        return ids


# ---------------------------------------------------------------- join / sync


def test_first_join_gets_member_id_required_then_joins_after_the_initial_delay() -> None:
    shell = Shell()
    effects = shell.join("a0")
    first = shell.joined("a0")
    assert first.error is E.MEMBER_ID_REQUIRED and first.member_id == "m1"
    assert [type(r) for r in effects.records] == [GroupMetadataRecord]  # the new group is persisted
    effects = shell.join("a1", first.member_id)
    assert "a1" not in shell.answers
    assert effects.next_deadline_ms == shell.now_ms + DELAY_MS
    shell.advance(DELAY_MS - 1)
    assert "a1" not in shell.answers
    shell.advance(1)
    joined = shell.joined("a1")
    assert (joined.error, joined.generation_id, joined.leader, joined.protocol_name) == (E.NONE, 1, "m1", "range")
    assert joined.protocol_type == "consumer"
    assert [m.member_id for m in joined.members] == ["m1"]
    assert shell.coordinator.group_state("g") is GroupState.COMPLETING_REBALANCE


def test_two_members_within_the_initial_delay_share_one_generation_and_the_leader_gets_both() -> None:
    shell = Shell()
    a, b = shell.new_member("a"), shell.new_member("b")
    shell.join("a1", a)
    shell.advance(DELAY_MS // 2)
    shell.join("b1", b, protocols=(JoinProtocol("range", b"sub-b"),))
    shell.advance(DELAY_MS // 2)  # first delay over, but a member arrived: wait another delay
    assert "a1" not in shell.answers and "b1" not in shell.answers
    shell.advance(DELAY_MS)
    leader, follower = shell.joined("a1"), shell.joined("b1")
    assert leader.generation_id == follower.generation_id == 1
    assert leader.leader == follower.leader == a
    assert {(m.member_id, m.metadata) for m in leader.members} == {(a, b"sub-a"), (b, b"sub-b")}
    assert follower.members == ()


def test_initial_delay_is_extended_by_arrivals_but_never_beyond_the_rebalance_timeout() -> None:
    shell = Shell()
    ids = [shell.new_member(f"c{i}") for i in range(4)]
    start_ms = shell.now_ms
    shell.join("t0", ids[0], rebalance_timeout_ms=250)
    for i, at_ms in enumerate((50, 150, 225, 249), start=1):
        shell.advance(start_ms + at_ms - shell.now_ms)
        if i < len(ids):
            shell.join(f"t{i}", ids[i], rebalance_timeout_ms=250)
    assert "t0" not in shell.answers
    shell.advance(1)  # 100 + 100 + 50 ms: a member arrived in the last delay, but time is up
    assert {shell.joined(f"t{i}").generation_id for i in range(4)} == {1}


def test_join_groups_without_member_id_required_for_old_versions() -> None:
    shell = Shell()
    shell.join("a", require_known_member_id=False)
    shell.advance(DELAY_MS)
    assert shell.joined("a").error is E.NONE and shell.joined("a").member_id == "m1"


def test_sync_hands_the_leaders_assignment_to_every_member_once_persisted() -> None:
    shell = Shell()
    a, b = shell.new_member("a"), shell.new_member("b")
    shell.join("a1", a)
    shell.join("b1", b)
    shell.advance(SETTLE_MS)
    generation = shell.joined("a1").generation_id
    assert shell.sync("b-sync", b, generation).completed == {}  # waits for the leader
    assert shell.heartbeat(b, generation) is E.NONE  # allowed between join and sync
    effects = shell.sync("a-sync", a, generation, assignments={a: b"A", b: b"B"}, protocol_name="range")
    assert set(effects.completed) == {"a-sync", "b-sync"}
    assert len(effects.records) == 1, "the assignment is persisted before anyone is answered"
    assert shell.synced("a-sync") == SyncResult(E.NONE, b"A", "consumer", "range")
    assert shell.synced("b-sync").assignment == b"B"
    value = shell.records()[-1]
    assert isinstance(value, GroupMetadataRecord) and value.value is not None
    assert {(m.member_id, m.assignment) for m in value.value.members} == {(a, b"A"), (b, b"B")}
    assert shell.coordinator.group_state("g") is GroupState.STABLE
    shell.sync("b-again", b, generation)
    assert shell.synced("b-again").assignment == b"B"


def test_a_member_missing_from_the_leaders_assignment_gets_an_empty_one() -> None:
    shell = Shell()
    ids = shell.stable_group("a", "b")
    shell.sync("b2", ids["b"], 1)
    assert shell.synced("b2").assignment == b"b"
    shell.join("a2", ids["a"])  # the leader rejoins: rebalance
    shell.join("b3", ids["b"])
    shell.sync("a3", ids["a"], 2, assignments={ids["a"]: b"all"})
    shell.sync("b4", ids["b"], 2)
    assert shell.synced("b4") == SyncResult(E.NONE, b"", "consumer", "range")


def test_protocol_is_chosen_by_votes_among_protocols_all_members_support() -> None:
    shell = Shell()
    prefs = {
        "a": (JoinProtocol("sticky", b""), JoinProtocol("range", b""), JoinProtocol("rr", b"")),
        "b": (JoinProtocol("range", b""), JoinProtocol("sticky", b"")),
        "c": (JoinProtocol("range", b""), JoinProtocol("sticky", b""), JoinProtocol("rr", b"")),
    }
    ids = {n: shell.new_member(n, protocols=p) for n, p in prefs.items()}
    for n, p in prefs.items():
        shell.join(f"{n}1", ids[n], protocols=p)
    shell.advance(SETTLE_MS)
    assert shell.joined("a1").protocol_name == "range"  # rr is not common; range has 2 votes of 3


def test_inconsistent_protocols_are_refused() -> None:
    shell = Shell()
    ids = shell.stable_group("a")
    shell.join("x", protocols=(JoinProtocol("roundrobin", b""),))
    assert shell.joined("x").error is E.INCONSISTENT_GROUP_PROTOCOL
    shell.join("y", protocol_type="connect")
    assert shell.joined("y").error is E.INCONSISTENT_GROUP_PROTOCOL
    shell.join("z", group="new", protocols=())
    assert shell.joined("z").error is E.INCONSISTENT_GROUP_PROTOCOL
    assert shell.coordinator.group_state("new") is GroupState.DEAD
    shell.sync("s", ids["a"], 1, protocol_name="roundrobin")
    assert shell.synced("s").error is E.INCONSISTENT_GROUP_PROTOCOL


def test_request_validation() -> None:
    shell = Shell()
    shell.join("short", session_timeout_ms=999)
    shell.join("long", session_timeout_ms=CONFIG.group_max_session_timeout_ms + 1)
    shell.join("nogroup", group="")
    shell.join("ghost", "m-unknown", group="nowhere")
    assert shell.joined("short").error is shell.joined("long").error is E.INVALID_SESSION_TIMEOUT
    assert shell.joined("nogroup").error is E.INVALID_GROUP_ID
    assert shell.joined("ghost").error is E.UNKNOWN_MEMBER_ID
    assert shell.coordinator.group_ids() == []
    with pytest.raises(ValueError):
        shell.coordinator.join(JoinRequest("g", "", "consumer", RANGE, SESSION_MS, REBALANCE_MS), "t", "", 0)


def test_group_max_size() -> None:
    shell = Shell(replace(CONFIG, group_max_size=2))
    ids = shell.stable_group("a", "b")
    shell.join("c0")
    assert shell.joined("c0") == JoinResult(E.GROUP_MAX_SIZE_REACHED, "")
    shell.leave(ids["b"])
    shell.join("c1")
    assert shell.joined("c1").error is E.MEMBER_ID_REQUIRED


def test_a_newer_join_supersedes_a_parked_one() -> None:
    shell = Shell()
    a = shell.new_member("a")
    shell.join("first", a)
    shell.join("second", a)
    assert shell.joined("first").error is E.REBALANCE_IN_PROGRESS
    shell.advance(DELAY_MS)
    assert shell.joined("second").error is E.NONE


# ---------------------------------------------------------------- rebalances


def test_a_third_member_triggers_a_rebalance_that_heartbeats_report() -> None:
    shell = Shell()
    ids = shell.stable_group("a", "b")
    c = shell.new_member("c")
    assert shell.coordinator.group_state("g") is GroupState.STABLE  # a pending member changes nothing yet
    shell.join("c1", c)
    assert shell.coordinator.group_state("g") is GroupState.PREPARING_REBALANCE
    assert shell.heartbeat(ids["a"], 1) is E.REBALANCE_IN_PROGRESS
    assert shell.heartbeat(ids["b"], 1) is E.REBALANCE_IN_PROGRESS
    assert shell.commit(ids["a"], 1, {("t", 0): 5}) == [E.NONE]  # the old generation may still commit
    shell.join("a2", ids["a"])
    assert "a2" not in shell.answers
    effects = shell.join("b2", ids["b"])  # the last one in: no waiting for a timeout
    assert set(effects.completed) == {"a2", "b2", "c1"}
    assert {shell.joined(t).generation_id for t in ("a2", "b2", "c1")} == {2}
    assert shell.joined("a2").leader == ids["a"] and len(shell.joined("a2").members) == 3
    assert shell.heartbeat(ids["a"], 1) is E.ILLEGAL_GENERATION
    assert shell.heartbeat(ids["a"], 2) is E.NONE


def test_the_leader_rejoining_forces_a_rebalance_a_follower_with_same_metadata_does_not() -> None:
    shell = Shell()
    ids = shell.stable_group("a", "b")
    shell.join("b2", ids["b"])
    assert shell.joined("b2").generation_id == 1 and shell.joined("b2").members == ()
    assert shell.coordinator.group_state("g") is GroupState.STABLE
    shell.join("b3", ids["b"], protocols=(JoinProtocol("range", b"new-subscription"),))
    assert shell.coordinator.group_state("g") is GroupState.PREPARING_REBALANCE


def test_leave_triggers_a_rebalance_and_the_last_leave_empties_the_group() -> None:
    shell = Shell()
    ids = shell.stable_group("a", "b")
    result = shell.leave(ids["b"]).reply
    assert result.error is E.NONE and [m.error for m in result.members] == [E.NONE]
    assert shell.coordinator.group_state("g") is GroupState.PREPARING_REBALANCE
    assert shell.heartbeat(ids["a"], 1) is E.REBALANCE_IN_PROGRESS
    shell.join("a2", ids["a"])
    assert shell.joined("a2").generation_id == 2 and [m.member_id for m in shell.joined("a2").members] == [ids["a"]]
    shell.sync("a-s", ids["a"], 2, assignments={ids["a"]: b"x"})
    effects = shell.leave(ids["a"], "m-nobody")
    assert [m.error for m in effects.reply.members] == [E.NONE, E.UNKNOWN_MEMBER_ID]
    assert shell.coordinator.group_state("g") is GroupState.EMPTY
    assert shell.coordinator.generation_id("g") == 3
    assert isinstance(effects.records[-1], GroupMetadataRecord)
    assert shell.leave("m-x", group="nowhere").reply.error is E.UNKNOWN_MEMBER_ID


def test_a_member_leaving_while_others_wait_for_the_assignment_sends_them_back_to_join() -> None:
    shell = Shell()
    a, b, c = (shell.new_member(n) for n in "abc")
    for n, m in zip("abc", (a, b, c), strict=True):
        shell.join(f"{n}1", m)
    shell.advance(SETTLE_MS)
    shell.sync("b-sync", b, 1)
    shell.leave(c)
    assert shell.synced("b-sync").error is E.REBALANCE_IN_PROGRESS
    assert shell.coordinator.group_state("g") is GroupState.PREPARING_REBALANCE


def test_session_expiry_removes_a_silent_member_and_rebalances() -> None:
    shell = Shell()
    ids = shell.stable_group("a", "b")
    for _ in range(3):
        shell.advance(3_000)
        assert shell.heartbeat(ids["a"], 1) is E.NONE
    assert shell.coordinator.group_state("g") is GroupState.STABLE
    shell.advance(1_000)  # b has been silent for a whole session
    assert shell.coordinator.group_state("g") is GroupState.PREPARING_REBALANCE
    assert shell.heartbeat(ids["b"], 1) is E.UNKNOWN_MEMBER_ID
    assert shell.heartbeat(ids["a"], 1) is E.REBALANCE_IN_PROGRESS
    shell.join("a2", ids["a"])
    assert shell.joined("a2").generation_id == 2 and len(shell.joined("a2").members) == 1


def test_a_member_that_does_not_rejoin_within_the_rebalance_timeout_is_removed() -> None:
    shell = Shell()
    ids = shell.stable_group("a", "b")
    shell.join("a2", ids["a"])  # leader asks for a rebalance
    for _ in range(REBALANCE_MS // 3000 - 1):
        shell.advance(3000)
        assert shell.heartbeat(ids["b"], 1) is E.REBALANCE_IN_PROGRESS  # alive, but never rejoins
    assert "a2" not in shell.answers
    shell.advance(3000)
    assert shell.joined("a2").generation_id == 2
    assert [m.member_id for m in shell.joined("a2").members] == [ids["a"]]
    assert shell.heartbeat(ids["b"], 1) is E.UNKNOWN_MEMBER_ID


def test_a_waiting_member_is_not_expired_by_its_session_timeout() -> None:
    shell = Shell()
    ids = shell.stable_group("a", "b")
    shell.join("a2", ids["a"], session_timeout_ms=1_000)
    for _ in range(5):  # a waits in JoinGroup far beyond its session; b keeps heartbeating
        shell.advance(3_000)
        assert shell.heartbeat(ids["b"], 1) is E.REBALANCE_IN_PROGRESS
    shell.join("b2", ids["b"])
    assert shell.joined("a2").error is E.NONE and len(shell.joined("a2").members) == 2


def test_a_member_that_never_syncs_is_removed_after_the_rebalance_timeout() -> None:
    shell = Shell()
    a, b = shell.new_member("a"), shell.new_member("b")
    shell.join("a1", a)
    shell.join("b1", b)
    shell.advance(SETTLE_MS)
    shell.sync("a-sync", a, 1, assignments={a: b"A", b: b"B"})
    for _ in range(REBALANCE_MS // 3000):
        shell.advance(3000)
        shell.heartbeat(a, 1)
        shell.heartbeat(b, 1)  # b heartbeats but never sends SyncGroup
    assert shell.coordinator.group_state("g") is GroupState.PREPARING_REBALANCE
    assert shell.heartbeat(b, 1) is E.UNKNOWN_MEMBER_ID


def test_pending_member_expires_after_its_session_timeout() -> None:
    shell = Shell()
    ids = shell.stable_group("a")
    shell.join("x0")
    pending = shell.joined("x0").member_id
    shell.join("a2", ids["a"])  # rebalance: must wait for the pending member to join or expire
    assert "a2" not in shell.answers
    shell.advance(SESSION_MS)
    assert shell.joined("a2").error is E.NONE and len(shell.joined("a2").members) == 1
    shell.join("x1", pending)
    assert shell.joined("x1").error is E.UNKNOWN_MEMBER_ID


# ---------------------------------------------------------------- fencing


def test_stale_generations_and_unknown_members_are_fenced() -> None:
    shell = Shell()
    ids = shell.stable_group("a")
    shell.join("a2", ids["a"])  # leader rejoins alone: generation 2 at once
    assert shell.joined("a2").generation_id == 2
    assert shell.commit(ids["a"], 1, {("t", 0): 1}) == [E.ILLEGAL_GENERATION]
    assert shell.heartbeat(ids["a"], 1) is E.ILLEGAL_GENERATION
    shell.sync("old", ids["a"], 1)
    assert shell.synced("old").error is E.ILLEGAL_GENERATION
    assert shell.commit(ids["a"], 2, {("t", 0): 1}) == [E.REBALANCE_IN_PROGRESS]  # no assignment yet
    assert shell.commit("m-nobody", 2, {("t", 0): 1}) == [E.UNKNOWN_MEMBER_ID]
    assert shell.heartbeat("m-nobody", 2) is E.UNKNOWN_MEMBER_ID
    assert shell.heartbeat(ids["a"], 2, group="nowhere") is E.UNKNOWN_MEMBER_ID
    shell.sync("nobody", "m-nobody", 2)
    assert shell.synced("nobody").error is E.UNKNOWN_MEMBER_ID
    shell.join("nobody-join", "m-nobody")
    assert shell.joined("nobody-join").error is E.UNKNOWN_MEMBER_ID
    assert shell.commit("", -1, {("t", 0): 1}) == [E.UNKNOWN_MEMBER_ID]  # not empty: no standalone commits


def test_static_member_restart_keeps_generation_and_fences_the_old_instance() -> None:
    shell = Shell()
    shell.join("s1", group_instance_id="inst-1")  # static members skip MEMBER_ID_REQUIRED
    shell.advance(DELAY_MS)
    first = shell.joined("s1")
    assert first.error is E.NONE
    shell.sync("s1-sync", first.member_id, 1, assignments={first.member_id: b"P"}, group_instance_id="inst-1")
    effects = shell.join("s2", group_instance_id="inst-1")  # restarted: no member id
    second = shell.joined("s2")
    assert second.error is E.NONE and second.member_id != first.member_id
    assert second.generation_id == 1 and second.leader == first.member_id  # old leader id: no reassignment
    assert len(effects.records) == 1, "the new member id is persisted"
    assert shell.coordinator.group_state("g") is GroupState.STABLE
    assert shell.heartbeat(first.member_id, 1, instance="inst-1") is E.FENCED_INSTANCE_ID
    assert shell.heartbeat(second.member_id, 1, instance="inst-1") is E.NONE
    shell.sync("s2-sync", second.member_id, 1, group_instance_id="inst-1")
    assert shell.synced("s2-sync").assignment == b"P"
    shell.join("s3", group_instance_id="inst-1", supports_skip_assignment=True)
    third = shell.joined("s3")
    assert third.leader == third.member_id and third.skip_assignment and len(third.members) == 1


def test_a_replaced_static_instance_is_fenced_everywhere() -> None:
    shell = Shell()
    shell.join("s1", group_instance_id="inst-1")
    shell.advance(DELAY_MS)
    old = shell.joined("s1").member_id
    shell.sync("s1-sync", old, 1, assignments={old: b"P"}, group_instance_id="inst-1")
    shell.join("s2", group_instance_id="inst-1")
    shell.join("zombie", old, group_instance_id="inst-1")
    assert shell.joined("zombie").error is E.FENCED_INSTANCE_ID
    shell.sync("zombie-sync", old, 1, group_instance_id="inst-1")
    assert shell.synced("zombie-sync").error is E.FENCED_INSTANCE_ID
    request = OffsetCommitRequest("g", (OffsetCommitPartition("t", 0, 1),), old, 1, "inst-1")
    assert shell.coordinator.commit_offsets(request, shell.now_ms).reply.partitions[0].error is E.FENCED_INSTANCE_ID
    leave = shell.coordinator.leave(LeaveRequest("g", (LeaveMember(old, "inst-1"),)), shell.now_ms).reply
    assert leave.members[0].error is E.FENCED_INSTANCE_ID


def test_a_member_that_lost_its_join_response_gets_it_again() -> None:
    shell = Shell()
    a, b = shell.new_member("a"), shell.new_member("b")
    shell.join("a1", a)
    shell.join("b1", b)
    shell.advance(SETTLE_MS)
    shell.join("a2", a)  # same metadata, while the group waits for the leader's assignment
    shell.join("b2", b)
    assert shell.joined("a2") == shell.joined("a1") and shell.joined("b2") == shell.joined("b1")
    assert shell.coordinator.group_state("g") is GroupState.COMPLETING_REBALANCE


def test_static_member_removed_by_instance_id() -> None:
    shell = Shell()
    shell.join("s1", group_instance_id="inst-1")
    shell.advance(DELAY_MS)
    result = shell.coordinator.leave(LeaveRequest("g", (LeaveMember("", "inst-1"),)), shell.now_ms).reply
    assert [m.error for m in result.members] == [E.NONE]


def test_static_member_not_removed_when_it_misses_a_join_phase() -> None:
    shell = Shell()
    shell.join("s1", group_instance_id="inst-1", session_timeout_ms=60_000)
    d = shell.new_member("d")
    shell.join("d1", d)
    shell.advance(SETTLE_MS)
    static_id = shell.joined("s1").member_id
    shell.sync("s", static_id, 1, assignments={})
    shell.join("d2", d, protocols=(JoinProtocol("range", b"changed"),))  # rebalance; static member is away
    shell.advance(REBALANCE_MS)
    result = shell.joined("d2")
    assert result.generation_id == 2 and {m.member_id for m in result.members} == {d, static_id}


# ---------------------------------------------------------------- offsets


def test_commit_and_fetch_offsets() -> None:
    shell = Shell()
    ids = shell.stable_group("a")
    errors = shell.commit(ids["a"], 1, {("t", 0): 10, ("t", 1): 20, ("u", 0): 5}, metadata="meta")
    assert errors == [E.NONE] * 3
    assert len([r for r in shell.records() if isinstance(r, OffsetCommitRecord)]) == 3
    fetched = shell.coordinator.fetch_offsets("g", [TopicPartition("t", 1), TopicPartition("t", 9)])
    assert [(p.partition, p.offset, p.metadata, p.leader_epoch) for p in fetched.partitions] == [
        (1, 20, "meta", -1), (9, -1, "", -1)]
    everything = shell.coordinator.fetch_offsets("g")
    assert [(p.topic, p.partition, p.offset) for p in everything.partitions] == [("t", 0, 10), ("t", 1, 20), ("u", 0, 5)]
    assert shell.coordinator.fetch_offsets("nowhere").partitions == ()
    too_long = "x" * (CONFIG.offset_metadata_max_bytes + 1)
    request = OffsetCommitRequest("g", (OffsetCommitPartition("t", 0, 11, metadata=too_long),
                                        OffsetCommitPartition("t", 1, 21, leader_epoch=3)), ids["a"], 1)
    result = shell._apply(shell.coordinator.commit_offsets(request, shell.now_ms)).reply
    assert [p.error for p in result.partitions] == [E.OFFSET_METADATA_TOO_LARGE, E.NONE]
    assert [(p.offset, p.leader_epoch) for p in shell.coordinator.fetch_offsets("g").partitions][:2] == [(10, -1), (21, 3)]


def test_standalone_commits_need_an_empty_group() -> None:
    shell = Shell()
    assert shell.commit("", -1, {("t", 0): 7}, group="simple") == [E.NONE]
    assert shell.coordinator.list_groups()[0].protocol_type == ""
    assert shell.coordinator.group_state("simple") is GroupState.EMPTY
    assert shell.commit("", 3, {("t", 0): 8}, group="missing") == [E.ILLEGAL_GENERATION]
    assert shell.coordinator.group_state("missing") is GroupState.DEAD
    ids = shell.stable_group("a")
    assert shell.commit("", -1, {("t", 0): 1}) == [E.UNKNOWN_MEMBER_ID]
    shell.leave(ids["a"])
    assert shell.commit("", -1, {("t", 0): 2}) == [E.NONE]  # empty again
    assert shell.coordinator.fetch_offsets("g").partitions[0].offset == 2


def test_offsets_expire_after_retention() -> None:
    config = replace(CONFIG, offsets_retention_ms=60_000, offsets_retention_check_interval_ms=10_000)
    shell = Shell(config)
    shell.commit("", -1, {("t", 0): 1}, group="simple")
    ids = shell.stable_group("a")
    shell.commit(ids["a"], 1, {("t", 0): 1})
    shell.leave(ids["a"])  # g is empty from now on
    shell.advance(30_000)
    assert shell.coordinator.group_ids() == ["g", "simple"]
    shell.commit("", -1, {("t", 1): 1}, group="simple")
    shell.advance(40_000)  # simple's first offset is 70 s old, its second 40 s; g has been empty 70 s
    assert [p.partition for p in shell.coordinator.fetch_offsets("simple").partitions] == [1]
    assert shell.coordinator.group_ids() == ["simple"]
    shell.advance(30_000)
    assert shell.coordinator.group_ids() == []
    reloaded = GroupCoordinator.load(shell.records(), config, shell.now_ms)
    assert reloaded.group_ids() == []


# ---------------------------------------------------------------- describe / list / delete


def test_describe_list_and_delete() -> None:
    shell = Shell()
    ids = shell.stable_group("a", "b")
    shell.commit(ids["a"], 1, {("t", 0): 3})
    (described,) = shell.coordinator.describe(["g"])
    assert (described.state, described.protocol_type, described.protocol_data) == (GroupState.STABLE, "consumer", "range")
    assert {(m.member_id, m.metadata, m.assignment, m.client_id) for m in described.members} == {
        (ids["a"], b"sub-a", b"a", "client-a-1"), (ids["b"], b"sub-a", b"b", "client-b-1")}
    assert shell.coordinator.describe(["nowhere"]) == (DescribedGroup("nowhere", E.NONE, GroupState.DEAD, "", ""),)
    shell.commit("", -1, {("t", 0): 1}, group="simple")
    assert [(g.group_id, g.state) for g in shell.coordinator.list_groups()] == [
        ("g", GroupState.STABLE), ("simple", GroupState.EMPTY)]
    assert [g.group_id for g in shell.coordinator.list_groups([GroupState.EMPTY])] == ["simple"]
    shell.join("a2", ids["a"])
    (rebalancing,) = shell.coordinator.describe(["g"])
    assert rebalancing.protocol_data == "" and all(m.assignment == b"" for m in rebalancing.members)

    deleted = shell._apply(shell.coordinator.delete_groups(["g", "simple", "nowhere"], shell.now_ms))
    assert [d.error for d in deleted.reply] == [E.NON_EMPTY_GROUP, E.NONE, E.GROUP_ID_NOT_FOUND]
    assert deleted.records == (OffsetCommitRecord("simple", "t", 0, None), GroupMetadataRecord("simple", None))
    shell.leave(ids["a"], ids["b"])
    assert shell.coordinator.group_state("g") is GroupState.EMPTY
    deleted = shell._apply(shell.coordinator.delete_groups(["g"], shell.now_ms))
    assert deleted.reply[0].error is E.NONE
    assert shell.coordinator.fetch_offsets("g", [TopicPartition("t", 0)]).partitions[0].offset == -1
    assert GroupCoordinator.load(shell.records(), CONFIG, shell.now_ms).group_ids() == []


def subscribing_to(*topics: str, version: int = 0) -> tuple[JoinProtocol, ...]:
    """A consumer's JoinGroup protocols: its subscription in ConsumerProtocolSubscription form."""
    from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription
    return (JoinProtocol("range", ConsumerProtocolSubscription(topics=list(topics), user_data=None,
                                                               owned_partitions=[]).encode(version=version)),)


def test_offset_delete_follows_kafkas_rules() -> None:
    shell = Shell()

    def delete(group: str, *tps: tuple[str, int]) -> Effects[OffsetDeleteResult]:
        return shell._apply(shell.coordinator.delete_offsets(group, [TopicPartition(t, p) for t, p in tps],
                                                             shell.now_ms))

    assert delete("nowhere", ("t", 0)).reply == OffsetDeleteResult(E.GROUP_ID_NOT_FOUND)
    # a consumer group with members: the topics they subscribe to keep their offsets
    ids = shell.stable_group("a", "b", protocols=subscribing_to("t", version=1))
    shell.commit(ids["a"], 1, {("t", 0): 3, ("u", 0): 4, ("u", 1): 5})
    out = delete("g", ("t", 0), ("u", 0), ("v", 7))
    assert [(p.topic, p.partition, p.error) for p in out.reply.partitions] == [
        ("t", 0, E.GROUP_SUBSCRIBED_TO_TOPIC), ("u", 0, E.NONE), ("v", 7, E.NONE)]
    assert out.records == (OffsetCommitRecord("g", "u", 0, None),)  # nothing committed for v-7: no tombstone
    assert [(p.topic, p.partition) for p in shell.coordinator.fetch_offsets("g").partitions] == [("t", 0), ("u", 1)]
    # a group of another protocol type with members: NON_EMPTY_GROUP, nothing deleted
    shell.stable_group("c", group="conn", protocol_type="connect", protocols=subscribing_to("t"))
    shell.commit("", -1, {("t", 0): 1}, group="conn")  # refused (not empty); the group has no offsets
    assert delete("conn", ("t", 0)) == Effects(OffsetDeleteResult(E.NON_EMPTY_GROUP), (),
                                               next_deadline_ms=shell.coordinator.next_deadline_ms())
    # members whose subscriptions do not parse subscribe to nothing, as in Kafka
    shell.stable_group("d", group="odd")
    shell.commit(shell.coordinator.describe(["odd"])[0].members[0].member_id, 1, {("t", 0): 1}, group="odd")
    assert delete("odd", ("t", 0)).reply.partitions[0].error is E.NONE
    # an empty group: every offset may go; the last one gone removes the group
    shell.leave(ids["a"], ids["b"])
    out = delete("g", ("t", 0), ("u", 1))
    assert [p.error for p in out.reply.partitions] == [E.NONE, E.NONE]
    assert out.records == (OffsetCommitRecord("g", "t", 0, None), OffsetCommitRecord("g", "u", 1, None),
                           GroupMetadataRecord("g", None))
    assert shell.coordinator.group_state("g") is GroupState.DEAD
    assert delete("g", ("t", 0)).reply.error is E.GROUP_ID_NOT_FOUND
    reloaded = GroupCoordinator.load(shell.records(), CONFIG, shell.now_ms)
    assert "g" not in reloaded.group_ids() and reloaded.fetch_offsets("odd").partitions == ()
    shell.coordinator.unload(shell.now_ms)
    assert delete("odd", ("t", 0)).reply.error is E.NOT_COORDINATOR


def test_unload_answers_parked_requests_not_coordinator() -> None:
    shell = Shell()
    a = shell.new_member("a")
    shell.join("a1", a)
    effects = shell._apply(shell.coordinator.unload(shell.now_ms))
    assert shell.joined("a1").error is E.NOT_COORDINATOR and effects.next_deadline_ms is None
    assert shell.heartbeat(a, 0) is E.NOT_COORDINATOR
    shell.join("late")
    assert shell.joined("late").error is E.NOT_COORDINATOR


# ---------------------------------------------------------------- loading


def test_load_resumes_a_stable_group_and_its_offsets() -> None:
    shell = Shell()
    ids = shell.stable_group("a", "b")
    shell.commit(ids["a"], 1, {("t", 0): 42})
    shell.coordinator = GroupCoordinator.load(shell.records(), CONFIG, shell.now_ms)  # a move, or kill -9
    assert shell.coordinator.group_state("g") is GroupState.STABLE
    assert shell.coordinator.fetch_offsets("g").partitions[0].offset == 42
    assert shell.heartbeat(ids["a"], 1) is E.NONE  # members carry on with their generation
    shell.sync("b-again", ids["b"], 1)
    assert shell.synced("b-again").assignment == b"b"
    shell.advance(SESSION_MS // 2)
    assert shell.heartbeat(ids["a"], 1) is E.NONE
    shell.advance(SESSION_MS // 2 + 1)  # b was silent for a full session since the load
    assert shell.coordinator.group_state("g") is GroupState.PREPARING_REBALANCE
    assert shell.heartbeat(ids["b"], 1) is E.UNKNOWN_MEMBER_ID


def test_load_during_a_rebalance_returns_to_the_last_stable_generation() -> None:
    shell = Shell()
    ids = shell.stable_group("a", "b")
    shell.join("a2", ids["a"])
    shell.join("b2", ids["b"])
    assert shell.joined("a2").generation_id == 2
    reloaded = GroupCoordinator.load(shell.records(), CONFIG, shell.now_ms)
    assert reloaded.group_state("g") is GroupState.STABLE and reloaded.generation_id("g") == 1
    shell.coordinator = reloaded
    assert shell.heartbeat(ids["a"], 2) is E.ILLEGAL_GENERATION  # the client rejoins


def test_load_does_not_depend_on_where_compaction_left_a_groups_records() -> None:
    """After compaction a group's offsets may precede its metadata record, and offsets committed
    after a deletion outlive the group's tombstone (the group is then a plain offsets store)."""
    member = GroupMemberValue("m1", None, "c", "/h", 30_000, 10_000, b"sub", b"asg")
    records: list[GroupRecord] = [
        OffsetCommitRecord("g", "t", 0, OffsetValue(5, -1, "", 10)),
        GroupMetadataRecord("g", GroupMetadataValue("consumer", 3, "range", "m1", 20, (member,))),
        OffsetCommitRecord("h", "t", 0, OffsetValue(7, -1, "", 10)),
        GroupMetadataRecord("h", None),
        OffsetCommitRecord("gone", "t", 0, None),
    ]
    coordinator = GroupCoordinator.load(records, CONFIG, 1_000)
    assert coordinator.group_ids() == ["g", "h"]
    assert coordinator.group_state("g") is GroupState.STABLE and coordinator.generation_id("g") == 3
    assert coordinator.fetch_offsets("g").partitions[0].offset == 5
    assert coordinator.group_state("h") is GroupState.EMPTY and coordinator.generation_id("h") == 0
    assert coordinator.fetch_offsets("h").partitions[0].offset == 7


# ---------------------------------------------------------------- records


def _sample_records() -> list[GroupRecord]:
    return [
        OffsetCommitRecord("g", "t", 3, OffsetValue(17, 2, "m\u00e9ta", 1234)),
        OffsetCommitRecord("g", "t", 3, None),
        GroupMetadataRecord("g", GroupMetadataValue("consumer", 4, "range", "m1", 99, (
            GroupMemberValue("m1", None, "c1", "/10.0.0.1", 30000, 10000, b"\x00\x01sub", b"\xffassign"),
            GroupMemberValue("m2", "inst", "c2", "/10.0.0.2", 30000, 10000, b"", b""),
        ))),
        GroupMetadataRecord("simple", GroupMetadataValue(None, 0, None, None, None, ())),
        GroupMetadataRecord("g", None),
    ]


def test_records_round_trip_through_bytes() -> None:
    for record in _sample_records():
        key, value = encode_group_record(record)
        assert decode_group_record(key, value) == record
    key_a, _ = encode_group_record(OffsetCommitRecord("g", "t", 3, OffsetValue(1, -1, "", 0)))
    key_b, _ = encode_group_record(OffsetCommitRecord("g", "t", 3, None))
    assert key_a == key_b, "a tombstone has the key of what it deletes (compaction)"


def _mutated(obj: dict[str, Any], path: list[Any], value: Any) -> bytes:
    data = json.loads(json.dumps(obj))
    target = data
    for step in path[:-1]:
        target = target[step]
    if value is _DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return json.dumps(data).encode()


def _encoded(record: GroupRecord) -> tuple[bytes, bytes]:
    key, value = encode_group_record(record)
    assert value is not None
    return key, value


_DELETE = object()
_GROUP_KEY, _GROUP_VALUE = _encoded(_sample_records()[2])
_OFFSET_KEY, _OFFSET_VALUE = _encoded(_sample_records()[0])


@pytest.mark.parametrize("key,value", [
    (b"not json", None),
    (b"[1, 2]", None),
    (_mutated(json.loads(_OFFSET_KEY), ["kind"], "member"), None),
    (_mutated(json.loads(_OFFSET_KEY), ["version"], 2), None),
    (_mutated(json.loads(_OFFSET_KEY), ["partition"], -1), None),
    (_mutated(json.loads(_OFFSET_KEY), ["partition"], "3"), None),
    (_mutated(json.loads(_OFFSET_KEY), ["extra"], 1), None),
    (_mutated(json.loads(_OFFSET_KEY), ["topic"], _DELETE), None),
    (_OFFSET_KEY, b"\xff\xfe"),
    (_OFFSET_KEY, _mutated(json.loads(_OFFSET_VALUE), ["offset"], True)),
    (_OFFSET_KEY, _mutated(json.loads(_OFFSET_VALUE), ["metadata"], None)),
    (_OFFSET_KEY, _mutated(json.loads(_OFFSET_VALUE), ["version"], 9)),
    (_OFFSET_KEY, _mutated(json.loads(_OFFSET_VALUE), ["expire_timestamp_ms"], 5)),
    (_GROUP_KEY, _mutated(json.loads(_GROUP_VALUE), ["members", 0, "subscription"], "***")),
    (_GROUP_KEY, _mutated(json.loads(_GROUP_VALUE), ["members", 0, "session_timeout_ms"], _DELETE)),
    (_GROUP_KEY, _mutated(json.loads(_GROUP_VALUE), ["members", 1, "member_id"], "m1")),
    (_GROUP_KEY, _mutated(json.loads(_GROUP_VALUE), ["members", 0, "group_instance_id"], "inst")),
    (_GROUP_KEY, _mutated(json.loads(_GROUP_VALUE), ["leader_id"], "m9")),
    (_GROUP_KEY, _mutated(json.loads(_GROUP_VALUE), ["protocol_name"], None)),
    (_GROUP_KEY, _mutated(json.loads(_GROUP_VALUE), ["members"], {})),
    (_GROUP_KEY, _mutated(json.loads(_GROUP_VALUE), ["generation_id"], -1)),
])
def test_malformed_records_are_refused(key: bytes, value: bytes | None) -> None:
    with pytest.raises(GroupRecordError):
        decode_group_record(key, value)


# ---------------------------------------------------------------- partitioning and helpers


def test_group_partition_matches_kafka() -> None:
    assert java_string_hashcode("") == 0
    assert java_string_hashcode("hello") == 99162322
    assert java_string_hashcode("polygenelubricants") == -(2**31)
    assert kafka_abs(-(2**31)) == 0 and kafka_abs(-5) == 5
    assert partition_for_group("polygenelubricants", 50) == 0
    assert partition_for_group("hello", 50) == 99162322 % 50
    assert java_string_hashcode("\U0001f600") == 0xD83D * 31 + 0xDE00  # surrogate pair, as Java sees it
    assert partition_for_group("my-group", 1) == 0
    with pytest.raises(ValueError):
        partition_for_group("g", 0)
    assert kafka_member_id("cli", None, "u") == "cli-u" and kafka_member_id("cli", "inst", "u") == "inst-u"


def test_deadline_queue_replaces_and_cancels() -> None:
    q: DeadlineQueue[str] = DeadlineQueue()
    q.schedule("a", 10)
    q.schedule("b", 5)
    q.schedule("a", 3)
    q.schedule("c", 7)
    q.cancel("c")
    assert q.next_deadline_ms() == 3 and len(q) == 2
    assert q.pop_due(4) == "a" and q.pop_due(4) is None and q.pop_due(5) == "b" and q.pop_due(100) is None
    for i in range(1000):
        q.schedule("hb", i)
    assert len(q._heap) < 200 and q.deadline_ms("hb") == 999


# ---------------------------------------------------------------- properties over random histories


@dataclass
class _Client:
    """What a Kafka client remembers about its membership of one group, and what it does next."""

    member_id: str = ""
    generation_id: int = -1
    leader: str = ""
    members: tuple[str, ...] = ()
    protocol_name: str | None = None
    needs_join: bool = True
    synced: bool = False
    waiting: bool = False


@dataclass
class _World:
    shell: Shell
    clients: dict[tuple[int, str], _Client] = field(default_factory=dict)
    outstanding: dict[Any, tuple[int, str]] = field(default_factory=dict)
    seq: int = 0
    stable_checks: int = 0

    def client(self, c: int, g: str) -> _Client:
        return self.clients.setdefault((c, g), _Client())


_PROTOCOLS = [
    ("consumer", (JoinProtocol("range", b"a"),)),
    ("consumer", (JoinProtocol("range", b"b"),)),
    ("consumer", (JoinProtocol("roundrobin", b"a"), JoinProtocol("range", b"a"))),
    ("connect", (JoinProtocol("range", b"a"),)),
]
STATIC_CLIENT = 3
_REJOIN = (E.REBALANCE_IN_PROGRESS, E.ILLEGAL_GENERATION)
_RESET = (E.UNKNOWN_MEMBER_ID, E.FENCED_INSTANCE_ID)


def _react(client: _Client, error: ErrorCode) -> None:
    if error in _RESET:
        client.member_id, client.generation_id = "", -1
    if error in _RESET or error in _REJOIN:
        client.needs_join, client.synced = True, False


def _absorb(world: _World, completed: dict[Any, JoinResult | SyncResult]) -> None:
    for token, result in completed.items():
        assert token in world.outstanding, f"{token} answered twice or never asked"
        client = world.client(*world.outstanding.pop(token))
        client.waiting = False
        if isinstance(result, JoinResult):
            if result.error is E.NONE:
                client.member_id, client.generation_id = result.member_id, result.generation_id
                client.leader, client.protocol_name = result.leader, result.protocol_name
                client.members = tuple(m.member_id for m in result.members)
                client.needs_join, client.synced = False, False
            elif result.error is E.MEMBER_ID_REQUIRED:
                client.member_id = result.member_id
        elif result.error is E.NONE:
            client.synced = True
        _react(client, result.error)


def _send_join(world: _World, c: int, g: str, protocol: int, v4: bool, session_timeout_ms: int) -> None:
    shell, client = world.shell, world.client(c, g)
    protocol_type, protocols = _PROTOCOLS[protocol]
    world.seq += 1
    token = (world.seq, c, g, "join")
    world.outstanding[token] = (c, g)
    client.waiting = True
    effects = shell.join(token, client.member_id, group=g, protocols=protocols, protocol_type=protocol_type,
                         group_instance_id=f"inst-{c}" if c == STATIC_CLIENT else None,
                         require_known_member_id=v4, session_timeout_ms=session_timeout_ms,
                         rebalance_timeout_ms=4_000)
    _absorb(world, dict(effects.completed))


def _act(world: _World, c: int, g: str) -> None:
    """The client's natural next step: join until it has a generation, then sync, then heartbeat."""
    shell, client = world.shell, world.client(c, g)
    instance = f"inst-{c}" if c == STATIC_CLIENT else None
    if client.waiting:
        return
    if client.needs_join:
        return _send_join(world, c, g, 0, True, 3_000)
    if not client.synced:
        world.seq += 1
        token = (world.seq, c, g, "sync")
        world.outstanding[token] = (c, g)
        client.waiting = True
        assignments = {m: m.encode() for m in client.members} if client.leader == client.member_id else {}
        effects = shell.sync(token, client.member_id, client.generation_id, group=g, assignments=assignments,
                             group_instance_id=instance, protocol_type="consumer", protocol_name=client.protocol_name)
        return _absorb(world, dict(effects.completed))
    _react(client, shell.heartbeat(client.member_id, client.generation_id, group=g, instance=instance))


def _step(world: _World, op: tuple[Any, ...]) -> None:
    shell = world.shell
    kind = op[0]
    if kind == "act":
        _act(world, op[1], op[2])
    elif kind == "join":
        _send_join(world, op[1], op[2], op[3], op[4], op[5])
    elif kind == "advance":
        _absorb(world, shell.advance(op[1]))
    elif kind == "reload":
        shell.coordinator = GroupCoordinator.load(shell.records(), shell.config, shell.now_ms)
        world.outstanding.clear()  # connections to the old coordinator are gone
        for client in world.clients.values():
            client.waiting = False
    elif kind == "delete":
        shell._apply(shell.coordinator.delete_groups([op[1]], shell.now_ms))
    elif kind == "leave":
        client = world.client(op[1], op[2])
        instance = f"inst-{op[1]}" if op[1] == STATIC_CLIENT else None
        effects = shell._apply(shell.coordinator.leave(
            LeaveRequest(op[2], (LeaveMember(client.member_id, instance),)), shell.now_ms))
        world.clients[(op[1], op[2])] = _Client(waiting=client.waiting)
        _absorb(world, dict(effects.completed))
    elif kind == "commit":
        client = world.client(op[1], op[2])
        use_group = op[6]
        shell.commit(client.member_id if use_group else "", client.generation_id if use_group else -1,
                     {(op[3], op[4]): op[5]}, group=op[2])
    else:
        raise AssertionError(kind)


def _interpret(raw: tuple[Any, ...]) -> tuple[Any, ...]:
    selector, c, g, protocol, flag, session_ms, topic, partition, offset, advance_ms = raw
    if selector < 55:
        return ("act", c, g)
    if selector < 70:
        return ("advance", advance_ms)
    if selector < 78:
        return ("commit", c, g, topic, partition, offset, flag)
    if selector < 84:
        return ("join", c, g, protocol, flag, session_ms)
    if selector < 90:
        return ("leave", c, g)
    if selector < 95:
        return ("reload",)
    return ("delete", g)


def _check_load_reproduces(world: _World) -> None:
    shell = world.shell
    live = shell.coordinator
    reloaded = GroupCoordinator.load(shell.records(), shell.config, shell.now_ms)
    assert reloaded.group_ids() == live.group_ids()
    for g in live.group_ids():
        assert reloaded.fetch_offsets(g) == live.fetch_offsets(g)
        state = live.group_state(g)
        if state in (GroupState.STABLE, GroupState.EMPTY):
            world.stable_checks += state is GroupState.STABLE
            assert reloaded.group_metadata(g) == live.group_metadata(g)
            assert reloaded.describe([g]) == live.describe([g])
        else:
            assert reloaded.group_state(g) in (GroupState.STABLE, GroupState.EMPTY)
            assert (reloaded.generation_id(g) or 0) <= (live.generation_id(g) or 0)


def test_load_reproduces_offsets_and_group_metadata_after_any_history() -> None:
    """Whatever clients do (including a coordinator reload mid-history), replaying the records
    gives back exactly the committed offsets, and for every group not mid-rebalance exactly its
    metadata; a group mid-rebalance comes back at its last persisted generation."""
    hypothesis = pytest.importorskip("hypothesis")
    st = pytest.importorskip("hypothesis.strategies")

    # One draw per step, interpreted with explicit weights: mostly clients doing their next
    # natural step, with time passing, commits, protocol changes, leaves, reloads and deletes.
    raw_op = st.tuples(st.integers(0, 99), st.integers(0, 3), st.sampled_from(["g0", "g1"]),
                       st.integers(0, len(_PROTOCOLS) - 1), st.booleans(), st.sampled_from([1_000, 3_000]),
                       st.sampled_from(["t", "u"]), st.integers(0, 2), st.integers(0, 100),
                       st.sampled_from([100, 200, 1_000, 2_500, 5_000]))
    op = raw_op.map(_interpret)
    config = replace(CONFIG, offsets_retention_ms=20_000, offsets_retention_check_interval_ms=5_000)
    stable_checks = 0

    @hypothesis.settings(max_examples=150, deadline=None, derandomize=True,
                         suppress_health_check=list(hypothesis.HealthCheck))
    @hypothesis.given(st.lists(op, min_size=10, max_size=60))
    def run(ops: list[tuple[Any, ...]]) -> None:
        nonlocal stable_checks
        world = _World(Shell(config))
        for o in ops:
            _step(world, o)
            _check_load_reproduces(world)
        stable_checks += world.stable_checks

    run()
    assert stable_checks > 100, "histories should often reach stable groups"


def test_a_typical_history_reaches_stable_groups_and_survives_reload() -> None:
    """A scripted history through the property's machinery, including a reload while stable."""
    world = _World(Shell(replace(CONFIG, offsets_retention_ms=None)))
    everyone = [("act", c, "g0") for c in range(4)]
    script: list[tuple[Any, ...]] = [
        *everyone, *everyone, ("advance", 200), ("act", 1, "g0"), ("act", 3, "g0"), ("act", 2, "g0"),
        ("act", 0, "g0"), ("commit", 0, "g0", "t", 0, 9, True), ("reload",), *everyone,
        ("join", 2, "g0", 1, True, 3_000), *everyone, *everyone, *everyone, *everyone,
    ]
    for o in script:
        _step(world, o)
        _check_load_reproduces(world)
    live = world.shell.coordinator
    assert live.group_state("g0") is GroupState.STABLE and live.generation_id("g0") == 2
    assert len(live.describe(["g0"])[0].members) == 4
    assert live.fetch_offsets("g0").partitions[0].offset == 9
    assert world.stable_checks > 0
