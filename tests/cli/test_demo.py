"""`conveyor demo` runs end to end, reports what happened, and fails when that differs."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conveyor import Conveyor
from conveyor.admin.api import make_filter
from conveyor.cli import demo
from conveyor.model.job import JobState

EXPECTED = {  # label -> (task, state, attempts)
    "welcome Ada": ("send_welcome_email", "completed", "1"),
    "welcome Grace": ("send_welcome_email", "completed", "1"),
    "primes below 100k": ("count_primes", "completed", "1"),
    "thumbnail": ("resize_image", "completed", "1"),
    "flaky CRM sync": ("sync_crm_contact", "completed", "2"),
    "poison invoice": ("import_invoice", "dead", "1"),
    "reminder in 2s": ("send_reminder", "completed", "1"),
}


def console_script() -> str:
    """The installed `conveyor` entry point, next to this interpreter."""
    script = shutil.which("conveyor", path=str(Path(sys.executable).parent))
    if script is None:
        pytest.fail("the `conveyor` console script is not installed: pip install -e .")
    return script


def test_demo_through_the_console_script(tmp_path: Path) -> None:
    db = tmp_path / "demo.db"
    started = time.monotonic()
    done = subprocess.run(
        [console_script(), "demo", "--db", str(db)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert time.monotonic() - started < 15
    out = done.stdout
    assert f"database: {db}" in out
    assert out.rstrip().endswith("everything went as expected")
    assert "outbox: 3 emails written" in out

    table = out[out.index("ID  ") :].split("\n\n")[0].splitlines()
    reported = {}
    for line in table[1:]:
        cells = [c.strip() for c in line.split("  ") if c.strip()]
        job_id, label, task, state, attempts, check = cells[:6]
        reported[label] = (task, state, attempts)
        assert check == "ok", line
    assert reported == EXPECTED
    assert "ValueError: could not convert string to float: 'twelve'" in out
    assert "Traceback" not in done.stderr

    # What it printed is what the database holds.
    app = Conveyor(f"sqlite:///{db}")
    try:
        assert app.jobs.count(make_filter(states=[JobState.COMPLETED])) == 6
        assert app.jobs.count(make_filter(states=[JobState.DEAD])) == 1
        assert app.jobs.count() == 7
    finally:
        app.close()


def test_demo_with_python_dash_m_and_a_temp_file() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "conveyor", "demo"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    db = Path(done.stdout.split("database: ", 1)[1].splitlines()[0])
    assert db.exists()
    shutil.rmtree(db.parent)


def test_demo_exits_non_zero_when_an_outcome_differs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Claim the poison pill should succeed: the demo must notice it did not.
    plan = [
        dataclasses.replace(item, state=JobState.COMPLETED)
        if item.task == "import_invoice"
        else item
        for item in demo.PLAN
    ]
    monkeypatch.setattr(demo, "PLAN", plan)
    assert demo.run(tmp_path / "demo.db") == 1
    out = capsys.readouterr().out
    assert (
        "NOT as expected:\n  poison invoice: expected completed after 1 attempt(s), "
        "got dead after 1" in out
    )
    assert "everything went as expected" not in out
