"""The six-step move driven through the real PartitionManager, Replica and StreamStorage, with the
in-process controller and the in-memory object store (fast and deterministic; the same scenarios
run against real processes in test_broker_integration.py)."""
from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import pytest

from metadata_quorum.kernel.controller_api import ControllerWrites, WriteFunction
from broker.log_dirs_manager import LogDirsManager
from broker.log_dirs_report import alter_s3_replica_dir
from broker.metrics import BrokerMetrics
from broker.partition import PartitionState
from broker.partition_manager import PartitionManager
from broker.partition_meta import PartitionMeta
from broker.replica import META_COMPACT_FORCE_RECORDS, Replica
from broker.tail_handoff import TailHandoff
from metadata_quorum.delta import MetadataDelta
from metadata_quorum.kernel.errors import ErrorCode, FerryError
from metadata_quorum.image import EMPTY_IMAGE
from metadata_quorum.local_controller import LocalController
from stream_storage import batches
from stream_storage.config import StreamStorageConfig
from stream_storage.control import LocalStreamControl
from stream_storage.memory_store import MemoryObjectStore
from stream_storage.storage import StreamStorage


class InProcessCluster:
    def __init__(self, root: str, brokers: int = 2, wal_per_dir: bool = False, hand_off_tails: bool = False) -> None:
        self.wal_per_dir = wal_per_dir
        # the brokers' object-tail hand-off, delivered in process (the HTTP route: test_tail_handoff.py)
        self.tails: DirectTailSender | None = DirectTailSender(self) if hand_off_tails else None
        self.extra_storages: list[StreamStorage] = []
        self.skew_ms = 0
        self.controller = LocalController(lambda: int(time.time() * 1000) + self.skew_ms, session_timeout_ms=2000)
        self.store = MemoryObjectStore(latency_ms=0.5)
        self.root = root
        self.ids = list(range(1, brokers + 1))
        self.managers: dict[int, PartitionManager] = {}
        self.storages: dict[int, StreamStorage] = {}
        self.dirs: dict[int, LogDirsManager] = {}
        self.listeners: dict[int, Any] = {}

    def wal_dir(self, broker_id: int) -> str:
        return os.path.join(self.root, "wal", f"broker-{broker_id}")

    def wal_dirs(self, broker_id: int) -> list[str]:
        root = self.wal_dir(broker_id)
        return [root] + [os.path.join(root, d) for d in ("0", "1") if os.path.isdir(os.path.join(root, d))]

    async def start(self) -> "InProcessCluster":
        for bid in self.ids:
            dirs = LogDirsManager([os.path.join(self.root, f"b{bid}", f"d{i}") for i in range(2)])
            dirs.prepare()
            self.dirs[bid] = dirs
            epoch = self.controller.write("register_broker", {
                "broker_id": bid, "incarnation_id": f"inc-{bid}", "endpoints": [f"http://b{bid}"],
                "log_dirs": [{"dir_id": d.dir_id, "path": d.path} for d in dirs.dirs]})["broker_epoch"]
            self.controller.write("broker_heartbeat", {"broker_id": bid, "broker_epoch": epoch,
                                                       "metadata_offset": 10**9})
            storage = StreamStorage(StreamStorageConfig(wal_dir=self.wal_dir(bid), upload_interval_ms=60000), self.store,
                                    LocalStreamControl(self.controller, delay_ms=0.2), bid, epoch)
            await storage.start()
            self.storages[bid] = storage
            per_dir: Any = storage
            if self.wal_per_dir:  # each log dir with its own WAL (and cache, uploader)
                per_dir = {}
                for i, d in enumerate(dirs.dirs):
                    st = StreamStorage(StreamStorageConfig(wal_dir=os.path.join(self.wal_dir(bid), str(i)), upload_interval_ms=60000),
                                       self.store, LocalStreamControl(self.controller, delay_ms=0.2), bid, epoch)
                    await st.start()
                    self.extra_storages.append(st)
                    per_dir[d.path] = st

            async def write(op: str, args: dict[str, Any]) -> dict[str, Any]:
                await asyncio.sleep(0.0005)
                return self.controller.write(op, args)

            manager = PartitionManager(bid, per_dir, ControllerWrites(WriteFunction(write)), BrokerMetrics(bid), self.wal_dirs, dirs,
                                       tail_sender=self.tails)
            self.managers[bid] = manager

            def listener(_base: int, _records: Any, delta: Any, image: Any, m: PartitionManager = manager) -> None:
                m.on_delta(delta, image)

            self.listeners[bid] = listener
            self.controller.listeners.append(listener)
        return self

    async def stop(self) -> None:
        for m in self.managers.values():
            await m.cancel_tasks()
        for s in list(self.storages.values()) + self.extra_storages:
            await s.abort()

    async def serving(self, bid: int, topic: str, partition: int, timeout_s: float = 10.0) -> Any:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            slot = self.managers[bid].slot_by_name(topic, partition)
            if slot is not None and slot.status.accepts_produce and slot.replica is not None:
                return slot
            await asyncio.sleep(0.005)
        raise AssertionError(f"broker {bid} does not serve {topic}-{partition}")


class DirectTailSender:
    """Hands a tail to the receiving manager directly (brokers register as ``http://b<id>``)."""

    def __init__(self, cluster: InProcessCluster) -> None:
        self.cluster = cluster
        self.sent: list[tuple[int, TailHandoff, bool]] = []
        self.drop = False  # a lost hand-off

    async def send(self, url: str, handoff: TailHandoff, tail: bytes) -> bool:
        bid = int(url.rsplit("b", 1)[1])
        kept = not self.drop and self.cluster.managers[bid].close_handoff.accept_object_tail(
            handoff.object_key, handoff.size, handoff.tail_start, tail)
        self.sent.append((bid, handoff, kept))
        return kept


@pytest.fixture
async def cluster(tmp_path):  # type: ignore[no-untyped-def]
    c = await InProcessCluster(str(tmp_path)).start()
    yield c
    await c.stop()


async def append(slot: Any, value: bytes) -> int:
    body = batches.build_batch([(None, value)], timestamp_ms=int(time.time() * 1000))
    base, _ = await slot.replica.append(body, batches.validate_batches(body))
    return int(base)


async def read_all(slot: Any) -> list[batches.Record]:
    out: list[batches.Record] = []
    offset = slot.replica.log_start_offset
    for _ in range(10000):
        if offset >= slot.replica.high_watermark:
            break
        recs = [r for r in batches.read_records(await slot.replica.fetch(offset, 1 << 20, 0)) if r.offset >= offset]
        out += recs
        offset = recs[-1].offset + 1
    return out


async def test_moves_back_and_forth_keep_every_record_and_time_each_step(cluster: InProcessCluster) -> None:
    c = cluster
    c.controller.write("create_topics", {"topics": [{"name": "t", "num_partitions": 1, "replication_factor": 1,
                                                     "assignments": {"0": [1]}}]})
    acked: list[tuple[int, bytes]] = []
    owner = 1
    for round_no in range(16):
        slot = await c.serving(owner, "t", 0)
        for i in range(5):
            value = b"m%d-%d" % (round_no, i)
            acked.append((await append(slot, value), value))
        target = 2 if owner == 1 else 1
        c.controller.write("alter_partition_reassignments",
                           {"reassignments": [{"topic": "t", "partition": 0, "replicas": [target]}]})
        # step 2: the old owner refuses produce from the moment it sees the change
        with pytest.raises(FerryError) as e:
            await append(slot, b"refused")
        assert e.value.error is ErrorCode.NOT_LEADER_OR_FOLLOWER
        owner = target
    slot = await c.serving(owner, "t", 0)
    records = await read_all(slot)
    assert [(r.offset, r.value) for r in records] == acked
    await asyncio.sleep(0.3)  # timelines are published (coalesced) after the election
    moves = [m for m in c.managers[owner].moves("t", 0) if m.from_broker is not None]
    assert len(moves) == 16 and all(m.complete and m.clean for m in moves), [m.to_json() for m in moves
                                                                             if not (m.complete and m.clean)]
    for m in moves:
        times = [m.t_ms[f"t{i}"] for i in range(7)]
        assert None not in times and times == sorted(times)  # type: ignore[type-var]
        assert sum(v for v in m.steps_ms.values() if v is not None) == m.total_ms
    # the meta stream was compacted: a move reads a bounded amount whatever the history
    meta_stream = c.controller.image.streams.streams[slot.replica.meta_stream_id]
    assert meta_stream.start_offset > 0 and len(meta_stream.objects) <= META_COMPACT_FORCE_RECORDS


async def test_a_clean_move_costs_one_put_and_one_get_whatever_the_meta_history(
        cluster: InProcessCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    """Step 4 is one PUT and one commit (which closes both streams); step 6 reads the partition
    meta from that object alone — one GET, however many moves wrote the meta stream before — and
    asks the controller for nothing the metadata image already holds (no describe_stream)."""
    c = cluster
    c.controller.write("create_topics", {"topics": [{"name": "h", "num_partitions": 1, "replication_factor": 1,
                                                     "assignments": {"0": [1]}}]})
    owner = 1
    acked: list[tuple[int, bytes]] = []
    for round_no in range(4):  # a history of closes in the meta stream, one object each
        slot = await c.serving(owner, "h", 0)
        for i in range(3):
            acked.append((await append(slot, b"h%d-%d" % (round_no, i)), b"h%d-%d" % (round_no, i)))
        owner = 2 if owner == 1 else 1
        c.controller.write("alter_partition_reassignments",
                           {"reassignments": [{"topic": "h", "partition": 0, "replicas": [owner]}]})
    slot = await c.serving(owner, "h", 0)
    meta_sid = slot.replica.meta_stream_id
    assert len(c.controller.image.streams.streams[meta_sid].objects) >= 4
    acked.append((await append(slot, b"last"), b"last"))
    await asyncio.sleep(0.05)  # background work of the earlier moves (timelines) settles

    ops: list[str] = []
    reads: list[str] = []
    write, read = c.controller.write, c.controller.read

    def counting_write(op: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
        ops.append(op)
        return write(op, args)

    def counting_read(op: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
        reads.append(op)
        return read(op, args)

    monkeypatch.setattr(c.controller, "write", counting_write)
    monkeypatch.setattr(c.controller, "read", counting_read)
    c.store.calls.clear()
    old = slot.replica
    target = 2 if owner == 1 else 1
    c.controller.write("alter_partition_reassignments",
                       {"reassignments": [{"topic": "h", "partition": 0, "replicas": [target]}]})
    moved = await c.serving(target, "h", 0)
    calls = dict(c.store.calls)
    assert calls == {"put": 1, "get": 1}, calls  # no LIST, no GET of older meta objects
    assert "describe_stream" not in reads, reads
    assert ops.count("commit_object") == 1 and "close_stream" not in ops, ops
    assert ops.count("open_stream") == 2 and ops.count("elect_leaders") == 1, ops
    assert [(r.offset, r.value) for r in await read_all(moved)] == acked
    # the state the old owner closed with, from its snapshot (a clean open: no index rebuild)
    assert (moved.replica.size_bytes, moved.replica.meta.time_index) == (old.size_bytes, old.meta.time_index)
    assert moved.replica.meta.leader_epochs[:-1] == old.meta.leader_epochs


async def test_with_the_tail_handed_over_a_clean_move_costs_one_put_and_no_get(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The old owner hands its closing object's tail to the new owner once it is stored: step 6
    reads the meta from it without a GET. The election goes right behind the closing commit. A
    lost hand-off costs the GET again, nothing else."""
    c = await InProcessCluster(str(tmp_path), hand_off_tails=True).start()
    assert c.tails is not None
    try:
        c.controller.write("create_topics", {"topics": [{"name": "p", "num_partitions": 1, "replication_factor": 1,
                                                         "assignments": {"0": [1]}}]})
        ops: list[str] = []
        write = c.controller.write

        def counting_write(op: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
            ops.append(op)
            return write(op, args)

        monkeypatch.setattr(c.controller, "write", counting_write)
        acked: list[tuple[int, bytes]] = []
        owner = 1
        for round_no, drop in enumerate((False, False, True, False)):
            slot = await c.serving(owner, "p", 0)
            for i in range(3):
                acked.append((await append(slot, b"p%d-%d" % (round_no, i)), b"p%d-%d" % (round_no, i)))
            await asyncio.sleep(0.05)  # the earlier move's background work (timelines) settles
            c.store.calls.clear()
            ops.clear()
            c.tails.drop = drop
            old = slot.replica
            target = 2 if owner == 1 else 1
            c.controller.write("alter_partition_reassignments",
                               {"reassignments": [{"topic": "p", "partition": 0, "replicas": [target]}]})
            moved = await c.serving(target, "p", 0)
            sent = c.tails.sent[-1]
            assert (sent[0], sent[2]) == (target, not drop), c.tails.sent
            assert dict(c.store.calls) == ({"put": 1, "get": 1} if drop else {"put": 1}), (drop, c.store.calls)
            assert ops.count("elect_leaders") == 1 and ops.count("commit_object") == 1, ops
            assert ops.index("elect_leaders") > ops.index("commit_object"), ops
            assert moved.replica.meta.leader_epochs[:-1] == old.meta.leader_epochs
            owner = target
        assert [(r.offset, r.value) for r in await read_all(await c.serving(owner, "p", 0))] == acked
        await asyncio.sleep(0.3)  # timelines are published after the election
        moves = [m for m in c.managers[owner].moves("p", 0) if m.from_broker is not None]
        assert moves and all(m.complete and m.clean for m in moves)
        for m in moves:
            times = [m.t_ms[f"t{i}"] for i in range(7)]
            assert None not in times and times == sorted(times), m.to_json()  # type: ignore[type-var]
    finally:
        await c.stop()


async def test_a_produce_during_a_move_is_held_until_the_hand_off_settles(cluster: InProcessCluster) -> None:
    """On the old owner a held request returns once the new leader is named; on the new owner once
    it serves (then its append is taken): neither waits out the bound, neither returns early."""
    from broker.admission import LeaderView
    c = cluster
    c.controller.write("create_topics", {"topics": [{"name": "w", "num_partitions": 1, "replication_factor": 1,
                                                     "assignments": {"0": [1]}}]})
    await append(await c.serving(1, "w", 0), b"before")

    def view(bid: int) -> Any:
        def current() -> LeaderView | None:
            image = c.managers[bid].image
            reg = image.topics.partition(image.topics.by_name["w"], 0)
            return None if reg is None else LeaderView(reg.leader, reg.leader_epoch)
        return current

    # nothing under way: returns at once, without yielding to the loop
    waited = c.managers[1].await_handoff("w", 0, view(1), 5.0)
    with pytest.raises(StopIteration):
        waited.send(None)
    done: dict[int, tuple[float, Any]] = {}

    async def hold(bid: int) -> None:
        await c.managers[bid].await_handoff("w", 0, view(bid), 5.0)
        slot = c.managers[bid].slot_by_name("w", 0)
        done[bid] = (time.monotonic(), view(bid)(), None if slot is None else slot.status.state)

    started = time.monotonic()
    c.controller.write("alter_partition_reassignments", {"reassignments": [{"topic": "w", "partition": 0,
                                                                            "replicas": [2]}]})
    old = asyncio.ensure_future(hold(1))
    await asyncio.sleep(0)
    assert not old.done()  # broker 1 is closing: held
    while c.managers[2].slot_by_name("w", 0) is None or \
            c.managers[2].slot_by_name("w", 0).status.state is not PartitionState.OPENING:
        if (slot := c.managers[2].slot_by_name("w", 0)) is not None and slot.status.accepts_produce:
            break
        await asyncio.sleep(0.0005)
    new = asyncio.ensure_future(hold(2))
    await asyncio.wait_for(asyncio.gather(old, new), 4.0)
    assert done[1][1].leader == 2  # the old owner let go once broker 2 was named
    assert done[2][2] is PartitionState.SERVING  # the new owner once it served
    assert max(t for t, _v, _s in done.values()) - started < 2.0
    assert await append(await c.serving(2, "w", 0), b"after") == 1


async def test_held_requests_leave_in_arrival_order_each_after_the_one_before_ran_on(
        cluster: InProcessCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    """A pipelining producer's batches held during a hand-off reach the WAL in the order sent: the
    held requests leave one by one in arrival order, and one arriving after the hand-off settled
    but before those ahead of it left queues behind them."""
    manager = cluster.managers[1]
    pending = {"now": True}
    monkeypatch.setattr(manager, "_handoff_pending", lambda topic, partition, view: pending["now"])
    order: list[int] = []

    async def request(n: int) -> None:
        await manager.await_handoff("p", 0, lambda: None, 5.0)
        order.append(n)  # what runs before the request's first await (its append to the WAL)

    held = [asyncio.ensure_future(request(n)) for n in range(5)]
    await asyncio.sleep(0.01)
    assert order == []
    pending["now"] = False
    manager.handoffs.changed()
    late = asyncio.ensure_future(request(5))  # the hand-off settled, but five are still ahead of it
    await asyncio.wait_for(asyncio.gather(*held, late), 2.0)
    assert order == [0, 1, 2, 3, 4, 5]
    assert manager.handoffs.lines == {}
    # a bounded wait: a hand-off that never settles lets the request go on (to be refused)
    pending["now"] = True
    started = time.monotonic()
    await manager.await_handoff("p", 0, lambda: None, 0.05)
    assert 0.04 < time.monotonic() - started < 1.0 and manager.handoffs.lines == {}


async def test_dead_owner_wal_recovered_and_stale_owner_fenced(cluster: InProcessCluster) -> None:
    c = cluster
    c.controller.write("create_topics", {"topics": [{"name": "f", "num_partitions": 1, "replication_factor": 1,
                                                     "assignments": {"0": [1]}}]})
    old = await c.serving(1, "f", 0)
    acked = [(await append(old, b"w%d" % i), b"w%d" % i) for i in range(20)]
    # broker 1 stops hearing the metadata log (a pause); broker 2 keeps heartbeating; time passes
    c.controller.listeners.remove(c.listeners[1])
    c.skew_ms += 5000
    epoch2 = c.controller.image.cluster.brokers[2].broker_epoch
    c.controller.write("broker_heartbeat", {"broker_id": 2, "broker_epoch": epoch2, "metadata_offset": 10**9})
    c.controller.tick()  # fences broker 1 and gives its partition to broker 2 at once
    new = await c.serving(2, "f", 0)
    assert [(r.offset, r.value) for r in await read_all(new)] == acked  # from broker 1's WAL
    moves = c.managers[2].moves("f", 0)
    assert moves and moves[0].clean is False and moves[0].to_broker == 2
    assert moves[0].recovered_records == 20 and not moves[0].wal_unreachable
    # the stale owner: its next writes are refused once its streams are fenced, and never land
    fenced = False
    for i in range(50):
        try:
            await append(old, b"stale%d" % i)
            await c.storages[1].force_upload(old.replica.data_stream_id)
        except FerryError as exc:
            assert exc.error in (ErrorCode.STREAM_FENCED, ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                 ErrorCode.STREAM_NOT_OPENED), exc
            c.managers[1].on_fenced(old, exc)
            fenced = True
            break
    assert fenced
    assert old.status.state is PartitionState.FENCED and not old.status.accepts_produce
    await append(new, b"after")
    values = [r.value for r in await read_all(new)]
    assert values == [v for _, v in acked] + [b"after"]


async def test_idempotent_retries_are_not_written_twice(cluster: InProcessCluster) -> None:
    c = cluster
    c.controller.write("create_topics", {"topics": [{"name": "i", "num_partitions": 1, "replication_factor": 1,
                                                     "assignments": {"0": [1]}}]})
    slot = await c.serving(1, "i", 0)
    body = batches.build_batch([(None, b"a"), (None, b"b")], timestamp_ms=1, producer_id=42, producer_epoch=0,
                               base_sequence=0)
    infos = batches.validate_batches(body)
    # the same batch sent three times at once (a client retrying while the first is in flight)
    answers = await asyncio.gather(*(slot.replica.append(body, infos) for _ in range(3)))
    assert answers == [(0, 1)] * 3
    # and again after a move: the producer state travelled in the meta stream
    c.controller.write("alter_partition_reassignments",
                       {"reassignments": [{"topic": "i", "partition": 0, "replicas": [2]}]})
    moved = await c.serving(2, "i", 0)
    assert await moved.replica.append(body, infos) == (0, 1)
    nxt = batches.build_batch([(None, b"c")], timestamp_ms=2, producer_id=42, producer_epoch=0, base_sequence=2)
    assert await moved.replica.append(nxt, batches.validate_batches(nxt)) == (2, 2)
    assert [r.value for r in await read_all(moved)] == [b"a", b"b", b"c"]


async def test_idempotent_retry_after_the_owner_died_is_answered_from_its_recovered_wal(
        cluster: InProcessCluster) -> None:
    """A kill -9 can land after a batch is durable and before its answer leaves: the client retries
    the same sequence on the new owner, which must know it from the dead owner's WAL tail."""
    c = cluster
    c.controller.write("create_topics", {"topics": [{"name": "k", "num_partitions": 1, "replication_factor": 1,
                                                     "assignments": {"0": [1]}}]})
    old = await c.serving(1, "k", 0)
    sent = []
    for seq in range(6):
        body = batches.build_batch([(None, b"v%d" % seq)], timestamp_ms=1, producer_id=77, producer_epoch=0,
                                   base_sequence=seq)
        sent.append(body)
        assert await old.replica.append(body, batches.validate_batches(body)) == (seq, seq)
    c.controller.listeners.remove(c.listeners[1])  # broker 1 is gone; broker 2 keeps heartbeating
    c.skew_ms += 5000
    epoch2 = c.controller.image.cluster.brokers[2].broker_epoch
    c.controller.write("broker_heartbeat", {"broker_id": 2, "broker_epoch": epoch2, "metadata_offset": 10**9})
    c.controller.tick()
    new = await c.serving(2, "k", 0)
    assert c.managers[2].moves("k", 0)[0].clean is False
    retry = sent[-1]
    assert await new.replica.append(retry, batches.validate_batches(retry)) == (5, 5)
    assert [r.value for r in await read_all(new)] == [b"v%d" % i for i in range(6)]


def idem(value: bytes, seq: int, producer_id: int = 55, epoch: int = 0) -> tuple[bytes, list[batches.BatchInfo]]:
    body = batches.build_batch([(None, value)], timestamp_ms=1, producer_id=producer_id, producer_epoch=epoch,
                               base_sequence=seq)
    return body, batches.validate_batches(body)


async def test_a_batch_after_a_refused_one_is_refused_not_written(cluster: InProcessCluster) -> None:
    """The chaos finding: librdkafka pipelines batches R1, R2 of a partition; R1 reached the old
    owner as it closed (NOT_LEADER_OR_FOLLOWER), R2 reached the new owner and was written. A
    pipelining client takes R2's success to mean that R1 was written too (it reports R1's records
    delivered, without an offset), so R2 must be refused until R1 is in, as Kafka does."""
    c = cluster
    c.controller.write("create_topics", {"topics": [{"name": "q", "num_partitions": 1, "replication_factor": 1,
                                                     "assignments": {"0": [1]}}]})
    old = await c.serving(1, "q", 0)
    assert await old.replica.append(*idem(b"r0", 0)) == (0, 0)
    c.controller.write("alter_partition_reassignments",
                       {"reassignments": [{"topic": "q", "partition": 0, "replicas": [2]}]})
    with pytest.raises(FerryError) as refused:
        await old.replica.append(*idem(b"r1", 1))
    assert refused.value.error is ErrorCode.NOT_LEADER_OR_FOLLOWER
    new = await c.serving(2, "q", 0)
    with pytest.raises(FerryError) as gap:
        await new.replica.append(*idem(b"r2", 2))
    assert gap.value.error is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert new.replica.high_watermark == 1  # nothing was written
    # the client re-sends R1 then R2, as librdkafka does after the error: both land, in order
    assert await new.replica.append(*idem(b"r1", 1)) == (1, 1)
    assert await new.replica.append(*idem(b"r2", 2)) == (2, 2)
    assert [r.value for r in await read_all(new)] == [b"r0", b"r1", b"r2"]


async def test_pipelined_batches_follow_the_one_in_flight(cluster: InProcessCluster) -> None:
    """Five batches of one producer in flight at once (librdkafka's max.in.flight): each follows
    the one before it although none is written yet; one after a gap in flight is still refused."""
    c = cluster
    c.controller.write("create_topics", {"topics": [{"name": "p", "num_partitions": 1, "replication_factor": 1,
                                                     "assignments": {"0": [1]}}]})
    slot = await c.serving(1, "p", 0)
    sends = [slot.replica.append(*idem(b"p%d" % i, i)) for i in range(5)]
    sends.append(slot.replica.append(*idem(b"gap", 7)))
    answers = await asyncio.gather(*sends, return_exceptions=True)
    assert answers[:5] == [(i, i) for i in range(5)]
    assert isinstance(answers[5], FerryError) and answers[5].error is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    # a new producer epoch (KIP-360's bump after a failed batch) starts again at sequence 0
    with pytest.raises(FerryError):
        await slot.replica.append(*idem(b"e1", 3, epoch=1))
    assert await slot.replica.append(*idem(b"e1", 0, epoch=1)) == (5, 5)
    with pytest.raises(FerryError) as old_epoch:
        await slot.replica.append(*idem(b"late", 5, epoch=0))
    assert old_epoch.value.error is ErrorCode.INVALID_PRODUCER_EPOCH
    assert [r.value for r in await read_all(slot)] == [b"p0", b"p1", b"p2", b"p3", b"p4", b"e1"]


def test_a_checkpoint_covers_only_batches_observed_without_a_gap() -> None:
    """An append can be durable (inside the high watermark) before its producer state is noted;
    a checkpoint then must not claim it, or the next owner after a crash would not re-read it and
    would refuse that producer's next batch as out of order."""
    replica = Replica(None, "c", "id", 0, 1, lambda _b: [], "/nonexistent")
    first, second = idem(b"a", 0)[1][0], idem(b"b", 1)[1][0]
    replica.high_watermark = 2
    replica._observe(second, 1, 1)  # the second append's continuation ran first
    assert replica.meta_snapshot(clean=False).end_offset == 0
    assert replica.producers.last_sequence(55) == (0, 1)
    replica._observe(first, 0, 1)
    assert replica.meta_snapshot(clean=False).end_offset == 2


async def test_a_fenced_close_still_closes_the_streams_it_owns(cluster: InProcessCluster) -> None:
    """Chaos seed 19: broker 1 was paused past its session; the new owner opened x-1's data stream,
    then broker 1 came back before it opened the meta stream (STREAM_NOT_CLOSED: broker 1 is alive).
    Broker 1 closes x-0 and x-1 together: the shared upload is fenced for x-1's data stream only.
    x-0 closes normally, and x-1's meta stream, still broker 1's, is closed too instead of being
    abandoned open (the new owner would wait for it forever)."""
    c = cluster
    c.controller.write("create_topics", {"topics": [{"name": "x", "num_partitions": 2, "replication_factor": 1,
                                                     "assignments": {"0": [1], "1": [1]}}]})
    kept, half_taken = await c.serving(1, "x", 0), await c.serving(1, "x", 1)
    for i in range(5):  # buffered in broker 1's uploader: the close uploads them in one object
        await append(kept, b"a%d" % i)
        await append(half_taken, b"b%d" % i)
    data_sid, meta_sid = half_taken.replica.data_stream_id, half_taken.replica.meta_stream_id
    streams = c.controller.image.streams.streams
    # broker 1 silent past its session: broker 2 takes over x-1's data stream, not yet its meta stream
    c.skew_ms += 5000
    epoch1, epoch2 = (c.controller.image.cluster.brokers[b].broker_epoch for b in (1, 2))
    c.controller.write("broker_heartbeat", {"broker_id": 2, "broker_epoch": epoch2, "metadata_offset": 10**9})
    c.controller.write("open_stream", {"stream_id": data_sid, "epoch": streams[data_sid].epoch + 1,
                                       "broker_id": 2, "broker_epoch": epoch2})
    c.controller.write("broker_heartbeat", {"broker_id": 1, "broker_epoch": epoch1, "metadata_offset": 10**9})
    meta_epoch = c.controller.image.streams.streams[meta_sid].epoch
    with pytest.raises(FerryError) as waiting:  # broker 1 is back: the meta stream is still its
        c.controller.write("open_stream", {"stream_id": meta_sid, "epoch": meta_epoch + 1,
                                           "broker_id": 2, "broker_epoch": epoch2})
    assert waiting.value.error is ErrorCode.STREAM_NOT_CLOSED
    c.controller.write("alter_partition_reassignments", {"reassignments": [
        {"topic": "x", "partition": 0, "replicas": [2]}, {"topic": "x", "partition": 1, "replicas": [2]}]})
    moved = await c.serving(2, "x", 0)
    assert [r.value for r in await read_all(moved)] == [b"a%d" % i for i in range(5)]
    deadline = time.monotonic() + 10
    while half_taken.status.state is not PartitionState.FENCED and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    assert half_taken.status.state is PartitionState.FENCED
    meta = c.controller.image.streams.streams[meta_sid]
    assert (meta.state, meta.owner) == ("CLOSED", 1)
    # so the new owner gets the meta stream now
    c.controller.write("open_stream", {"stream_id": meta_sid, "epoch": meta_epoch + 1,
                                       "broker_id": 2, "broker_epoch": epoch2})


async def test_deleted_topic_is_dropped_without_uploading(cluster: InProcessCluster) -> None:
    c = cluster
    c.controller.write("create_topics", {"topics": [{"name": "d", "num_partitions": 1, "replication_factor": 1,
                                                     "assignments": {"0": [1]}}]})
    slot = await c.serving(1, "d", 0)
    replica = slot.replica
    await append(slot, b"x")
    c.controller.write("delete_topics", {"names": ["d"]})
    for _ in range(200):
        if c.managers[1].slot_by_name("d", 0) is None and not c.managers[1].slots:
            break
        await asyncio.sleep(0.01)
    assert not c.managers[1].slots and slot.replica is None
    with pytest.raises(FerryError) as e:
        body = batches.build_batch([(None, b"late")], timestamp_ms=1)
        await replica.append(body, batches.validate_batches(body))
    assert e.value.error is ErrorCode.NOT_LEADER_OR_FOLLOWER


async def test_restarted_broker_never_replays_its_fenced_writes(cluster: InProcessCluster) -> None:
    """A paused owner writes to its WAL after another broker took over; when it restarts and later
    gets the partition back, those unacknowledged writes must not reappear."""
    c = cluster
    c.controller.write("create_topics", {"topics": [{"name": "s", "num_partitions": 1, "replication_factor": 1,
                                                     "assignments": {"0": [1]}}]})
    old = await c.serving(1, "s", 0)
    acked = [(await append(old, b"a%d" % i), b"a%d" % i) for i in range(5)]
    c.controller.listeners.remove(c.listeners[1])  # broker 1 is paused: it sees nothing more
    c.skew_ms += 5000
    epoch2 = c.controller.image.cluster.brokers[2].broker_epoch
    c.controller.write("broker_heartbeat", {"broker_id": 2, "broker_epoch": epoch2, "metadata_offset": 10**9})
    c.controller.tick()
    await c.serving(2, "s", 0)
    # broker 1 wakes up and writes to its own WAL (a real broker's lease refuses to acknowledge this)
    body = batches.build_batch([(None, b"stale")], timestamp_ms=1)
    try:
        await old.replica.append(body, batches.validate_batches(body))
    except FerryError:
        pass
    # broker 1 restarts (same WAL dir) while broker 2 moves the partition back to it
    await c.managers[1].cancel_tasks()
    await c.storages[1].abort()
    c.skew_ms += 5000
    c.controller.write("broker_heartbeat", {"broker_id": 2, "broker_epoch": epoch2, "metadata_offset": 10**9})
    dirs = LogDirsManager([os.path.join(c.root, "b1", f"d{i}") for i in range(2)])
    dirs.prepare()
    epoch1 = c.controller.write("register_broker", {
        "broker_id": 1, "incarnation_id": "inc-1b", "endpoints": ["http://b1"],
        "log_dirs": [{"dir_id": d.dir_id, "path": d.path} for d in dirs.dirs]})["broker_epoch"]
    c.controller.write("broker_heartbeat", {"broker_id": 1, "broker_epoch": epoch1, "metadata_offset": 10**9})
    storage = StreamStorage(StreamStorageConfig(wal_dir=c.wal_dir(1)), c.store,
                            LocalStreamControl(c.controller, delay_ms=0.2), 1, epoch1)
    await storage.start()
    c.storages[1] = storage

    async def write(op: str, args: dict[str, Any]) -> dict[str, Any]:
        return c.controller.write(op, args)

    manager = PartitionManager(1, storage, ControllerWrites(WriteFunction(write)), BrokerMetrics(1), c.wal_dirs, dirs)
    c.managers[1] = manager
    manager.on_delta(MetadataDelta(EMPTY_IMAGE).replay_all([r for _o, r in c.controller.log]),
                     c.controller.image)
    c.controller.listeners.append(lambda _b, _r, delta, image: manager.on_delta(delta, image))
    c.controller.write("alter_partition_reassignments",
                       {"reassignments": [{"topic": "s", "partition": 0, "replicas": [1]}]})
    back = await c.serving(1, "s", 0)
    assert [(r.offset, r.value) for r in await read_all(back)] == acked
    await append(back, b"b0")  # and it serves on from there
    assert [r.value for r in await read_all(back)] == [v for _o, v in acked] + [b"b0"]


async def test_log_dirs_placement_and_alter_through_future_dir(cluster: InProcessCluster) -> None:
    c = cluster
    d0, d1 = (d.path for d in c.dirs[2].dirs)
    c.controller.write("create_topics", {"topics": [{"name": "l", "num_partitions": 2, "replication_factor": 1,
                                                     "assignments": {"0": [1], "1": [1]}}]})
    # a reassignment naming a log dir places the replica there when it opens
    reply = c.controller.write("alter_partition_reassignments", {"reassignments": [
        {"topic": "l", "partition": 0, "replicas": [2], "log_dirs": [d1]}]})
    assert not reply["responses"][0].get("error"), reply
    slot = await c.serving(2, "l", 0)
    assert slot.log_dir == d1 and os.path.isdir(os.path.join(d1, "l-0"))
    # AlterReplicaLogDirs: bad input changes nothing
    for bad, error in (("rel/dir", ErrorCode.LOG_DIR_NOT_FOUND), ("/no/such/dir", ErrorCode.LOG_DIR_NOT_FOUND)):
        with pytest.raises(FerryError) as e:
            await alter_s3_replica_dir(c.dirs[2], c.managers[2], "l", 0, bad)
        assert e.value.error is error
    with pytest.raises(FerryError) as e:
        await alter_s3_replica_dir(c.dirs[2], c.managers[2], "nope", 0, d0)
    assert e.value.error is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    with pytest.raises(FerryError) as e:
        await alter_s3_replica_dir(c.dirs[2], c.managers[2], "l", 1, d0)  # led by broker 1, no replica here
    assert e.value.error is ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert slot.log_dir == d1
    # a real move: through l-0.<uid>-future, old copy retired
    await append(slot, b"before")
    await alter_s3_replica_dir(c.dirs[2], c.managers[2], "l", 0, d0)
    assert slot.log_dir == d0 and os.listdir(d0).count("l-0") == 1 and "l-0" not in os.listdir(d1)
    await append(slot, b"after")
    assert [r.value for r in await read_all(slot)] == [b"before", b"after"]


async def test_serving_partition_checkpoints_its_meta(cluster: InProcessCluster) -> None:
    c = cluster
    for m in c.managers.values():
        m.meta_checkpoint_interval_ms = 20
    c.controller.write("create_topics", {"topics": [{"name": "k", "num_partitions": 1, "replication_factor": 1,
                                                     "assignments": {"0": [1]}}]})
    slot = await c.serving(1, "k", 0)
    for i in range(3):
        await append(slot, b"c%d" % i)
    for _ in range(200):
        raw = slot.replica.meta_stream.get("partition")
        if raw is not None and PartitionMeta.decode(raw).end_offset == 3:
            break
        await asyncio.sleep(0.01)
    meta = PartitionMeta.decode(slot.replica.meta_stream.get("partition"))
    assert meta.end_offset == 3 and meta.clean_shutdown is False and meta.size_bytes > 0
    assert not await slot.replica.checkpoint()  # nothing new since: nothing written


async def test_alter_log_dir_moves_wal_and_streams_to_the_target_dir(tmp_path) -> None:  # type: ignore[no-untyped-def]
    c = await InProcessCluster(str(tmp_path), wal_per_dir=True).start()
    try:
        d0, d1 = (d.path for d in c.dirs[1].dirs)
        c.controller.write("create_topics", {"topics": [{"name": "w", "num_partitions": 1, "replication_factor": 1,
                                                         "assignments": {"0": [1]}}]})
        slot = await c.serving(1, "w", 0)
        first = slot.log_dir
        other = d1 if first == d0 else d0
        old_storage = c.managers[1].storage_for(first)
        new_storage = c.managers[1].storage_for(other)
        assert old_storage is not new_storage and slot.replica.storage is old_storage
        acked = [(await append(slot, b"x%d" % i), b"x%d" % i) for i in range(5)]
        await alter_s3_replica_dir(c.dirs[1], c.managers[1], "w", 0, other)
        assert slot.log_dir == other and slot.replica.storage is new_storage and slot.status.accepts_produce
        assert old_storage.stream(slot.replica.data_stream_id) is None  # nothing of it left in the old WAL
        assert "w-0" in os.listdir(other) and "w-0" not in os.listdir(first)
        acked.append((await append(slot, b"after"), b"after"))
        assert [(r.offset, r.value) for r in await read_all(slot)] == acked
        # the new dir's WAL holds the tail now: a crash of this broker is recovered from it
        c.controller.listeners.remove(c.listeners[1])
        c.skew_ms += 5000
        epoch2 = c.controller.image.cluster.brokers[2].broker_epoch
        c.controller.write("broker_heartbeat", {"broker_id": 2, "broker_epoch": epoch2, "metadata_offset": 10**9})
        c.controller.tick()
        moved = await c.serving(2, "w", 0)
        assert [(r.offset, r.value) for r in await read_all(moved)] == acked
    finally:
        await c.stop()


async def test_saturated_dir_uploads_what_its_wal_buffers(cluster: InProcessCluster) -> None:
    c = cluster
    c.controller.write("create_topics", {"topics": [{"name": "z", "num_partitions": 1, "replication_factor": 1,
                                                     "assignments": {"0": [1]}}]})
    slot = await c.serving(1, "z", 0)
    for i in range(4):
        await append(slot, b"z%d" % i)
    stream = c.controller.image.streams.streams[slot.replica.data_stream_id]
    assert stream.end_offset < 4  # still only in the WAL (the uploader waits for its interval)
    await c.managers[1].relieve_saturated(slot.log_dir)
    assert c.controller.image.streams.streams[slot.replica.data_stream_id].end_offset == 4


async def test_unreachable_wal_of_a_dead_owner_is_stated_not_hidden(cluster: InProcessCluster) -> None:
    c = cluster
    c.controller.write("create_topics", {"topics": [{"name": "u", "num_partitions": 1, "replication_factor": 1,
                                                     "assignments": {"0": [1]}}]})
    old = await c.serving(1, "u", 0)
    for i in range(3):
        await append(old, b"u%d" % i)  # in broker 1's WAL only (uploads wait for their interval)
    c.controller.listeners.remove(c.listeners[1])
    os.rename(c.wal_dir(1), c.wal_dir(1) + ".gone")  # the disk holding broker 1's WAL is lost
    c.skew_ms += 5000
    epoch2 = c.controller.image.cluster.brokers[2].broker_epoch
    c.controller.write("broker_heartbeat", {"broker_id": 2, "broker_epoch": epoch2, "metadata_offset": 10**9})
    c.controller.tick()
    new = await c.serving(2, "u", 0)
    assert await read_all(new) == []  # only what reached S3 survives ...
    move = c.managers[2].moves("u", 0)[0]
    assert move.wal_unreachable and move.clean is False  # ... and the loss is stated
    assert move.to_json()["wal_unreachable"] is True


async def test_max_timestamp_and_latest_tiered_offsets_survive_uploads_deletes_and_moves(
        cluster: InProcessCluster) -> None:
    """ListOffsets -3 and -5 on a partition: the first record with the largest timestamp (kept as
    batches are appended, carried to the next owner in the partition meta, recomputed from what
    remains once DeleteRecords removed it), and the last offset already in S3 objects."""
    c = cluster
    c.controller.write("create_topics", {"topics": [{"name": "mx", "num_partitions": 1, "replication_factor": 1,
                                                     "assignments": {"0": [1]}}]})
    slot = await c.serving(1, "mx", 0)

    async def put(*stamps: int) -> None:
        body = batches.build_batch([batches.Record(0, ts, None, b"v", ()) for ts in stamps])
        await slot.replica.append(body, batches.validate_batches(body))

    assert await slot.replica.max_timestamp_offset() == (-1, -1)
    assert slot.replica.latest_tiered_offset() == -1
    await put(10_000_100, 10_000_400, 10_000_250)  # offsets 0-2: the middle one is the largest
    await put(9_000, 10_000_300)                    # 3-4
    await put(8_000)                                # 5
    assert await slot.replica.max_timestamp_offset() == (1, 10_000_400)
    await c.storages[1].force_upload(slot.replica.data_stream_id)
    assert slot.replica.latest_tiered_offset() == 5
    await put(7_000)                                # 6: only in the WAL and the cache
    assert slot.replica.latest_tiered_offset() == 5
    await slot.replica.delete_records_before(2)     # the largest record is gone, its batch is not
    assert await slot.replica.max_timestamp_offset() == (4, 10_000_300)
    c.controller.write("alter_partition_reassignments",
                       {"reassignments": [{"topic": "mx", "partition": 0, "replicas": [2]}]})
    slot = await c.serving(2, "mx", 0)
    assert await slot.replica.max_timestamp_offset() == (4, 10_000_300)
    assert slot.replica.latest_tiered_offset() == 6  # the close uploaded the tail
    await slot.replica.delete_records_before(5)
    assert await slot.replica.max_timestamp_offset() == (5, 8_000)
    await put(8_000)                                 # 7: a tie comes after the first
    assert await slot.replica.max_timestamp_offset() == (5, 8_000)
    await put(20_000_000)                            # 8: a new maximum, then the owner dies
    c.controller.listeners.remove(c.listeners[2])
    c.skew_ms += 5000
    epoch1 = c.controller.image.cluster.brokers[1].broker_epoch
    c.controller.write("broker_heartbeat", {"broker_id": 1, "broker_epoch": epoch1, "metadata_offset": 10**9})
    c.controller.tick()  # fences broker 2; broker 1 recovers its WAL tail and rebuilds the index from it
    slot = await c.serving(1, "mx", 0)
    assert await slot.replica.max_timestamp_offset() == (8, 20_000_000)
