"""The scheduler service: enqueues the due ticks of every schedule.

Run it in every worker (the default) and as `conveyor scheduler APP`, any
number of times. There is no leader and no lock: each tick's job id is derived
from (schedule name, planned tick), so replicas that enqueue the same tick get
the same job back from the backend's dedup. `TICK_DEDUP_WINDOW` keeps that
dedup in force after the job completes, so a replica that stalled for a while
does not enqueue a tick again once its job is done; the per-schedule state in
meta (namespace "schedules") is the second guard, for windows longer than that.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

from conveyor.backends.contract import Backend
from conveyor.backends.params import JobFilter, JobPage, RecordKey, RecordWrite
from conveyor.model.errors import ConfigurationError
from conveyor.model.job import ACTIVE_STATES, Job, NewJob
from conveyor.scheduling.schedules import SCHEDULE_META_KEY, Run, Schedule, ScheduledRun, iso
from conveyor.scheduling.state import SCHEDULES_NAMESPACE, LastRun, ScheduleState
from conveyor.task import BoundTask, Task, make_options

if TYPE_CHECKING:
    from conveyor.handle import JobHandle
    from conveyor.model.clock import Clock

log = logging.getLogger("conveyor.scheduler")

# A completed tick's job keeps blocking re-enqueues of that tick this long. A day
# outlasts any plausible stall of a replica between reading the state and
# enqueueing, and matches the default retention of completed jobs, so it costs
# no extra rows by default.
TICK_DEDUP_WINDOW = 24 * 3600.0
MAX_IDLE = 30.0  # re-read state at least this often, so a clock jump is noticed


class SchedulerApp(Protocol):
    """What the scheduler needs of its app (a `Conveyor`): its schedules and tasks,
    the clock, the backend (for the schedules' state) and the enqueue verb."""

    @property
    def clock(self) -> Clock: ...
    @property
    def schedules(self) -> Mapping[str, Schedule]: ...
    @property
    def tasks(self) -> Mapping[str, Task[Any, Any]]: ...
    def get_task(self, name: str) -> Task[Any, Any]: ...
    async def backend(self) -> Backend: ...
    async def enqueue_many_async(
        self, jobs: Iterable[NewJob], *, connection: Any = None
    ) -> list[JobHandle[Any]]: ...


class Scheduler:
    """Enqueue every due tick of `app`'s schedules (or `schedules`).

    >>> stop = asyncio.Event()
    >>> await Scheduler(app).run(stop)        # or: await scheduler.tick() in tests
    """

    def __init__(
        self,
        app: SchedulerApp,
        schedules: Iterable[Schedule] | None = None,
        *,
        poll_interval: float = 1.0,
    ) -> None:
        self.app = app
        self.schedules: list[Schedule] = list(
            app.schedules.values() if schedules is None else schedules
        )
        self.poll_interval = poll_interval
        self._known: dict[str, ScheduleState] = {}  # our own high-water marks
        check_schedules(app, self.schedules)

    # --- one pass ---------------------------------------------------------------------
    async def tick(self) -> list[Job]:
        """Enqueue whatever is due now; return the jobs (existing ones when another
        replica was first). Safe to call from any number of processes at once."""
        backend = await self.app.backend()
        now = self.app.clock()
        stored = await backend.list_records(SCHEDULES_NAMESPACE)
        jobs: list[Job] = []
        failed: Exception | None = None
        for schedule in self.schedules:
            try:
                jobs.extend(await self._pass(backend, schedule, now, stored.get(schedule.name)))
            except Exception as exc:
                log.warning("schedule %s: pass failed: %s", schedule.name, exc)
                failed = failed or exc
        if failed is not None:
            raise failed  # the loop backs off; the state of the others is already saved
        return jobs

    async def _pass(
        self, backend: Backend, schedule: Schedule, now: float, stored_text: str | None
    ) -> list[Job]:
        stored = None if stored_text is None else ScheduleState.from_json(stored_text)
        known = self._known.get(schedule.name)
        if stored is not None:
            state = stored.merge(known)
        elif known is not None:
            state = known  # the record was lost; our own memory is the best there is
        else:
            # First sight: nothing before now is owed. A tick at exactly now still fires.
            state = ScheduleState.fresh(since=math.ceil(now) - 1)
        before = state
        jobs: list[Job] = []

        if state.pending is not None and not await self._busy(backend, state):
            run = state.pending
            [job] = await self._enqueue(backend, schedule, [run], now)
            state = state.fired(run, job.id, now)
            jobs.append(job)

        plan = schedule.plan(state.last_tick, now)
        if plan.runs and schedule.overlap == "allow":
            enqueued = await self._enqueue(backend, schedule, plan.runs, now)
            for run, job in zip(plan.runs, enqueued, strict=True):
                state = state.fired(run, job.id, now)
            jobs.extend(enqueued)
        for planned in plan.runs if schedule.overlap != "allow" else ():
            run = (
                schedule.widen(planned, state.uncovered_from)
                if schedule.misfire == "catch_up"
                else planned
            )
            if await self._busy(backend, state):
                if schedule.overlap == "queue_one" and state.pending is None:
                    state = state.buffered(run)
                else:
                    state = state.skipped_tick(run.tick)
                    if schedule.misfire == "catch_up":
                        state = state.left_uncovered(planned)
                    log.info(
                        "schedule %s: tick %s skipped, its previous run is still active",
                        schedule.name,
                        iso(run.tick),
                    )
                continue
            [job] = await self._enqueue(backend, schedule, [run], now)
            state = state.fired(run, job.id, now)
            jobs.append(job)
        if plan.watermark is not None:
            if plan.skipped:
                log.warning(
                    "schedule %s: %s missed ticks dropped (misfire=%s)",
                    schedule.name,
                    plan.skipped,
                    schedule.misfire,
                )
            state = state.advanced(plan.watermark, plan.skipped or 0)

        if state != before or stored is None:
            state = await self._save(backend, schedule.name, state)
        self._known[schedule.name] = state
        return jobs

    async def _save(self, backend: Backend, name: str, state: ScheduleState) -> ScheduleState:
        # Re-read just before writing and write the merge: another replica may have
        # written since our read, and its progress must not be undone.
        latest = await backend.get_record(RecordKey(namespace=SCHEDULES_NAMESPACE, key=name))
        merged = state.merge(None if latest is None else ScheduleState.from_json(latest))
        await backend.put_record(
            RecordWrite(namespace=SCHEDULES_NAMESPACE, key=name, value=merged.to_json())
        )
        return merged

    async def _busy(self, backend: Backend, state: ScheduleState) -> bool:
        """Is a previous run of this schedule still waiting or running?"""
        if not state.recent_job_ids:
            return False
        active = await backend.list_jobs(
            JobPage(where=JobFilter(states=tuple(ACTIVE_STATES), ids=state.recent_job_ids), limit=1)
        )
        return bool(active)

    async def _enqueue(
        self, backend: Backend, schedule: Schedule, runs: Sequence[Run], now: float
    ) -> list[Job]:
        task = self.app.get_task(schedule.task)
        batch: list[NewJob] = []
        for run in runs:
            options = make_options(
                queue=schedule.queue,
                priority=schedule.priority,
                job_id=schedule.job_id(run.tick),
                unique_for=TICK_DEDUP_WINDOW,
                meta={SCHEDULE_META_KEY: ScheduledRun.of(schedule.name, run).to_meta()},
            )
            batch.append(BoundTask(task, options).message(*schedule.args, **schedule.kwargs))
        # Through the app, so its middleware (tracing, metrics, correlation ids) sees
        # scheduled jobs as it sees every other enqueue; same backend underneath.
        jobs = [handle.job for handle in await self.app.enqueue_many_async(batch)]
        for run, job in zip(runs, jobs, strict=True):
            log.info("schedule %s: tick %s -> job %s", schedule.name, iso(run.tick), job.id)
        return jobs

    # --- the service --------------------------------------------------------------------
    async def run(self, stop: asyncio.Event) -> None:
        """Pass over the schedules until `stop` is set, sleeping until the next fire
        time (at most `MAX_IDLE`, or `poll_interval` while a queued run waits)."""
        if not self.schedules:
            return
        log.info("scheduler started: %s", ", ".join(s.name for s in self.schedules))
        failures = 0
        while not stop.is_set():
            try:
                await self.tick()
                failures = 0
                wait = self.seconds_to_next()
            except Exception as exc:
                failures += 1
                wait = min(self.poll_interval * 2**failures, MAX_IDLE)
                log.warning("scheduler pass failed (%s); retrying in %.1fs", exc, wait)
            try:
                await asyncio.wait_for(stop.wait(), timeout=max(0.01, wait))
            except TimeoutError:
                pass

    def seconds_to_next(self) -> float:
        now = self.app.clock()
        wait = MAX_IDLE
        for schedule in self.schedules:
            state = self._known.get(schedule.name)
            if state is None or state.pending is not None:
                wait = min(wait, self.poll_interval)
                continue
            fire_at = schedule.fire_at(schedule.next_tick(state.last_tick))
            wait = min(wait, fire_at - now)
        return max(0.0, wait)


def check_schedules(app: SchedulerApp, schedules: Sequence[Schedule]) -> None:
    """Start-up checks: each schedule's task exists and takes its arguments."""
    names: set[str] = set()
    for schedule in schedules:
        if schedule.name in names:
            raise ConfigurationError(
                f"two schedules are named {schedule.name!r}; pass name= to one"
            )
        names.add(schedule.name)
        task = app.tasks.get(schedule.task)
        if task is None:
            raise ConfigurationError(
                f"schedule {schedule.name!r} runs task {schedule.task!r}, which is not registered"
            )
        try:
            task.validate(schedule.args, schedule.kwargs)
        except Exception as exc:
            raise ConfigurationError(f"schedule {schedule.name!r}: {exc}") from None


# --- inspection (conveyor cron list) -----------------------------------------------------
@dataclass(frozen=True, slots=True)
class ScheduleReport:
    schedule: Schedule
    upcoming: list[datetime]  # UTC
    upcoming_local: list[datetime]  # in the schedule's zone
    state: ScheduleState | None
    last_run: LastRun | None
    last_job: Job | None


async def schedule_reports(app: SchedulerApp, upcoming: int = 3) -> list[ScheduleReport]:
    """Each schedule with its next fire times and its last run, from the stored state."""
    from zoneinfo import ZoneInfo

    backend = await app.backend()
    stored = await backend.list_records(SCHEDULES_NAMESPACE)
    now = app.clock()
    reports: list[ScheduleReport] = []
    for schedule in app.schedules.values():
        text = stored.get(schedule.name)
        state = None if text is None else ScheduleState.from_json(text)
        after = max(math.ceil(now) - 1, state.last_tick if state is not None else 0)
        ticks = [schedule.fire_at(t) for t in schedule.upcoming(after, upcoming)]
        utc = [datetime.fromtimestamp(t, tz=UTC) for t in ticks]
        zone = ZoneInfo(schedule.zone)
        last = state.last_run if state is not None else None
        job = None if last is None else await backend.get_job(last.job_id)
        reports.append(
            ScheduleReport(schedule, utc, [u.astimezone(zone) for u in utc], state, last, job)
        )
    return reports


def describe_reports(reports: Sequence[ScheduleReport]) -> list[dict[str, Any]]:
    """Plain data for `conveyor cron list --json` and the dashboard."""
    out: list[dict[str, Any]] = []
    for r in reports:
        s = r.schedule
        out.append(
            {
                "name": s.name,
                "task": s.task,
                "timing": s.timing.describe(),
                "zone": s.zone,
                "misfire": s.misfire,
                "overlap": s.overlap,
                "jitter": s.jitter,
                "next_utc": [u.isoformat() for u in r.upcoming],
                "next_local": [u.isoformat() for u in r.upcoming_local],
                "last_run": None
                if r.last_run is None
                else {
                    "tick": iso(r.last_run.tick),
                    "job_id": r.last_run.job_id,
                    "state": None if r.last_job is None else r.last_job.state.value,
                    "covers_from": iso(r.last_run.covers_from),
                    "covers_to": iso(r.last_run.covers_to),
                },
                "pending": None
                if r.state is None or r.state.pending is None
                else iso(r.state.pending.tick),
                "skipped": 0 if r.state is None else r.state.skipped,
            }
        )
    return out
