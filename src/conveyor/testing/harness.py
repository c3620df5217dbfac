"""An app under test: its test clock, its mode (manual or inline), and the record
of what ran. Attached by `use_memory()` (and so by the pytest fixtures); the one
middleware it adds sees every execution and every enqueue of the app."""

from __future__ import annotations

import json
import uuid
import weakref
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from conveyor.backends.memory.registry import drop_store
from conveyor.model.job import AttemptError, Job, JobState
from conveyor.observe.middleware import CallNext, EnqueueContext, ExecuteContext, MiddlewareContext
from conveyor.testing.clock import TestClock
from conveyor.worker.executor import decode_payload

if TYPE_CHECKING:
    from conveyor.app import Conveyor


@dataclass(frozen=True, slots=True)
class Attempt:
    """One run of a handler during a drain, and how it ended: `outcome` is the state
    the attempt sent the job to (completed, retryable, dead, scheduled for a snooze,
    cancelled)."""

    job_id: str
    task: str
    attempt: int
    args: list[Any]
    kwargs: dict[str, Any]
    outcome: JobState
    error: AttemptError | None
    result: Any


class Harness:
    def __init__(self, app: Conveyor, clock: TestClock) -> None:
        self.app = app
        self.clock = clock
        # Set by `inline()` (drain.py): runs a drain and returns the jobs as they ended.
        self.inline_drain: Callable[[], Awaitable[dict[str, Job]]] | None = None
        self.draining = 0  # drains under way (an inline enqueue inside one runs in it)
        self.recording: list[Attempt] | None = None
        self.middleware = RecordingMiddleware(self)


_harnesses: weakref.WeakKeyDictionary[Conveyor, Harness] = weakref.WeakKeyDictionary()


def harness_of(app: Conveyor) -> Harness:
    harness = _harnesses.get(app)
    if harness is None:
        raise RuntimeError(
            f"{app!r} is not under test: use the conveyor_app fixture, or "
            "`with use_memory(app):` to run it on a memory backend with a test clock"
        )
    return harness


class RecordingMiddleware:
    """Outermost: records each attempt of a drain as it ended, and, in inline mode,
    drains after an enqueue."""

    def __init__(self, harness: Harness) -> None:
        self.harness = harness

    async def __call__(self, call_next: CallNext, ctx: MiddlewareContext) -> None:
        await call_next(ctx)
        harness = self.harness
        if isinstance(ctx, ExecuteContext):
            if harness.recording is not None and ctx.settlement is not None:
                harness.recording.append(
                    _attempt(
                        ctx.job, ctx.settlement.state, ctx.settlement.error, ctx.settlement.result
                    )
                )
        elif (
            isinstance(ctx, EnqueueContext)
            and harness.inline_drain is not None
            and not harness.draining
        ):
            ended = await harness.inline_drain()
            # The handles the enqueue returns show how the jobs ended.
            ctx.jobs_out = [ended.get(job.id, job) for job in ctx.jobs_out]


def _attempt(
    job: Job, outcome: JobState, error: AttemptError | None, result: str | None
) -> Attempt:
    args, kwargs = decode_payload(job)
    return Attempt(
        job.id,
        job.task,
        job.attempt,
        args,
        kwargs,
        outcome,
        error,
        None if result is None else json.loads(result),
    )


@contextmanager
def use_memory(app: Conveyor, clock: TestClock | None = None) -> Iterator[TestClock]:
    """Run `app` (your own, as imported by your code) on a fresh memory backend with a
    test clock for the block; it goes back to its own backend afterwards.

    >>> with use_memory(myproject.jobs.app) as clock:
    ...     signup(...)                       # code that enqueues through the app
    ...     drain(myproject.jobs.app)
    """
    if app in _harnesses:
        raise RuntimeError(f"{app!r} is already under test")
    clock = clock or TestClock()
    saved = (app.url, app.clock)
    url = f"memory://test-{uuid.uuid4().hex[:12]}"
    app.rebind(url, clock)
    harness = _harnesses[app] = Harness(app, clock)
    app.middleware.insert(0, harness.middleware)
    try:
        yield clock
    finally:
        app.middleware.remove(harness.middleware)
        del _harnesses[app]
        app.rebind(*saved)
        drop_store(url)
