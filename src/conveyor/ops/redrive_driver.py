"""Driving a paced redrive run (`conveyor.ops.redrive_runs`): one `step` at a time, each
reading the run record, counting the outcomes of the jobs it redrove, stopping the run
if too many failed again, redriving what the token bucket lets through, and writing
the record back (compare-and-set, so a pause or cancel written meanwhile wins).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from conveyor.backends.params import BulkAction, JobFilter, JobPage, RecordKey, RecordSwap
from conveyor.model.job import JobState
from conveyor.observe.audit import Actor, AuditTrail, PendingAction
from conveyor.ops.redrive_runs import DRIVER_LEASE, RUN_TTL, RUNS_NAMESPACE, RedriveRun, RunStatus

if TYPE_CHECKING:
    from conveyor.app import Conveyor

MAX_BATCH = 500
POLL_EVERY = 1.0  # seconds between two reads of the watched jobs' states


@dataclass
class Driver:
    """Drives one run, one `step` at a time (`drive` loops it)."""

    app: Conveyor
    run_id: str
    driver_id: str
    tokens: float = 0.0
    last_step: float | None = None
    last_poll: float = -math.inf
    watching: dict[str, int] = field(default_factory=dict)  # id -> errors at redrive
    exhausted: bool = False

    async def step(self) -> RedriveRun:
        """Read the run; if it is still ours and running: count outcomes, stop if too
        many fail, redrive what the bucket allows, write the run back."""
        backend = await self.app.backend()
        text = await backend.get_record(RecordKey(namespace=RUNS_NAMESPACE, key=self.run_id))
        if text is None:
            raise LookupError(f"redrive run {self.run_id} is gone")
        run = RedriveRun.from_json(text)
        if run.status is not RunStatus.RUNNING or run.driver != self.driver_id:
            return run
        now = self.app.clock()
        burst = max(1.0, run.rate)
        if self.last_step is None:
            # A new run starts with one second's worth; a resumed or adopted one goes on
            # at its pace (a pause must not buy a burst).
            self.tokens = burst if run.redriven == 0 else 0.0
        else:
            self.tokens = min(burst, self.tokens + max(0.0, now - self.last_step) * run.rate)
        self.last_step = now
        polled = now - self.last_poll >= POLL_EVERY
        succeeded, failed = await self._outcomes(now) if polled else (0, 0)
        run = replace(run, succeeded=run.succeeded + succeeded, failed=run.failed + failed)
        seen = run.succeeded + run.failed
        status, reason, moved = run.status, run.reason, 0
        if seen >= run.min_sample and run.failing_share > run.stop_if_failing:
            status = RunStatus.STOPPED
            reason = (
                f"{run.failed} of {seen} redriven jobs failed again "
                f"({run.failing_share:.0%} > {run.stop_if_failing:.0%})"
            )
        else:
            moved = await self._redrive(run)
        # A fresh count once a second; in between, what the batches took from it.
        remaining = await backend.count_jobs(run.where) if polled else max(0, run.remaining - moved)
        if status is RunStatus.RUNNING and self.exhausted and not self.watching:
            status, reason = RunStatus.DONE, "nothing left to redrive"
        if (
            run.limit is not None
            and run.redriven + moved >= run.limit
            and not self.watching
            and status is RunStatus.RUNNING
        ):
            status, reason = RunStatus.DONE, f"redrove the {run.limit:,} asked for"
        updated = replace(
            run,
            status=status,
            reason=reason,
            redriven=run.redriven + moved,
            pending=len(self.watching),
            remaining=remaining,
            updated_at=now,
            driver=None if status.finished else self.driver_id,
            driver_until=0.0 if status.finished else now + DRIVER_LEASE,
        )
        return await self._save(text, updated)

    async def _redrive(self, run: RedriveRun) -> int:
        room = run.window - len(self.watching)
        left = MAX_BATCH if run.limit is None else run.limit - run.redriven
        n = min(int(self.tokens), MAX_BATCH, room, left)
        if n <= 0 or self.exhausted:
            return 0
        backend = await self.app.backend()
        jobs = await backend.redrive_jobs(BulkAction(where=run.where, limit=n, dry_run=False))
        self.tokens -= len(jobs)
        self.watching.update({j.id: len(j.errors) for j in jobs})
        if len(jobs) < n:
            self.exhausted = True
        if jobs and run.audit_key:
            await AuditTrail(backend, self.app.clock).index([j.id for j in jobs], run.audit_key)
        return len(jobs)

    async def _outcomes(self, now: float) -> tuple[int, int]:
        self.last_poll = now
        backend = await self.app.backend()
        succeeded = failed = 0
        ids = list(self.watching)
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            found = {
                j.id: j
                for j in await backend.list_jobs(
                    JobPage(where=JobFilter(ids=tuple(chunk)), limit=len(chunk))
                )
            }
            for job_id in chunk:
                job = found.get(job_id)
                if job is None:
                    del self.watching[job_id]  # deleted meanwhile: no outcome
                elif len(job.errors) > self.watching[job_id]:
                    failed += 1
                    del self.watching[job_id]
                elif job.state is JobState.COMPLETED:
                    succeeded += 1
                    del self.watching[job_id]
                elif job.is_finished:
                    del self.watching[job_id]  # cancelled by someone: no outcome
        return succeeded, failed

    async def _save(self, text: str, updated: RedriveRun) -> RedriveRun:
        backend = await self.app.backend()
        for _ in range(20):
            if await backend.compare_and_set_record(
                RecordSwap(
                    namespace=RUNS_NAMESPACE,
                    key=self.run_id,
                    expected=text,
                    value=updated.to_json(),
                    ttl=RUN_TTL,
                )
            ):
                if updated.status.finished:
                    await self._audit_end(updated)
                return updated
            # Paused or cancelled meanwhile: keep their status, add our counts.
            current = await backend.get_record(RecordKey(namespace=RUNS_NAMESPACE, key=self.run_id))
            if current is None:
                raise LookupError(f"redrive run {self.run_id} is gone")
            theirs = RedriveRun.from_json(current)
            updated = replace(
                updated,
                status=theirs.status,
                reason=theirs.reason,
                driver=theirs.driver,
                driver_until=theirs.driver_until,
            )
            text = current
        raise RuntimeError(f"redrive run {self.run_id} kept changing")

    async def _audit_end(self, run: RedriveRun) -> None:
        trail = AuditTrail(await self.app.backend(), self.app.clock)
        pending = PendingAction(
            f"redrive run {run.status.value}",
            Actor(run.by, run.via),
            f"run {run.id}",
            run.where,
            note=run.describe(),
        )
        pending.count = run.redriven
        await trail.record(pending)


def step_interval(rate: float) -> float:
    """Seconds between two steps: four small batches a second at most (fewer for slow
    rates), not one per job."""
    return min(POLL_EVERY, max(0.25, 1.0 / rate))


async def drive(
    driver: Driver,
    on_step: Callable[[RedriveRun], None] | None = None,
    interrupted: asyncio.Event | None = None,
) -> RedriveRun:
    """Step the run until it finishes, is paused or cancelled, another driver has it,
    or `interrupted` is set; return it as it was last seen."""
    while True:
        run = await driver.step()
        if on_step is not None:
            on_step(run)
        if run.status is not RunStatus.RUNNING or run.driver != driver.driver_id:
            return run
        if interrupted is None:
            await asyncio.sleep(step_interval(run.rate))
            continue
        try:
            async with asyncio.timeout(step_interval(run.rate)):
                await interrupted.wait()
        except TimeoutError:
            continue
        return run
