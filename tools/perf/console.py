"""The web console at scale: first paint and per-update time in a real browser (headless Chromium),
with a synthetic cluster of 10,000 partitions and 100 moves per second.

The console app is the real one (tools/console/app.py) over a synthetic source
(tools/console/synthetic.py); the page is the real page in Debian's chromium. Figures: first paint
(navigation start to the first full view drawn, from the page's clock), each update's handling on
the page (parse, apply, redraw) and the longest gap between animation frames (what a user feels as
jank: it includes layout and paint), the view model's own time per poll (Python), and a move's
delay from its completion (t6) to the page drawing it.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from typing import Any

from tools.console.app import Console, bound_port, serve
from tools.console.browser import find_browser, headless_chromium
from tools.console.model import History, build_view, diff_view
from tools.console.synthetic import SyntheticSource, describe

FRAME_GAPS_JS = """
window.__gaps = []; let last = performance.now();
function tick(t) { window.__gaps.push(t - last); last = t; requestAnimationFrame(tick); }
requestAnimationFrame(tick);
"""


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


async def model_cost_ms(partitions: int, moves_per_s: float, polls: int = 20) -> list[float]:
    """The Python view model's time per poll (build_view + diff_view), on the same synthetic cluster."""
    clock = [0]
    source = SyntheticSource(partitions, moves_per_s=moves_per_s, now_ms=lambda: clock[0])
    history, prev, out = History(), None, []
    for i in range(polls):
        clock[0] = (i + 1) * 200
        obs = await source.observe()
        started = time.perf_counter()
        view = build_view(obs, history)
        diff_view(prev, view)
        out.append((time.perf_counter() - started) * 1000)
        prev = view
    return out


async def measure(partitions: int, moves_per_s: float, duration_s: float, poll_interval_ms: int,
                  screenshot: str | None = None) -> dict[str, Any]:
    source = SyntheticSource(partitions, moves_per_s=moves_per_s)
    console = Console(source, poll_interval_ms=poll_interval_ms)
    runner = await serve(console, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{bound_port(runner)}/"
    driver: Any = None
    try:
        await asyncio.sleep(poll_interval_ms / 1000 * 2)  # the first view is built before the page asks
        driver = await asyncio.to_thread(headless_chromium)
        await asyncio.to_thread(driver.get, url)
        deadline = time.monotonic() + 10
        while await asyncio.to_thread(driver.execute_script, "return ferryStats.firstPaintMs") is None:
            if time.monotonic() > deadline:
                raise TimeoutError("the page did not paint within 10 s")
            await asyncio.sleep(0.05)
        first_paint_ms = float(await asyncio.to_thread(driver.execute_script, "return ferryStats.firstPaintMs"))
        fcp = await asyncio.to_thread(driver.execute_script, "const e = performance.getEntriesByName("
                                      "'first-contentful-paint')[0]; return e ? e.startTime : null")
        drawn = await asyncio.to_thread(driver.execute_script,
                                        "return Object.values(ferryView().partitions).reduce((a, l) => a + l.length, 0)")
        full_ms = await asyncio.to_thread(driver.execute_script, "return ferryStats.fullMs")
        await asyncio.to_thread(driver.execute_script, "ferryStats.applyMs = []; ferryStats.moveToPageMs = [];"
                                + FRAME_GAPS_JS)
        await asyncio.sleep(duration_s)
        stats = await asyncio.to_thread(driver.execute_script, "return {apply: ferryStats.applyMs, "
                                        "moves: ferryStats.moveToPageMs, gaps: window.__gaps.slice(1)}")
        if screenshot:
            await asyncio.to_thread(driver.save_screenshot, screenshot)
    finally:
        if driver is not None:
            await asyncio.to_thread(driver.quit)
        await runner.cleanup()
    apply_ms, gaps, to_page = [float(v) for v in stats["apply"]], [float(v) for v in stats["gaps"]], \
        [float(v) for v in stats["moves"]]
    model = await model_cost_ms(partitions, moves_per_s)
    return {
        **describe(source), "duration_s": duration_s, "poll_interval_ms": poll_interval_ms,
        "partitions_drawn": drawn,
        "first_paint_ms": round(first_paint_ms, 1), "full_view_ms": round(float(full_ms[0]), 1) if full_ms else None, "first_contentful_paint_ms": None if fcp is None else round(float(fcp), 1),
        "updates": len(apply_ms), "update_p50_ms": round(pct(apply_ms, 50), 2),
        "update_p99_ms": round(pct(apply_ms, 99), 2), "update_max_ms": round(max(apply_ms, default=float("nan")), 2),
        "frames": len(gaps), "frame_gap_p99_ms": round(pct(gaps, 99), 1),
        "frame_gap_max_ms": round(max(gaps, default=float("nan")), 1),
        "moves_drawn": len(to_page), "move_to_page_p50_ms": round(pct(to_page, 50), 1),
        "move_to_page_max_ms": round(max(to_page, default=float("nan")), 1),
        "model_per_poll_p50_ms": round(statistics.median(model), 2), "model_per_poll_max_ms": round(max(model), 2),
    }


def print_table(out: dict[str, Any]) -> None:
    from rich.console import Console as Rich
    from rich.table import Table

    table = Table(title=f"ferry console: {out['partitions']} partitions in {out['topics']} topics, {out['brokers']} "
                        f"brokers, {out['moves_per_s']:.0f} moves/s for {out['duration_s']:.0f} s "
                        f"(poll every {out['poll_interval_ms']} ms), headless Chromium")
    for col in ("figure", "value", "target"):
        table.add_column(col)
    table.add_row("first paint (navigation → 10,000 cells drawn)", f"{out['first_paint_ms']:.0f} ms", "≤ 1000 ms")
    table.add_row("first contentful paint", f"{out['first_contentful_paint_ms']} ms", "")
    table.add_row("the whole view's handling on the page (parse, draw every panel)", f"{out['full_view_ms']} ms", "")
    table.add_row(f"per update on the page, {out['updates']} updates: p50 / p99 / max",
                  f"{out['update_p50_ms']:.1f} / {out['update_p99_ms']:.1f} / {out['update_max_ms']:.1f} ms", "≤ 100 ms")
    table.add_row(f"gap between frames, {out['frames']} frames: p99 / max",
                  f"{out['frame_gap_p99_ms']:.0f} / {out['frame_gap_max_ms']:.0f} ms", "≤ 100 ms")
    table.add_row(f"move completed → drawn, {out['moves_drawn']} moves: p50 / max",
                  f"{out['move_to_page_p50_ms']:.0f} / {out['move_to_page_max_ms']:.0f} ms", "≤ 1000 ms")
    table.add_row("view model per poll (Python): p50 / max",
                  f"{out['model_per_poll_p50_ms']:.1f} / {out['model_per_poll_max_ms']:.1f} ms", "")
    Rich(width=120).print(table)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="ferry perf console", description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--partitions", type=int, default=10_000, help="partitions (default 10,000)")
    parser.add_argument("--moves-per-s", type=float, default=100.0, help="moves per second (default 100)")
    parser.add_argument("--duration-s", type=float, default=10.0, help="how long updates are measured (default 10)")
    parser.add_argument("--poll-interval-ms", type=int, default=200, help="the console's poll interval (default 200)")
    parser.add_argument("--screenshot", metavar="PNG", help="save the page as it was at the end")
    args = parser.parse_args(argv)
    if not 10 <= args.partitions <= 200_000 or not 0 <= args.moves_per_s <= 10_000 or not 1 <= args.duration_s <= 600:
        print("Error: --partitions 10..200000, --moves-per-s 0..10000, --duration-s 1..600 (INVALID_REQUEST)",
              file=sys.stderr)
        return 2
    found = find_browser()
    if isinstance(found, str):
        print(f"Error: {found} (INVALID_CONFIG)", file=sys.stderr)
        return 1
    out = asyncio.run(measure(args.partitions, args.moves_per_s, args.duration_s, args.poll_interval_ms,
                             args.screenshot))
    print(json.dumps(out, sort_keys=True) if args.json else "", end="\n" if args.json else "")
    if not args.json:
        print_table(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
