"""The two clocks of a Ferry process: the wall clock for timestamps, a monotonic one for durations.

Every duration — a session, a lease, a timeout, a deadline, a back-off, a rate, an uptime — is
measured on ``mono_ms`` (``time.monotonic``), which a step of the system clock (an NTP correction,
an operator's ``date -s``) does not move. Only a time that leaves the process as wall time reads
``wall_ms``: a record's CreateTime/LogAppendTime, a timestamp written into the metadata log or
an object key, a time shown to a user. A deadline that must survive its process (written into the
metadata log and judged by another controller after a failover) can only be wall time; the code
that judges one says how a step bounds it.

``wall_ms`` is the one place a Ferry process reads the wall clock, so a chaos run can step it for
one process without touching the machine's clock (``ferry chaos run --net``, fault
``clock_step``): a server process started with ``FERRY_CHAOS_CLOCK_DIR`` set reads the offset in
``<dir>/<its pid>.offset_ms`` (integer milliseconds) on ``SIGUSR2`` and adds it to every
``wall_ms`` from then on. Without the variable nothing is installed and the offset stays 0.
"""
from __future__ import annotations

import logging
import os
import signal
import threading
import time
from types import FrameType
from typing import Callable, Mapping

log = logging.getLogger(__name__)

CHAOS_CLOCK_ENV = "FERRY_CHAOS_CLOCK_DIR"
STEP_SIGNAL = signal.SIGUSR2

_offset_ms = 0


def wall_ms() -> int:
    """Milliseconds since the epoch, as the process's (possibly stepped) wall clock says."""
    return int(time.time() * 1000) + _offset_ms


def wall_s() -> float:
    return time.time() + _offset_ms / 1000


def mono_ms() -> int:
    """Milliseconds on a clock no step moves (its zero is arbitrary: only differences mean anything)."""
    return int(time.monotonic() * 1000)


def mono_to_wall_ms(at_mono_ms: int) -> int:
    """A ``mono_ms`` reading as wall time now (for showing when something happened)."""
    return wall_ms() - (mono_ms() - at_mono_ms)


class SteadyWallClock:
    """Wall time that never jumps: it follows ``wall`` but runs at most ``max_slew`` faster or
    slower than ``mono``, as an NTP daemon slews instead of stepping.

    For a time that must be both: a deadline judged on this process's timers *and* a timestamp
    written where another process reads it. The group and transaction coordinators are the case:
    a member's session and a transaction's timeout run on their timers, while the same times go
    into ``__consumer_offsets`` and ``__transaction_state`` and are judged again by the next
    coordinator after a move. On ``wall_ms`` a forward step of 5 min would expire every session
    at once; on ``mono_ms`` the persisted times would mean nothing to another broker. Here a step
    is absorbed at ``max_slew`` (10 %: a 5 min step in 50 min), so a timeout fires at most 10 %
    early or 11 % late, and the readings agree with other brokers' again once absorbed.
    """

    def __init__(self, wall: Callable[[], int] = wall_ms, mono: Callable[[], int] = mono_ms,
                 max_slew: float = 0.1) -> None:
        if not 0 <= max_slew < 1:
            raise ValueError(f"max_slew is a fraction in [0, 1), not {max_slew}")
        self._wall = wall
        self._mono = mono
        self.max_slew = max_slew
        self._lock = threading.Lock()
        self._last_mono = mono()
        self._last = float(wall())

    def __call__(self) -> int:
        with self._lock:
            now_mono = self._mono()
            elapsed = max(0, now_mono - self._last_mono)
            slowest = self._last + elapsed * (1 - self.max_slew)
            fastest = self._last + elapsed * (1 + self.max_slew)
            self._last = min(max(float(self._wall()), slowest), fastest)
            self._last_mono = now_mono
            return int(self._last)


def wall_offset_ms() -> int:
    return _offset_ms


def parse_offset(text: str) -> int:
    """The clock file's content: one integer, the offset in ms (ValueError on anything else)."""
    value = text.strip()
    if not value or not value.lstrip("-").isdigit():
        raise ValueError(f"a clock offset is an integer number of milliseconds, not {text!r}")
    return int(value)


def set_offset_ms(offset_ms: int) -> None:
    global _offset_ms
    _offset_ms = offset_ms


def reload_offset(path: str) -> int:
    """Read the offset from ``path`` and apply it; a missing or bad file changes nothing."""
    try:
        with open(path, encoding="ascii") as f:
            offset = parse_offset(f.read())
    except (OSError, ValueError):
        return _offset_ms
    set_offset_ms(offset)
    return offset


def offset_path(directory: str, pid: int) -> str:
    """The file holding process ``pid``'s clock offset."""
    return os.path.join(directory, f"{pid}.offset_ms")


def install_chaos_clock(environ: Mapping[str, str] | None = None) -> str | None:
    """With ``FERRY_CHAOS_CLOCK_DIR`` set: apply this process's offset now and again on every
    ``SIGUSR2`` (call from the main thread at start-up). Returns the file, or None when not enabled."""
    env = os.environ if environ is None else environ
    directory = env.get(CHAOS_CLOCK_ENV)
    if not directory:
        return None
    path = offset_path(directory, os.getpid())
    reload_offset(path)

    def on_step(_signum: int, _frame: FrameType | None) -> None:
        log.warning("wall clock offset now %d ms (chaos clock step)", reload_offset(path))
    signal.signal(STEP_SIGNAL, on_step)
    return path
