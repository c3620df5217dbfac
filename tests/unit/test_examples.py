"""The examples in examples/ run and print what their docs say."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_quickstart(tmp_path: Path) -> None:
    run = subprocess.run([sys.executable, str(EXAMPLES / "quickstart.py"), str(tmp_path / "q.db")],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == [
        "sent welcome mail to user 42 | same job: True",
        "avatar-42.png | attempts: 2",
    ]
