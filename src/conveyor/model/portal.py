"""The thin sync facade: sync callers (Django views, scripts, the CLI) run the
async core on one private event-loop thread per app."""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import logging
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")
log = logging.getLogger("conveyor")

# At interpreter exit: how long closing the backend may take (a server that does not
# answer must not hang the exit), then how long its last tasks may take to finish.
EXIT_CLOSE_PATIENCE = 5.0
CANCEL_PATIENCE = 2.0


class Portal:
    """A daemon thread running an event loop, started on first use.

    A script that exits without `close()` (the plain way to write one) must exit
    silently: while the loop runs, an exit hook closes what runs on it (`on_exit`,
    the app's backend: its connection pool's tasks) and stops it, where the
    interpreter would otherwise destroy those tasks pending and say so on stderr.
    """

    def __init__(
        self,
        name: str = "conveyor-portal",
        on_exit: Callable[[], Coroutine[Any, Any, None]] | None = None,
    ) -> None:
        self._name = name
        self._on_exit = on_exit
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def _start(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                ready = threading.Event()

                def serve() -> None:
                    asyncio.set_event_loop(loop)
                    loop.call_soon(ready.set)
                    loop.run_forever()

                self._thread = threading.Thread(target=serve, name=self._name, daemon=True)
                self._thread.start()
                ready.wait()
                self._loop = loop
                atexit.register(self._at_exit)
            return self._loop

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        return self._loop

    def call(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        loop = self._start()
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError(
                "a sync Conveyor call from inside its own portal loop would deadlock"
            )
        call = _Call(coro)
        loop.call_soon_threadsafe(call.start)
        result: T = call.result(timeout)
        return result

    def stop(self) -> None:
        """Finish the loop's remaining tasks, stop it and join its thread."""
        self._stop()
        atexit.unregister(self._at_exit)

    def _at_exit(self) -> None:
        loop = self._loop
        if loop is None:
            return
        if self._on_exit is not None:
            try:
                asyncio.run_coroutine_threadsafe(self._on_exit(), loop).result(EXIT_CLOSE_PATIENCE)
            except Exception:
                log.debug("closing the backend at exit failed", exc_info=True)
        self._stop()

    def _stop(self) -> None:
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is None or thread is None:
            return
        if threading.current_thread() is thread:
            loop.stop()  # called from the loop itself: it stops after this callback
            return
        try:
            asyncio.run_coroutine_threadsafe(_finish_tasks(), loop).result(CANCEL_PATIENCE)
        except Exception:
            log.debug("tasks still running when the portal loop stopped", exc_info=True)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=5)
        if not thread.is_alive():
            loop.close()


class _Call:
    """One coroutine run on the portal's loop for a waiting thread: what
    `asyncio.run_coroutine_threadsafe(...).result()` does, without its concurrent
    future and the callbacks chaining it to the task, which cost CPU that every call of
    the sync facade pays (figures: docs/performance.md). As there, a call whose wait
    times out keeps running."""

    __slots__ = ("_coro", "_done", "_value", "_error")

    def __init__(self, coro: Coroutine[Any, Any, Any]) -> None:
        self._coro = coro
        self._done = threading.Lock()  # held until the outcome is in: the cheapest wake-up
        self._done.acquire()
        self._value: Any = None
        self._error: BaseException | None = None

    def start(self) -> None:
        """On the loop."""
        try:
            task = asyncio.ensure_future(self._coro)
        except BaseException as exc:
            self._error = exc
            self._done.release()
            return
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Future[Any]) -> None:
        if task.cancelled():
            self._error = concurrent.futures.CancelledError()
        elif (error := task.exception()) is not None:
            self._error = error
        else:
            self._value = task.result()
        self._done.release()

    def result(self, timeout: float | None) -> Any:
        if not self._done.acquire(timeout=-1 if timeout is None else max(0.0, timeout)):
            raise TimeoutError(f"the call did not finish within {timeout} s")
        if self._error is not None:
            error, self._error = self._error, None  # no cycle through its traceback
            raise error
        return self._value


async def _finish_tasks() -> None:
    """Cancel every other task of this loop and wait for them, as `asyncio.run`
    does before closing its loop: a task left pending is destroyed with a warning,
    and its callbacks later fail with 'Event loop is closed'."""
    current = asyncio.current_task()
    tasks = [task for task in asyncio.all_tasks() if task is not current]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await asyncio.get_running_loop().shutdown_asyncgens()
