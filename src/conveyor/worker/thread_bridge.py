"""Sync handlers' calls on threads of the worker's own, with their endings handed back
to the event loop in batches.

`loop.run_in_executor` costs a `concurrent.futures.Future` chained to an asyncio one
and one `call_soon_threadsafe` (a write to the loop's wake-up socket, and a read of
it) per call. Handing the endings back in batches (each thread puts what its call
returned on a list and wakes the loop only if no wake-up is pending, so one wake-up
carries every call that ended meanwhile) cut that by a good part on this machine's
2 cores, but `ThreadPoolExecutor.submit` itself stayed: a
`Future` with its `Condition`, a work item, and an idle-thread `Semaphore` taken and
given back, all Python code under locks, on both sides of every call. Here a call
is one put on a `queue.SimpleQueue` (C) taken by a waiting thread, a fraction of the
cost (docs/performance.md). The threads are started as calls need them, up to `max_threads`,
named `conveyor-job_N` and not daemons, as the executor's were (process_exit.py
decides what a process leaving them behind does).
"""

from __future__ import annotations

import asyncio
import itertools
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")
THREAD_NAME_PREFIX = "conveyor-job"
# What a thread takes off the queue: a call, or None (shutdown: end the thread).
_Call = tuple[asyncio.AbstractEventLoop, "asyncio.Future[Any]", Callable[[], Any]]


class ThreadBridge:
    """Runs calls on up to `max_threads` threads; each call's ending resolves an
    asyncio future."""

    def __init__(self, max_threads: int) -> None:
        if max_threads < 1:
            raise ValueError(f"max_threads must be at least 1, got {max_threads}")
        self.max_threads = max_threads
        self._calls: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._names = itertools.count()
        self._lock = threading.Lock()  # _idle, _ended, _wake_pending
        self._idle = 0  # threads done with a call and not yet given another (approximate:
        # a thread counted idle may find a call queued before it was counted; then the
        # next call waits for a thread or starts one, as with ThreadPoolExecutor)
        self._ended: list[tuple[asyncio.Future[Any], BaseException | None, Any]] = []
        self._wake_pending = False
        self._shut_down = False

    def submit(self, fn: Callable[[], T]) -> asyncio.Future[T]:
        """Start `fn` on a thread. Returns the future of its value (or exception) on
        the running loop. Cancelling it before a thread took the call keeps the call
        from running; once running, the call goes on and its ending is dropped."""
        if self._shut_down:
            raise RuntimeError("cannot start a call after the thread bridge shut down")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._calls.put((loop, future, fn))
        with self._lock:
            if self._idle:
                self._idle -= 1  # a waiting thread will take it
                return future
        if len(self._threads) < self.max_threads:
            thread = threading.Thread(
                target=self._work, name=f"{THREAD_NAME_PREFIX}_{next(self._names)}"
            )
            self._threads.append(thread)
            thread.start()
        return future  # every thread is busy: the first to finish takes it

    def shutdown(self, wait: bool = False) -> None:
        """Calls not yet taken by a thread never run; each thread ends once its running
        call (if any) returns. `wait`: until then. Call from the loop's thread."""
        self._shut_down = True
        while True:
            try:
                call = self._calls.get_nowait()
            except queue.Empty:
                break
            if call is not None:
                try:
                    call[1].cancel()
                except RuntimeError:  # its loop is closed: nobody awaits it
                    pass
        for _ in self._threads:
            self._calls.put(None)
        if wait:
            for thread in self._threads:
                thread.join()

    def _work(self) -> None:
        take = self._calls.get
        while True:
            call = take()
            if call is None:
                return
            loop, future, fn = call
            del call
            # Given up before a thread was free (a cold stop, a lost lease): not run. A
            # cancel that lands just after this read lets the call run; its ending is
            # dropped (`_resolve`).
            ran = not future.cancelled()
            error: BaseException | None = None
            value: Any = None
            if ran:
                try:
                    value = fn()
                except BaseException as exc:
                    error = exc
            with self._lock:
                # Idle from here on, before the loop hears of the ending: the call it
                # starts next, maybe in answer to this one, finds this thread free.
                self._idle += 1
                wake = ran and not self._wake_pending
                if ran:
                    self._ended.append((future, error, value))
                    self._wake_pending = True
            del fn, value, error, future  # the call's data goes with it, not with the idle thread
            if wake:
                try:
                    loop.call_soon_threadsafe(self._resolve)
                except RuntimeError:  # the loop is closed: nobody waits for this any more
                    with self._lock:
                        self._ended.clear()
                        self._wake_pending = False

    def _resolve(self) -> None:
        with self._lock:
            ended, self._ended = self._ended, []
            self._wake_pending = False
        for future, error, value in ended:
            if future.done():  # cancelled meanwhile (a cold stop, a lost lease)
                continue
            if error is None:
                future.set_result(value)
            elif isinstance(error, StopIteration):  # a Future cannot hold one
                future.set_exception(RuntimeError(f"StopIteration: {error}"))
            else:
                future.set_exception(error)
