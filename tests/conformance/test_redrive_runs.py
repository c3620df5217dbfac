"""Paced redrive on every backend: the rate, the watch on outcomes that stops a run
by itself, pause, resume, cancel, adoption of an orphaned run, and its audit entries.
Time is the injected clock; a test plays the workers by settling jobs itself."""

from __future__ import annotations

from helpers import claim_one, error, new_job

from conveyor import Conveyor
from conveyor.backends.claiming import strict_claim
from conveyor.backends.contract import Backend
from conveyor.backends.params import JobFilter, JobPage, Settlement
from conveyor.model.clock import ManualClock
from conveyor.model.job import JobState
from conveyor.ops.redrive_driver import Driver
from conveyor.ops.redrive_runs import DRIVER_LEASE, Runs, RunStatus, parse_rate

DEAD = JobFilter(states=(JobState.DEAD,))


async def dead_jobs(backend: Backend, clock: ManualClock, n: int) -> list[str]:
    ids = [f"d{i:02d}" for i in range(n)]
    await backend.enqueue_jobs([new_job(id=i, task="app.tasks.charge") for i in ids])
    for _ in ids:
        job = await claim_one(backend)
        clock.advance(1)
        await backend.settle_jobs(
            [
                Settlement(
                    job.id, job.lease_token, JobState.DEAD, error=error(job.attempt, "KeyError")
                )
            ]
        )
    return ids


async def work(backend: Backend, outcomes: list[JobState]) -> list[str]:
    """Claim as many available jobs as outcomes given and settle them so (a retry
    is due in an hour)."""
    jobs = await backend.fetch_jobs(strict_claim(["default"], len(outcomes), "w", 30))
    assert len(jobs) == len(outcomes)
    await backend.settle_jobs(
        [
            Settlement(
                j.id,
                j.lease_token,
                outcome,
                run_at=backend.clock() + 3600,
                error=None if outcome is JobState.COMPLETED else error(1, "KeyError"),
            )
            for j, outcome in zip(jobs, outcomes, strict=True)
        ]
    )
    return [j.id for j in jobs]


async def test_a_run_redrives_at_its_rate(
    app: Conveyor, backend: Backend, clock: ManualClock
) -> None:
    await dead_jobs(backend, clock, 10)
    run = await Runs(app).start(DEAD, rate=parse_rate("2/s"), by="alice", driver="d1")
    assert (run.status, run.remaining, run.total) == (RunStatus.RUNNING, 10, 10)
    driver = Driver(app, run.id, "d1")
    assert (await driver.step()).redriven == 2  # a full bucket: one second's worth
    assert (await driver.step()).redriven == 2  # no time passed, no token
    clock.advance(0.5)
    assert (await driver.step()).redriven == 3
    clock.advance(60)  # an idle minute does not build up a burst beyond one second
    after = await driver.step()
    assert (after.redriven, after.pending, after.remaining) == (5, 5, 5)
    assert await backend.count_jobs(DEAD) == 5
    moved = await backend.list_jobs(JobPage(where=JobFilter(states=(JobState.AVAILABLE,))))
    assert len(moved) == 5 and all(j.attempt == 0 and len(j.errors) == 1 for j in moved)


async def test_a_run_stops_itself_when_redriven_jobs_fail_again(
    app: Conveyor, backend: Backend, clock: ManualClock
) -> None:
    await dead_jobs(backend, clock, 20)
    runs = Runs(app)
    run = await runs.start(
        DEAD, rate=4.0, stop_if_failing=0.5, min_sample=4, by="alice", driver="d1"
    )
    driver = Driver(app, run.id, "d1")
    assert (await driver.step()).redriven == 4
    await work(backend, [JobState.COMPLETED, JobState.COMPLETED, JobState.DEAD, JobState.RETRYABLE])
    clock.advance(1)
    seen = await driver.step()
    assert (seen.succeeded, seen.failed, seen.status) == (2, 2, RunStatus.RUNNING)  # 50%: not above
    assert seen.redriven == 8
    await work(backend, [JobState.DEAD, JobState.COMPLETED, JobState.COMPLETED, JobState.COMPLETED])
    clock.advance(1)
    assert (await driver.step()).status is RunStatus.RUNNING  # 3 of 8 failed
    await work(backend, [JobState.DEAD] * 4)
    clock.advance(1)
    stopped = await driver.step()
    assert (stopped.status, stopped.succeeded, stopped.failed) == (RunStatus.STOPPED, 5, 7)
    assert stopped.reason == "7 of 12 redriven jobs failed again (58% > 50%)"
    assert stopped.redriven == 12 and stopped.driver is None
    clock.advance(5)
    assert (await driver.step()).redriven == 12  # stopped for good
    assert await backend.count_jobs(DEAD) == 8 + 6  # never redriven + dead again (one retries)
    actions = [(e.action, e.by, e.count) for e in await app.admin.audit()]
    assert actions == [("redrive run stopped", "alice", 12), ("redrive run started", "alice", 0)]


async def test_pause_resume_and_cancel_from_another_process(
    app: Conveyor, backend: Backend, clock: ManualClock
) -> None:
    await dead_jobs(backend, clock, 10)
    runs = Runs(app)
    run = await runs.start(DEAD, rate=2.0, by="alice", driver="cli")
    cli = Driver(app, run.id, "cli")
    assert (await cli.step()).redriven == 2
    paused = await runs.pause(run.id, by="bob")
    assert (paused.status, paused.reason, paused.driver) == (
        RunStatus.PAUSED,
        "paused by bob",
        None,
    )
    clock.advance(5)
    assert (await cli.step()).redriven == 2  # paused: the driver lets go
    resumed = await runs.resume(run.id, "dashboard", by="bob")
    assert (resumed.status, resumed.driver) == (RunStatus.RUNNING, "dashboard")
    clock.advance(5)
    assert (await cli.step()).redriven == 2  # no longer its driver
    dashboard = Driver(app, run.id, "dashboard")
    assert (await dashboard.step()).redriven == 2  # resumed: no new burst
    clock.advance(1)
    assert (await dashboard.step()).redriven == 4
    cancelled = await runs.cancel(run.id, by="carol")
    assert cancelled.status is RunStatus.CANCELLED
    clock.advance(5)
    assert (await dashboard.step()).redriven == 4
    assert await backend.count_jobs(DEAD) == 6
    assert [e.action for e in await app.admin.audit()] == [
        "redrive run cancelled",
        "redrive run resumed",
        "redrive run paused",
        "redrive run started",
    ]


async def test_an_orphaned_run_is_adopted_and_finishes(
    app: Conveyor, backend: Backend, clock: ManualClock
) -> None:
    ids = await dead_jobs(backend, clock, 3)
    runs = Runs(app)
    run = await runs.start(DEAD, rate=2.0, by="alice", driver="gone")
    assert (await Driver(app, run.id, "gone").step()).redriven == 2
    assert await runs.adopt_orphans("new") == []  # its driver's lease still holds
    clock.advance(DRIVER_LEASE + 1)
    [adopted] = await runs.adopt_orphans("new")
    assert adopted.driver == "new"
    driver = Driver(app, run.id, "new")
    assert (await driver.step()).redriven == 2  # adopted: it goes on at its pace
    clock.advance(0.5)
    assert (await driver.step()).redriven == 3
    await work(backend, [JobState.COMPLETED] * 3)
    clock.advance(1)
    # Only the job it redrove itself is watched by the new driver.
    done = await driver.step()
    assert (done.status, done.succeeded, done.reason) == (
        RunStatus.DONE,
        1,
        "nothing left to redrive",
    )
    start = [e for e in await app.admin.audit() if e.action == "redrive run started"][0]
    for job_id in ids:
        assert [e.key for e in await app.admin.actions_on(job_id)] == [start.key]


async def test_a_run_waits_while_its_window_of_jobs_has_no_outcome(
    app: Conveyor, backend: Backend, clock: ManualClock
) -> None:
    await dead_jobs(backend, clock, 10)
    run = await Runs(app).start(DEAD, rate=10.0, window=3, limit=5, by="alice", driver="d")
    driver = Driver(app, run.id, "d")
    assert (await driver.step()).redriven == 3
    clock.advance(1)
    assert (await driver.step()).redriven == 3  # no worker took them: wait
    await work(backend, [JobState.COMPLETED] * 3)
    clock.advance(1)
    assert (await driver.step()).redriven == 5  # the limit, not the window, now
    await work(backend, [JobState.COMPLETED] * 2)
    clock.advance(1)
    done = await driver.step()
    assert (done.status, done.succeeded, done.reason) == (
        RunStatus.DONE,
        5,
        "redrove the 5 asked for",
    )
    assert await backend.count_jobs(DEAD) == 5
