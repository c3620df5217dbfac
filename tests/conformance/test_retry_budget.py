"""Retry budgets (conveyor.rules.retry_budget): past a task's budget, retries are moved to
later windows, keeping the job's retry; the counts are shared through the store."""

from __future__ import annotations

import math
from collections import Counter

import pytest
from helpers import RunningWorker, eventually

from conveyor import Conveyor, RetryBudget, RetryOptions
from conveyor.backends.contract import Backend
from conveyor.backends.params import JobFilter
from conveyor.downstreams.retry_ledger import RetryLedger
from conveyor.model.clock import ManualClock
from conveyor.model.errors import ConfigurationError
from conveyor.model.job import Job, JobState
from conveyor.worker import WorkerConfig

WINDOW = 60.0


async def test_retries_past_the_budget_are_spread_over_later_windows(
    app: Conveyor, clock: ManualClock
) -> None:
    @app.task(
        name="flaky",
        queue="budget",
        max_attempts=5,
        retry=RetryOptions(
            backoff_base=0.25,
            backoff_cap=1.0,
            budget=RetryBudget(share=0, minimum=3, window=WINDOW),
        ),
    )
    async def flaky(i: int) -> None:
        raise ConnectionError("downstream down")

    ids = [h.id for h in app.enqueue_many([flaky.message(i) for i in range(10)])]
    now = clock()  # frozen: no retry comes due while the test runs
    config = WorkerConfig(queues=("budget",), concurrency=4, poll_interval=0.05)
    async with RunningWorker(app, config):

        async def all_failed_once() -> bool:
            jobs = await app.admin.list(JobFilter(ids=tuple(ids)), limit=20)
            return len(jobs) == 10 and all(j.state is JobState.RETRYABLE for j in jobs)

        await eventually(all_failed_once)
    jobs = await app.admin.list(JobFilter(ids=tuple(ids)), limit=20)
    assert {(j.attempt, len(j.errors), j.errors[-1].type) for j in jobs} == {
        (1, 1, "ConnectionError")
    }
    current = math.floor(now / WINDOW)
    by_window = Counter(math.floor(j.run_at / WINDOW) - current for j in jobs)
    # 3 retries fit this window (by their backoff); the other 7 keep their retry, 3 a
    # window after it, then 3, then 1.
    assert by_window == {0: 3, 1: 3, 2: 3, 3: 1}
    assert sorted(j.run_at - now for j in jobs)[:3] <= [1.0, 1.0, 1.0]


def _failed_job(attempt: int = 1) -> Job:
    return Job(
        id="j",
        task="charge",
        queue="default",
        payload="{}",
        state=JobState.RUNNING,
        attempt=attempt,
    )


async def test_workers_share_one_budget_through_the_store(
    backend: Backend, clock: ManualClock
) -> None:
    budget = RetryBudget(share=0.5, minimum=1, window=WINDOW)
    first, second = RetryLedger(lambda task: budget), RetryLedger(lambda task: budget)
    now = clock()
    # Worker one starts 4 first attempts: the window allows 1 + 0.5 * 4 = 3 retries.
    for _ in range(4):
        first.started(_failed_job(), now)
    assert [first.retry_at(_failed_job(), now + 1, now) for _ in range(3)] == [(now + 1, False)] * 3
    await first.sync(backend, now)
    second.started(_failed_job(attempt=2), now)  # a retry starting: not a first attempt
    await second.sync(backend, now)  # learns the fleet's counts of this window
    run_at, deferred = second.retry_at(_failed_job(), now + 1, now)
    assert deferred and WINDOW <= run_at - math.floor(now / WINDOW) * WINDOW < 2 * WINDOW
    await second.sync(backend, now)
    await first.sync(backend, now)
    records = await backend.list_records("retry-budget")
    index = math.floor(now / WINDOW)
    assert {k: int(v) for k, v in records.items()} == {
        f"charge:{index}:first": 4,
        f"charge:{index}:retries": 3,
        f"charge:{index + 1}:first": 0,
        f"charge:{index + 1}:retries": 1,
    }


async def test_a_task_without_a_budget_is_never_moved(backend: Backend, clock: ManualClock) -> None:
    ledger = RetryLedger(lambda task: None)
    now = clock()
    assert [ledger.retry_at(_failed_job(), now + 2, now) for _ in range(100)] == [
        (now + 2, False)
    ] * 100
    await ledger.sync(backend, now)
    assert await backend.list_records("retry-budget") == {}


@pytest.mark.parametrize(
    "options",
    [
        {"share": -0.1},
        {"share": float("nan")},
        {"share": "0.2"},
        {"minimum": -1},
        {"minimum": 1.5},
        {"window": 0.5},
        {"window": "60"},
        {"share": 0, "minimum": 0},
    ],
)
def test_a_budget_that_makes_no_sense_is_refused(options: dict[str, object]) -> None:
    with pytest.raises(ConfigurationError, match="retry budget|allows no retry"):
        RetryBudget(**options)  # type: ignore[arg-type]


def test_a_task_option_that_is_not_a_budget_is_refused(app: Conveyor) -> None:
    with pytest.raises(
        ConfigurationError, match=r"task charge: RetryOptions\(budget=\) takes a RetryBudget"
    ):
        # Ignored for mypy: the wrong type is the point of the test
        app.task(name="charge", retry=RetryOptions(budget=0.2))(lambda: None)  # type: ignore[arg-type]
