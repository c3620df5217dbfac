"""Wake-ups for idle workers of one memory store, across the event loops of its
process (a worker's loop, the sync facade's loop, a test's loop)."""

from __future__ import annotations

import asyncio
import threading


class Wakeups:
    """`wait` returns at the next `notify` (from any thread) or after its timeout.
    Like every backend's wake-up, only a hint: a worker still polls.

    Each notify counts one generation. A waiter that says which generation it saw
    last returns at once if a notify came since, as a listening socket keeps the
    datagrams sent while nobody read it: an enqueue that happens between a claim
    that found nothing and the wait that follows is not lost."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiters: set[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = set()
        self.generation = 0

    async def wait(self, timeout: float, seen: int | None) -> int:
        """Wait; return the generation to pass as `seen` next time (None the first time:
        nothing before it counts)."""
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        entry = (loop, waiter)
        with self._lock:
            if timeout <= 0 or (seen is not None and seen != self.generation):
                return self.generation
            self._waiters.add(entry)
        try:
            await asyncio.wait_for(asyncio.shield(waiter), timeout)
        except TimeoutError:
            pass
        finally:
            with self._lock:
                self._waiters.discard(entry)
        return self.generation

    def notify(self) -> None:
        with self._lock:
            self.generation += 1
            waiters, self._waiters = self._waiters, set()
        for loop, waiter in waiters:
            try:
                loop.call_soon_threadsafe(_wake, waiter)
            except RuntimeError:  # that loop is closed: nobody waits there any more
                pass


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)
