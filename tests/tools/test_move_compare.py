"""The pure parts of `ferry perf move --compare`: the producer-seen gap and the JSON summary."""
from __future__ import annotations

from tools.move_workload import Ack
from tools.perf.move_compare import max_gap_ms, summary


def test_the_gap_is_the_longest_silence_including_the_edges() -> None:
    acks = [Ack(i, i, 1, t) for i, t in enumerate([0.9, 1.05, 1.1, 1.6, 1.65])]
    assert round(max_gap_ms(acks, 1.0, 2.0) or 0) == 500
    assert round(max_gap_ms(acks, 1.0, 1.62) or 0) == 500
    assert max_gap_ms([], 1.0, 2.0) is None


def test_summary_keys_and_ratio() -> None:
    classic = {"1MiB": {"move_s": 0.2}, "1GiB": {"move_s": 12.0}}
    s3 = {"1MiB": {"move_s": 0.1}, "1GiB": {"move_s": 0.12}}
    out = summary(classic, s3, {"error": -0.02})
    assert out["classic_move_s_by_size"] == {"1MiB": 0.2, "1GiB": 12.0}
    assert out["s3_move_s_by_size"] == {"1MiB": 0.1, "1GiB": 0.12}
    assert out["classic_over_s3_at_1gib"] == 100.0
    assert out["throttled_rate_error"] == -0.02
    quick = summary({"64MiB": {"move_s": 0.3}}, {"64MiB": {"move_s": 0.1}}, {})
    assert quick["classic_over_s3_at_1gib"] is None and quick["classic_over_s3_at_largest"] == 3.0
