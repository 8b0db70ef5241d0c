"""SteadyWallClock: wall time for coordinators that a clock step cannot jump."""
from __future__ import annotations

import pytest

from metadata_quorum.kernel.clock import SteadyWallClock


class Clocks:
    def __init__(self) -> None:
        self.wall_ms = 1_700_000_000_000
        self.mono_ms = 5_000

    def advance(self, ms: int) -> None:
        self.wall_ms += ms
        self.mono_ms += ms


def make() -> tuple[Clocks, SteadyWallClock]:
    c = Clocks()
    return c, SteadyWallClock(lambda: c.wall_ms, lambda: c.mono_ms)


def test_it_reads_the_wall_clock_while_nothing_steps() -> None:
    c, clock = make()
    assert clock() == c.wall_ms
    for _ in range(100):
        c.advance(37)
        assert clock() == c.wall_ms


def test_a_forward_step_is_absorbed_at_the_slew_rate_so_a_session_cannot_expire_early() -> None:
    c, clock = make()
    start = clock()
    session_ms = 45_000
    c.wall_ms += 5 * 60_000  # someone sets the clock 5 min ahead
    real_ms = 0
    while clock() < start + session_ms:
        c.advance(100)
        real_ms += 100
    # the session ran at least 1/1.1 of its length in real time, not 0 ms
    assert real_ms >= session_ms / 1.1 - 100
    # and the clock catches up with the wall clock in about step / slew
    c.advance(3_000_000)
    assert clock() == c.wall_ms


def test_a_backward_step_never_takes_the_clock_back() -> None:
    c, clock = make()
    readings = [clock()]
    c.wall_ms -= 30_000
    for _ in range(400):
        c.advance(50)
        readings.append(clock())
    assert readings == sorted(readings)
    # it still advances at 90 % of real time, so timeouts fire at most 11 % late
    assert readings[-1] - readings[0] >= 0.9 * 400 * 50 - 1


def test_many_small_readings_still_slew() -> None:
    """Milliseconds apart: a per-reading rounding must not freeze the correction."""
    c, clock = make()
    first = clock()
    c.wall_ms += 10_000
    for _ in range(10_000):
        c.advance(1)
        clock()
    assert clock() - first == pytest.approx(10_000 * 1.1, abs=2)


def test_the_slew_is_a_fraction() -> None:
    with pytest.raises(ValueError):
        SteadyWallClock(max_slew=1.5)
