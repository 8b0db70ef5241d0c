"""Proof that a peer broker's process is gone, for failover before its session runs out.

The controller fences a silent broker only after ``session_timeout_ms``, because until then the
broker's lease may still let it acknowledge writes (heartbeat.py). A broker killed outright
(kill -9, an OOM kill, a crash) acknowledges nothing more, but silence alone cannot tell it from
one that is paused or cut off. Where brokers share their WAL root (the local WAL of a local
cluster: the next owner of a partition reads the dead owner's WAL tail there anyway), the kernel
can tell: every broker holds an exclusive ``flock`` on ``<its WAL dir>/broker.lock`` from before
it registers until its process ends, and the kernel drops that lock when the process dies, however
it dies. A peer that can take the lock knows that no process of that broker id holds it — so
every incarnation registered before that moment is dead — and reports it (``report_broker_dead``).
The controller then fences it at once, as on a session expiry. A paused (SIGSTOP) or cut-off
broker still holds its lock, so it keeps its lease and waits out the session as before.

This is the local analogue of how AutoMQ fences a failed broker's WAL volume before another takes
it over; with the S3 WAL (no shared directory) the session timeout alone decides.
"""
from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import time
from typing import Callable, Iterable

from metadata_quorum.kernel.controller_api import ControllerWrites
from metadata_quorum.kernel.errors import FerryError
from metadata_quorum.image import MetadataImage

log = logging.getLogger("ferry.broker.liveness")

LOCK_FILE = "broker.lock"


def lock_path(wal_dir: str) -> str:
    return os.path.join(wal_dir, LOCK_FILE)


class ProcessLock:
    """This broker's lock on its WAL dir, held for the life of the process."""

    def __init__(self, path: str, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd

    @classmethod
    def acquire(cls, wal_dir: str, timeout_s: float = 30.0) -> "ProcessLock":
        """Take the lock, waiting while a peer probes it or an earlier incarnation is still exiting.

        Raises ``TimeoutError`` if another live process keeps it (two brokers with one id)."""
        os.makedirs(wal_dir, exist_ok=True)
        path = lock_path(wal_dir)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError as e:
                if time.monotonic() > deadline:
                    os.close(fd)
                    raise TimeoutError(f"another process holds {path}: is a broker with this id running?") from e
                time.sleep(0.01)
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        return cls(path, fd)

    def release(self) -> None:
        """At the very end of a clean stop, once nothing more is acknowledged."""
        if self._fd is not None:
            os.close(self._fd)  # closing the only descriptor drops the flock
            self._fd = None


def lock_is_free(wal_dir: str) -> bool:
    """Whether no process holds ``wal_dir``'s broker lock (False if there is no lock file: that
    broker never ran with this WAL root, and nothing can be told about it)."""
    try:
        fd = os.open(lock_path(wal_dir), os.O_RDWR)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)  # also drops the lock if it was taken
    return True


def suspects(image: MetadataImage, me: int) -> list[tuple[int, int]]:
    """``(broker_id, broker_epoch)`` of every other unfenced broker, read *before* probing: an
    incarnation takes its lock before it registers, so one registered before a free lock was seen
    is dead."""
    return [(b, reg.broker_epoch) for b, reg in sorted(image.cluster.brokers.items())
            if b != me and not reg.fenced]


class PeerDeathWatcher:
    """Probes the other brokers' locks every ``interval_ms`` and reports each dead incarnation once."""

    def __init__(self, me: int, image: Callable[[], MetadataImage | None], wal_dir_of: Callable[[int], str],
                 controller: ControllerWrites,
                 my_epoch: Callable[[], int], interval_ms: int) -> None:
        self.me = me
        self._image = image
        self._wal_dir_of = wal_dir_of
        self._controller = controller
        self._my_epoch = my_epoch
        self.interval_s = interval_ms / 1000
        self.reported: set[tuple[int, int]] = set()

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                await self.probe_once()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - a failed probe is tried again next interval
                log.warning("peer liveness probe failed: %r", exc)

    async def probe_once(self) -> list[tuple[int, int]]:
        """Probe once; returns the incarnations found dead (a report the controller did not take
        is sent again on the next probe)."""
        image = self._image()
        if image is None:
            return []
        candidates = [s for s in suspects(image, self.me) if s not in self.reported]
        if not candidates:
            return []
        free = await asyncio.to_thread(self._free, [b for b, _ in candidates])
        dead = [s for s in candidates if s[0] in free]
        for broker_id, broker_epoch in dead:
            try:
                reply = await self._controller.report_broker_dead({
                    "broker_id": broker_id, "broker_epoch": broker_epoch,
                    "reporter_id": self.me, "reporter_epoch": self._my_epoch()})
            except FerryError as exc:
                log.warning("could not report broker %d (epoch %d) dead: %s", broker_id, broker_epoch, exc)
                continue
            self.reported.add((broker_id, broker_epoch))
            log.info("broker %d (epoch %d) is dead (its WAL lock is free): %s", broker_id, broker_epoch,
                     "fenced" if reply.get("fenced") else reply.get("why", "not fenced"))
        return dead

    def _free(self, broker_ids: Iterable[int]) -> set[int]:
        return {b for b in broker_ids if lock_is_free(self._wal_dir_of(b))}
