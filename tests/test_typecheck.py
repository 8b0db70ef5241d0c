"""mypy passes on every package (config in pyproject.toml): a type error fails `make test`."""
from __future__ import annotations

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("metadata_quorum", "stream_storage", "broker", "tools")


def test_mypy_passes_on_every_package() -> None:
    result = subprocess.run([sys.executable, "-m", "mypy", *PACKAGES], cwd=ROOT, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, f"mypy found type errors:\n{result.stdout}\n{result.stderr}"
    assert "Success" in result.stdout
