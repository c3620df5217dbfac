"""Soft and hard time limits, checkpoints from both kinds of handler, and the claim
budget that pool children recycle by, against every backend (in-process workers)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from typing import Any

from helpers import RunningWorker, eventually, wait_finished

from conveyor import Conveyor, RetryOptions, current_job
from conveyor.handle import JobHandle
from conveyor.model.errors import SoftTimeLimitExceeded
from conveyor.model.job import JobState
from conveyor.worker import ExitStatus, WorkerConfig

FAST = WorkerConfig(concurrency=4, poll_interval=0.05, rescue_interval=0.1, lease=5)


async def test_sync_soft_limit_raises_inside_the_handler(live_app: Conveyor) -> None:
    cleaned: list[int] = []

    @live_app.task(name="spin", timeout=0.3, max_attempts=2, retry=RetryOptions(backoff_base=0.001))
    def spin() -> str:
        try:
            while True:  # pure Python: the exception lands at the next bytecode
                time.sleep(0.005)
        except SoftTimeLimitExceeded:
            cleaned.append(current_job().attempt)
            raise

    handle = await spin.enqueue_async()
    async with RunningWorker(live_app, FAST):
        job = (await wait_finished(live_app, [handle.id]))[handle.id]
    assert cleaned == [1, 2]
    assert job.state is JobState.DEAD
    assert [(e.attempt, e.type) for e in job.errors] == [
        (1, "SoftTimeLimitExceeded"),
        (2, "SoftTimeLimitExceeded"),
    ]
    assert "in spin" in job.errors[0].traceback  # raised in the handler's own frame


async def test_async_soft_limit_cancels_the_handler(live_app: Conveyor) -> None:
    cleaned: list[int] = []

    @live_app.task(name="nap", timeout=0.2, max_attempts=1)  # timeout= is the soft limit
    async def nap() -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cleaned.append(current_job().attempt)
            raise

    handle = await nap.enqueue_async()
    async with RunningWorker(live_app, FAST):
        job = (await wait_finished(live_app, [handle.id]))[handle.id]
    assert cleaned == [1]
    assert job.state is JobState.DEAD and [e.type for e in job.errors] == ["SoftTimeLimitExceeded"]


async def test_handler_that_catches_the_soft_limit_may_still_return(live_app: Conveyor) -> None:
    @live_app.task(name="partial", timeout=0.2)
    def partial() -> str:
        try:
            while True:
                time.sleep(0.005)
        except SoftTimeLimitExceeded:
            return "partial result"

    handle = await partial.enqueue_async()
    async with RunningWorker(live_app, FAST):
        job = (await wait_finished(live_app, [handle.id]))[handle.id]
    assert job.state is JobState.COMPLETED and job.result_value == "partial result"


async def test_hard_limit_stops_async_handler_that_ignores_the_soft_one(live_app: Conveyor) -> None:
    released = False

    @live_app.task(name="stubborn", timeout=0.1, hard_time_limit=0.4, max_attempts=1)
    async def stubborn() -> None:
        while not released:
            try:
                await asyncio.sleep(0.01)
            except asyncio.CancelledError:
                pass  # ignores every cancel

    handle = await stubborn.enqueue_async()
    try:
        async with RunningWorker(live_app, FAST) as worker:
            job = (await wait_finished(live_app, [handle.id]))[handle.id]
            assert worker.counts["runaway"] == 1  # it swallowed the hard cancel too
    finally:
        released = True  # the abandoned coroutine would otherwise outlive the test's loop
    assert job.state is JobState.DEAD and [e.type for e in job.errors] == ["HardTimeLimitExceeded"]


async def test_hard_limit_of_sync_handler_is_recorded_and_reported(live_app: Conveyor) -> None:
    release = threading.Event()
    finished: list[int] = []

    @live_app.task(
        name="runaway",
        timeout=0.1,
        hard_time_limit=0.4,
        max_attempts=2,
        retry=RetryOptions(backoff_base=0.001),
    )
    def runaway() -> None:
        while not release.is_set():
            try:
                time.sleep(0.005)
            except SoftTimeLimitExceeded:
                pass  # ignores the soft limit
        finished.append(current_job().attempt)

    handle = await runaway.enqueue_async()
    try:
        async with RunningWorker(live_app, FAST) as worker:
            job = (await wait_finished(live_app, [handle.id]))[handle.id]
            assert worker.counts["runaway"] == 2
    finally:
        release.set()
    assert job.state is JobState.DEAD
    assert [(e.attempt, e.type) for e in job.errors] == [
        (1, "HardTimeLimitExceeded"),
        (2, "HardTimeLimitExceeded"),
    ]


async def test_runaway_stops_a_worker_configured_to_be_replaced(live_app: Conveyor) -> None:
    release = threading.Event()

    @live_app.task(name="runaway", hard_time_limit=0.3, max_attempts=3)
    def runaway() -> None:
        release.wait(30)

    @live_app.task(name="bystander")
    async def bystander() -> None:
        await asyncio.sleep(30)

    bystanding = await bystander.enqueue_async()
    handle = await runaway.enqueue_async()
    config = WorkerConfig(concurrency=4, poll_interval=0.05, stop_on_runaway=True)
    runner = RunningWorker(live_app, config)
    try:
        async with runner:
            status = await asyncio.wait_for(runner.task, 30)  # type: ignore[arg-type]
    finally:
        release.set()
    assert status is ExitStatus.COLD
    job = await live_app.admin.get(handle.id)
    other = await live_app.admin.get(bystanding.id)
    assert job is not None and job.state is JobState.RETRYABLE
    assert [e.type for e in job.errors] == ["HardTimeLimitExceeded"]
    # The other job was returned without using an attempt.
    assert other is not None and other.state is JobState.AVAILABLE and other.attempt == 0


async def test_checkpoints_from_sync_and_async_handlers_reach_the_retry(live_app: Conveyor) -> None:
    seen: list[tuple[str, int, object]] = []

    @live_app.task(name="sync_steps", max_attempts=3, retry=RetryOptions(backoff_base=0.001))
    def sync_steps() -> int:
        ctx = current_job()
        seen.append(("sync", ctx.attempt, ctx.last_checkpoint))
        start = ctx.last_checkpoint["step"] if ctx.last_checkpoint else 0
        for step in range(start, 4):
            ctx.checkpoint({"step": step + 1})
            if ctx.attempt == 1 and step == 1:
                raise ConnectionError("lost the GPU")
        return start

    @live_app.task(name="async_steps", max_attempts=3, retry=RetryOptions(backoff_base=0.001))
    async def async_steps() -> int:
        ctx = current_job()
        seen.append(("async", ctx.attempt, ctx.last_checkpoint))
        start = ctx.last_checkpoint["step"] if ctx.last_checkpoint else 0
        for step in range(start, 4):
            await ctx.checkpoint_async({"step": step + 1})
            await ctx.progress_async((step + 1) / 4, f"step {step + 1}")
            if ctx.attempt == 1 and step == 2:
                raise ConnectionError("lost the GPU")
        return start

    handles: list[JobHandle[Any]] = [
        await sync_steps.enqueue_async(),
        await async_steps.enqueue_async(),
    ]
    async with RunningWorker(live_app, FAST):
        jobs = await wait_finished(live_app, [h.id for h in handles])
    assert sorted(seen) == [
        ("async", 1, None),
        ("async", 2, {"step": 3}),
        ("sync", 1, None),
        ("sync", 2, {"step": 2}),
    ]
    assert [jobs[h.id].result_value for h in handles] == [2, 3]
    assert jobs[handles[1].id].progress is not None
    assert '"step 4"' in jobs[handles[1].id].progress  # type: ignore[operator]


async def test_max_jobs_claims_exactly_that_many_then_drains(live_app: Conveyor) -> None:
    ran: Counter[str] = Counter()

    @live_app.task(name="tick")
    def tick() -> None:
        ran[current_job().id] += 1

    handles = [await tick.enqueue_async() for _ in range(12)]
    config = WorkerConfig(concurrency=4, poll_interval=0.05, max_jobs=5)
    runner = RunningWorker(live_app, config)
    async with runner:
        status = await asyncio.wait_for(runner.task, 30)  # type: ignore[arg-type]
    assert status is ExitStatus.DRAINED
    assert sum(ran.values()) == 5 and set(ran.values()) == {1}

    async def five_completed() -> bool:
        states = Counter([(await live_app.admin.get(h.id)).state for h in handles])  # type: ignore[union-attr]
        return states == {JobState.COMPLETED: 5, JobState.AVAILABLE: 7}

    await eventually(five_completed)
