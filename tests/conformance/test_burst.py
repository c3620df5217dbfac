"""Burst runs (`conveyor worker --burst`) against every backend: run what is due, then
return; what is due later stays for the next run."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta

from conveyor import Conveyor, Retry, current_job
from conveyor.admin.api import make_filter
from conveyor.model.job import JobState
from conveyor.worker import ExitStatus, Worker, WorkerConfig

BURST = WorkerConfig(queues=("default", "other"), concurrency=3, poll_interval=5.0, burst=True)


async def _burst(app: Conveyor, config: WorkerConfig = BURST) -> tuple[Worker, ExitStatus]:
    worker = Worker(app, config)
    # A burst that does not end by itself fails here, long before a poll would end it.
    return worker, await asyncio.wait_for(worker.run(), 20)


async def test_burst_runs_what_is_due_then_returns(live_app: Conveyor) -> None:
    runs: list[str] = []

    @live_app.task(name="work")
    def work(n: int) -> int:
        runs.append(f"work:{n}")
        return n

    @live_app.task(name="other_work", queue="other")
    async def other_work() -> None:
        runs.append("other")

    @live_app.task(name="fan_out")
    async def fan_out() -> None:
        runs.append("fan_out")
        await work.enqueue_async(99)  # due at once: this burst runs it too

    @live_app.task(name="again_now")
    async def again_now() -> str:
        runs.append(f"again_now:{current_job().attempt}")
        if current_job().attempt == 1:
            raise Retry(after=0)  # due at once: run again in this burst
        return "second"

    @live_app.task(name="again_later")
    async def again_later() -> None:
        runs.append("again_later")
        raise Retry(after=timedelta(hours=1))  # not waited for

    @live_app.task(name="later")
    async def later() -> None:
        runs.append("later")

    ids = [(await work.enqueue_async(n)).id for n in range(5)]
    other = await other_work.enqueue_async()
    fan = await fan_out.enqueue_async()
    now = await again_now.enqueue_async()
    retry_later = await again_later.enqueue_async()
    delayed = await later.options(delay=timedelta(hours=1)).enqueue_async()

    started = time.monotonic()
    worker, status = await _burst(live_app)
    assert status is ExitStatus.DRAINED
    assert time.monotonic() - started < BURST.poll_interval  # it never sat out a poll
    assert sorted(runs) == sorted(
        [
            *(f"work:{n}" for n in range(5)),
            "other",
            "fan_out",
            "work:99",
            "again_now:1",
            "again_now:2",
            "again_later",
        ]
    )
    assert worker.counts == {"completed": 9, "retryable": 2}
    for job_id in [*ids, other.id, fan.id]:
        assert (await live_app.admin.get(job_id)).state is JobState.COMPLETED  # type: ignore[union-attr]
    second = await live_app.admin.get(now.id)
    assert second is not None and (second.state, second.attempt) == (JobState.COMPLETED, 2)
    waiting = await live_app.admin.get(retry_later.id)
    assert waiting is not None and (waiting.state, waiting.attempt) == (JobState.RETRYABLE, 1)
    scheduled = await live_app.admin.get(delayed.id)
    assert scheduled is not None and (scheduled.state, scheduled.attempt) == (JobState.SCHEDULED, 0)


async def test_burst_counts_the_jobs_that_ended_dead(live_app: Conveyor) -> None:
    @live_app.task(name="parse")
    def parse(text: str) -> float:
        return float(text)  # ValueError: dead at once

    good = await parse.enqueue_async("1.5")
    bad = await parse.enqueue_async("twelve")
    worker, status = await _burst(live_app)
    assert status is ExitStatus.DRAINED
    assert worker.counts == {"completed": 1, "dead": 1}
    assert (await live_app.admin.get(good.id)).state is JobState.COMPLETED  # type: ignore[union-attr]
    assert (await live_app.admin.get(bad.id)).state is JobState.DEAD  # type: ignore[union-attr]


async def test_burst_with_nothing_due_returns_at_once(live_app: Conveyor) -> None:
    @live_app.task(name="later")
    def later() -> None: ...

    await later.options(delay=timedelta(minutes=5)).enqueue_async()
    started = time.monotonic()
    worker, status = await _burst(live_app)
    assert (status, worker.claimed, dict(worker.counts)) == (ExitStatus.DRAINED, 0, {})
    assert time.monotonic() - started < BURST.poll_interval


async def test_burst_with_max_jobs_stops_at_that_many(live_app: Conveyor) -> None:
    @live_app.task(name="work")
    def work(n: int) -> int:
        return n

    for n in range(5):
        await work.enqueue_async(n)
    worker, status = await _burst(live_app, WorkerConfig(concurrency=1, burst=True, max_jobs=2))
    assert (status, worker.claimed, worker.counts["completed"]) == (ExitStatus.DRAINED, 2, 2)
    assert await live_app.admin.count(make_filter(states=[JobState.AVAILABLE])) == 3
