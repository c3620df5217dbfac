"""Adaptive concurrency (conveyor.rules.adaptive, docs/downstreams.md): workers' controllers
share one limit per key through the store, decide it once per window (additive
increase after a window of successes that used the limit, multiplicative decrease
after a signal), and the backend holds every claimer to it."""

from __future__ import annotations

import asyncio
import logging

import pytest
from helpers import error

from conveyor import Adaptive, Conveyor, Limits
from conveyor.backends.claiming import strict_claim
from conveyor.backends.contract import Backend, FlowState
from conveyor.backends.params import JobFilter, JobPage, RecordKey, Settlement
from conveyor.downstreams.adaptive_controller import NAMESPACE, AdaptiveController
from conveyor.model.clock import ManualClock
from conveyor.model.job import Job, JobState
from conveyor.rules.adaptive import LimitState
from conveyor.worker import Worker, WorkerConfig

S = JobState
KEY = "task:calls"
RULE = Adaptive(min=1, max=6, start=2, window=1.0, decrease=0.5)


class Throttled(Exception):
    status_code = 429


def attempt(n: int, task: str = "calls") -> Job:
    return Job(
        id=f"a{n}",
        task=task,
        queue="default",
        payload="{}",
        state=S.RUNNING,
        attempt=1,
        concurrency_key=KEY,
        concurrency_limit=2,
    )


def ok(job: Job) -> Settlement:
    return Settlement(job.id, job.lease_token, S.COMPLETED)


def retried(job: Job) -> Settlement:
    return Settlement(job.id, job.lease_token, S.RETRYABLE, error=error(1), run_at=0.0)


class Fleet:
    """Two workers' controllers over one store, on the test's clock."""

    def __init__(self, backend: Backend, clock: ManualClock) -> None:
        self.backend, self.clock = backend, clock
        self.one, self.two = (
            AdaptiveController(lambda task: RULE if task == "calls" else None) for _ in range(2)
        )
        self.n = 0

    def run(
        self,
        controller: AdaptiveController,
        *,
        fail: BaseException | None = None,
        started_before: float = 0.0,
    ) -> None:
        self.n += 1
        job = attempt(self.n)
        controller.started(job, self.clock() - started_before)
        if fail is None:
            controller.ended(job, ok(job), self.clock())
        else:
            controller.failed(job, fail)
            controller.ended(job, retried(job), self.clock())

    async def sync(self) -> None:
        await self.one.sync(self.backend, self.clock())
        await self.two.sync(self.backend, self.clock())

    async def state(self) -> LimitState:
        text = await self.backend.get_record(RecordKey(namespace=NAMESPACE, key=KEY))
        assert text is not None
        state = LimitState.decode(text)
        assert state is not None
        return state

    async def window(self) -> LimitState:
        """Both workers sync (counts in), the window passes, both sync again."""
        await self.sync()
        self.clock.advance(RULE.window)
        await self.sync()
        await self.sync()  # the loser of the decision reads the new state
        return await self.state()


async def test_the_fleet_starts_at_start_and_the_backend_holds_it(
    backend: Backend, clock: ManualClock
) -> None:
    fleet = Fleet(backend, clock)
    fleet.run(fleet.one)
    await fleet.sync()
    assert (await fleet.state()).limit == 2 and (await fleet.state()).version == 0
    assert isinstance(backend, FlowState) and await backend.key_limit(KEY) == 2


async def test_successes_that_use_the_limit_add_one_per_window_up_to_max(
    backend: Backend, clock: ManualClock
) -> None:
    fleet = Fleet(backend, clock)
    limits = []
    for _ in range(7):
        fleet.run(fleet.one)  # two successes a window, one on each worker: the limit
        fleet.run(fleet.two)  # of 2 was used; later the running count does not say so
        state = await fleet.window()
        limits.append((state.limit, state.version))
    # Saturated only while ok + signals >= limit (nothing runs between windows here).
    assert limits == [(3, 1), (3, 2), (3, 3), (3, 4), (3, 5), (3, 6), (3, 7)]
    for _ in range(4):  # enough successes per window for any limit: + 1 each, up to max
        for _ in range(6):
            fleet.run(fleet.two)
        limits.append(((await fleet.window()).limit, 0))
    assert [limit for limit, _ in limits[7:]] == [4, 5, 6, 6]
    assert isinstance(backend, FlowState) and await backend.key_limit(KEY) == 6


async def test_a_signal_cuts_the_limit_at_once_by_the_factor_once_per_window(
    backend: Backend, clock: ManualClock
) -> None:
    fleet = Fleet(backend, clock)
    for _ in range(4):
        for _ in range(6):
            fleet.run(fleet.one)
        await fleet.window()
    assert (await fleet.state()).limit == 6
    # Both workers see 429s, with successes: at their next sync (the window is not
    # over), one decision between them, 6 -> 3.
    fleet.run(fleet.one, fail=Throttled("slow down"))
    fleet.run(fleet.two, fail=Throttled("slow down"))
    fleet.run(fleet.two)
    before = (await fleet.state()).version
    await fleet.sync()
    await fleet.sync()
    state = await fleet.state()
    assert (state.limit, state.version, state.cut_at) == (3, before + 1, clock())
    assert isinstance(backend, FlowState) and await backend.key_limit(KEY) == 3
    assert fleet.one.limits() == fleet.two.limits() == {KEY: 3}
    # The window right after the cut never cuts again: its signals may be those of
    # the jobs the old limit let in, still leaving.
    fleet.run(fleet.two, fail=TimeoutError())
    fleet.run(fleet.two)
    await fleet.sync()
    assert (await fleet.state()).version == before + 1
    state = await fleet.window()
    assert (state.limit, state.version) == (3, before + 2)
    # A signal of an attempt started before the cut judged the old limit: ignored.
    fleet.run(fleet.one, fail=TimeoutError(), started_before=RULE.window * 1.5)
    for _ in range(3):
        fleet.run(fleet.two)
    assert (await fleet.window()).limit == 4
    # Fresh timeouts cut again, each after the window that follows the last cut:
    # 4 -> 2, then 1, and never under min.
    for expected in (2, 1, 1):
        fleet.run(fleet.two, fail=TimeoutError())
        assert (await fleet.window()).limit == expected


async def test_other_failures_and_a_quiet_window_change_nothing(
    backend: Backend, clock: ManualClock
) -> None:
    fleet = Fleet(backend, clock)
    fleet.run(fleet.one, fail=ValueError("a bug, not the downstream"))
    fleet.run(fleet.one, fail=ValueError("a bug, not the downstream"))
    assert (await fleet.window()).limit == 2
    assert (await fleet.window()).limit == 2  # nothing ran


async def test_the_latency_target_counts_as_a_signal(backend: Backend, clock: ManualClock) -> None:
    rule = Adaptive(min=1, max=10, start=4, window=1.0, latency_target=0.5)
    controller = AdaptiveController(lambda task: rule)
    for n, seconds in enumerate((0.2, 0.3, 0.4, 1.5)):  # mean 0.6 s, over 0.5 s
        job = attempt(n)
        controller.started(job, clock())
        clock.advance(seconds)
        controller.ended(job, ok(job), clock())
    await controller.sync(backend, clock())
    clock.advance(1.0)
    await controller.sync(backend, clock())
    assert controller.limits() == {KEY: 3}  # floor(4 * 0.9), at the window's end


async def test_claimers_are_held_to_the_decided_limit(
    app: Conveyor, backend: Backend, clock: ManualClock
) -> None:
    @app.task(name="calls", limits=Limits(adaptive=RULE))
    async def calls(i: int) -> None: ...

    await app.enqueue_many_async([calls.message(i) for i in range(30)])
    fleet = Fleet(backend, clock)
    for _ in range(6):
        fleet.run(fleet.one)
    assert (await fleet.window()).limit == 3
    claimed = await asyncio.gather(
        *(backend.fetch_jobs(strict_claim(["default"], 5, f"w{n}", 30.0)) for n in range(4))
    )
    assert sum(len(jobs) for jobs in claimed) == 3
    running = await backend.list_jobs(JobPage(where=JobFilter(states=(S.RUNNING,)), limit=50))
    assert {job.concurrency_key for job in running} == {KEY}


async def test_a_worker_warns_at_start_of_a_task_that_calls_out_with_no_limit(
    app: Conveyor, caplog: pytest.LogCaptureFixture
) -> None:
    @app.task(name="unlimited", retry_on=(ConnectionError,))
    async def unlimited() -> None: ...

    @app.task(name="limited", retry_on=(ConnectionError,), limits=Limits(adaptive=True))
    async def limited() -> None: ...

    with caplog.at_level(logging.WARNING, logger="conveyor.worker"):
        await Worker(app, WorkerConfig(concurrency=100, burst=True)).run()
        await Worker(app, WorkerConfig(concurrency=10, burst=True)).run()
    warned = [r.getMessage() for r in caplog.records if "calls out" in r.getMessage()]
    assert len(warned) == 1 and warned[0].startswith("task unlimited retries on ConnectionError")
