"""Whatever a handler raises ends its attempt with a recorded error, against every
backend: BaseExceptions (KeyboardInterrupt, SystemExit, GeneratorExit), exceptions
that cannot be raised into a Future (StopIteration), and a CancelledError the
worker did not ask for. Only the worker's own stop interrupts an attempt."""

from __future__ import annotations

import asyncio
import gc
import tracemalloc
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from helpers import RunningWorker, eventually, wait_finished

from conveyor import Conveyor, RetryOptions, current_job
from conveyor.model.job import JobState
from conveyor.observe.middleware import CallNext, ExecuteContext, MiddlewareContext
from conveyor.worker import ExitStatus, WorkerConfig

FAST = WorkerConfig(concurrency=4, poll_interval=0.05, rescue_interval=0.1, lease=5)
QUICK_RETRY: dict[str, Any] = {"retry": RetryOptions(backoff_base=0.001, backoff_cap=0.01)}


class HandlerAbort(BaseException):
    """A BaseException of the user's own, outside Exception."""


# name -> (exception to raise, the type recorded for a sync and for an async handler)
ESCAPES: dict[str, tuple[Callable[[], BaseException], str, str]] = {
    "keyboard": (KeyboardInterrupt, "KeyboardInterrupt", "KeyboardInterrupt"),
    "system_exit": (lambda: SystemExit(3), "SystemExit", "SystemExit"),
    "generator_exit": (GeneratorExit, "GeneratorExit", "GeneratorExit"),
    # A coroutine cannot raise StopIteration: Python turns it into RuntimeError
    # ("coroutine raised StopIteration", PEP 479) before anyone else sees it.
    "stop_iteration": (lambda: StopIteration("done"), "StopIteration", "RuntimeError"),
    "stop_async_iteration": (StopAsyncIteration, "StopAsyncIteration", "StopAsyncIteration"),
    "cancelled": (
        lambda: asyncio.CancelledError("leaked from a library"),
        "CancelledError",
        "CancelledError",
    ),
    "custom_base": (lambda: HandlerAbort("mine"), "HandlerAbort", "HandlerAbort"),
}

# A time limit runs an async handler in a task of its own and a sync one under the
# soft-limit injector: a different path from the one without limits.
KINDS = {
    "sync": (False, {}),
    "async": (True, {}),
    "sync_with_limits": (False, {"timeout": 30, "hard_time_limit": 60}),
    "async_with_limits": (True, {"timeout": 30, "hard_time_limit": 60}),
}


def _register(
    app: Conveyor,
    name: str,
    is_async: bool,
    raise_it: Callable[[], BaseException],
    runs: Counter[str],
    **options: Any,
) -> Any:
    if is_async:

        async def handler() -> None:
            runs[name] += 1
            raise raise_it()
    else:

        def handler() -> None:  # type: ignore[misc]
            runs[name] += 1
            raise raise_it()

    handler.__name__ = name
    return app.task(name=name, **options)(handler)


@pytest.mark.parametrize("kind", sorted(KINDS))
async def test_every_exception_type_ends_the_attempt_with_its_error(
    live_app: Conveyor, kind: str
) -> None:
    is_async, limits = KINDS[kind]
    runs: Counter[str] = Counter()
    tasks = {
        name: _register(
            live_app, name, is_async, raise_it, runs, max_attempts=2, **QUICK_RETRY, **limits
        )
        for name, (raise_it, _, _) in ESCAPES.items()
    }
    handles = {name: await task.enqueue_async() for name, task in tasks.items()}
    runner = RunningWorker(live_app, FAST)
    async with runner as worker:
        jobs = await wait_finished(live_app, [h.id for h in handles.values()])
        assert worker.in_flight == 0  # every slot is free again
        # A cold stop finds nothing to return and exits.
        assert await runner.stop(cold=True) is ExitStatus.DRAINED
    recorded = {
        name: (jobs[h.id].state, [e.type for e in jobs[h.id].errors]) for name, h in handles.items()
    }
    assert recorded == {
        name: (JobState.DEAD, [async_type if is_async else sync_type] * 2)
        for name, (_, sync_type, async_type) in ESCAPES.items()
    }
    assert runs == {name: 2 for name in ESCAPES}
    assert worker.claimed == 2 * len(ESCAPES)
    assert all(jobs[h.id].errors[0].traceback for h in handles.values())
    assert "leaked from a library" in jobs[handles["cancelled"].id].errors[0].message


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
async def test_cancel_the_worker_did_not_ask_for_is_a_failed_attempt(
    live_app: Conveyor, is_async: bool
) -> None:
    runs: Counter[str] = Counter()
    task = _register(
        live_app,
        "leaks_cancel",
        is_async,
        lambda: asyncio.CancelledError("leaked from a library"),
        runs,
        max_attempts=3,
        **QUICK_RETRY,
    )
    handle = await task.enqueue_async()
    async with RunningWorker(live_app, FAST) as worker:
        job = (await wait_finished(live_app, [handle.id]))[handle.id]
    assert runs["leaks_cancel"] == 3
    assert worker.claimed == 3  # claimed once per attempt, never again at once
    assert (job.state, job.attempt) == (JobState.DEAD, 3)
    assert [(e.attempt, e.type, e.message) for e in job.errors] == [
        (n, "CancelledError", "leaked from a library") for n in (1, 2, 3)
    ]


async def test_task_cancelling_itself_is_a_failed_attempt(live_app: Conveyor) -> None:
    """A cancel request the worker did not make (here the handler's own, on the
    worker's task) uses the attempt: only the worker's cold stop gives it back."""
    runs: list[int] = []

    @live_app.task(name="cancels_itself", max_attempts=2, **QUICK_RETRY)
    async def cancels_itself() -> None:
        runs.append(current_job().attempt)
        task = asyncio.current_task()
        assert task is not None
        task.cancel("by the handler")
        await asyncio.sleep(0)

    handle = await cancels_itself.enqueue_async()
    async with RunningWorker(live_app, FAST) as worker:
        job = (await wait_finished(live_app, [handle.id]))[handle.id]
    assert runs == [1, 2] and worker.claimed == 2
    assert job.state is JobState.DEAD
    assert [e.type for e in job.errors] == ["CancelledError", "CancelledError"]


async def test_lost_lease_still_writes_nothing(live_app: Conveyor) -> None:
    """The worker's own cancels keep their meaning: a lease its heartbeat finds lost
    stops the attempt and writes nothing (the cold stop's refund is in test_worker)."""
    first_cancelled = asyncio.Event()
    seen: list[tuple[int, str]] = []

    @live_app.task(name="outlives_its_lease", max_attempts=3)
    async def outlives_its_lease() -> str:
        attempt = current_job().attempt
        if attempt == 1:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                seen.append((attempt, "cancelled"))
                first_cancelled.set()
                raise
        await asyncio.wait_for(first_cancelled.wait(), 10)
        seen.append((attempt, "completed"))
        return "second attempt"

    handle = await outlives_its_lease.enqueue_async()
    # The lease runs out long before the first heartbeat, which then finds it lost.
    late_heartbeats = WorkerConfig(
        concurrency=1, poll_interval=0.05, lease=0.4, heartbeat_interval=1.5, rescue_interval=60
    )
    rescuer = WorkerConfig(concurrency=1, poll_interval=0.05, lease=5, rescue_interval=0.05)
    async with RunningWorker(live_app, late_heartbeats) as first:
        await eventually(lambda: _true(first.in_flight == 1))
        async with RunningWorker(live_app, rescuer):
            job = (await wait_finished(live_app, [handle.id]))[handle.id]
    assert seen == [(1, "cancelled"), (2, "completed")]
    assert (job.state, job.attempt, job.result_value) == (JobState.COMPLETED, 2, "second attempt")
    assert [e.type for e in job.errors] == ["LeaseExpired"]
    assert first.counts == {}  # wrote no outcome at all, not even a stale one


async def _true(value: bool) -> bool:
    return value


class _CancelsAfterTheHandler:
    async def __call__(self, call_next: CallNext, ctx: MiddlewareContext) -> None:
        await call_next(ctx)
        if isinstance(ctx, ExecuteContext):
            raise asyncio.CancelledError("a middleware's own")


async def test_middleware_raising_cancelled_keeps_the_handlers_outcome(live_app: Conveyor) -> None:
    live_app.middleware.append(_CancelsAfterTheHandler())
    runs: list[int] = []

    @live_app.task(name="fine", max_attempts=3)
    def fine() -> str:
        runs.append(current_job().attempt)
        return "ok"

    handle = await fine.enqueue_async()
    async with RunningWorker(live_app, FAST) as worker:
        job = (await wait_finished(live_app, [handle.id]))[handle.id]
    assert runs == [1] and worker.claimed == 1
    assert (job.state, job.result_value, job.errors) == (JobState.COMPLETED, "ok", ())


@pytest.fixture
def no_cycle_collector() -> Iterator[None]:
    """Memory kept by reference cycles stays until the collector runs; with it off,
    what the test measures is what plain reference counting frees."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


BIG = 50 << 20  # bytes each failing attempt allocates
ATTEMPTS = 5


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
async def test_failed_attempts_do_not_keep_the_handlers_memory(
    live_app: Conveyor, is_async: bool, no_cycle_collector: None
) -> None:
    def allocate_and_fail() -> None:
        buffer = bytearray(BIG)  # a local of the failing frame, as in most handlers
        raise ConnectionError(f"failed with {len(buffer)} bytes in hand")

    if is_async:

        @live_app.task(name="hungry", max_attempts=ATTEMPTS, **QUICK_RETRY)
        async def hungry() -> None:
            allocate_and_fail()
    else:

        @live_app.task(name="hungry", max_attempts=ATTEMPTS, **QUICK_RETRY)  # type: ignore[no-redef]
        def hungry() -> None:
            allocate_and_fail()

    handle = await hungry.enqueue_async()
    tracemalloc.start()
    try:
        async with RunningWorker(live_app, FAST):
            job = (await wait_finished(live_app, [handle.id]))[handle.id]
            live, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert job.state is JobState.DEAD and len(job.errors) == ATTEMPTS
    assert "in allocate_and_fail" in job.errors[-1].traceback
    assert peak >= BIG  # the handler did allocate it
    # Not even one attempt's buffer is still alive once its outcome is written.
    assert live < BIG, f"{live >> 20} MiB still allocated after {ATTEMPTS} failed attempts"
