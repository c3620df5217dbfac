"""Task[P, R] is typed with ParamSpec: mypy rejects wrong enqueue arguments."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

SAMPLE = Path(__file__).resolve().parent.parent / "typing" / "enqueue_types.py"


def test_mypy_checks_enqueue_arguments_against_the_function() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(SAMPLE)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    errors = {int(m.group(1)) for m in re.finditer(r"enqueue_types\.py:(\d+): error", run.stdout)}
    expected = {i + 1 for i, line in enumerate(SAMPLE.read_text().splitlines()) if "# E:" in line}
    assert errors == expected, run.stdout


def test_package_passes_strict_mypy() -> None:
    src = Path(__file__).resolve().parents[2] / "src" / "conveyor"
    run = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", str(src)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout
