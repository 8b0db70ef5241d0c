"""Where a moved partition's produce stall goes: the client's gap cut at the move's six steps (pure).

The stall of a moved partition is measured by the client: from the last acknowledgement by the old
owner (A) to the first by the new one (B). The brokers' timeline of the same move
(broker/move_timeline.py: t0 controller accepted, t1 old owner applied, t4 streams force-uploaded
and closed, t6 new owner serving) cuts that interval into parts that add up to it:

- ``before_move``: A -> t0, the old owner still served but no acknowledgement came (the last
  record had been sent earlier: sparse load, or the plan's own time);
- ``queued``: t0 -> t1, the change accepted but not yet applied by the old owner (moves queued
  behind each other, metadata propagation to the broker);
- ``close_upload``: t1 -> t4, the old owner stops produce, persists, force-uploads the buffered
  bytes and closes its streams (a hot partition's upload);
- ``handoff``: t4 -> t6, the election and the new owner opening the streams;
- ``client``: t6 -> B, the new owner serves but the client has not yet sent there: its
  NOT_LEADER_OR_FOLLOWER answers, back-off, metadata refresh and the re-sent request.

Each time is clipped into [A, B] in order, so the parts are never negative and always sum to B - A;
wall clocks of one machine (the brokers' ms and the client's, converted) are assumed comparable.
"""
from __future__ import annotations

from typing import Mapping

PARTS = ("before_move", "queued", "close_upload", "handoff", "client")
_BOUNDARIES = ("t0", "t1", "t4", "t6")


def stall_parts(a_ms: float, b_ms: float, t_ms: Mapping[str, int | None]) -> dict[str, float] | None:
    """The parts of the stall [a_ms, b_ms] (wall ms), or None when the timeline lacks a boundary."""
    if b_ms < a_ms or any(t_ms.get(k) is None for k in _BOUNDARIES):
        return None
    points = [a_ms]
    for key in _BOUNDARIES:
        value = float(t_ms[key])  # type: ignore[arg-type]  # checked above
        points.append(min(max(value, points[-1]), b_ms))
    points.append(b_ms)
    return {name: round(points[i + 1] - points[i], 1) for i, name in enumerate(PARTS)}


def summarize_parts(parts: list[dict[str, float]]) -> dict[str, dict[str, float]]:
    """Per part: the mean and the share of the total stall, over the moves measured."""
    if not parts:
        return {}
    total = sum(sum(p.values()) for p in parts) or 1.0
    return {name: {"mean_ms": round(sum(p[name] for p in parts) / len(parts), 1),
                   "share": round(sum(p[name] for p in parts) / total, 3)} for name in PARTS}
