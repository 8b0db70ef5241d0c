"""`ferry perf txn`'s arithmetic: the move gap is the longest pause in acknowledgements from the move on."""
from __future__ import annotations

from tools.perf.txn import Run, max_gap_ms, percentile


def test_the_gap_counts_only_pauses_from_the_move_on() -> None:
    acked = [0.0, 0.5, 1.0, 1.01, 1.02, 1.30, 1.31]
    assert abs(max_gap_ms(acked, after=1.0) - 280.0) < 1e-6
    assert abs(max_gap_ms(acked, after=0.0) - 500.0) < 1e-6
    assert max_gap_ms([], after=0.0) == 0.0


def test_throughput_and_percentiles() -> None:
    run = Run(acked_bytes=10 * 1024 * 1024, elapsed_s=2.0)
    assert run.mb_s == 5.0 and Run().mb_s == 0.0
    assert percentile([], 99) == 0.0 and percentile([1.0, 2.0, 3.0], 50) == 2.0
