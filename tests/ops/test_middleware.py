"""The one middleware onion around enqueue and execution."""

from __future__ import annotations

from dataclasses import replace

from conformance.helpers import RunningWorker, eventually, wait_finished

from conveyor import Conveyor
from conveyor.model.job import JobState
from conveyor.observe.middleware import CallNext, EnqueueContext, ExecuteContext, MiddlewareContext
from conveyor.worker import WorkerConfig

FAST = WorkerConfig(queues=("default",), concurrency=2, poll_interval=0.05, stats_interval=0.05)


class Recorder:
    def __init__(self, name: str, events: list[str]) -> None:
        self.name, self.events = name, events

    async def __call__(self, call_next: CallNext, ctx: MiddlewareContext) -> None:
        kind = "enqueue" if isinstance(ctx, EnqueueContext) else "execute"
        self.events.append(f"{self.name}>{kind}")
        if isinstance(ctx, EnqueueContext):
            ctx.jobs_in = [replace(j, meta={**j.meta, self.name: True}) for j in ctx.jobs_in]
        await call_next(ctx)
        if isinstance(ctx, ExecuteContext):
            assert ctx.settlement is not None
            self.events.append(f"{self.name}<{ctx.settlement.state.value}")
        else:
            self.events.append(f"{self.name}<{len(ctx.jobs_out)}")


async def test_first_middleware_is_outermost_on_enqueue_and_execution(app: Conveyor) -> None:
    events: list[str] = []
    app.middleware[:] = [Recorder("outer", events), Recorder("inner", events)]

    @app.task(name="add")
    def add(a: int, b: int) -> int:
        events.append("handler")
        return a + b

    handle = await add.enqueue_async(1, 2)
    assert events == ["outer>enqueue", "inner>enqueue", "inner<1", "outer<1"]
    stored = await app.admin.get(handle.id)
    assert stored is not None and stored.meta == {"outer": True, "inner": True}
    events.clear()
    async with RunningWorker(app, FAST):
        jobs = await wait_finished(app, [handle.id])
    assert jobs[handle.id].result_value == 3
    assert events == [
        "outer>execute",
        "inner>execute",
        "handler",
        "inner<completed",
        "outer<completed",
    ]


def test_sync_enqueue_runs_the_middleware_too(tmp_path: object) -> None:
    events: list[str] = []
    app = Conveyor(f"sqlite:///{tmp_path}/sync.db", middleware=[Recorder("m", events)])
    try:

        @app.task(name="noop")
        def noop() -> None: ...

        handle = noop.enqueue()
        assert events == ["m>enqueue", "m<1"]
        job = app.jobs.get(handle.id)
        assert job is not None and job.meta == {"m": True}
    finally:
        app.close()


class Broken:
    async def __call__(self, call_next: CallNext, ctx: MiddlewareContext) -> None:
        if isinstance(ctx, ExecuteContext):
            raise RuntimeError("metrics exporter down")
        await call_next(ctx)


async def test_a_broken_middleware_fails_the_attempt_instead_of_stranding_the_job(
    app: Conveyor,
) -> None:
    app.middleware.append(Broken())

    @app.task(name="noop", max_attempts=1)
    def noop() -> None: ...

    handle = await noop.enqueue_async()
    async with RunningWorker(app, FAST):
        jobs = await wait_finished(app, [handle.id])
    job = jobs[handle.id]
    assert job.state is JobState.DEAD
    assert [(e.type, e.message) for e in job.errors] == [("RuntimeError", "metrics exporter down")]


class Swallows:
    async def __call__(self, call_next: CallNext, ctx: MiddlewareContext) -> None:
        if isinstance(ctx, EnqueueContext):
            await call_next(ctx)
        # execution: never calls call_next, so the handler does not run


class FailsAfter:
    async def __call__(self, call_next: CallNext, ctx: MiddlewareContext) -> None:
        await call_next(ctx)
        if isinstance(ctx, ExecuteContext):
            raise RuntimeError("exporter down after the job ran")


async def test_a_middleware_that_skips_the_handler_retries_the_job(app: Conveyor) -> None:
    app.middleware.append(Swallows())
    ran: list[int] = []

    @app.task(name="noop", max_attempts=3)
    def noop() -> None:
        ran.append(1)

    handle = await noop.enqueue_async()
    async with RunningWorker(app, FAST):

        async def retried() -> bool:
            job = await app.admin.get(handle.id)
            return job is not None and job.state is JobState.RETRYABLE

        await eventually(retried)
    job = await app.admin.get(handle.id)
    assert job is not None and ran == []
    assert [e.type for e in job.errors] == ["RuntimeError"]
    assert job.errors[0].message == "a middleware returned without calling call_next"


async def test_a_middleware_failing_after_the_handler_keeps_its_outcome(app: Conveyor) -> None:
    app.middleware.append(FailsAfter())

    @app.task(name="add")
    def add(a: int, b: int) -> int:
        return a + b

    handle = await add.enqueue_async(2, 2)
    async with RunningWorker(app, FAST):
        jobs = await wait_finished(app, [handle.id])
    assert jobs[handle.id].state is JobState.COMPLETED and jobs[handle.id].result_value == 4
