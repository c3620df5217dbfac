"""One onion of middleware around enqueue and around the execution of a job.

A middleware is any object with `async def __call__(self, call_next, ctx)`. It
sees every enqueue (`EnqueueContext`) and every execution (`ExecuteContext`);
it may change `ctx` before `await call_next(ctx)` (add trace context to the new
jobs' `meta`, say) and read the outcome after it (`ctx.jobs_out`,
`ctx.settlement`). Metrics, tracing and logs are built on it and only observe:
they never change an outcome, and an error of theirs must not fail the job.

>>> class Timing:
...     async def __call__(self, call_next, ctx):
...         start = time.perf_counter()
...         await call_next(ctx)
...         if isinstance(ctx, ExecuteContext):
...             print(ctx.job.task, time.perf_counter() - start)
>>> app = Conveyor("sqlite:///jobs.db", middleware=[Timing()])

The first middleware in the list is the outermost.

A middleware that, for some calls, would only `await call_next(ctx)` may say so with
an optional `passes_on(ctx) -> bool`: the chain then leaves it out of that call. Its
layer costs a coroutine and a closure per job otherwise, a tenth of a worker's own CPU
per no-op job with the two that `conveyor worker` always adds (correlation ids, and
tracing with nothing recording).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from conveyor.backends.params import Settlement
    from conveyor.model.job import Job, NewJob


@dataclass(slots=True)
class EnqueueContext:
    """One call to enqueue: `jobs_in` may be changed on the way in (their meta),
    `jobs_out` holds what the backend stored (or the existing duplicates)."""

    jobs_in: list[NewJob]
    jobs_out: list[Job] = field(default_factory=list)


@dataclass(slots=True)
class ExecuteContext:
    """One attempt of one job in a worker. `settlement` is how it ended (None
    until `call_next` returns; it stays None if the attempt was interrupted by a
    cold stop or a lost lease, which raise through the middleware)."""

    job: Job
    worker_id: str
    settlement: Settlement | None = None
    # True when the task's retry budget moved this attempt's retry to a later window
    # (conveyor.rules.retry_budget): the settlement's run_at is that later time.
    retry_deferred: bool = False


MiddlewareContext = EnqueueContext | ExecuteContext
CallNext = Callable[[MiddlewareContext], Awaitable[None]]


class Middleware(Protocol):
    async def __call__(self, call_next: CallNext, ctx: MiddlewareContext) -> None: ...


async def run_chain(
    middleware: Sequence[Middleware], ctx: MiddlewareContext, innermost: CallNext
) -> None:
    """Run `innermost(ctx)` wrapped by `middleware`, first one outermost (those whose
    `passes_on(ctx)` is true left out)."""
    call: CallNext = innermost
    for layer in reversed(middleware):
        passes_on = getattr(layer, "passes_on", None)
        if passes_on is None or not passes_on(ctx):
            call = _bind(layer, call)
    await call(ctx)


def _bind(layer: Middleware, call_next: CallNext) -> CallNext:
    async def call(ctx: MiddlewareContext) -> None:
        await layer(call_next, ctx)

    return call
