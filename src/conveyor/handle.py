"""What `enqueue` returns: the job's id and a way to follow it."""

from __future__ import annotations

import asyncio
import time
from types import TracebackType
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, cast

from conveyor.backends.capabilities import FinishWakeups
from conveyor.backends.contract import Backend
from conveyor.backends.params import FinishWait
from conveyor.model.errors import CorruptJob, JobFailed, JobNotFound, QueueFull
from conveyor.model.job import Job, JobState

if TYPE_CHECKING:
    from conveyor.admin.api import Admin, Jobs
    from conveyor.model.portal import Portal
    from conveyor.payloads.claim_check import ClaimCheck

R = TypeVar("R")


class HandleApp(Protocol):
    """What a handle needs of its app (a `Conveyor`): the admin API, async and
    sync, the portal that runs async code for sync callers, and the claim-check
    that reads back a result stored apart."""

    @property
    def admin(self) -> Admin: ...
    @property
    def jobs(self) -> Jobs: ...
    @property
    def portal(self) -> Portal: ...
    @property
    def claim_check(self) -> ClaimCheck: ...
    async def backend(self) -> Backend: ...


class JobHandle(Generic[R]):
    def __init__(self, app: HandleApp, job: Job) -> None:
        self.app = app
        self.id = job.id
        self.job = job  # the snapshot at enqueue time (the existing job, when deduplicated)

    def __repr__(self) -> str:
        return f"<JobHandle {self.id} {self.job.task}>"

    def refresh(self) -> Job:
        job = self.app.jobs.get(self.id)
        if job is None:
            raise JobNotFound(f"job {self.id} no longer exists (pruned or deleted)")
        self.job = job
        return job

    @property
    def state(self) -> JobState:
        return self.refresh().state

    def result(self, timeout: float | None = None) -> R:
        """Wait until the job finishes; return its result or raise JobFailed."""
        return self.app.portal.call(self.result_async(timeout))

    async def result_async(self, timeout: float | None = None) -> R:
        """Wait as `result` does. A backend with FinishWakeups wakes this at the job's
        end; otherwise (and as a fallback) it polls, backing off to 0.25 s."""
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = 0.005
        backend = await self.app.backend()
        wakes = backend if isinstance(backend, FinishWakeups) else None
        while True:
            job = await self.app.admin.get(self.id)
            if job is None:
                raise JobNotFound(f"job {self.id} no longer exists (pruned or deleted)")
            self.job = job
            if job.state is JobState.COMPLETED:
                try:
                    # A result stored apart is read back (and checked) from the store.
                    return cast(R, await self.app.claim_check.result_value(job))
                except ValueError:
                    raise CorruptJob(
                        f"job {job.id} completed, but its stored result cannot "
                        f"be read: {job.corrupt}"
                    ) from None
            if job.state in (JobState.DEAD, JobState.CANCELLED):
                last = job.errors[-1] if job.errors else None
                raise JobFailed(
                    job.id,
                    job.state.value,
                    f"{last.type}: {last.message}" if last else "no error recorded",
                )
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise TimeoutError(f"job {self.id} still {job.state.value} after {timeout}s")
            if wakes is not None:  # a hint, so a bounded wait: a lost one costs a second
                await wakes.wait_for_finish(
                    FinishWait(job_id=self.id, timeout=1.0 if left is None else min(left, 1.0))
                )
                continue
            await asyncio.sleep(delay if left is None else min(delay, left))
            delay = min(delay * 2, 0.25)


def handles(app: HandleApp, jobs: list[Job]) -> list[JobHandle[Any]]:
    return [JobHandle(app, job) for job in jobs]


class refusals_by_handle:
    """A QueueFull raised inside names the stored jobs by handle, as the app's callers
    get them, instead of by Job. A class, not a @contextmanager: it wraps every
    enqueue, and a generator-based one costs ten times as much to enter and leave."""

    __slots__ = ("app",)

    def __init__(self, app: HandleApp) -> None:
        self.app = app

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if isinstance(error, QueueFull):
            raise QueueFull(
                error.refused,
                [None if job is None else JobHandle(self.app, job) for job in error.jobs],
            ) from None
