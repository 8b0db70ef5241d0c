"""Config validation, the heartbeat lease and load samples (pure parts of the broker shell)."""
from __future__ import annotations

import json
from typing import Any

import pytest

from broker.config import config_from_dict, load_config, wal_dir_of
from broker.heartbeat import BrokerLease
from broker.load_sampler import LoadCounters, LoadSampler, PartitionLoad
from metadata_quorum.kernel.errors import ErrorCode, FerryError
from broker.load_samples import decode_samples, encode_samples

BASE = {"broker_id": 1, "controllers": ["127.0.0.1:9001"], "log_dirs": ["/var/ferry/d0"]}


def test_config_defaults_are_kafkas() -> None:
    cfg = config_from_dict(dict(BASE))
    assert (cfg.heartbeat_interval_ms, cfg.session_timeout_ms, cfg.metrics_interval_ms) == (2000, 9000, 10000)
    assert cfg.controllers == ("http://127.0.0.1:9001",)
    assert cfg.effective_wal_dir == wal_dir_of("/var/ferry/wal", 1) == "/var/ferry/wal/broker-1"


@pytest.mark.parametrize("change,needle", [
    ({"log_dirs": ["relative"]}, "absolute"),
    ({"log_dirs": []}, "log_dirs"),
    ({"controllers": []}, "controllers"),
    ({"surprise": 1}, "surprise"),
    ({"heartbeat_interval_ms": 9000}, "below"),
    ({"session_timeout_ms": 0}, "'session_timeout_ms' must be >= 1"),
    ({"session_timeout_ms": "9000"}, "'session_timeout_ms' must be an integer"),
    ({"kafka_port": 70000}, "'kafka_port' must be >= 0 and <= 65535"),
    ({"wal_fsync": False}, "unknown broker setting 'wal_fsync'"),
    ({"s3": {"bucket": "b", "endpoint": "http://x"}}, "unknown broker setting 's3.endpoint'"),
    ({"s3": {"retry": {"max_attempts": 0}}}, "'s3.retry.max_attempts' must be >= 1"),
    ({"storage": {"upload_bytes": -1}}, "'storage.upload_bytes' must be >= 1"),
    ({"storage": {"wal_fsync": "yes"}}, "'storage.wal_fsync' must be true or false"),
    ({"storage": {"wal_dir": "/x"}}, "'storage.wal_dir' is not allowed"),
    ({"log_level": "LOUD"}, "'log_level' must be one of"),
    ({"log_dirs": ["/a", "/a/"]}, "duplicate"),
    ({"super_users": ["admin"]}, "'super_users': 'admin' is not a principal of the form User:<name>"),
    ({"super_users": "User:admin"}, "'super_users' must be a list"),
    ({"authorizer_enabled": "yes"}, "'authorizer_enabled' must be true or false"),
    # formerly accepted: stream storage numbers without bounds, and Kafka's fetch-wait rule
    ({"storage": {"compaction_interval_ms": -5}}, "'storage.compaction_interval_ms' must be >= 0, got -5"),
    ({"storage": {"readahead_bytes": -1}}, "'storage.readahead_bytes' must be >= 1, got -1"),
    ({"storage": {"readahead_bytes": 0}}, "'storage.readahead_bytes' must be >= 1, got 0"),
    ({"storage": {"compaction_target_bytes": 1}}, "'storage.compaction_target_bytes' must be >= 2"),
    ({"storage": {"compaction_max_small_objects": 0}}, "'storage.compaction_max_small_objects' must be >= 2"),
    ({"storage": {"compaction_min_age_ms": -1}}, "'storage.compaction_min_age_ms' must be >= 0"),
    ({"storage": {"compaction_delete_delay_ms": -10}}, "'storage.compaction_delete_delay_ms' must be >= 0"),
    ({"storage": {"compaction_interval_ms": 2.5}}, "'storage.compaction_interval_ms' must be an integer"),
    ({"replica_fetch_wait_max_ms": 2000, "replica_lag_time_max_ms": 1000},
     "'replica_fetch_wait_max_ms' must be at most 'replica_lag_time_max_ms'"),
])
def test_bad_config_is_invalid_config(change: dict, needle: str) -> None:
    with pytest.raises(FerryError) as e:
        config_from_dict(dict(BASE, **change))
    assert e.value.error is ErrorCode.INVALID_CONFIG and needle in e.value.message


def test_documented_zeros_are_accepted() -> None:
    storage = {"compaction_interval_ms": 0, "compaction_min_age_ms": 0, "compaction_delete_delay_ms": 0,
               "cache_bytes": 0, "index_cache_entries": 0}
    cfg = config_from_dict(dict(BASE, storage=storage, peer_probe_interval_ms=0, meta_checkpoint_interval_ms=0,
                                produce_handoff_wait_ms=0, replica_fetch_wait_max_ms=500, replica_lag_time_max_ms=500))
    assert {k: getattr(cfg.storage, k) for k in storage} == storage and cfg.produce_handoff_wait_ms == 0


def test_a_broker_with_a_bad_config_exits_2_naming_the_setting_and_creates_nothing(  # type: ignore[no-untyped-def]
        tmp_path, capsys, monkeypatch) -> None:
    from broker import server

    async def started(config: Any) -> int:  # a config that got through would start a broker here
        return 0

    monkeypatch.setattr(server, "run", started)

    path = tmp_path / "b.json"
    path.write_text(json.dumps(dict(BASE, log_dirs=[str(tmp_path / "d0")], wal_root=str(tmp_path / "wal"),
                                    storage={"compaction_interval_ms": -5})))
    assert server.main(["--id", "1", "--config", str(path)]) == 2
    assert "INVALID_CONFIG" in (err := capsys.readouterr().err) and "'storage.compaction_interval_ms'" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.json"]


def test_load_config_id_must_match(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "b.json"
    path.write_text(json.dumps(BASE))
    assert load_config(str(path), 1).broker_id == 1
    with pytest.raises(FerryError, match="does not match"):
        load_config(str(path), 2)
    path.write_text("{nope")
    with pytest.raises(FerryError, match="not valid JSON"):
        load_config(str(path), 1)


def test_lease_ends_a_session_after_the_last_acknowledged_send() -> None:
    lease = BrokerLease(session_timeout_ms=2000)
    assert not lease.valid(0.0)
    lease.renewed(10.0)
    assert lease.valid(11.9)
    assert not lease.valid(12.0)
    lease.renewed(9.0)  # a late answer to an older heartbeat does not shorten or extend it
    assert lease.valid(11.9) and not lease.valid(12.0)


def test_load_samples_are_per_interval_differences() -> None:
    s = LoadSampler(broker_id=3, interval_ms=1000)
    c = LoadCounters(bytes_in=100, records_in=10)
    first = s.sample(1000, [PartitionLoad("t", 0, c, 500)])
    assert (first[0].bytes_in, first[0].records_in, first[0].size_bytes) == (100, 10, 500)
    c.bytes_in, c.bytes_out, c.records_out = 250, 40, 4
    second = s.sample(2000, [PartitionLoad("t", 0, c, 650)])
    assert (second[0].bytes_in, second[0].bytes_out, second[0].records_out) == (150, 40, 4)
    assert decode_samples(encode_samples(second)) == second
    # the partition left and came back with fresh counters
    third = s.sample(3000, [PartitionLoad("t", 0, LoadCounters(bytes_in=5), 650)])
    assert third[0].bytes_in == 5


def test_the_rebalancer_reads_the_sample_format_the_broker_writes() -> None:
    import ast
    import pathlib

    import tools.rebalance.samples as reader
    from broker.load_samples import PartitionSample, parse_sample_key, sample_key

    written = [PartitionSample(1_700_000_000_000, 10_000, 2, "t", 3, 100, 50, 10, 5, 4096)]
    (read,) = reader.decode_samples(encode_samples(written))
    assert tuple(getattr(read, c) for c in reader.SAMPLE_COLUMNS) == \
        tuple(getattr(written[0], c) for c in reader.SAMPLE_COLUMNS)
    key = sample_key(2, 1_700_000_000_000)
    assert reader.parse_sample_key(key) == parse_sample_key(key) == (2, 1_700_000_000_000)
    # the broker (a server) never imports the tools package
    for path in pathlib.Path(__file__).resolve().parents[2].joinpath("broker").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
                assert not any(n == "tools" or n.startswith("tools.") for n in names), (path.name, names)


def test_an_append_synced_before_a_pause_is_acknowledged_only_if_the_lease_and_leadership_still_hold() -> None:
    """After the WAL sync the produce path re-checks the lease AND the (fresh) image: a broker
    paused past its session whose lease was renewed on resume must not acknowledge a write to a
    partition that moved away meanwhile."""
    from types import SimpleNamespace

    from broker.heartbeat import BrokerLease
    from broker.request_core import RequestCore
    from metadata_quorum.kernel.errors import ErrorCode, FerryError

    now = {"t": 100.0}
    lease = BrokerLease(4000)
    regs = {0: SimpleNamespace(leader=1, leader_epoch=5)}
    image = SimpleNamespace(topics=SimpleNamespace(by_name={"t": "tid"}, partition=lambda tid, p: regs.get(p)))
    broker: Any = object.__new__(RequestCore)
    broker.broker_id = 1
    broker.config = SimpleNamespace(session_timeout_ms=4000)
    broker.heartbeater = SimpleNamespace(lease=lease)
    broker.follower = SimpleNamespace(fresh=lambda t, window_s: window_s == lease.session_timeout_s)
    broker.manager = SimpleNamespace(image=image)
    broker._lease_warned_mono_s = -1e9
    replica = SimpleNamespace(leader_epoch=5, fenced=False)
    slot: Any = SimpleNamespace(tp=SimpleNamespace(partition=0), replica=replica)
    import broker.request_core as core_mod
    real_monotonic = core_mod.time.monotonic
    core_mod.time.monotonic = lambda: now["t"]  # type: ignore[assignment]
    try:
        lease.renewed(99.0)
        broker._confirm_ack("t", slot, replica)  # lease valid, still the leader: acknowledged
        now["t"] = 110.0  # paused past the session between the sync and the answer
        with pytest.raises(FerryError) as err:
            broker._confirm_ack("t", slot, replica)
        assert err.value.error == ErrorCode.NOT_LEADER_OR_FOLLOWER
        lease.renewed(109.5)  # unfenced again on resume, image caught up: it shows the move
        regs[0] = SimpleNamespace(leader=2, leader_epoch=6)
        with pytest.raises(FerryError) as err:
            broker._confirm_ack("t", slot, replica)
        assert err.value.error == ErrorCode.NOT_LEADER_OR_FOLLOWER and (err.value.details or {})["leader_id"] == 2
        regs[0] = SimpleNamespace(leader=1, leader_epoch=5)
        broker._confirm_ack("t", slot, replica)  # nothing moved: acknowledged
    finally:
        core_mod.time.monotonic = real_monotonic  # type: ignore[assignment]


async def test_a_write_the_lease_covered_is_acknowledged_though_the_image_fell_behind_meanwhile() -> None:
    """The image going stale during a write (a controller failover: heartbeats answered, the
    metadata log not) does not refuse the write once synced: under the lease that covered it no
    other broker can own the partition, so the write is in the log. Refusing it made librdkafka
    retry the batch, and its epoch bump on another partition's sequence gap renumbered it: the
    record was appended twice (chaos seed 6, --net). A lease that ran out during the write, or a
    fenced stream, still refuses it."""
    from types import SimpleNamespace

    from broker.admission import may_acknowledge
    from broker.heartbeat import BrokerLease
    from broker.request_core import RequestCore
    from metadata_quorum.kernel.errors import ErrorCode, FerryError

    now = {"t": 100.0}
    fresh = {"yes": True}
    lease = BrokerLease(4000)
    regs = {0: SimpleNamespace(leader=1, leader_epoch=5)}
    image = SimpleNamespace(topics=SimpleNamespace(by_name={"t": "tid"}, partition=lambda tid, p: regs.get(p)))
    broker: Any = object.__new__(RequestCore)
    broker.broker_id = 1
    broker.heartbeater = SimpleNamespace(lease=lease)
    broker.follower = SimpleNamespace(fresh=lambda t, window_s: fresh["yes"])
    broker.manager = SimpleNamespace(image=image)
    broker._lease_warned_mono_s = -1e9
    replica = SimpleNamespace(leader_epoch=5, fenced=False)
    slot: Any = SimpleNamespace(tp=SimpleNamespace(partition=0), replica=replica)

    async def wal_sync(pause_s: float, image_falls_behind: bool) -> tuple[int, int]:
        now["t"] += pause_s
        fresh["yes"] = not image_falls_behind
        return 7, 7

    import broker.request_core as core_mod
    real_monotonic = core_mod.time.monotonic
    core_mod.time.monotonic = lambda: now["t"]  # type: ignore[assignment]
    try:
        lease.renewed(99.0)
        until = broker._lease_until_mono_s()
        assert until == 103.0 and broker.write_lease_valid()
        # the image falls behind while the WAL syncs; the lease still covers the write: acknowledged
        assert await broker._acknowledged("t", 0, slot, replica, wal_sync(0.01, True), until) == (7, 7)
        assert not broker.write_lease_valid()  # a new write is still refused at admission
        # the lease ran out during the write: refused, image fresh or not
        fresh["yes"], now["t"] = True, 100.0
        for behind in (True, False):
            now["t"] = 100.0
            with pytest.raises(FerryError) as err:
                await broker._acknowledged("t", 0, slot, replica, wal_sync(3.5, behind), until)
            assert err.value.error == ErrorCode.NOT_LEADER_OR_FOLLOWER
        # a fenced stream is refused even under the lease
        now["t"], replica.fenced = 100.0, True
        with pytest.raises(FerryError):
            await broker._acknowledged("t", 0, slot, replica, wal_sync(0.01, False), until)
    finally:
        core_mod.time.monotonic = real_monotonic  # type: ignore[assignment]
    view = SimpleNamespace(leader=1, leader_epoch=5)
    covered = dict(now_mono_s=101.0, lease_until_mono_s=103.0, replica_leader_epoch=5, same_replica=True,
                   view=view)
    may_acknowledge("t", 0, 1, lease_valid=False, replica_fenced=False, **covered)  # type: ignore[arg-type]
    with pytest.raises(FerryError, match="lost its lease"):
        may_acknowledge("t", 0, 1, lease_valid=False, replica_fenced=False,  # type: ignore[arg-type]
                        **{**covered, "now_mono_s": 103.0})


def test_a_produce_is_held_only_while_its_partition_changes_hands_here() -> None:
    from broker.admission import LeaderView, ServingState, handoff_pending

    def state(name: str, accepts: bool = False, closed: bool = True) -> ServingState:
        return ServingState(accepts_requests=accepts, state_name=name, replica_closed=closed, replica_leader_epoch=3)

    me, other, nobody = 1, 2, -1
    # the elected new owner still opening: held until it serves
    assert handoff_pending(me, LeaderView(me, 4), state("OPENING"))
    # the old owner closing, or closed, while no leader is named yet: held until one is
    assert handoff_pending(me, LeaderView(nobody, 3), state("CLOSING"))
    assert handoff_pending(me, LeaderView(nobody, 3), state("CLOSED"))
    # served, led elsewhere, unknown, no slot here, fenced: answered at once, as before
    assert not handoff_pending(me, LeaderView(me, 4), state("SERVING", accepts=True, closed=False))
    assert not handoff_pending(me, LeaderView(other, 4), state("CLOSING"))
    assert not handoff_pending(me, LeaderView(other, 4), state("CLOSED"))
    assert not handoff_pending(me, None, state("OPENING"))
    assert not handoff_pending(me, LeaderView(me, 4), None)
    assert not handoff_pending(me, LeaderView(me, 4), state("FENCED"))
    assert not handoff_pending(me, LeaderView(nobody, 4), state("OPENING"))
    # the owner-to-be, named before its election: held (with or without a slot) until it serves
    assert handoff_pending(me, LeaderView(nobody, 3, me, 4), None)
    assert handoff_pending(me, LeaderView(nobody, 3, me, 4), state("CLOSED"))
    assert not handoff_pending(me, LeaderView(nobody, 3, me, 4), state("FENCED"))
    # the old owner once the owner-to-be is named: refused at once, naming it
    assert not handoff_pending(me, LeaderView(nobody, 3, other, 4), state("CLOSING"))
    assert not handoff_pending(me, LeaderView(nobody, 3, other, 4), state("CLOSED"))


def test_a_refusal_during_a_hand_over_names_the_owner_to_be() -> None:
    """KIP-951: the client learns where to go next from the refusal itself."""
    from broker.admission import LeaderView, not_leader

    err = not_leader("t", 0, 1, LeaderView(-1, 3, 2, 4), "CLOSING", "http://b2")
    assert err.error == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert err.details == {"leader_id": 2, "leader_url": "http://b2", "leader_epoch": 4}
    assert "moving to broker 2" in err.message
    err = not_leader("t", 0, 1, LeaderView(-1, 3), "CLOSING", None)
    assert (err.details or {})["leader_id"] == -1 and "no leader" in err.message


def test_key_compaction_looks_every_short_pass_and_object_compaction_every_long_one() -> None:
    """Compacted topics are cleaned within seconds of their data's upload (Kafka's cleaner looks
    every 15 s); object compaction keeps its own, longer period in the same passes."""
    from itertools import islice

    from broker.compaction import passes

    assert list(islice(passes(30_000, 5_000), 12)) == [(5_000, False)] * 5 + [(5_000, True)] + \
        [(5_000, False)] * 5 + [(5_000, True)]
    assert list(islice(passes(30_000, 30_000), 2)) == [(30_000, True), (30_000, True)]
    assert list(islice(passes(4_000, 10_000), 2)) == [(4_000, True), (4_000, True)]
