"""Stopping a worker does not depend on every cancel landing (every backend)."""

from __future__ import annotations

import asyncio
import time

from conveyor import Conveyor
from conveyor.model.job import JobState
from conveyor.worker import ExitStatus, Worker, WorkerConfig


async def test_a_cold_stop_returns_a_job_whose_handler_lost_the_cancel(live_app: Conveyor) -> None:
    # What a handler awaiting redis-py 8 on Python 3.11 looked like: the cancel lands as
    # a send completes, asyncio.wait_for returns instead of raising, and the handler
    # carries on. The cold stop must not wait for it to end by itself (an hour here).
    started = asyncio.Event()
    cancels_seen = 0

    @live_app.task(name="loses_a_cancel")
    async def loses_a_cancel() -> None:
        nonlocal cancels_seen
        started.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancels_seen += 1  # swallowed, as the lost cancel was
        await asyncio.sleep(3600)

    handle = await loses_a_cancel.enqueue_async()
    worker = Worker(live_app, WorkerConfig(concurrency=1, poll_interval=0.05, grace_period=0.1))
    run = asyncio.create_task(worker.run())
    await asyncio.wait_for(started.wait(), 10)
    stopped_at = time.monotonic()
    worker.stop()
    assert await asyncio.wait_for(run, 10) is ExitStatus.COLD
    assert time.monotonic() - stopped_at < 5
    assert cancels_seen == 1
    job = await live_app.admin.get(handle.id)
    assert job is not None and (job.state, job.attempt) == (JobState.AVAILABLE, 0)
