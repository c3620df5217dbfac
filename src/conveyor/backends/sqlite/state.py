"""What the roles of one `SqliteBackend` share, passed to each of them: the database
file, the backend's own connection on its store thread, and the wake-up senders.

Every verb's SQL runs on that one thread (store_thread.py): a role's async verb hands
`run` a sync call that takes the connection, and awaits its answer. The sync facade's
enqueue is the exception: it runs on a connection of the caller's own thread
(lifecycle.py), with the same sync code.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

from conveyor.backends.sqlite.connection import SqliteConnection
from conveyor.backends.sqlite.store_thread import StoreThread
from conveyor.backends.sqlite.wakeup import WakeupSender
from conveyor.model.clock import Clock

# The page cache of the backend's own connection, the one that claims (SQLite's default is
# 2 MB, filled only as pages are read): a claim that rotates over fairness keys or queues
# reads rows spread over the file, and with 2 MB a queue of 100,000 jobs read most of them
# back through the WAL on every claim (figures: docs/performance.md, docs/sqlite.md). The
# connections a sync facade's threads enqueue on keep the default.
CLAIMING_CACHE_MB = 32

T = TypeVar("T")


class SqliteState:
    """One database file as a backend's roles use it; opened on first use."""

    def __init__(self, path: str, synchronous: str, clock: Clock) -> None:
        self.path, self.synchronous, self.clock = path, synchronous, clock
        self.thread: StoreThread | None = None
        self.connection: SqliteConnection | None = None
        # After a commit: a datagram to idle workers (new work), and to those waiting
        # for a job's end (job.result(), FinishWakeups). None while closed.
        self.wake_workers: WakeupSender | None = None
        self.wake_result_waiters: WakeupSender | None = None
        self._open_lock = threading.Lock()

    async def run(self, call: Callable[[SqliteConnection], T]) -> T:
        """`call(connection)` on the store thread, after every call queued before it."""
        if self.thread is None:
            await self.open()
        assert self.thread is not None

        def on_thread() -> T:
            assert self.connection is not None, "backend closed"
            return call(self.connection)

        return await self.thread.run(on_thread)

    async def open(self) -> None:
        with self._open_lock:
            if self.thread is not None:
                return
            self.thread = StoreThread("conveyor-sqlite")

        def connect() -> None:
            self.connection = SqliteConnection(
                self.path, self.clock, self.synchronous, cache_mb=CLAIMING_CACHE_MB
            )

        await self.thread.run(connect)
        self.wake_workers = WakeupSender(self.path)
        self.wake_result_waiters = WakeupSender(self.path, "done")

    async def close(self) -> None:
        for sender in (self.wake_workers, self.wake_result_waiters):
            if sender is not None:
                sender.close()
        self.wake_workers = self.wake_result_waiters = None
        thread, self.thread = self.thread, None
        if thread is not None:
            connection = self.connection
            if connection is not None:
                await thread.run(connection.close)
            thread.stop()
        self.connection = None
