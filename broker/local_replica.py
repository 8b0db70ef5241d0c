"""One ``storage=local`` replica on this broker: leader or follower of a Kafka-style replicated log.

As leader it appends with its leader epoch, answers followers' fetches (tracking each one's log
end offset), moves the high watermark to the smallest log end offset of the ISR, completes
``acks=all`` produces once the high watermark passes them, and proposes ISR changes (the lagging
ones out, the caught-up ones in) to the controller through ``AlterPartition``. As follower it
fetches from the leader (``replica_fetcher.py``), truncates a divergent suffix and appends what
the leader sends. Consumers read only below the high watermark. The rules are in
``replication_rules.py``; the bytes on disk in ``local_log.py``.
"""
from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import time
from dataclasses import dataclass
from typing import Awaitable, Callable, Iterator, Sequence

from metadata_quorum.kernel.clock import mono_ms
from broker import replication_rules as rules
from broker.load_sampler import LoadCounters
from broker.local_log import LocalLog
from broker.partition_meta import ProducerState
from broker.txn_state import AbortedTxn
from metadata_quorum.kernel.errors import ErrorCode, FerryError
from stream_storage import batches

#: transactions are kept by the s3 partitions' replicas (broker/txn_state.py) only
NO_LOCAL_TRANSACTIONS = ("{} is a storage=local partition, which does not take transactions; use a storage=s3 "
                         "topic or produce without a transactional.id")

log = logging.getLogger("ferry.broker.local_replica")

ROLE_LEADER = "leader"
ROLE_FOLLOWER = "follower"
ROLE_STOPPED = "stopped"

ProposeIsr = Callable[["LocalReplica", tuple[int, ...]], Awaitable[None]]


def _now_ms() -> int:
    return mono_ms()  # rates, ages and lags are durations: a wall-clock step must not move them


@dataclass(frozen=True)
class ReplicaFetchResult:
    """A leader's answer to a follower's fetch."""

    data: bytes
    high_watermark: int
    log_start_offset: int
    log_end_offset: int
    divergence: rules.Divergence | None = None


@dataclass(frozen=True)
class ReplicationSettings:
    """The topic's and broker's replication settings, as Kafka names them."""

    min_insync_replicas: int = 1
    replica_lag_time_max_ms: int = 30000
    request_timeout_ms: int = 30000


class LocalReplica:
    """The replica's role, epochs, ISR, high watermark and followers' states around its log."""

    def __init__(self, topic: str, topic_id: str, partition: int, broker_id: int, log_: LocalLog,
                 log_dir: str, high_watermark: int, propose_isr: ProposeIsr,
                 settings: Callable[[], ReplicationSettings], clock_ms: Callable[[], int] = _now_ms,
                 on_disk_full: Callable[[str], None] | None = None) -> None:
        self.topic = topic
        self.topic_id = topic_id
        self.partition = partition
        self.broker_id = broker_id
        self.log = log_
        self.log_dir = log_dir
        self._propose_isr = propose_isr
        self._settings = settings
        self._clock_ms = clock_ms
        self._on_disk_full = on_disk_full
        self.role = ROLE_STOPPED
        self.leader_id = -1
        self.leader_epoch = -1
        self.partition_epoch = -1
        self.replicas: tuple[int, ...] = ()
        self.isr: tuple[int, ...] = ()
        self.pending_isr: tuple[int, ...] | None = None
        self.followers: dict[int, rules.FollowerState] = {}
        self.high_watermark = min(high_watermark, log_.log_end_offset)
        self.leader_epoch_start_offset = 0
        self.producers = ProducerState()
        self.counters = LoadCounters()
        self._changed = asyncio.Event()  # set and replaced on every change (end, high watermark, role)
        self.closed = False
        self.fenced = False
        self._rebuild_producers()

    # ------------------------------------------------------------------ what request_core.py reads
    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def size_bytes(self) -> int:
        return self.log.size_bytes

    @property
    def streams_fenced(self) -> bool:
        return False  # a local replica has no streams: its fencing is the leader epoch

    @property
    def is_leader(self) -> bool:
        return self.role == ROLE_LEADER

    # ------------------------------------------------------------------ role changes
    def become_leader(self, leader_epoch: int, partition_epoch: int, replicas: Sequence[int], isr: Sequence[int]) -> None:
        """Kafka's makeLeader: the new epoch starts at the log end; followers' ends are unknown."""
        now = self._clock_ms()
        self.role, self.leader_id = ROLE_LEADER, self.broker_id
        self.leader_epoch, self.partition_epoch = leader_epoch, partition_epoch
        self.replicas, self.isr, self.pending_isr = tuple(replicas), tuple(isr), None
        self.followers = rules.reset_followers((r for r in replicas if r != self.broker_id), now)
        self.log.assign_epoch(leader_epoch, self.log.log_end_offset)
        self.leader_epoch_start_offset = self.log.log_end_offset
        self.closed = False
        self._update_hw()
        log.info("%s-%d: leader at epoch %d (log end %d, high watermark %d, isr %s)", self.topic, self.partition,
                 leader_epoch, self.log.log_end_offset, self.high_watermark, list(self.isr))

    def become_follower(self, leader_id: int, leader_epoch: int, partition_epoch: int, replicas: Sequence[int],
                        isr: Sequence[int]) -> None:
        self.role, self.leader_id = ROLE_FOLLOWER, leader_id
        self.leader_epoch, self.partition_epoch = leader_epoch, partition_epoch
        self.replicas, self.isr, self.pending_isr = tuple(replicas), tuple(isr), None
        self.followers = {}
        self.closed = True  # no produce here
        self._wake()
        log.info("%s-%d: follower of broker %d at epoch %d (log end %d)", self.topic, self.partition, leader_id,
                 leader_epoch, self.log.log_end_offset)

    def update_registration(self, partition_epoch: int, replicas: Sequence[int], isr: Sequence[int]) -> None:
        """A committed ISR or replica change at the same leader epoch."""
        self.partition_epoch = partition_epoch
        self.replicas, self.isr = tuple(replicas), tuple(isr)
        if self.pending_isr is not None and tuple(isr) == self.pending_isr:
            self.pending_isr = None
        for r in replicas:
            if r != self.broker_id and r not in self.followers and self.is_leader:
                self.followers[r] = rules.FollowerState(last_caught_up_ms=self._clock_ms())
        self._update_hw()

    def stop(self) -> None:
        self.role = ROLE_STOPPED
        self.closed = True
        self.fenced = True
        self._wake()

    # ------------------------------------------------------------------ produce (leader)
    async def append(self, body: bytearray, infos: list[batches.BatchInfo]) -> tuple[int, int]:
        """acks=1: on the leader's log (page cache), not yet replicated."""
        return self._append(body, infos)

    async def append_acked(self, body: bytearray, infos: list[batches.BatchInfo], acks: int) -> tuple[int, int]:
        """acks=all: refused below min.insync.replicas; answered once the high watermark passes the
        batch (every in-sync replica has it), REQUEST_TIMED_OUT after ``request.timeout.ms``."""
        settings = self._settings()
        if acks == -1:
            rules.check_enough_replicas(len(self.isr), settings.min_insync_replicas, self.topic, self.partition)
        base, last = self._append(body, infos)
        if acks != -1:
            return base, last
        deadline = time.monotonic() + settings.request_timeout_ms / 1000
        epoch = self.leader_epoch
        while True:
            changed = self._changed
            if self.leader_epoch != epoch or not self.is_leader:
                raise FerryError(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"{self.topic}-{self.partition}: leadership "
                                 "moved before the batch was replicated; it may or may not be committed")
            decision = rules.acks_all_decision(last, self.high_watermark, len(self.isr), settings.min_insync_replicas)
            if decision.done:
                if decision.error is not None:
                    raise FerryError(decision.error, f"{self.topic}-{self.partition}: the batch is written but the "
                                     f"ISR {list(self.isr)} is below min.insync.replicas="
                                     f"{settings.min_insync_replicas}")
                return base, last
            left = deadline - time.monotonic()
            if left <= 0:
                raise FerryError(ErrorCode.REQUEST_TIMED_OUT, f"{self.topic}-{self.partition}: the ISR "
                                 f"{list(self.isr)} did not replicate offset {last} within "
                                 f"{settings.request_timeout_ms} ms")
            try:
                await asyncio.wait_for(changed.wait(), left)
            except asyncio.TimeoutError:
                pass

    def _append(self, body: bytearray, infos: list[batches.BatchInfo]) -> tuple[int, int]:
        if not self.is_leader or self.closed:
            raise FerryError(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"{self.topic}-{self.partition} is not led here")
        info = infos[0]
        if info.is_transactional:
            raise FerryError(ErrorCode.INVALID_TXN_STATE, NO_LOCAL_TRANSACTIONS.format(f"{self.topic}-{self.partition}"))
        dup = self.producers.duplicate_of(info.producer_id, info.producer_epoch, info.base_sequence)
        if dup is not None:
            return dup
        with self._storage_errors():
            base, last = self.log.append_as_leader(body, self.leader_epoch)
        self.producers.record(info.producer_id, info.producer_epoch, info.base_sequence, info.records_count,
                              base, last)
        self.counters.bytes_in += len(body)
        self.counters.records_in += last - base + 1
        self._update_hw()
        self._wake()
        return base, last

    # ------------------------------------------------------------------ consumer fetch (leader)
    async def append_marker(self, producer_id: int, producer_epoch: int, commit: bool,
                            coordinator_epoch: int) -> int:
        raise FerryError(ErrorCode.INVALID_TXN_STATE, NO_LOCAL_TRANSACTIONS.format(f"{self.topic}-{self.partition}"))

    @property
    def last_stable_offset(self) -> int:
        """No transaction is ever open here (transactional batches are refused)."""
        return self.high_watermark

    def aborted_transactions(self, fetch_offset: int, upper_offset: int) -> list[AbortedTxn]:
        return []

    async def fetch(self, offset: int, max_bytes: int, max_wait_ms: int, read_committed: bool = False) -> bytes:
        """Whole batches below the high watermark (the last stable offset too: no transactions here). An offset between the high watermark and the log
        end is in range (as in Kafka): a new leader's high watermark may lag what its predecessor
        acknowledged until the followers fetch again, and a consumer there just waits."""
        if offset < self.log_start_offset or offset > max(self.high_watermark, self.log.log_end_offset):
            raise FerryError(ErrorCode.OFFSET_OUT_OF_RANGE,
                             f"offset {offset} is outside [{self.log_start_offset}, {self.log.log_end_offset}]",
                             {"log_start_offset": self.log_start_offset, "high_watermark": self.high_watermark})
        if offset >= self.high_watermark and max_wait_ms > 0:
            await self._wait_for(lambda: self.high_watermark > offset or self.closed, max_wait_ms)
        if offset >= self.high_watermark:
            return b""
        data = self.log.read(offset, max_bytes, self.high_watermark)
        self.counters.bytes_out += len(data)
        return data

    async def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int]:
        return self.log.offset_for_timestamp(timestamp_ms, self.high_watermark)

    async def max_timestamp_offset(self) -> tuple[int, int]:
        return self.log.max_timestamp_offset(self.high_watermark)

    def latest_tiered_offset(self) -> int:
        """Nothing of a storage=local partition is in S3: -1, as Kafka answers without tiered storage."""
        return -1

    async def delete_records_before(self, offset: int) -> int:
        raise FerryError(ErrorCode.INVALID_REQUEST, f"DeleteRecords is not supported on storage=local topics yet "
                         f"({self.topic}-{self.partition})")

    # ------------------------------------------------------------------ follower fetch (leader)
    async def serve_replica_fetch(self, replica_id: int, fetch_offset: int, last_fetched_epoch: int,
                                  leader_epoch: int, max_bytes: int, max_wait_ms: int) -> ReplicaFetchResult:
        """A follower's fetch: check its epoch and divergence, note its log end, maybe move the
        high watermark and propose it for the ISR, then answer (waiting for data if it is caught up)."""
        if not self.is_leader:
            raise FerryError(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"{self.topic}-{self.partition} is not led here")
        rules.check_fetch_epoch(self.leader_epoch, leader_epoch, self.topic, self.partition)
        if replica_id not in self.replicas or replica_id == self.broker_id:
            raise FerryError(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"broker {replica_id} is not a follower of "
                             f"{self.topic}-{self.partition} (replicas {list(self.replicas)})")
        divergence = rules.diverging_epoch(self.log.epochs, self.log.log_end_offset, fetch_offset, last_fetched_epoch)
        if divergence is not None:
            return ReplicaFetchResult(b"", self.high_watermark, self.log_start_offset, self.log.log_end_offset,
                                      divergence)
        if fetch_offset < self.log_start_offset or fetch_offset > self.log.log_end_offset:
            raise FerryError(ErrorCode.OFFSET_OUT_OF_RANGE,
                             f"follower offset {fetch_offset} is outside [{self.log_start_offset}, "
                             f"{self.log.log_end_offset}]", {"log_start_offset": self.log_start_offset,
                                                             "log_end_offset": self.log.log_end_offset})
        self.note_follower(replica_id, fetch_offset)
        if fetch_offset == self.log.log_end_offset and max_wait_ms > 0:
            await self._wait_for(lambda: self.log.log_end_offset > fetch_offset or not self.is_leader, max_wait_ms)
            if not self.is_leader:
                raise FerryError(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"{self.topic}-{self.partition} is not led here")
        data = self.log.read(fetch_offset, max_bytes, self.log.log_end_offset) \
            if fetch_offset < self.log.log_end_offset else b""
        return ReplicaFetchResult(data, self.high_watermark, self.log_start_offset, self.log.log_end_offset)

    def note_follower(self, replica_id: int, fetch_offset: int) -> None:
        state = self.followers.get(replica_id, rules.FollowerState())
        self.followers[replica_id] = rules.on_follower_fetch(state, fetch_offset, self.log.log_end_offset,
                                                             self._clock_ms())
        self._update_hw()
        self.maybe_change_isr()

    def maybe_change_isr(self) -> None:
        """Propose an ISR change when the rules call for one and none is in flight."""
        if not self.is_leader or self.pending_isr is not None:
            return
        wanted = rules.isr_after(self.isr, self.broker_id, self.log.log_end_offset, self.followers, self.replicas,
                                 self.high_watermark, self.leader_epoch_start_offset, self._clock_ms(),
                                 self._settings().replica_lag_time_max_ms)
        if set(wanted) == set(self.isr):
            return
        self.pending_isr = wanted
        log.info("%s-%d: proposing ISR %s (was %s)", self.topic, self.partition, list(wanted), list(self.isr))
        asyncio.get_running_loop().create_task(self._propose(wanted))

    async def _propose(self, wanted: tuple[int, ...]) -> None:
        try:
            await self._propose_isr(self, wanted)
        finally:
            if self.pending_isr == wanted:
                self.pending_isr = None
            self._update_hw()

    def _maximal_isr(self) -> tuple[int, ...]:
        """Kafka's maximal ISR: while an expansion is in flight the high watermark already waits
        for the joining replica; a shrink takes effect only once committed."""
        if self.pending_isr is None:
            return self.isr
        return self.isr + tuple(r for r in self.pending_isr if r not in self.isr)

    def _update_hw(self) -> None:
        if not self.is_leader:
            return
        hw = rules.high_watermark(self.high_watermark, self.broker_id, self.log.log_end_offset, self._maximal_isr(),
                                  self.followers)
        if hw != self.high_watermark:
            self.high_watermark = hw
            self._wake()

    # ------------------------------------------------------------------ follower side
    def append_from_leader(self, data: bytes, leader_hw: int) -> int:
        start = self.log.log_end_offset
        with self._storage_errors():
            added = self.log.append_replicated(data) if data else 0
        if added:
            for info in batches.iter_batches(data):
                if info.next_offset > start:
                    self.producers.record(info.producer_id, info.producer_epoch, info.base_sequence,
                                          info.records_count, info.base_offset, info.next_offset - 1)
            self.counters.bytes_in += len(data)
        self.high_watermark = rules.follower_high_watermark(leader_hw, self.log.log_end_offset)
        return added

    def truncate(self, divergence: rules.Divergence) -> int:
        """KIP-279: drop the suffix the leader does not have."""
        offset = rules.truncation_offset(self.log.epochs, self.log.log_end_offset, divergence, self.high_watermark)
        before = self.log.log_end_offset
        end = self.log.truncate_to(offset)
        self.high_watermark = min(self.high_watermark, end)
        self._rebuild_producers()
        log.warning("%s-%d: truncated a divergent suffix from %d to %d (leader's epoch %d ends at %d)", self.topic,
                    self.partition, before, end, divergence.epoch, divergence.end_offset)
        return end

    def reset_to(self, offset: int) -> None:
        """The leader's log starts after this replica's end: start over there (Kafka's
        truncateFullyAndStartAt)."""
        self.log.reset(offset)
        self.high_watermark = offset
        self._rebuild_producers()

    # ------------------------------------------------------------------ helpers
    @contextlib.contextmanager
    def _storage_errors(self) -> Iterator[None]:
        """A failed write is KAFKA_STORAGE_ERROR (the log kept nothing of it), and its dir is
        reported full (KIP-928: saturated, not offline)."""
        try:
            yield
        except OSError as exc:
            self._maybe_disk_full(exc)
            raise FerryError(ErrorCode.KAFKA_STORAGE_ERROR, f"{self.topic}-{self.partition}: writing to "
                             f"{self.log_dir} failed: {exc}") from exc
        except FerryError as exc:
            if exc.error is ErrorCode.KAFKA_STORAGE_ERROR:
                self._maybe_disk_full(exc.__cause__)
            raise

    def _maybe_disk_full(self, cause: BaseException | None) -> None:
        if isinstance(cause, OSError) and cause.errno == errno.ENOSPC and self._on_disk_full is not None:
            self._on_disk_full(self.log_dir)

    def _rebuild_producers(self) -> None:
        """Idempotent producers' last sequences, from the active segment (Kafka's snapshot + scan)."""
        self.producers = ProducerState()
        seg = self.log.active
        offset = seg.base_offset
        while offset < seg.next_offset:
            data = self.log.read(offset, 4 * 1024 * 1024, seg.next_offset)
            if not data:
                break
            for info in batches.iter_batches(data):
                self.producers.record(info.producer_id, info.producer_epoch, info.base_sequence, info.records_count,
                                      info.base_offset, info.next_offset - 1)
                offset = info.next_offset

    async def _wait_for(self, predicate: Callable[[], bool], max_wait_ms: int) -> None:
        deadline = time.monotonic() + max_wait_ms / 1000
        while not predicate():
            changed = self._changed
            left = deadline - time.monotonic()
            if left <= 0:
                return
            try:
                await asyncio.wait_for(changed.wait(), left)
            except asyncio.TimeoutError:
                return

    def _wake(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    def wake_fetchers(self) -> None:
        """Wake every fetch waiting for data (the replica moved or left): each looks again."""
        self._wake()
