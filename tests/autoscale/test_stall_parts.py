"""The stall of a moved partition cut at the move's steps (pure)."""
from __future__ import annotations

from tools.autoscale.stall_parts import stall_parts, summarize_parts

T = {"t0": 1_000, "t1": 1_040, "t2": 1_041, "t3": 1_050, "t4": 1_120, "t5": 1_130, "t6": 1_160}


def test_parts_add_up_to_the_stall():
    parts = stall_parts(990.0, 1_400.0, T)
    assert parts == {"before_move": 10.0, "queued": 40.0, "close_upload": 80.0, "handoff": 40.0, "client": 240.0}
    assert sum(parts.values()) == 410.0


def test_acknowledgements_after_t0_clip_the_early_parts():
    parts = stall_parts(1_045.0, 1_200.0, T)  # the old owner acknowledged after it applied the change
    assert parts is not None
    assert parts["before_move"] == parts["queued"] == 0.0 and parts["close_upload"] == 75.0
    assert sum(parts.values()) == 155.0
    # the client found the new owner before t6 was recorded: nothing is negative
    early = stall_parts(990.0, 1_150.0, T)
    assert early is not None and early["client"] == 0.0 and min(early.values()) >= 0 and sum(early.values()) == 160.0


def test_incomplete_timelines_are_not_guessed():
    assert stall_parts(990.0, 1_400.0, {**T, "t6": None}) is None
    assert stall_parts(1_400.0, 990.0, T) is None
    summary = summarize_parts([stall_parts(990.0, 1_400.0, T), stall_parts(990.0, 1_400.0, T)])  # type: ignore[list-item]
    assert summary["client"] == {"mean_ms": 240.0, "share": round(240 / 410, 3)}
