"""The thin sync facade: sync callers (Django views, scripts, the CLI) run the
async core on one private event-loop thread per app."""

from __future__ import annotations

import asyncio
import atexit
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

    def __init__(self, name: str = "conveyor-portal",
                 on_exit: Callable[[], Coroutine[Any, Any, None]] | None = None) -> None:
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
            raise RuntimeError("a sync Conveyor call from inside its own portal loop would deadlock")
        return asyncio.run_coroutine_threadsafe(coro, loop).result(timeout)

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
                asyncio.run_coroutine_threadsafe(self._on_exit(), loop).result(
                    EXIT_CLOSE_PATIENCE)
            except Exception:  # noqa: BLE001 - the process is exiting either way
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
        except Exception:  # noqa: BLE001 - a task that will not finish is left behind
            log.debug("tasks still running when the portal loop stopped", exc_info=True)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=5)
        if not thread.is_alive():
            loop.close()


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
