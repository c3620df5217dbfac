"""Periodic schedules against every backend: any number of schedulers fire each
tick once; overlap and misfire policies; state that survives a restart.

Time is a ManualClock shared by every replica: ticks are minutes of fake time.
"""

from __future__ import annotations

import asyncio
import math
import random
from collections import Counter
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from helpers import RunningWorker, complete, eventually

from conveyor import Conveyor
from conveyor.backends.claiming import strict_claim
from conveyor.backends.contract import Backend
from conveyor.backends.params import JobFilter, JobPage, RecordWrite
from conveyor.model.clock import ManualClock
from conveyor.model.job import Job, JobState
from conveyor.scheduling.scheduler import Scheduler, schedule_reports
from conveyor.scheduling.schedules import SCHEDULE_META_KEY, ScheduledRun, iso
from conveyor.scheduling.state import SCHEDULES_NAMESPACE
from conveyor.worker import WorkerConfig

MINUTE = 60
START = 1_800_000_000  # ManualClock's default start; a multiple of 5 minutes


def declare(app: Conveyor, **periodic: Any) -> None:
    """The same declarations in every replica, as a deployed app would have."""

    @app.periodic(**periodic)
    @app.task(name="tests.tick")
    def tick(label: str = "") -> None: ...


@pytest.fixture
async def replicas(
    backend_url: str, clock: ManualClock
) -> AsyncIterator[Callable[..., list[Conveyor]]]:
    made: list[Conveyor] = []

    def make(count: int, **periodic: Any) -> list[Conveyor]:
        for _ in range(count):
            app = Conveyor(backend_url, clock=clock)
            declare(app, **periodic)
            made.append(app)
        return made[-count:]

    yield make
    for app in made:
        await app.aclose()


async def run_all(backend: Backend, executions: Counter[str]) -> list[Job]:
    """Claim and complete every available job, counting executions per job id."""
    done: list[Job] = []
    while jobs := await backend.fetch_jobs(strict_claim(["default"], 100, "w1", 30)):
        for job in jobs:
            executions[job.id] += 1
        await backend.settle_jobs([complete(job) for job in jobs])
        done.extend(jobs)
    return done


async def jobs_of(backend: Backend) -> list[Job]:
    return await backend.list_jobs(JobPage(where=JobFilter(tasks=("tests.tick",)), limit=10_000))


def run_of(job: Job) -> ScheduledRun:
    return ScheduledRun.from_meta(job.meta[SCHEDULE_META_KEY])


def at(epoch: int) -> datetime:
    return datetime.fromtimestamp(epoch, tz=UTC)


# --- once per tick -----------------------------------------------------------------------
async def test_three_schedulers_fire_every_tick_exactly_once(
    replicas: Callable[..., list[Conveyor]], backend: Backend, clock: ManualClock
) -> None:
    apps = replicas(
        3, every=timedelta(minutes=1), misfire="all", max_catch_up=10, overlap="allow", jitter=20
    )
    schedulers = [Scheduler(app) for app in apps]
    executions: Counter[str] = Counter()
    # Irregular steps, some longer than a tick, replicas passing concurrently and one
    # of them often absent; jobs run and complete between passes.
    steps = [17, 60, 90, 5, 130, 61, 59, 1, 240, 33] * 12
    for i, step in enumerate(steps):
        clock.advance(step)
        active = schedulers if i % 3 else schedulers[:2]
        await asyncio.gather(*(s.tick() for s in active))
        await run_all(backend, executions)
    await asyncio.gather(*(s.tick() for s in schedulers))
    await run_all(backend, executions)

    # Every tick whose jittered fire time has come, from the first pass on.
    schedule = apps[0].schedules["tests.tick"]
    expected: list[int] = []
    tick = START + 16  # the first pass happened at START + 17
    while True:
        tick = schedule.next_tick(tick)
        if schedule.fire_at(tick) > clock.now:
            break
        expected.append(tick)
    assert len(expected) > 100
    assert sorted(executions) == sorted(schedule.job_id(t) for t in expected)
    assert set(executions.values()) == {1}
    assert len(await jobs_of(backend)) == len(expected)


async def test_a_stalled_replica_does_not_refire_a_completed_tick(
    replicas: Callable[..., list[Conveyor]], backend: Backend, clock: ManualClock
) -> None:
    fast, slow = replicas(2, every=timedelta(minutes=5), misfire="all", overlap="allow")
    fast_scheduler, slow_scheduler = Scheduler(fast), Scheduler(slow)
    await fast_scheduler.tick()  # START is a tick: it fires
    stale = await backend.list_records(SCHEDULES_NAMESPACE)
    clock.advance(5 * MINUTE)
    [job] = await fast_scheduler.tick()
    executions: Counter[str] = Counter()
    await run_all(backend, executions)
    clock.advance(30 * MINUTE)
    # The slow replica read the state before that tick was fired, and acts on it only
    # now, long after the tick's job completed.
    await backend.put_record(
        RecordWrite(namespace=SCHEDULES_NAMESPACE, key="tests.tick", value=stale["tests.tick"])
    )
    enqueued = await slow_scheduler.tick()
    assert [j.id for j in enqueued][0] == job.id  # it tried, and got the finished job back
    await run_all(backend, executions)
    after = await backend.get_job(job.id)
    assert after is not None and after.state is JobState.COMPLETED
    assert executions[job.id] == 1
    assert len(executions) == 8 and set(executions.values()) == {1}  # START .. START+35min


@pytest.mark.parametrize("seed", [1, 2])
async def test_once_per_tick_survives_stale_state_restarts_and_random_interleavings(
    replicas: Callable[..., list[Conveyor]], backend: Backend, clock: ManualClock, seed: int
) -> None:
    """Adversarial: the state record is rolled back to an old snapshot (a lost
    update, or a replica acting on a stale read), replicas restart with no memory,
    passes interleave at random and jobs complete in between."""
    rng = random.Random(seed)
    apps = replicas(
        3,
        cron="*/2 * * * *",
        tz="America/New_York",
        misfire="all",
        max_catch_up=50,
        overlap="allow",
        jitter=45,
    )
    schedulers = [Scheduler(app) for app in apps]
    snapshots: list[str] = []
    executions: Counter[str] = Counter()
    first_pass: float | None = None
    for _ in range(100):
        clock.advance(rng.choice([1, 20, 59, 61, 120, 121, 300]))
        if snapshots and rng.random() < 0.2:
            await backend.put_record(
                RecordWrite(
                    namespace=SCHEDULES_NAMESPACE, key="tests.tick", value=rng.choice(snapshots)
                )
            )
        if rng.random() < 0.1:
            i = rng.randrange(3)
            schedulers[i] = Scheduler(apps[i])  # a restart: no memory but the backend
        chosen = rng.sample(schedulers, rng.randint(1, 3))
        first_pass = clock.now if first_pass is None else first_pass
        await asyncio.gather(*(s.tick() for s in chosen))
        snapshots.append((await backend.list_records(SCHEDULES_NAMESPACE))["tests.tick"])
        if rng.random() < 0.7:
            await run_all(backend, executions)
    await asyncio.gather(*(s.tick() for s in schedulers))
    await run_all(backend, executions)

    schedule = apps[0].schedules["tests.tick"]
    expected = []
    assert first_pass is not None
    tick = math.ceil(first_pass) - 1
    while schedule.fire_at(tick := schedule.next_tick(tick)) <= clock.now:
        expected.append(schedule.job_id(tick))
    assert set(executions.values()) == {1}
    assert sorted(executions) == expected


@pytest.mark.parametrize(("overlap", "seed"), [("skip", 4), ("queue_one", 5)])
async def test_catch_up_windows_tile_time_under_random_outages_and_overlaps(
    replicas: Callable[..., list[Conveyor]],
    backend: Backend,
    clock: ManualClock,
    overlap: str,
    seed: int,
) -> None:
    rng = random.Random(seed)
    apps = replicas(3, every=timedelta(minutes=1), misfire="catch_up", overlap=overlap)
    schedulers = [Scheduler(app) for app in apps]
    executions: Counter[str] = Counter()
    windows: list[ScheduledRun] = []
    for step in range(90):
        clock.advance(rng.choice([1, 30, 60, 61, 150, 600, 3600]))
        if rng.random() < 0.1:
            i = rng.randrange(3)
            schedulers[i] = Scheduler(apps[i])
        await asyncio.gather(*(s.tick() for s in rng.sample(schedulers, rng.randint(1, 3))))
        if rng.random() < 0.5 or step >= 85:  # the last steps drain what is held
            windows.extend(run_of(job) for job in await run_all(backend, executions))
    assert set(executions.values()) == {1}
    schedule = apps[0].schedules["tests.tick"]
    windows.sort(key=lambda run: run.tick)
    assert len(windows) > 20
    for before, after in zip(windows, windows[1:], strict=False):  # contiguous: no hole, no overlap
        assert after.covers_from == at(schedule.next_tick(int(before.covers_to.timestamp())))
    for run in windows:
        assert run.tick == run.covers_to
        assert run.ticks == (run.covers_to - run.covers_from) // timedelta(minutes=1) + 1


# --- overlap ---------------------------------------------------------------------------
async def test_overlap_skip_skips_ticks_while_the_previous_run_waits_or_runs(
    replicas: Callable[..., list[Conveyor]], backend: Backend, clock: ManualClock
) -> None:
    apps = replicas(2, every=timedelta(minutes=1), overlap="skip")
    schedulers = [Scheduler(app) for app in apps]
    [first] = await schedulers[0].tick()
    await schedulers[1].tick()
    clock.advance(MINUTE)  # first still waiting
    assert [await s.tick() for s in schedulers] == [[], []]
    [running] = await backend.fetch_jobs(strict_claim(["default"], 10, "w1", 600))
    clock.advance(MINUTE)  # first running
    assert [await s.tick() for s in schedulers] == [[], []]
    await backend.settle_jobs([complete(running)])
    clock.advance(MINUTE)
    fired = [await s.tick() for s in schedulers]
    assert [len(f) for f in fired] == [1, 0]
    assert fired[0][0].id == apps[0].schedules["tests.tick"].job_id(START + 3 * MINUTE)
    assert len(await jobs_of(backend)) == 2
    state = (await schedule_reports(apps[0]))[0].state
    assert state is not None and state.skipped == 2


async def test_overlap_allow_fires_every_tick_while_runs_pile_up(
    replicas: Callable[..., list[Conveyor]], backend: Backend, clock: ManualClock
) -> None:
    [app] = replicas(1, every=timedelta(minutes=1), overlap="allow")
    scheduler = Scheduler(app)
    for _ in range(4):
        await scheduler.tick()
        clock.advance(MINUTE)
    assert await backend.count_jobs(JobFilter(states=(JobState.AVAILABLE,))) == 4


async def test_overlap_queue_one_holds_one_run_behind_the_running_one(
    replicas: Callable[..., list[Conveyor]], backend: Backend, clock: ManualClock
) -> None:
    apps = replicas(2, every=timedelta(minutes=1), overlap="queue_one")
    schedulers = [Scheduler(app) for app in apps]
    job_id = apps[0].schedules["tests.tick"].job_id
    await asyncio.gather(*(s.tick() for s in schedulers))
    [running] = await backend.fetch_jobs(strict_claim(["default"], 10, "w1", 600))
    assert running.id == job_id(START)
    for _ in range(3):  # three ticks while it runs: the first is held, the others dropped
        clock.advance(MINUTE)
        assert await asyncio.gather(*(s.tick() for s in schedulers)) == [[], []]
    assert len(await jobs_of(backend)) == 1
    reports = await schedule_reports(apps[1])
    assert reports[0].state is not None and reports[0].state.pending is not None
    assert reports[0].state.pending.tick == START + MINUTE

    await backend.settle_jobs([complete(running)])
    fired = await asyncio.gather(*(s.tick() for s in schedulers))  # no clock move needed
    assert {j.id for f in fired for j in f} == {job_id(START + MINUTE)}
    assert len(await jobs_of(backend)) == 2
    clock.advance(MINUTE)  # the held run now waits: this tick is held behind it
    assert await asyncio.gather(*(s.tick() for s in schedulers)) == [[], []]
    executions: Counter[str] = Counter()
    await run_all(backend, executions)
    await asyncio.gather(*(s.tick() for s in schedulers))
    await run_all(backend, executions)
    assert executions == Counter({job_id(START + MINUTE): 1, job_id(START + 4 * MINUTE): 1})


# --- misfire after downtime ------------------------------------------------------------
async def outage(app: Conveyor, clock: ManualClock, hours: float) -> list[Job]:
    """Fire the first tick, stop for `hours`, start a *new* scheduler (a restart)."""
    await Scheduler(app).tick()
    clock.advance(timedelta(hours=hours))
    return await Scheduler(app).tick()


async def test_misfire_skip_fires_only_the_latest_missed_tick(
    replicas: Callable[..., list[Conveyor]], backend: Backend, clock: ManualClock
) -> None:
    [app] = replicas(1, every=timedelta(minutes=5), misfire="skip", overlap="allow")
    [job] = await outage(app, clock, hours=6)
    assert run_of(job).tick == at(START + 6 * 3600)
    assert len(await jobs_of(backend)) == 2


async def test_misfire_catch_up_fires_one_run_covering_the_window(
    replicas: Callable[..., list[Conveyor]], backend: Backend, clock: ManualClock
) -> None:
    [app] = replicas(1, every=timedelta(minutes=5), misfire="catch_up", overlap="allow")
    [job] = await outage(app, clock, hours=6)
    run = run_of(job)
    assert (run.covers_from, run.covers_to, run.ticks) == (
        at(START + 5 * MINUTE),
        at(START + 6 * 3600),
        72,
    )
    assert job.id == app.schedules["tests.tick"].job_id(START + 6 * 3600)
    assert len(await jobs_of(backend)) == 2


async def test_misfire_all_fires_each_missed_tick_up_to_max_catch_up(
    replicas: Callable[..., list[Conveyor]], backend: Backend, clock: ManualClock
) -> None:
    [app] = replicas(1, every=timedelta(minutes=5), misfire="all", max_catch_up=5, overlap="allow")
    jobs = await outage(app, clock, hours=6)
    assert [run_of(j).tick for j in jobs] == [
        at(START + 6 * 3600 - k * 5 * MINUTE) for k in (4, 3, 2, 1, 0)
    ]
    assert len(await jobs_of(backend)) == 6


# --- state survives restarts -------------------------------------------------------------
async def test_schedule_state_survives_a_restart(
    backend_url: str, backend: Backend, clock: ManualClock
) -> None:
    first = Conveyor(backend_url, clock=clock)
    declare(first, cron="*/5 * * * *", tz="Europe/Madrid", misfire="catch_up", overlap="allow")
    [fired] = await Scheduler(first).tick()
    await first.aclose()

    clock.advance(timedelta(minutes=32))  # down through six ticks
    second = Conveyor(backend_url, clock=clock)  # a new process: no memory but the backend
    declare(second, cron="*/5 * * * *", tz="Europe/Madrid", misfire="catch_up", overlap="allow")
    try:
        [report] = await schedule_reports(second)
        assert report.last_run is not None and report.last_run.job_id == fired.id
        assert report.last_job is not None and report.last_job.state is JobState.AVAILABLE
        assert report.upcoming == [at(START + m * MINUTE) for m in (35, 40, 45)]
        [caught_up] = await Scheduler(second).tick()
        run = run_of(caught_up)
        assert (run.covers_from, run.covers_to, run.ticks) == (
            at(START + 5 * MINUTE),
            at(START + 30 * MINUTE),
            6,
        )
        [report] = await schedule_reports(second)
        assert report.last_run is not None and report.last_run.job_id == caught_up.id
        assert report.upcoming_local[0].utcoffset() == timedelta(hours=1)  # CET in January 2027
        assert iso(int(report.upcoming[0].timestamp())) == "2027-01-15T08:35:00Z"
    finally:
        await second.aclose()


async def test_a_new_schedule_owes_nothing_from_before_it_was_first_seen(
    replicas: Callable[..., list[Conveyor]], backend: Backend, clock: ManualClock
) -> None:
    clock.advance(30)  # not on a tick
    [app] = replicas(1, every=timedelta(minutes=5), misfire="all", overlap="allow")
    assert await Scheduler(app).tick() == []
    clock.advance(5 * MINUTE)
    [job] = await Scheduler(app).tick()
    assert run_of(job).tick == at(START + 5 * MINUTE)


# --- inside the worker ---------------------------------------------------------------------
async def test_workers_run_the_scheduler_by_default(backend_url: str, clock: ManualClock) -> None:
    app = Conveyor(backend_url, clock=clock)
    ran: list[str] = []

    @app.periodic(every=timedelta(minutes=1))
    @app.task(name="tests.scheduled")
    def scheduled() -> None:
        ran.append("x")

    try:
        async with RunningWorker(app, WorkerConfig(poll_interval=0.05)):
            backend = await app.backend()

            async def completed() -> bool:
                return await backend.count_jobs(JobFilter(states=(JobState.COMPLETED,))) == 1

            await eventually(completed)
        assert ran == ["x"]
    finally:
        await app.aclose()


async def test_cron_list_shows_next_fire_times_in_utc_and_the_zone_and_the_last_run(
    replicas: Callable[..., list[Conveyor]], backend: Backend, clock: ManualClock
) -> None:
    from conveyor.ops.schedule_commands import cron_list

    [app] = replicas(1, cron="0 9 * * *", tz="Europe/Madrid", overlap="allow")
    text = await cron_list(app, upcoming=2)
    assert text.splitlines() == [
        "tests.tick",
        "  cron '0 9 * * *' in Europe/Madrid; misfire=skip overlap=allow",
        "  next  2027-01-15 08:00:00 UTC   2027-01-15 09:00 CET (Europe/Madrid)",
        "  next  2027-01-16 08:00:00 UTC   2027-01-16 09:00 CET (Europe/Madrid)",
        "  last  never fired",
    ]
    [job] = await Scheduler(app).tick()  # START is 09:00 in Madrid
    text = await cron_list(app, upcoming=1)
    assert text.splitlines()[2:] == [
        "  next  2027-01-16 08:00:00 UTC   2027-01-16 09:00 CET (Europe/Madrid)",
        f"  last  2027-01-15T08:00:00Z  job {job.id}  available",
    ]
    assert '"job_id": "cron:tests.tick:2027-01-15T08:00:00Z"' in await cron_list(app, as_json=True)


async def test_scheduler_command_runs_until_stopped(
    replicas: Callable[..., list[Conveyor]], clock: ManualClock
) -> None:
    from conveyor.ops.schedule_commands import run_scheduler

    [app] = replicas(1, every=timedelta(minutes=1))
    stop = asyncio.Event()
    running = asyncio.create_task(run_scheduler(app, stop))
    backend = await app.backend()

    async def fired() -> bool:
        return len(await jobs_of(backend)) == 1

    await eventually(fired)
    stop.set()
    assert await asyncio.wait_for(running, 10) == 0


@pytest.mark.parametrize("overlap", ["skip", "queue_one"])
async def test_catch_up_windows_leave_no_hole_when_overlap_holds_runs_back(
    replicas: Callable[..., list[Conveyor]], backend: Backend, clock: ManualClock, overlap: str
) -> None:
    """Workers and schedulers down together: the last run is still waiting when the
    scheduler comes back, so the catch-up run is held back or skipped; the window
    it would have covered is then covered by a later run, not lost."""
    apps = replicas(2, every=timedelta(minutes=5), misfire="catch_up", overlap=overlap)
    schedulers = [Scheduler(app) for app in apps]
    await asyncio.gather(*(s.tick() for s in schedulers))  # START fires; nobody runs it
    clock.advance(timedelta(hours=6))
    await asyncio.gather(*(s.tick() for s in schedulers))  # busy: held back or skipped
    clock.advance(5 * MINUTE)
    await asyncio.gather(*(s.tick() for s in schedulers))  # still busy
    executions: Counter[str] = Counter()
    windows: list[tuple[datetime, datetime, int | None]] = []
    for step in range(4):  # workers are back: run what is there, let the schedulers catch up
        for job in await run_all(backend, executions):
            windows.append((run_of(job).covers_from, run_of(job).covers_to, run_of(job).ticks))
        if step < 3:
            clock.advance(5 * MINUTE)
            await asyncio.gather(*(s.tick() for s in schedulers))
    assert set(executions.values()) == {1}
    if overlap == "skip":  # two skipped windows join the next run's
        assert windows == [
            (at(START), at(START), 1),
            (at(START + 5 * MINUTE), at(START + 6 * 3600 + 10 * MINUTE), 74),
            (at(START + 6 * 3600 + 15 * MINUTE), at(START + 6 * 3600 + 15 * MINUTE), 1),
            (at(START + 6 * 3600 + 20 * MINUTE), at(START + 6 * 3600 + 20 * MINUTE), 1),
        ]
    else:  # the first held run keeps its window; the tick dropped behind it joins the next
        assert windows == [
            (at(START), at(START), 1),
            (at(START + 5 * MINUTE), at(START + 6 * 3600), 72),
            (at(START + 6 * 3600 + 5 * MINUTE), at(START + 6 * 3600 + 10 * MINUTE), 2),
            (at(START + 6 * 3600 + 15 * MINUTE), at(START + 6 * 3600 + 15 * MINUTE), 1),
        ]
