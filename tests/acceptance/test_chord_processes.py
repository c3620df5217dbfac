"""The chord callback runs exactly once when the last two members of its group
complete at the same instant on two worker processes (docs/workflows.md): releasing
a dependant happens in the statement or script that completes its parent, so the
two completions decrement its count one after the other and only the second makes
it available. Repeated, each round a fresh chord whose two members meet at a
barrier and return on the same clock tick."""

from __future__ import annotations

from collections import Counter

import pytest
from acceptance_support import Runs, WorkerProcess

from conveyor import chord, group
from conveyor.model.job import JobState

pytestmark = pytest.mark.slow

ROUNDS = 25


def test_chord_callback_runs_once_when_the_last_two_members_complete_at_once(
    url: str, runs: Runs, workers: list[WorkerProcess]
) -> None:
    from jobs_app import app, chord_callback, chord_member

    for _ in range(2):
        workers.append(WorkerProcess(url, runs.path, "-c", "1", "--poll", "0.05"))
    app.rebind(url)  # the workflow is enqueued by its tasks' app
    try:
        for n in range(ROUNDS):
            name = f"r{n}"
            flow = chord(
                group(chord_member.s(name, 1), chord_member.s(name, 2)), chord_callback.s(name)
            )
            handle = flow.enqueue()
            assert handle.result(timeout=60) == [1, 2], n
            members = [e for e in runs.events() if e[0] == f"member-{name}"]
            assert len(members) == 2 and members[0][3] != members[1][3], members  # two workers
            member_jobs = [app.jobs.get(h.id) for h in handle.jobs[:2]]
            ends = [j.finished_at for j in member_jobs if j is not None]
            # Ignored for mypy: finished_at is set: both jobs finished
            assert len(ends) == 2 and abs(ends[0] - ends[1]) < 0.05, ends  # type: ignore[operator]  # at the same instant
        callbacks = Counter(e[0] for e in runs.events() if e[0].startswith("callback-"))
        assert callbacks == Counter({f"callback-r{n}": 1 for n in range(ROUNDS)})
        stats = {s.queue: s for s in app.jobs.stats()}
        counts = stats["default"].counts
        assert counts.get(JobState.COMPLETED) == 3 * ROUNDS and sum(counts.values()) == 3 * ROUNDS
    finally:
        app.close()
