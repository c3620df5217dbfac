"""conveyor.testing's drain() and inline mode run jobs through the real worker on
a memory backend, moving the test clock over every wait."""

from __future__ import annotations

from datetime import timedelta

import pytest

from conveyor import Cancel, Conveyor, JobState, RetryOptions, Snooze, current_job
from conveyor.observe.middleware import CallNext, ExecuteContext, MiddlewareContext
from conveyor.testing import TestClock, drain, drain_async, inline

S = JobState


def test_a_task_that_fails_twice_then_succeeds_runs_three_times(
    conveyor_app: Conveyor, conveyor_clock: TestClock
) -> None:
    seen: list[tuple[int, float]] = []

    @conveyor_app.task(retry=RetryOptions(backoff_base=10, backoff_cap=10))
    def flaky(n: int) -> int:
        seen.append((current_job().attempt, conveyor_clock.now))
        if len(seen) < 3:
            raise ConnectionError("try again")
        return n * 2

    start = conveyor_clock.now
    handle = flaky.enqueue(21)
    drained = drain(conveyor_app)
    assert [(a.attempt, a.outcome) for a in drained.attempts] == [
        (1, S.RETRYABLE),
        (2, S.RETRYABLE),
        (3, S.COMPLETED),
    ]
    assert [a.error.type if a.error else None for a in drained.attempts] == [
        "ConnectionError",
        "ConnectionError",
        None,
    ]
    assert drained.results(flaky) == [42] and drained.states == {S.COMPLETED: 1}
    assert handle.result() == 42
    # Each retry ran when its backoff (at most 10 s, full jitter) was over, no sooner.
    job = drained.jobs[handle.id]
    assert [at for _, at in seen] == sorted(at for _, at in seen)
    assert seen[0][1] == start and seen[2][1] - start <= 20
    assert [e.at for e in job.errors] == [seen[0][1], seen[1][1]]


def test_drain_runs_what_jobs_enqueue_and_what_those_enqueue(conveyor_app: Conveyor) -> None:
    ran: list[str] = []

    @conveyor_app.task
    def third() -> None:
        ran.append("third")

    @conveyor_app.task
    async def second() -> None:
        ran.append("second")
        await third.enqueue_async()

    @conveyor_app.task
    def first() -> None:
        ran.append("first")
        second.options(delay=timedelta(hours=2)).enqueue()  # the drain moves the clock

    first.enqueue()
    drained = drain(conveyor_app)
    assert ran == ["first", "second", "third"]
    assert [a.task for a in drained.attempts] == [first.name, second.name, third.name]
    assert drain(conveyor_app).attempts == ()  # idle


def test_advance_lets_only_that_much_time_pass(
    conveyor_app: Conveyor, conveyor_clock: TestClock
) -> None:
    @conveyor_app.task
    def remind(what: str) -> str:
        return what

    remind.options(delay=timedelta(minutes=10)).enqueue("soon")
    later = remind.options(delay=timedelta(hours=1)).enqueue("later")
    start = conveyor_clock.now
    assert drain(conveyor_app, advance=timedelta(minutes=30)).results(remind) == ["soon"]
    assert conveyor_clock.now == start + 1800
    assert later.state is S.SCHEDULED
    conveyor_clock.advance(minutes=30)  # the clock alone runs nothing
    assert later.state is S.SCHEDULED
    assert drain(conveyor_app).results(remind) == ["later"]


def test_snoozes_cancels_and_dead_letters_end_as_in_production(conveyor_app: Conveyor) -> None:
    calls: list[str] = []

    @conveyor_app.task
    def patient() -> str:
        calls.append("patient")
        if len(calls) == 1:
            raise Snooze(timedelta(minutes=5))
        return "done"

    @conveyor_app.task
    def closed() -> None:
        raise Cancel("account closed")

    @conveyor_app.task(max_attempts=2)
    def broken() -> None:
        raise KeyError("no such user")

    patient.enqueue()
    closed.enqueue()
    broken.enqueue()
    drained = drain(conveyor_app)
    assert [(a.task, a.attempt, a.outcome) for a in drained.attempts] == [
        (patient.name, 1, S.SCHEDULED),
        (closed.name, 1, S.DEAD),
        (broken.name, 1, S.DEAD),
        (patient.name, 1, S.COMPLETED),
    ]  # a snooze uses no attempt
    assert drained.states == {S.COMPLETED: 1, S.DEAD: 2}


def test_inline_runs_each_enqueue_at_once_through_middleware(conveyor_app: Conveyor) -> None:
    outcomes: list[tuple[str, int, JobState | None]] = []

    class Watch:
        async def __call__(self, call_next: CallNext, ctx: MiddlewareContext) -> None:
            await call_next(ctx)
            if isinstance(ctx, ExecuteContext):
                state = None if ctx.settlement is None else ctx.settlement.state
                outcomes.append((ctx.job.task, ctx.job.attempt, state))

    conveyor_app.middleware.append(Watch())

    @conveyor_app.task
    def child(n: int) -> int:
        return n + 1

    @conveyor_app.task
    def parent(n: int) -> int:
        if current_job().attempt == 1:
            raise TimeoutError("first attempt times out")
        child.enqueue(n)
        return n

    with inline(conveyor_app):
        handle = parent.enqueue(1)
        assert handle.job.state is S.COMPLETED and handle.job.attempt == 2  # ended already
        assert handle.result() == 1
    assert outcomes == [
        (parent.name, 1, S.RETRYABLE),
        (parent.name, 2, S.COMPLETED),
        (child.name, 1, S.COMPLETED),
    ]
    handle = child.enqueue(5)  # manual again: it waits for a drain
    assert handle.job.state is S.AVAILABLE


async def test_an_async_test_drains_with_drain_async(conveyor_app: Conveyor) -> None:
    @conveyor_app.task
    async def double(n: int) -> int:
        return 2 * n

    await double.enqueue_async(4)
    assert (await drain_async(conveyor_app)).results(double) == [8]


def test_an_app_not_under_test_is_refused_clearly() -> None:
    app = Conveyor("memory://not-under-test")
    with pytest.raises(RuntimeError, match="not under test: use the conveyor_app fixture"):
        drain(app)
    app.close()
