"""Jittered exponential backoff: the one retry-delay rule of controllers' clients, brokers and tools.

Kafka's clients wait ``retry.backoff.ms`` after a first failure, double it each attempt up to
``retry.backoff.max.ms`` and spread it by ±20 % so that many clients failing together do not retry
together. A fixed delay (what Ferry had) makes thousands of partitions that failed at once retry
at once, and every retry round meets the same overload again. The rule is pure: the random draw
and the clock are the caller's, so tests drive it without waiting.
"""
from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class Backoff:
    """Delay before retry ``attempt`` (0 = the first retry): ``initial_ms × multiplier^attempt``,
    capped at ``max_ms``, times a factor drawn uniformly from ``[1 - jitter, 1 + jitter]``."""

    initial_ms: float = 20.0
    max_ms: float = 1000.0
    multiplier: float = 2.0
    jitter: float = 0.2

    def __post_init__(self) -> None:
        if not (0 < self.initial_ms <= self.max_ms) or self.multiplier < 1 or not 0 <= self.jitter < 1:
            raise ValueError(f"invalid backoff {self!r}")

    def delay_ms(self, attempt: int, draw: float, retry_after_ms: int | None = None) -> float:
        """``draw`` in [0, 1); a server's ``retry_after_ms`` is a floor (it knows its queue)."""
        base = min(self.max_ms, self.initial_ms * self.multiplier ** min(max(attempt, 0), 64))
        delay = base * (1 - self.jitter + 2 * self.jitter * draw)
        if retry_after_ms is not None and retry_after_ms > 0:
            delay = max(delay, float(retry_after_ms) * (1 + self.jitter * draw))
        return delay

    def delay_s(self, attempt: int, retry_after_ms: int | None = None) -> float:
        return self.delay_ms(attempt, random.random(), retry_after_ms) / 1000.0


def retry_after_ms_of(details: object) -> int | None:
    """The ``retry_after_ms`` an error's details carry, if any."""
    if isinstance(details, dict):
        value = details.get("retry_after_ms")
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


# The shared defaults: the controller client, the broker's retries of its own steps, the tools.
CONTROLLER_BACKOFF = Backoff(initial_ms=20.0, max_ms=1000.0)
STEP_BACKOFF = Backoff(initial_ms=100.0, max_ms=2000.0)
CLIENT_BACKOFF = Backoff(initial_ms=100.0, max_ms=1000.0)
