"""SQLite: a settle batch's completions are one UPDATE joined to the batch as JSON
(lifecycle.py, complete_jobs). Found by the corrupt-field fuzz: an id with a NUL in it did
not come back from SQLite's JSON functions unchanged, so its completion was reported
stale and the job stayed running until its lease ran out."""

from __future__ import annotations

from pathlib import Path

from conveyor.backends.claiming import strict_claim
from conveyor.backends.params import Settlement
from conveyor.backends.sqlite.connection import SqliteConnection
from conveyor.backends.sqlite.enqueue import enqueue_jobs
from conveyor.backends.sqlite.lifecycle import fetch_jobs, get_job, settle_jobs
from conveyor.model.job import JobState, NewJob

IDS = ["plain", "nul\x00inside", "accents-é-ü", "emoji-\U0001f600", "last"]


def test_every_completion_of_a_batch_applies_whatever_its_id(tmp_path: Path) -> None:
    connection = SqliteConnection(str(tmp_path / "jobs.db"), lambda: 1000.0)
    connection.migrate()
    enqueue_jobs(
        connection,
        [
            NewJob(id=i, task="t.noop", queue="default", payload='{"args": [], "kwargs": {}}')
            for i in IDS
        ],
    )
    claimed = fetch_jobs(connection, strict_claim(["default"], 10, "w1", 30))
    assert sorted(job.id for job in claimed) == sorted(IDS)
    stale, unblocked = settle_jobs(
        connection,
        [
            Settlement(job.id, job.lease_token, JobState.COMPLETED, result=f'"{n}"')
            for n, job in enumerate(claimed)
        ],
    )
    assert (stale, unblocked) == ([], 0)
    for n, job in enumerate(claimed):
        stored = get_job(connection, job.id)
        assert stored is not None
        assert (stored.state, stored.result) == (JobState.COMPLETED, f'"{n}"')
    connection.close()
