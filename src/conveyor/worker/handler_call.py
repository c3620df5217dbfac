"""How a handler's call ended, held as a value instead of raised.

Whatever a handler raises must reach the executor as its attempt's error, and an
exception raised onward as-is does not always get there:
  * a sync handler's exception would cross into the event loop through a Future, and
    `Future.set_exception` refuses StopIteration ("cannot be raised into a Future"):
    the Future never completes and the job stays `running`;
  * KeyboardInterrupt and SystemExit raised in a task's step leave the event loop
    itself (asyncio re-raises them), stopping the whole worker;
  * a CancelledError a library leaked cannot be told, once raised, from the worker
    cancelling the job.
So the call is wrapped where it runs and every ending becomes a `Returned` or a
`Raised`; only a cancel that someone requested of the task running the handler is
let through, for the worker to decide on (see `InFlightJobs._interrupted`).
"""

from __future__ import annotations

import asyncio
import traceback
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class ShutdownCancel(BaseException):
    """Raised into a handler by a cold shutdown: release the job, refund the attempt."""


# What the worker stops an attempt with. Raised by anyone else, they are the
# attempt's failure; see `cancel_requested`.
INTERRUPTS = (asyncio.CancelledError, ShutdownCancel)


@dataclass(frozen=True, slots=True)
class Returned(Generic[T]):
    value: T


@dataclass(frozen=True, slots=True)
class Raised:
    error: BaseException


HandlerOutcome = Returned[T] | Raised


def call_capturing(fn: Callable[[], T]) -> HandlerOutcome[T]:
    """Call a sync handler; what it raises, of any type, is returned as `Raised`."""
    try:
        return Returned(fn())
    except BaseException as exc:
        return Raised(exc)


async def await_capturing(coro: Coroutine[Any, Any, T]) -> HandlerOutcome[T]:
    """Await an async handler; what it raises is returned as `Raised`, except the
    CancelledError of a cancel requested of the running task (`Task.cancelling()`
    counts requests; a CancelledError the handler raises by itself is not one)."""
    try:
        return Returned(await coro)
    except INTERRUPTS as exc:
        if cancel_requested():
            raise
        return Raised(exc)
    except BaseException as exc:
        return Raised(exc)


def cancel_requested() -> bool:
    """True if something called `cancel()` on the running task (and did not take it back)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def formatted(error: BaseException) -> str:
    return "".join(traceback.format_exception(error))


def release_frames(error: BaseException) -> None:
    """Drop the frames `error` keeps, and with them the handler's locals.

    A traceback holds every frame it passed through, and a frame holds its locals:
    a failed handler's data stays alive as long as its exception does, and the
    exception is usually part of a reference cycle (frame -> local -> exception ->
    traceback -> frame) that only the cycle collector frees, whenever it happens to
    run. Call once the traceback has been formatted; the chained (`__cause__`,
    `__context__`) and grouped exceptions are released too.
    """
    seen: set[int] = set()
    pending = [error]
    while pending:
        exc = pending.pop()
        if id(exc) in seen:
            continue
        seen.add(id(exc))
        if exc.__traceback__ is not None:
            traceback.clear_frames(exc.__traceback__)  # skips frames still running
            exc.__traceback__ = None
        pending += [e for e in (exc.__cause__, exc.__context__) if e is not None]
        if isinstance(exc, BaseExceptionGroup):
            pending += exc.exceptions
