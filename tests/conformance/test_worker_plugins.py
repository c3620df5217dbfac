"""The worker's plug-in seam (conveyor.plugins): a `WorkerPlugin` given to the worker is
called on the hooks it overrides, like the built-in features (breakers, adaptive limits,
retry budgets, result expiry, workflow inputs)."""

from __future__ import annotations

import asyncio
from typing import Any

from helpers import wait_finished

from conveyor import Conveyor, RetryOptions
from conveyor.backends.contract import Backend
from conveyor.backends.params import Settlement
from conveyor.model.job import Job, JobState
from conveyor.plugins import WorkerPlugin, overriding
from conveyor.rules.retry import RetryPolicy
from conveyor.worker import ExitStatus, Worker, WorkerConfig

FAST = WorkerConfig(concurrency=2, poll_interval=0.05)


class Recorder(WorkerPlugin):
    name = "recorder"

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.ticks = 0
        self.ticked = asyncio.Event()

    async def on_start(self, backend: Backend, now: float) -> None:
        self.calls.append(("start", ""))

    async def on_stop(self) -> None:
        self.calls.append(("stop", ""))

    def tick_interval(self) -> float | None:
        return 0.01

    async def tick(self, backend: Backend, now: float) -> None:
        self.ticks += 1
        self.ticked.set()

    def before_attempt(self, job: Job, now: float) -> None:
        self.calls.append(("before", job.task))

    def handler_ended(self, job: Job, error: BaseException | None, policy: RetryPolicy) -> None:
        self.calls.append(("handler", type(error).__name__ if error else "returned"))

    def attempt_failed(self, job: Job, error: BaseException) -> None:
        self.calls.append(("failed", type(error).__name__))

    def retry_at(self, job: Job, wanted: float, now: float) -> tuple[float, bool]:
        self.calls.append(("retry_at", job.task))
        return wanted + 3600.0, True  # a rule that holds every retry back an hour

    def completed(self, job: Job, settlement: Settlement) -> Settlement:
        self.calls.append(("completed", job.task))
        return settlement

    def after_attempt(self, job: Job, settlement: Settlement | None) -> Any:
        self.calls.append(("after", "none" if settlement is None else settlement.state.value))
        return None


async def test_a_plugin_sees_each_attempt_and_runs_beside_the_worker(live_app: Conveyor) -> None:
    @live_app.task(name="ok")
    def ok() -> int:
        return 1

    @live_app.task(name="flaky", max_attempts=3, retry=RetryOptions(backoff_base=0.001))
    def flaky() -> None:
        raise ConnectionError("down")

    recorder = Recorder()
    worker = Worker(live_app, FAST, plugins=[recorder])
    run = asyncio.create_task(worker.run())
    try:
        done = await ok.enqueue_async()
        await wait_finished(live_app, [done.id])
        await asyncio.wait_for(recorder.ticked.wait(), 10)
        retried = await flaky.enqueue_async()

        async def moved() -> bool:
            job = await live_app.admin.get(retried.id)
            return job is not None and job.state is JobState.RETRYABLE

        for _ in range(500):
            if await moved():
                break
            await asyncio.sleep(0.02)
        job = await live_app.admin.get(retried.id)
        assert job is not None and job.state is JobState.RETRYABLE
        assert job.run_at >= live_app.clock() + 3000  # the plugin moved the retry
    finally:
        worker.stop()
        assert await asyncio.wait_for(run, 30) is ExitStatus.DRAINED
    assert recorder.calls[0] == ("start", "")
    assert recorder.calls[-1] == ("stop", "")
    assert recorder.ticks >= 1
    attempts = recorder.calls[1:-1]
    assert attempts == [
        ("before", "ok"),
        ("handler", "returned"),
        ("completed", "ok"),
        ("after", "completed"),
        ("before", "flaky"),
        ("handler", "ConnectionError"),
        ("failed", "ConnectionError"),
        ("retry_at", "flaky"),
        ("after", "retryable"),
    ]


def test_only_the_hooks_a_plugin_overrides_are_called() -> None:
    recorder, plain = Recorder(), WorkerPlugin()
    assert overriding([recorder, plain], "before_attempt") == (recorder,)
    assert overriding([recorder, plain], "leading_args") == ()
    assert plain.service(None, lambda: 0.0, asyncio.Event()) is None  # type: ignore[arg-type]
