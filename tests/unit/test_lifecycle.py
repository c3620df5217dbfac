from __future__ import annotations

import re
from pathlib import Path

import pytest

from conveyor.model.job import JobState
from conveyor.model.lifecycle import ALLOWED, TRANSITIONS, IllegalTransition, Transition, check

SQLITE_MIGRATIONS = Path(__file__).resolve().parents[2] / "src/conveyor/backends/sqlite/migrations"


def test_sqlite_trigger_allows_exactly_the_lifecycle_table() -> None:
    # The guard in force is the one the newest migration that (re)creates it wrote.
    defining = [
        path
        for path in sorted(SQLITE_MIGRATIONS.glob("*.sql"))
        if "CREATE TRIGGER conveyor_jobs_state_guard" in path.read_text()
    ]
    pairs = set(re.findall(r"'(\w+)>(\w+)'", defining[-1].read_text()))
    assert pairs == {(a.value, b.value) for a, b in ALLOWED}


def test_state_machine_doc_draws_every_transition() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs/state-machine.md").read_text()
    drawn = set(re.findall(r"^\s*(\w+) --> (\w+)", doc, re.MULTILINE))
    assert drawn == {(a.value, b.value) for a, b in ALLOWED}


def test_check_accepts_table_and_rejects_the_rest() -> None:
    check(JobState.AVAILABLE, JobState.RUNNING, Transition.CLAIM)
    with pytest.raises(IllegalTransition):
        check(JobState.COMPLETED, JobState.RUNNING)
    with pytest.raises(IllegalTransition):
        check(JobState.AVAILABLE, JobState.RUNNING, Transition.COMPLETE)


def test_terminal_states_only_leave_by_redrive() -> None:
    for old, new in ALLOWED:
        if old in (JobState.COMPLETED, JobState.DEAD, JobState.CANCELLED):
            assert old is not JobState.COMPLETED
            assert new is JobState.AVAILABLE or (old, new) == (JobState.CANCELLED, JobState.BLOCKED)
            assert TRANSITIONS[(old, new)] == {Transition.REDRIVE}
