"""Registration and heartbeats, and the lease that keeps a silent broker from acknowledging writes.

The controller fences a broker it has not heard from for ``session_timeout_ms`` and gives its
partitions to others. A broker that was paused (SIGSTOP, a long GC-like stall) must not wake up
and acknowledge produce requests it can no longer own, so it holds a *lease*: it may acknowledge
only while ``now < send time of the last acknowledged heartbeat + session_timeout_ms``. The
controller stamps a heartbeat when it receives it, which is after the broker sent it, so the
lease always ends before the controller can fence the broker — provided the lease is not longer
than the controllers' session timeout: when a reply states the controller's
``session_timeout_ms``, the lease never lasts longer than that. Only a heartbeat answered
"not fenced" renews it; the broker's image must also be fresh (freshness.py). An incarnation the
controller fenced for silence is never unfenced again: its heartbeats are refused with
``STALE_BROKER_EPOCH`` and the broker registers again (metadata_quorum/ops/cluster.py,
``expired_incarnation_key``). Otherwise a heartbeat stamped just before a pause and sent after the
fence would renew the lease from before the fence.

Heartbeats are pipelined: one leaves every ``interval_ms`` whether or not the ones before it were
answered (at most a session's worth in flight). The controller answers a heartbeat only after a
commit, so on a loaded quorum an answer can take longer than the interval; sent one after the
other, heartbeats would then *arrive* that much further apart and a live broker would look silent.
Answers can come back out of order (each rides its own connection): one is applied only if it was
sent after the last one applied (:class:`AnswerOrder`), so an old "not fenced" never overrides a
newer "fenced".
"""
from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

from metadata_quorum.kernel.controller_api import ControllerWrites
from metadata_quorum.kernel.errors import ErrorCode, FerryError
from metadata_quorum.kernel.messages.cluster import BrokerAddresses, BrokerHeartbeatReply, BrokerHeartbeatRequest

log = logging.getLogger("ferry.broker.heartbeat")


@dataclass
class HeartbeatState:
    broker_id: int
    incarnation_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    broker_epoch: int = -1
    fenced: bool = True
    caught_up: bool = False
    want_shutdown: bool = False
    should_shut_down: bool = False
    lease_sent_mono_s: float = -1.0
    last_error: str | None = None


class BrokerLease:
    """Pure check of the heartbeat lease (monotonic seconds in, a yes/no out)."""

    def __init__(self, session_timeout_ms: int) -> None:
        self.session_timeout_s = session_timeout_ms / 1000.0
        self.sent_mono_s = -1.0

    def bound_by(self, controller_session_timeout_ms: Any) -> None:
        """The controller fences after its own session timeout: never hold the lease longer."""
        if isinstance(controller_session_timeout_ms, int) and controller_session_timeout_ms > 0:
            self.session_timeout_s = min(self.session_timeout_s, controller_session_timeout_ms / 1000.0)

    def renewed(self, sent_mono_s: float) -> None:
        self.sent_mono_s = max(self.sent_mono_s, sent_mono_s)

    def valid(self, now_mono_s: float) -> bool:
        return self.sent_mono_s >= 0 and now_mono_s < self.sent_mono_s + self.session_timeout_s


class AnswerOrder:
    """Which heartbeat answers to apply when several are in flight: only one sent after the last
    applied (pure: send times in, a yes/no out)."""

    def __init__(self) -> None:
        self.applied_sent_mono_s = float("-inf")

    def admit(self, sent_mono_s: float) -> bool:
        if sent_mono_s < self.applied_sent_mono_s:
            return False
        self.applied_sent_mono_s = sent_mono_s
        return True


def max_in_flight(interval_ms: int, session_timeout_ms: int) -> int:
    """Heartbeats that may wait for answers at once: a session's worth (an answer to one sent
    longer ago than that could not renew the lease anyway)."""
    return max(1, session_timeout_ms // max(1, interval_ms))


class Heartbeater:
    """Registers the broker, then heartbeats every ``interval_ms`` until stopped."""

    def __init__(self, controller: ControllerWrites, broker_id: int, interval_ms: int, session_timeout_ms: int,
                 registration: Callable[[], BrokerAddresses], metadata_offset: Callable[[], int],
                 dir_states: Callable[[], tuple[list[str], list[str]]],
                 on_failure: Callable[[], None] | None = None,
                 on_registered: Callable[[int], None] | None = None) -> None:
        self._controller = controller
        self.state = HeartbeatState(broker_id)
        self.interval_s = interval_ms / 1000.0
        self.lease = BrokerLease(session_timeout_ms)
        self._registration = registration
        self._metadata_offset = metadata_offset
        self._dir_states = dir_states
        self._on_failure = on_failure
        self.on_registered = on_registered
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._order = AnswerOrder()
        self._in_flight: set[asyncio.Task[None]] = set()
        self._max_in_flight = max_in_flight(interval_ms, session_timeout_ms)
        self._registering = asyncio.Lock()
        self.shutdown_granted = asyncio.Event()

    async def register(self, timeout_s: float = 30.0) -> int:
        """Register (retrying while the quorum elects a leader); returns the broker epoch."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                reply = await self._controller.register_broker({
                    **self._registration(), "broker_id": self.state.broker_id,
                    "incarnation_id": self.state.incarnation_id})
                self.state.broker_epoch = int(reply["broker_epoch"])
                self.lease.bound_by(reply.get("session_timeout_ms"))
                if self.on_registered is not None:
                    self.on_registered(self.state.broker_epoch)
                log.info("registered broker %d with epoch %d", self.state.broker_id, self.state.broker_epoch)
                return self.state.broker_epoch
            except FerryError as exc:
                if not exc.retriable and exc.error is not ErrorCode.DUPLICATE_BROKER_REGISTRATION:
                    raise
                if time.monotonic() > deadline:
                    raise
                log.info("registration not accepted yet: %s", exc)
            except (OSError, asyncio.TimeoutError) as exc:
                if time.monotonic() > deadline:
                    raise FerryError(ErrorCode.REQUEST_TIMED_OUT, f"cannot reach the controllers: {exc}") from exc
            await asyncio.sleep(0.2)

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="heartbeat")

    def request_shutdown(self) -> None:
        self.state.want_shutdown = True
        self._wake.set()

    def poke(self) -> None:
        """Heartbeat now (e.g. the broker caught up with the metadata log)."""
        self._wake.set()

    async def stop(self) -> None:
        tasks = [t for t in (self._task, *self._in_flight) if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            try:
                await task
            except (asyncio.CancelledError, Exception):  # noqa: BLE001 - stopping
                pass

    async def beat_once(self) -> BrokerHeartbeatReply:
        saturated, offline = self._dir_states()
        args: BrokerHeartbeatRequest = {
            "broker_id": self.state.broker_id, "broker_epoch": self.state.broker_epoch,
            "metadata_offset": self._metadata_offset(), "want_shutdown": self.state.want_shutdown,
            "saturated_log_dirs": saturated, "offline_log_dirs": offline}
        sent = time.monotonic()
        reply = await self._controller.broker_heartbeat(args)
        if args["broker_epoch"] != self.state.broker_epoch or not self._order.admit(sent):
            return reply  # about an incarnation registered over since, or older than one applied
        self.lease.bound_by(reply.get("session_timeout_ms"))  # before renewing with this answer
        self.state.fenced = bool(reply.get("is_fenced", False))
        if not self.state.fenced:  # a fenced broker holds no lease: it may not acknowledge writes
            self.lease.renewed(sent)
        self.state.caught_up = bool(reply.get("is_caught_up", True))
        self.state.last_error = None
        if reply.get("should_shut_down"):
            self.state.should_shut_down = True
            self.shutdown_granted.set()
        return reply

    async def _loop(self) -> None:
        while True:
            if len(self._in_flight) < self._max_in_flight:
                task = asyncio.create_task(self._beat(), name="heartbeat-beat")
                self._in_flight.add(task)
                task.add_done_callback(self._in_flight.discard)
            interval = self.interval_s / 4 if self.state.want_shutdown else self.interval_s
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=interval)
            except asyncio.TimeoutError:
                pass
            self._wake.clear()

    async def _beat(self) -> None:
        """One heartbeat and what its failure calls for; never raises (it runs beside the others)."""
        epoch = self.state.broker_epoch
        try:
            await self.beat_once()
        except FerryError as exc:
            self.state.last_error = str(exc)
            if exc.error in (ErrorCode.STALE_BROKER_EPOCH, ErrorCode.BROKER_ID_NOT_REGISTERED):
                log.warning("heartbeat refused (%s); registering again", exc)
                await self._register_again(epoch)
            else:
                log.warning("heartbeat failed: %s", exc)
            if self._on_failure:
                self._on_failure()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - a heartbeat failure must not kill the loop
            self.state.last_error = str(exc)
            log.warning("heartbeat failed: %r", exc)
            if self._on_failure:
                self._on_failure()

    async def _register_again(self, refused_epoch: int) -> None:
        """Register once for all the heartbeats of ``refused_epoch`` refused together."""
        async with self._registering:
            if self.state.broker_epoch != refused_epoch:
                return  # another refused heartbeat registered already
            try:
                await self.register(timeout_s=self.interval_s * 4)
            except Exception as reg_exc:  # noqa: BLE001 - keep trying on the next beat
                log.warning("re-registration failed: %s", reg_exc)
