"""Clock faults of a ``--net`` chaos run: one process's wall clock stepped, then stepped back.

Every Ferry server reads the wall clock through ``metadata_quorum.kernel.clock.wall_ms``; a
process started with ``FERRY_CHAOS_CLOCK_DIR`` takes the offset in ``<dir>/<pid>.offset_ms`` on
``SIGUSR2``. A ``clock_step`` writes the offset (±30 s or ±5 min), signals the process, and at its
end writes 0 and signals again: a step forwards then backwards, or the other way round. Steps
touch only the wall clock; durations (sessions, leases, timeouts) are monotonic, so a step alone
must neither fence a broker nor change the active controller (``check_clock_steps``).

A step of a broker may come with a cut from every controller (``FaultEvent.peer ==
"controllers"``): the broker's lease is then judged as for a network cut (``checker.check_leases``),
which a lease kept on the wall clock would fail after a backward step.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Sequence

from metadata_quorum.kernel.clock import STEP_SIGNAL, offset_path
from tools.chaos.checker import Violation

STEPS_MS = (30_000, -30_000, 300_000, -300_000)
WITH_CUT = "controllers"  # FaultEvent.peer of a step made while the broker is cut from the controllers


def write_offset(directory: str, pid: int, offset_ms: int) -> str:
    """Write ``offset_ms`` for process ``pid`` (atomically: the process may read at any time)."""
    path = offset_path(directory, pid)
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="ascii") as f:
        f.write(f"{offset_ms}\n")
    os.replace(tmp, path)
    return path


def step(directory: str, pid: int, offset_ms: int, sig: int = STEP_SIGNAL) -> None:
    """Set process ``pid``'s wall-clock offset to ``offset_ms`` now."""
    write_offset(directory, pid, offset_ms)
    os.kill(pid, sig)


def describe_step(node: str, step_ms: int, with_cut: bool) -> str:
    sign = "+" if step_ms >= 0 else "-"
    secs = abs(step_ms) / 1000
    return f"step {node}'s wall clock {sign}{secs:g} s and back" + (" while cut from the controllers" if with_cut else "")


@dataclass(frozen=True)
class StepSpan:
    """A step without a cut: the controllers' high watermarks (the next offset to commit) just
    before the step and a session timeout after the step back: the records in ``[from, to)`` are
    those committed while the step alone could have acted."""

    what: str
    from_offset: int
    to_offset: int


def check_clock_steps(spans: Sequence[StepSpan], records: Sequence[tuple[int, dict[str, Any]]],
                      log_from_offset: int) -> tuple[list[Violation], int]:
    """A broker fenced or a new active controller (its ``NoOp`` record) within a step's span is a
    violation: nothing but the step happened on the process track then. Returns the violations
    and how many spans were judged (a span older than the log read back is not)."""
    out: list[Violation] = []
    judged = 0
    for span in spans:
        if span.from_offset < log_from_offset or span.to_offset < span.from_offset:
            continue
        judged += 1
        inside = [(o, r) for o, r in records if span.from_offset <= o < span.to_offset]
        fenced = sorted({int(r.get("fields", {}).get("broker_id", -1)) for _o, r in inside
                         if r.get("type") == "BrokerRegistrationChange" and r.get("fields", {}).get("fenced") is True})
        leaders = [int(r.get("fields", {}).get("leader_id", -1)) for _o, r in inside if r.get("type") == "NoOp"]
        if fenced:
            out.append(Violation("clock", f"'{span.what}': broker(s) {fenced} fenced within the step"))
        if leaders:
            out.append(Violation("clock", f"'{span.what}': a new active controller ({leaders}) within the step"))
    return out, judged


__all__ = ["STEPS_MS", "WITH_CUT", "StepSpan", "check_clock_steps", "describe_step", "step", "write_offset"]
