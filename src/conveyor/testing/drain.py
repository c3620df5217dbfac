"""`drain(app)`: run what is enqueued, and what follows from it, through the real
worker until nothing waits, moving the test clock over every wait."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from conveyor.backends.params import JobFilter, JobPage
from conveyor.model.clock import Duration, to_epoch, to_seconds
from conveyor.model.job import Job, JobState
from conveyor.scheduling.scheduler import Scheduler, schedule_reports
from conveyor.task import Task
from conveyor.testing.harness import Attempt, harness_of
from conveyor.worker import Worker, WorkerConfig

if TYPE_CHECKING:
    from conveyor.app import Conveyor

MAX_STEPS = 10_000  # clock moves in one drain: more means a job that never ends
_WAITING_LATER = (JobState.SCHEDULED, JobState.RETRYABLE)


class DrainDidNotEnd(AssertionError):
    """A drain moved the clock `MAX_STEPS` times and jobs still wait (a job that
    snoozes or re-enqueues itself for ever)."""


@dataclass(frozen=True)
class Drained:
    """What a drain ran: every attempt in the order they ended, and each job that ran
    as it is now."""

    attempts: tuple[Attempt, ...]
    jobs: dict[str, Job] = field(default_factory=dict)

    def of(self, task: Task[Any, Any] | str) -> list[Attempt]:
        """The attempts of one task (a Task, or its name)."""
        name = task if isinstance(task, str) else task.name
        return [a for a in self.attempts if a.task == name]

    @property
    def states(self) -> Counter[JobState]:
        """How many of the jobs that ran are now in each state."""
        return Counter(job.state for job in self.jobs.values())

    def results(self, task: Task[Any, Any] | str) -> list[Any]:
        """The results of a task's completed attempts, in the order they ended."""
        return [a.result for a in self.of(task) if a.outcome is JobState.COMPLETED]


def drain(
    app: Conveyor,
    *,
    advance: Duration | None = None,
    queues: Sequence[str] | None = None,
    concurrency: int = 1,
) -> Drained:
    """Sync form of `drain_async`, for sync tests (a framework's test client)."""
    return app.portal.call(
        drain_async(app, advance=advance, queues=queues, concurrency=concurrency)
    )


async def drain_async(
    app: Conveyor,
    *,
    advance: Duration | None = None,
    queues: Sequence[str] | None = None,
    concurrency: int = 1,
) -> Drained:
    """Run every job due now through a real worker (`burst`), and what those jobs
    enqueue; then move the test clock to the next job waiting for its time (a
    retry's backoff, a delay, a snooze) and run again, until no job waits. The
    app's schedules fire at each moment the clock passes, as a worker's scheduler
    would have fired them.

    With `advance=`, let exactly that much time pass instead: everything due on the
    way runs at its time, schedules included, the clock ends `advance` later, and
    jobs due after that stay waiting.

    Jobs run one at a time in claim order (priority, run_at, enqueue order) unless
    `concurrency=` says more; `queues=` limits the drain to those queues."""
    harness = harness_of(app)
    clock = harness.clock
    end = None if advance is None else clock.now + to_seconds(advance)
    scheduler = Scheduler(app) if app.schedules else None
    outer = harness.recording
    record: list[Attempt] = []
    harness.recording = record
    harness.draining += 1
    try:
        for _ in range(MAX_STEPS):
            if scheduler is not None:
                await scheduler.tick()
            await _burst(app, queues, concurrency)
            later = [t for t in (await _next_job(app), await _next_tick(app)) if t is not None]
            if end is None:
                if await _next_job(app) is None:
                    break
                target = min(later)
            else:
                if clock.now >= end:
                    break
                target = min([*later, end])
            clock.now = max(clock.now, target)
        else:
            raise DrainDidNotEnd(
                f"drain moved the clock {MAX_STEPS} times and jobs still "
                f"wait (now {clock.datetime.isoformat()}): a job that never ends?"
            )
    finally:
        harness.draining -= 1
        harness.recording = outer
        if outer is not None:  # a drain inside a drain (inline): the outer one saw it too
            outer.extend(record)
    return Drained(tuple(record), await _jobs(app, record))


async def _burst(app: Conveyor, queues: Sequence[str] | None, concurrency: int) -> None:
    config = WorkerConfig(
        queues=tuple(queues or await _all_queues(app)),
        concurrency=concurrency,
        burst=True,
        scheduler=False,
        liveness=False,
        grace_period=0.0,
    )
    await Worker(app, config).run()


async def _all_queues(app: Conveyor) -> list[str]:
    backend = await app.backend()
    named = [app.default_queue, *(t.defaults.queue for t in app.tasks.values())]
    return list(dict.fromkeys([*named, *(s.queue for s in await backend.queue_stats())]))


async def _next_job(app: Conveyor) -> float | None:
    backend = await app.backend()
    waiting = await backend.list_jobs(
        JobPage(where=JobFilter(states=_WAITING_LATER), limit=1_000_000)
    )
    return min((job.run_at for job in waiting), default=None)


async def _next_tick(app: Conveyor) -> float | None:
    if not app.schedules:
        return None
    reports = await schedule_reports(app, upcoming=1)
    return min((to_epoch(r.upcoming[0]) for r in reports if r.upcoming), default=None)


async def _jobs(app: Conveyor, attempts: Sequence[Attempt]) -> dict[str, Job]:
    backend = await app.backend()
    jobs: dict[str, Job] = {}
    for attempt in attempts:
        if attempt.job_id not in jobs:
            job = await backend.get_job(attempt.job_id)
            if job is not None:
                jobs[attempt.job_id] = job
    return jobs


@contextmanager
def inline(app: Conveyor) -> Iterator[None]:
    """Within the block every enqueue of `app` runs its jobs at once, through the real
    worker: the enqueue returns when they (and what they enqueued) have ended.

    >>> with inline(app):
    ...     handle = send_welcome.enqueue(42)
    >>> handle.job.state  # completed (or dead, after its retries)
    """
    harness = harness_of(app)

    async def drain_now() -> dict[str, Job]:
        return (await drain_async(app)).jobs

    before, harness.inline_drain = harness.inline_drain, drain_now
    try:
        yield
    finally:
        harness.inline_drain = before
