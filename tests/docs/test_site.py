"""The docs site builds with `mkdocs build --strict`: a broken link, a nav entry without
a page or an API reference that does not resolve fails it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_site_builds_strict(tmp_path: Path) -> None:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr
    api = (tmp_path / "site" / "api" / "index.html").read_text()
    for name in (
        "conveyor.Conveyor",
        "conveyor.worker.WorkerConfig",
        "conveyor.contrib.django",
        "conveyor.contrib.fastapi",
    ):
        assert f'id="{name}"' in api, name
    # Docstring examples are highlighted as a Python session, not quoted as text.
    assert "```pycon" not in api and '<span class="gp">&gt;&gt;&gt; </span>' in api
