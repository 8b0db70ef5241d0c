"""ruff passes on every package and the tests (rules in pyproject.toml): a finding fails `make test`.

The rules are the ones that find bugs rather than style: names never defined or never used,
loop variables caught by closures, zip() over inputs that must match, blocking calls inside
async functions (each one stalls every request the broker's event loop serves), blind excepts
without a reason, and noqa comments that no longer hide anything."""
from __future__ import annotations

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PATHS = ("metadata_quorum", "stream_storage", "broker", "tools", "tests")


def test_ruff_finds_nothing() -> None:
    result = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise",
                             *PATHS], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"ruff found problems:\n{result.stdout}\n{result.stderr}"
    assert "All checks passed" in result.stdout


def test_ruff_reports_a_finding(tmp_path) -> None:
    """The same command fails on a file with an undefined name and a blocking call in async code,
    so the check above cannot pass by linting nothing."""
    bad = tmp_path / "bad.py"
    bad.write_text("import time\n\n\nasync def f() -> None:\n    time.sleep(1)\n    return undefined_name\n")
    result = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise",
                             "--config", os.path.join(ROOT, "pyproject.toml"), str(bad)],
                            cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "F821" in result.stdout and "ASYNC251" in result.stdout, result.stdout
