"""How long a process's event loop was held: the time a request (a heartbeat) waited unread.

A sleeper wakes every ``PROBE_INTERVAL_MS``; how late it wakes is how long the loop was busy with
something else (an operation, a replay, a garbage collection). ``LagWindow`` keeps the lateness
of the last minute so that a reader sampling every few tens of milliseconds (``ferry perf
scale``) sees every spike, and the maximum since the process started.
"""
from __future__ import annotations

import asyncio
import collections
import time
from dataclasses import dataclass, field

PROBE_INTERVAL_MS = 20
RECENT_WINDOW_S = 2.0
KEEP_S = 60.0
NOTED_MIN_MS = 5.0  # lateness below this is the scheduler's noise, not a held loop


@dataclass
class LagWindow:
    """Lateness samples over a sliding window (pure: the caller passes the monotonic time)."""

    max_ms: float = 0.0
    _samples: collections.deque[tuple[float, float]] = field(default_factory=collections.deque)

    def note(self, now_s: float, late_ms: float) -> None:
        self.max_ms = max(self.max_ms, late_ms)
        if late_ms >= NOTED_MIN_MS:
            self._samples.append((now_s, late_ms))
        while self._samples and self._samples[0][0] < now_s - KEEP_S:
            self._samples.popleft()

    def max_since(self, now_s: float, window_s: float = RECENT_WINDOW_S) -> float:
        """The longest hold that ended within the last ``window_s`` seconds."""
        return max((late for at, late in self._samples if at >= now_s - window_s), default=0.0)


class LoopLagProbe:
    """The sleeper; ``window`` holds what it measured."""

    def __init__(self, interval_ms: int = PROBE_INTERVAL_MS) -> None:
        self.interval_s = interval_ms / 1000
        self.window = LagWindow()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()

    def report(self) -> dict[str, float]:
        """``loop_lag_max_ms`` since start and ``loop_lag_recent_ms`` over the last two seconds."""
        return {"loop_lag_max_ms": round(self.window.max_ms, 1),
                "loop_lag_recent_ms": round(self.window.max_since(time.monotonic()), 1)}

    async def _run(self) -> None:
        while True:
            slept_from = time.monotonic()
            await asyncio.sleep(self.interval_s)
            now = time.monotonic()
            self.window.note(now, max(0.0, (now - slept_from - self.interval_s) * 1000))
