"""A ``storage=local`` replica's move to another log dir (KIP-113's ReplicaAlterLogDirsThread, one
task per moving partition): the I/O shell around ``local_dir_move.next_copy_step``.

The copy reads whole batches from the current log and appends them to the future log as a
follower would (offsets and epochs kept), charged to the ``replica.alter.log.dirs.io.max.bytes.
per.second`` throttle. The swap holds the partition's lock and runs without an await from the last
check to the renames, so no produce or follower append lands in between (every append to a local
log runs on the event loop without an await). The old dir is removed after the lock is released.
"""
from __future__ import annotations

import asyncio
import logging
import os
import shutil
import signal
import uuid
from typing import Callable, Protocol

from metadata_quorum.kernel.clock import mono_ms
from broker import local_dir_move as mv
from broker import replication_throttle as thr
from broker.local_log import LocalLog, fsync_dir
from broker.local_replica import LocalReplica
from broker.log_dirs import delete_dir_name, future_dir_name, partition_dir_name

log = logging.getLogger("ferry.broker.local_dir_mover")

COPY_CHUNK_BYTES = 1024 * 1024
SWAP_MAX_LAG_BYTES = COPY_CHUNK_BYTES  # the swap copies at most one chunk (a throttled one when throttled) under the lock
ALTER_RATE = "replica.alter.log.dirs.io.max.bytes.per.second"
# Fault injection for the crash tests: a broker started with this variable set to a crash point's
# name kills itself (SIGKILL, as kill -9) when a move reaches it. Unset in normal runs.
CRASH_AT_ENV = "FERRY_LOCAL_DIR_MOVE_CRASH_AT"
CRASH_POINTS = ("flushed", "renamed-current", "renamed-future")


def _crash_point(name: str) -> None:
    if os.environ.get(CRASH_AT_ENV) == name:
        log.warning("crash point %s reached: killing this broker (%s)", name, CRASH_AT_ENV)
        os.kill(os.getpid(), signal.SIGKILL)


class MovingSlot(Protocol):
    """The partition being moved, as LocalPartitions holds it."""

    topic: str
    replica: LocalReplica | None
    log_dir: str | None
    io_lock: asyncio.Lock


def position(log_: LocalLog) -> mv.LogPosition:
    return mv.LogPosition(log_.log_start_offset, log_.log_end_offset, tuple(log_.epochs))


def _now_ms() -> int:
    return mono_ms()  # rates, ages and lags are durations: a wall-clock step must not move them


async def move(slot: MovingSlot, future: LocalLog, target_dir: str, rate_bps: Callable[[], int | None],
               on_swapped: Callable[[str], None]) -> None:
    """Copy until the future log has caught up, then swap it in; ``on_swapped(old_dir_root)`` runs
    under the lock once the partition lives in ``target_dir``."""
    debt = thr.Debt()
    while True:
        replica = slot.replica
        if replica is None or replica.fenced:
            return  # the replica stopped (deleted or moved away): its future log goes with it
        current = replica.log
        rate = rate_bps()
        chunk = thr.chunk_bytes(rate, COPY_CHUNK_BYTES) if rate else COPY_CHUNK_BYTES
        step = mv.next_copy_step(position(current), position(future), current.bytes_after(future.log_end_offset),
                                 min(chunk, SWAP_MAX_LAG_BYTES))
        if step.action == mv.STEP_RESET:
            future.reset(step.offset)
        elif step.action == mv.STEP_TRUNCATE:
            future.truncate_to(step.offset)
        elif step.action == mv.STEP_COPY:
            data = current.read(step.offset, chunk, current.log_end_offset)
            if data:
                future.append_replicated(data)
            delay_ms = 0.0
            if rate and data:
                debt, delay_ms = thr.charge(debt, rate, len(data), _now_ms())
            await asyncio.sleep(delay_ms / 1000)
        else:
            await asyncio.to_thread(future.flush)  # most of the fsync outside the lock
            async with slot.io_lock:
                if _swap(slot, future, target_dir, on_swapped):
                    return


def _swap(slot: MovingSlot, future: LocalLog, target_dir: str, on_swapped: Callable[[str], None]) -> bool:
    """Under the partition's lock, with no await: catch up, flush, rename, switch. False when the
    current log moved away from the future one meanwhile (the loop decides again)."""
    replica = slot.replica
    assert replica is not None
    current = replica.log
    while future.log_end_offset < current.log_end_offset:
        step = mv.next_copy_step(position(current), position(future), 0, 0)
        if step.action != mv.STEP_SWAP and step.action != mv.STEP_COPY:
            return False
        data = current.read(future.log_end_offset, COPY_CHUNK_BYTES, current.log_end_offset)
        if not data:
            return False
        future.append_replicated(data)
    if mv.next_copy_step(position(current), position(future), 0, 0).action != mv.STEP_SWAP:
        return False
    future.write_epochs(list(current.epochs))
    future.flush()
    fsync_dir(future.dir_path)
    _crash_point("flushed")
    old_path = current.dir_path
    old_root = os.path.dirname(old_path)
    doomed = os.path.join(old_root, delete_dir_name(slot.topic, replica.partition, uuid.uuid4().hex))
    os.replace(old_path, doomed)  # from here on, start-up promotes the (complete, flushed) future
    fsync_dir(old_root)
    _crash_point("renamed-current")
    new_path = os.path.join(target_dir, partition_dir_name(slot.topic, replica.partition))
    os.replace(future.dir_path, new_path)
    fsync_dir(target_dir)
    _crash_point("renamed-future")
    future.moved_to(new_path)
    future.recovery_point = future.log_end_offset
    replica.log = future
    replica.log_dir = target_dir
    slot.log_dir = target_dir
    current.release()
    on_swapped(old_root)
    log.info("%s-%d: moved to log dir %s at offset %d; %s goes", slot.topic, replica.partition, target_dir,
             future.log_end_offset, doomed)
    asyncio.get_running_loop().run_in_executor(None, shutil.rmtree, doomed, True)
    return True


def future_path(target_dir: str, topic: str, partition: int) -> str:
    """Where a move's future log lives (the name cut to 255 characters, as Kafka cuts it)."""
    return os.path.join(target_dir, future_dir_name(topic, partition, uuid.uuid4().hex))
