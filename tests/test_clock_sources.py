"""Servers read the wall clock in one place (``metadata_quorum/kernel/clock.py``): every other
time is a duration on the monotonic clock, and a chaos run can step a process's wall clock."""
from __future__ import annotations

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parent.parent
SERVER_PACKAGES = ("metadata_quorum", "broker", "stream_storage")
WALL_READS = re.compile(r"\btime\.time(_ns)?\(|\bdatetime\.(now|utcnow|today)\(|\bfrom time import\b")


def test_only_the_clock_module_reads_the_wall_clock() -> None:
    found = []
    for package in SERVER_PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if path == ROOT / "metadata_quorum" / "kernel" / "clock.py":
                continue
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if WALL_READS.search(line):
                    found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not found, "read the wall clock through kernel.clock.wall_ms (or durations through mono_ms):\n" + \
        "\n".join(found)
    assert WALL_READS.search("x = int(time.time() * 1000)") and WALL_READS.search("datetime.now()")
