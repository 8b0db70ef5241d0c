"""Kafka's replication decisions (replication_rules.py) and a replica driven through them with a
manual clock and real files, no socket: high watermark, ISR shrink and expand, acks=all,
divergence and truncation, and a seeded model of the ISR rules."""
from __future__ import annotations

import asyncio
import random

import pytest

from broker import local_layout as lay
from broker import replication_rules as rules
from broker.local_log import LocalLog
from broker.local_replica import LocalReplica, ReplicationSettings
from metadata_quorum.kernel.errors import ErrorCode, FerryError
from stream_storage import batches

F = rules.FollowerState


def test_high_watermark_is_the_smallest_end_of_the_isr_and_never_goes_back() -> None:
    followers = {2: F(log_end_offset=7), 3: F(log_end_offset=4)}
    assert rules.high_watermark(0, 1, 10, (1, 2, 3), followers) == 4
    assert rules.high_watermark(0, 1, 10, (1, 2), followers) == 7
    assert rules.high_watermark(5, 1, 10, (1, 3), followers) == 5, "never below the current"
    assert rules.high_watermark(2, 1, 10, (1, 2, 3), {2: F(7)}) == 2, "an unknown follower end holds it"
    assert rules.high_watermark(0, 1, 10, (1,), {}) == 10


def test_caught_up_time_follows_kafkas_rule() -> None:
    s = rules.on_follower_fetch(F(), 5, 10, now_ms=100)
    assert s.last_caught_up_ms == 0, "behind the leader's end, never caught up before"
    s = rules.on_follower_fetch(s, 10, 12, now_ms=200)
    assert s.last_caught_up_ms == 100, "it reached the end the leader had at its previous fetch"
    s = rules.on_follower_fetch(s, 12, 12, now_ms=300)
    assert s.last_caught_up_ms == 300


def test_isr_shrinks_after_the_lag_time_and_expands_when_caught_up() -> None:
    followers = {2: F(10, last_caught_up_ms=0), 3: F(4, last_caught_up_ms=0)}
    assert rules.out_of_sync(1, 10, (1, 2, 3), followers, now_ms=500, lag_max_ms=1000) == set()
    assert rules.out_of_sync(1, 10, (1, 2, 3), followers, now_ms=1500, lag_max_ms=1000) == {3}
    assert rules.isr_after((1, 2, 3), 1, 10, followers, (1, 2, 3), 4, 0, 1500, 1000) == (1, 2)
    assert rules.isr_after((1, 2), 1, 10, {2: F(10), 3: F(8)}, (1, 2, 3), 8, 0, 0, 1000) == (1, 2, 3)
    assert rules.isr_after((1, 2), 1, 10, {2: F(10), 3: F(7)}, (1, 2, 3), 8, 0, 0, 1000) == (1, 2)
    assert not rules.may_join_isr(F(9), 9, leader_epoch_start_offset=10), \
        "a follower must reach the current leader epoch (it truncated its divergent suffix)"


def test_acks_all_and_min_insync() -> None:
    with pytest.raises(FerryError) as e:
        rules.check_enough_replicas(1, 2, "t", 0)
    assert e.value.error is ErrorCode.NOT_ENOUGH_REPLICAS
    rules.check_enough_replicas(2, 2, "t", 0)
    assert rules.acks_all_decision(5, 5, 3, 2) == rules.AckDecision(False)
    assert rules.acks_all_decision(5, 6, 3, 2) == rules.AckDecision(True)
    assert rules.acks_all_decision(5, 6, 1, 2) == rules.AckDecision(True, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND)


def test_divergence_and_truncation_point() -> None:
    leader = [(0, 0), (2, 10)]  # epoch 1 never reached the leader
    assert rules.diverging_epoch(leader, 15, 10, 0) is None
    assert rules.diverging_epoch(leader, 15, 12, 0) == rules.Divergence(0, 10)
    assert rules.diverging_epoch(leader, 15, 12, 1) == rules.Divergence(0, 10), "unknown epoch: the one below"
    assert rules.diverging_epoch(leader, 15, 15, 2) is None
    follower = [(0, 0), (1, 10)]
    assert rules.truncation_offset(follower, 14, rules.Divergence(0, 10), 8) == 10
    assert rules.truncation_offset([(0, 0)], 14, rules.Divergence(0, 12), 8) == 12
    assert rules.truncation_offset([(3, 0)], 14, rules.Divergence(1, 12), 8) == 12, "no shared epoch: leader's end"
    assert rules.truncation_offset(follower, 14, rules.Divergence(-1, -1), 8) == 8, "nothing known: the HW"
    with pytest.raises(FerryError) as e:
        rules.check_fetch_epoch(5, 4, "t", 0)
    assert e.value.error is ErrorCode.FENCED_LEADER_EPOCH
    with pytest.raises(FerryError) as e:
        rules.check_fetch_epoch(5, 6, "t", 0)
    assert e.value.error is ErrorCode.UNKNOWN_LEADER_EPOCH


# ------------------------------------------------------------------ replicas on real files, no socket
class Clock:
    def __init__(self) -> None:
        self.ms = 1000

    def __call__(self) -> int:
        return self.ms


def make_replica(tmp_path, broker: int, clock: Clock, proposals: list[tuple[int, ...]], min_isr: int = 2) -> LocalReplica:
    log = LocalLog(str(tmp_path / f"b{broker}" / "t-0"), "tid", lay.RollPolicy(segment_bytes=4096)).open()

    async def propose(replica: LocalReplica, isr: tuple[int, ...]) -> None:
        proposals.append(isr)
        replica.update_registration(replica.partition_epoch + 1, replica.replicas, isr)

    return LocalReplica("t", "tid", 0, broker, log, str(tmp_path), 0, propose,
                        lambda: ReplicationSettings(min_insync_replicas=min_isr, replica_lag_time_max_ms=1000,
                                                    request_timeout_ms=2000), clock_ms=clock)


def one(value: bytes) -> tuple[bytearray, list[batches.BatchInfo]]:
    body = bytearray(batches.build_batch([(None, value)], timestamp_ms=1))
    return body, batches.validate_batches(body)


def test_leader_and_follower_replicate_and_the_ack_waits_for_the_isr(tmp_path) -> None:
    async def run() -> None:
        clock = Clock()
        proposals: list[tuple[int, ...]] = []
        leader = make_replica(tmp_path, 1, clock, proposals)
        follower = make_replica(tmp_path, 2, clock, proposals)
        leader.become_leader(1, 0, (1, 2), (1, 2))
        follower.become_follower(1, 1, 0, (1, 2), (1, 2))
        ack = asyncio.ensure_future(leader.append_acked(*one(b"a"), acks=-1))
        await asyncio.sleep(0.01)
        assert not ack.done(), "acks=all waits for the follower"
        assert await leader.fetch(0, 1 << 20, 0) == b"", "consumers see nothing above the high watermark"
        got = await leader.serve_replica_fetch(2, 0, follower.log.latest_epoch, 1, 1 << 20, 0)
        follower.append_from_leader(got.data, got.high_watermark)
        assert not ack.done()
        await leader.serve_replica_fetch(2, follower.log.log_end_offset, follower.log.latest_epoch, 1, 1 << 20, 0)
        assert await asyncio.wait_for(ack, 1) == (0, 0)
        assert leader.high_watermark == 1
        assert [r.value for r in batches.read_records(await leader.fetch(0, 1 << 20, 0))] == [b"a"]
        # the follower stops fetching: after the lag time it leaves the ISR, acks go on with one replica
        await leader.append(*one(b"b"))
        clock.ms += 1500
        leader.maybe_change_isr()
        await asyncio.sleep(0.01)
        assert proposals[-1] == (1,) and leader.isr == (1,)
        with pytest.raises(FerryError) as e:
            await leader.append_acked(*one(b"c"), acks=-1)
        assert e.value.error is ErrorCode.NOT_ENOUGH_REPLICAS
        # it catches up and joins again
        got = await leader.serve_replica_fetch(2, 1, follower.log.latest_epoch, 1, 1 << 20, 0)
        follower.append_from_leader(got.data, got.high_watermark)
        await leader.serve_replica_fetch(2, follower.log.log_end_offset, follower.log.latest_epoch, 1, 1 << 20, 0)
        await asyncio.sleep(0.01)
        assert proposals[-1] == (1, 2) and leader.isr == (1, 2)
    asyncio.run(run())


def test_a_deposed_leader_truncates_its_divergent_suffix(tmp_path) -> None:
    async def run() -> None:
        clock = Clock()
        props: list[tuple[int, ...]] = []
        a, b = make_replica(tmp_path, 1, clock, props, min_isr=1), make_replica(tmp_path, 2, clock, props, min_isr=1)
        a.become_leader(1, 0, (1, 2), (1, 2))
        b.become_follower(1, 1, 0, (1, 2), (1, 2))
        await a.append(*one(b"x0"))
        got = await a.serve_replica_fetch(2, 0, -1, 1, 1 << 20, 0)
        b.append_from_leader(got.data, got.high_watermark)
        await a.append(*one(b"only-on-a-1"))
        await a.append(*one(b"only-on-a-2"))
        # b is elected at epoch 2 and takes a new record; a comes back as its follower
        b.become_leader(2, 1, (1, 2), (2,))
        await b.append(*one(b"y1"))
        a.become_follower(2, 2, 1, (1, 2), (2,))
        got = await b.serve_replica_fetch(1, a.log.log_end_offset, a.log.latest_epoch, 2, 1 << 20, 0)
        assert got.divergence == rules.Divergence(1, 1)
        assert a.truncate(got.divergence) == 1
        got = await b.serve_replica_fetch(1, a.log.log_end_offset, a.log.latest_epoch, 2, 1 << 20, 0)
        assert got.divergence is None
        a.append_from_leader(got.data, got.high_watermark)
        values = [r.value for r in batches.read_records(a.log.read(0, 1 << 20, a.log.log_end_offset))]
        assert values == [b"x0", b"y1"]
        assert a.log.epochs == b.log.epochs == [(1, 0), (2, 1)]
    asyncio.run(run())


def test_seeded_model_hw_never_passes_an_isr_member_and_committed_offsets_stay() -> None:
    """Random follower fetches, appends, ISR changes and leader changes within the rules: the
    high watermark is at most every ISR member's end, and every offset below a high watermark
    ever reached is still in every ISR member's log."""
    for seed in range(30):
        rng = random.Random(seed)
        n = 3
        logs = {r: [] for r in range(1, n + 1)}  # values by offset
        epochs = {r: [] for r in logs}
        leader, epoch, isr, hw = 1, 0, [1, 2, 3], 0
        followers = rules.reset_followers([2, 3], 0)
        committed: list[int] = []
        for step in range(300):
            now = step * 10
            action = rng.random()
            if action < 0.4:
                logs[leader].append((epoch, step))
                epochs[leader] = lay.assign_epoch(epochs[leader], epoch, len(logs[leader]) - 1)
            elif action < 0.85:
                f = rng.choice([r for r in logs if r != leader])
                end = len(logs[f])
                last_epoch = lay.latest_epoch(epochs[f])  # the epoch cache's, as the fetcher sends
                div = rules.diverging_epoch(epochs[leader], len(logs[leader]), end, last_epoch)
                if div is not None:
                    cut = rules.truncation_offset(epochs[f], end, div, 0)
                    del logs[f][cut:]
                    epochs[f] = lay.truncate_epochs_from_end(epochs[f], cut)
                    assert f not in isr or cut >= hw, f"seed {seed} step {step}: an in-sync follower lost committed data"
                    continue
                followers[f] = rules.on_follower_fetch(followers.get(f, F()), end, len(logs[leader]), now)
                take = rng.randint(0, 3)
                for entry in logs[leader][end:end + take]:
                    logs[f].append(entry)
                    epochs[f] = lay.assign_epoch(epochs[f], entry[0], len(logs[f]) - 1)
                isr = list(rules.isr_after(tuple(isr), leader, len(logs[leader]), followers, tuple(logs), hw,
                                           next(o for e, o in epochs[leader] if e == epoch)
                                           if any(e == epoch for e, _ in epochs[leader]) else 0, now, 50))
            else:
                candidates = [r for r in isr if r != leader]
                if not candidates:
                    continue
                leader = rng.choice(candidates)
                epoch += 1
                epochs[leader] = lay.assign_epoch(epochs[leader], epoch, len(logs[leader]))
                followers = rules.reset_followers([r for r in logs if r != leader], now)
            hw = rules.high_watermark(hw, leader, len(logs[leader]), isr, followers)
            assert all(hw <= len(logs[r]) for r in isr), (seed, step)
            if hw > len(committed):
                committed = list(logs[leader][:hw])
            for r in isr:
                assert logs[r][:len(committed)] == committed, (seed, step, r)
