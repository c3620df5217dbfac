"""The SQLite backend's own thread: its connection's calls, run one at a time, in order.

A `ThreadPoolExecutor` of one worker did this before, through `run_in_executor`: its
submit, work item and the concurrent future chained to an asyncio one cost more CPU
a call than this queue and one `call_soon_threadsafe` (docs/performance.md). Every
async verb pays it once, an async enqueue too,
and a bare committed INSERT is what that enqueue is held to.

The thread is a daemon, as the portal's is: a process that exits without closing
the backend does not hang on it. A write interrupted by the exit is a transaction
SQLite rolls back; one whose caller got its answer has committed.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")
_Call = tuple[Callable[[], Any], asyncio.AbstractEventLoop, "asyncio.Future[Any]"]


class StoreThread:
    def __init__(self, name: str) -> None:
        self._calls: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    def run(self, call: Callable[[], T]) -> asyncio.Future[T]:
        """`call()` on the thread, after every call queued before it; its result (or
        exception) in the returned future, of the running loop."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._calls.put((call, loop, future))
        return future

    def stop(self) -> None:
        """End the thread once the calls queued so far have run, and wait for it."""
        self._calls.put(None)
        if threading.current_thread() is not self._thread:
            self._thread.join()

    def _serve(self) -> None:
        while (item := self._calls.get()) is not None:
            call, loop, future = item
            try:
                result = call()
            except BaseException as exc:
                _hand_back(loop, _set_exception, future, exc)
            else:
                _hand_back(loop, _set_result, future, result)


def _hand_back(
    loop: asyncio.AbstractEventLoop,
    setter: Callable[..., None],
    future: asyncio.Future[Any],
    value: Any,
) -> None:
    try:
        loop.call_soon_threadsafe(setter, future, value)
    except RuntimeError:  # the caller's loop is closed: nobody waits for the answer
        pass


def _set_result(future: asyncio.Future[Any], result: Any) -> None:
    if not future.done():  # a cancelled caller stopped waiting; the call still ran
        future.set_result(result)


def _set_exception(future: asyncio.Future[Any], exc: BaseException) -> None:
    if not future.done():
        future.set_exception(exc)
