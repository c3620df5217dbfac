"""Soft and hard time limits around one handler call.

Soft limit: the handler gets a chance to clean up.
  * async: its task is cancelled (`asyncio.CancelledError` inside, as with
    `asyncio.timeout`); the attempt records `SoftTimeLimitExceeded`.
  * sync (thread pool): `SoftTimeLimitExceeded` is raised in the handler's own
    thread with `PyThreadState_SetAsyncExc`, at its next bytecode. A thread blocked
    in a C call (`time.sleep`, a socket read) sees it when that call returns. Signals
    cannot do this: CPython runs signal handlers in the main thread only, and the
    main thread runs the event loop.
Hard limit: the handler is stopped for good and the attempt records
  `HardTimeLimitExceeded`.
  * async: cancelled again; one that swallows that cancel too is reported to
    `on_runaway` like a sync one.
  * sync: a thread cannot be killed. The call is abandoned and `on_runaway` is
    told; a pool child (`-p`) then returns its other jobs and exits, and the
    supervisor starts a fresh one, which is what actually stops the code. A single
    worker process (no `-p`) can only log it: its thread runs until it returns.
Both return how the call ended (`handler_call`): the handler's value, or what it
raised, or the limit it ran into. Only a cancel of the caller's own task (a cold stop,
a lost lease) is raised, and passed on to the handler.
"""

from __future__ import annotations

import asyncio
import ctypes
import functools
import threading
from collections.abc import Callable, Coroutine
from typing import Any, Generic, TypeVar

from conveyor.model.errors import HardTimeLimitExceeded, SoftTimeLimitExceeded
from conveyor.worker.handler_call import HandlerOutcome, Raised, await_capturing, call_capturing
from conveyor.worker.thread_bridge import ThreadBridge

T = TypeVar("T")


class _ThreadCall(Generic[T]):
    """One sync call on a pool thread that can receive the soft-limit exception.

    The exception is injected only while the call runs: `interrupt` and the end of
    the call hold the same lock, and the end also clears a pending injection, so it
    can never surface in the thread pool's own code after the handler returned.
    The handler's ending comes back as a value: its exception never goes through the
    Future as-is (see handler_call).
    """

    def __init__(self, fn: Callable[[], T]) -> None:
        self.fn = fn
        self._lock = threading.Lock()
        self._thread_id: int | None = None
        self._finished = False
        self._injected = False

    def __call__(self) -> HandlerOutcome[T]:
        with self._lock:
            self._thread_id = threading.get_ident()
        try:
            return call_capturing(self.fn)
        finally:
            with self._lock:
                self._finished = True
                if self._injected and self._thread_id is not None:
                    _set_async_exc(self._thread_id, None)  # drop it if not raised yet

    def interrupt(self) -> bool:
        with self._lock:
            if self._finished or self._thread_id is None or self._injected:
                return False
            self._injected = _set_async_exc(self._thread_id, SoftTimeLimitExceeded)
            return self._injected


def _set_async_exc(thread_id: int, exc: type[BaseException] | None) -> bool:
    obj = ctypes.py_object(exc) if exc is not None else None
    return bool(ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id), obj) == 1)


def _soft_message(limit: float) -> str:
    return f"ran past its soft time limit of {limit:g}s"


def _hard_message(limit: float) -> str:
    return f"still running at its hard time limit of {limit:g}s; stopped"


async def run_async_limited(
    coro: Coroutine[Any, Any, T],
    soft: float | None,
    hard: float | None,
    on_runaway: Callable[[], None],
) -> HandlerOutcome[T]:
    """Await `coro` under the limits (seconds from now; None: no limit)."""
    if soft is not None and hard is not None and soft >= hard:
        soft = None  # the hard limit comes first
    if soft is None and hard is None:
        return await await_capturing(coro)
    # Its own task, so that a limit can cancel it; captured inside that task, so that
    # not even KeyboardInterrupt or SystemExit escapes a task step into the loop.
    inner: asyncio.Task[HandlerOutcome[T]] = asyncio.ensure_future(await_capturing(coro))
    loop = asyncio.get_running_loop()
    started = loop.time()
    try:
        if soft is not None:
            await asyncio.wait([inner], timeout=soft)
            if not inner.done():
                inner.cancel("soft time limit")
                remaining = None if hard is None else hard - (loop.time() - started)
                await asyncio.wait([inner], timeout=remaining)
                if not inner.done():
                    await _stop_coroutine(inner, on_runaway)
                    return Raised(HardTimeLimitExceeded(_hard_message(hard or 0.0)))
                if inner.cancelled():
                    return Raised(SoftTimeLimitExceeded(_soft_message(soft)))
            # The handler may have caught the cancel and returned. Only a cancel it
            # asked of its own task leaves it cancelled here: that raises, and the
            # worker, which did not ask for it, records it as the attempt's failure.
            return inner.result()
        await asyncio.wait([inner], timeout=hard)
        if not inner.done():
            await _stop_coroutine(inner, on_runaway)
            return Raised(HardTimeLimitExceeded(_hard_message(hard or 0.0)))
        return inner.result()
    except asyncio.CancelledError:
        if not inner.done():
            inner.cancel()  # a cold stop or a lost lease: pass it on to the handler
        raise


async def _stop_coroutine(inner: asyncio.Task[Any], on_runaway: Callable[[], None]) -> None:
    """Cancel at the hard limit; a coroutine that swallows even this cancel and is still
    running a second later is a runaway like a sync one (its process must go)."""
    inner.cancel("hard time limit")
    await asyncio.wait([inner], timeout=1.0)
    if not inner.done():
        on_runaway()


async def run_sync_limited(
    threads: ThreadBridge,
    fn: Callable[[], T],
    soft: float | None,
    hard: float | None,
    on_runaway: Callable[[], None],
) -> HandlerOutcome[T]:
    """Run `fn` on a pool thread under the limits; see the module docstring."""
    if soft is not None and hard is not None and soft >= hard:
        soft = None
    # Only a soft limit injects an exception: without one, no lock and thread id to
    # keep per call.
    call = _ThreadCall(fn) if soft is not None else None
    loop = asyncio.get_running_loop()
    future = threads.submit(call if call is not None else functools.partial(call_capturing, fn))
    started = loop.time()
    try:
        if soft is None and hard is None:
            return await _thread_outcome(future)
        if soft is not None:
            done, _ = await asyncio.wait([future], timeout=soft)
            if not done:
                assert call is not None
                call.interrupt()
                if hard is None:
                    # SoftTimeLimitExceeded, unless the handler caught it
                    return await _thread_outcome(future)
                remaining = hard - (loop.time() - started)
                done, _ = await asyncio.wait([future], timeout=max(remaining, 0.0))
            if done:
                return await _thread_outcome(future)
        else:
            done, _ = await asyncio.wait([future], timeout=hard)
            if done:
                return await _thread_outcome(future)
    except asyncio.CancelledError:
        # A cold stop or a lost lease: the thread's result is dropped, and a call still
        # waiting for a thread never starts.
        future.cancel()
        raise
    future.cancel()  # its result, whenever it comes, is dropped
    on_runaway()
    return Raised(HardTimeLimitExceeded(_hard_message(hard or 0.0)))


async def _thread_outcome(future: asyncio.Future[HandlerOutcome[T]]) -> HandlerOutcome[T]:
    try:
        return await future  # a cancel of the caller's task (not an Exception) raises
    except Exception as exc:
        # The soft-limit exception landed in `_ThreadCall` itself, after the handler
        # ended and before the injection was withdrawn: the handler did run past it.
        return Raised(exc)
