"""A killed worker's jobs back at once by its liveness signal, and a frozen one's never
taken: real worker processes, SIGKILL and SIGSTOP, on every backend."""

from __future__ import annotations

import signal
import time
from collections import Counter

import pytest
from acceptance_support import Runs, WorkerProcess, announced
from polling import poll
from runs_log import read as read_runs

from conveyor import Conveyor
from conveyor.model.job import Job, JobState

pytestmark = pytest.mark.slow

JOBS = 8


def enqueue(url: str, task: str, seconds: float, n: int) -> list[str]:
    import jobs_app

    app = Conveyor(url)
    try:
        make = getattr(jobs_app, task)
        return [h.id for h in app.enqueue_many([make.message(seconds) for _ in range(n)])]
    finally:
        app.close()


def finished_jobs(url: str, ids: list[str], timeout: float = 60.0) -> dict[str, Job]:
    app = Conveyor(url)
    try:

        def all_finished() -> dict[str, Job] | None:
            jobs = {job_id: app.jobs.get(job_id) for job_id in ids}
            done = {k: j for k, j in jobs.items() if j is not None and j.is_finished}
            return done if len(done) == len(ids) else None

        return poll(all_finished, timeout, f"{len(ids)} jobs to finish", interval=0.05)
    finally:
        app.close()


def test_a_killed_workers_jobs_run_again_within_two_seconds_not_its_lease(
    url: str, runs: Runs, workers: list[WorkerProcess]
) -> None:
    ids = enqueue(url, "hang_first", 120.0, JOBS)
    victim = WorkerProcess(url, runs.path, "-c", str(JOBS), "--lease", "10")
    workers.append(victim)
    runs.wait_for("start", JOBS)
    rescuer = WorkerProcess(url, runs.path, "-c", str(JOBS), "--lease", "10")
    workers.append(rescuer)
    poll(lambda: len(announced(url)) == 2, 30, "both workers to announce their signals")

    killed_at = time.time()
    victim.signal(signal.SIGKILL)
    runs.wait_for("start", 2 * JOBS, timeout=10)
    again = [e for e in read_runs(runs.path) if e.kind == "start" and e.attempt == 2]
    assert len(again) == JOBS and {e.pid for e in again} == {rescuer.proc.pid}
    took = max(e.at for e in again) - killed_at
    assert took < 2.0, f"the jobs ran again {took:.2f}s after the kill (lease: 10 s)"

    jobs = finished_jobs(url, ids)
    for job in jobs.values():
        assert job.state is JobState.COMPLETED and job.attempt == 2
        assert [(e.attempt, e.type) for e in job.errors] == [(1, "WorkerLost")]
        assert "died (its" in job.errors[0].message
    finishes = Counter(e.job_id for e in read_runs(runs.path) if e.kind == "finish")
    assert finishes == {job_id: 1 for job_id in ids}  # the victim finished none


def test_a_frozen_worker_within_its_lease_keeps_its_jobs(
    url: str, runs: Runs, workers: list[WorkerProcess]
) -> None:
    """SIGSTOP keeps the process's sockets and file locks: its signal is still held,
    so nobody rescues it, and its lease (10 s) outlasts the freeze (5 s)."""
    ids = enqueue(url, "work", 8.0, JOBS)
    frozen = WorkerProcess(url, runs.path, "-c", str(JOBS), "--lease", "10")
    workers.append(frozen)
    runs.wait_for("start", JOBS)
    other = WorkerProcess(url, runs.path, "-c", str(JOBS), "--lease", "10")
    workers.append(other)
    poll(lambda: len(announced(url)) == 2, 30, "both workers to announce their signals")

    frozen.signal(signal.SIGSTOP)
    time.sleep(5.0)  # the scenario itself: a worker frozen for 5 s (not a synchronisation)
    frozen.signal(signal.SIGCONT)

    jobs = finished_jobs(url, ids)
    for job in jobs.values():
        assert job.state is JobState.COMPLETED and job.attempt == 1 and job.errors == ()
    events = read_runs(runs.path)
    assert Counter(e.job_id for e in events if e.kind == "start") == {i: 1 for i in ids}
    assert Counter(e.job_id for e in events if e.kind == "finish") == {i: 1 for i in ids}
    assert {e.pid for e in events} == {frozen.proc.pid}
    assert "died (its" not in other.output()
