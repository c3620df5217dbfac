"""Pools whose connection handed back last is the next one handed out.

psycopg_pool hands out its idle connections first in, first out. A producer that
enqueues one job at a time (a Django view, a script) then commits on each of the
pool's connections in turn, and a commit on a different connection than the last
one costs more client CPU and wall time per commit, where `SELECT 1` shows no
difference (figures: docs/performance.md). So one idle connection waits aside, outside the
pool's queue, for the next call; the others wait in the pool as before, and
concurrent callers still share them all.

What the pool does to a connection coming back (discarding a broken one, closing
one past its `max_lifetime`) still happens: a connection goes back into the pool
when another one already waits aside, when it is broken or inside a transaction,
and once every ROTATE_SECONDS whatever it is.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Generic, TypeVar

import psycopg
from psycopg.pq import TransactionStatus
from psycopg_pool import AsyncConnectionPool, ConnectionPool

ROTATE_SECONDS = 60.0
C = TypeVar("C", psycopg.Connection[Any], psycopg.AsyncConnection[Any])


class _Aside(Generic[C]):
    """The one connection kept out of the pool's queue. Its lock is held for a swap
    only (never across I/O), so the async pool may take it too."""

    def __init__(self) -> None:
        self._conn: C | None = None
        self._lock = threading.Lock()
        self._rotate_at = time.monotonic() + ROTATE_SECONDS

    def take(self) -> C | None:
        with self._lock:
            conn, self._conn = self._conn, None
        return conn

    def keep(self, conn: C, pool_closed: bool) -> bool:
        """Keep `conn` aside for the next call? False: it goes back into the pool."""
        if (
            pool_closed
            or conn.closed
            or conn.broken
            or conn.info.transaction_status != TransactionStatus.IDLE
        ):
            return False
        with self._lock:
            if self._conn is not None:
                return False
            if (now := time.monotonic()) >= self._rotate_at:
                self._rotate_at = now + ROTATE_SECONDS
                return False
            self._conn = conn
            return True


class LastUsedConnectionPool(ConnectionPool[psycopg.Connection[Any]]):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._aside: _Aside[psycopg.Connection[Any]] = _Aside()
        super().__init__(*args, **kwargs)

    def getconn(self, timeout: float | None = None) -> psycopg.Connection[Any]:
        conn = self._aside.take()
        return conn if conn is not None else super().getconn(timeout)

    def putconn(self, conn: psycopg.Connection[Any]) -> None:
        if not self._aside.keep(conn, self.closed):
            super().putconn(conn)

    def close(self, timeout: float = 5.0) -> None:
        if (conn := self._aside.take()) is not None:
            super().putconn(conn)  # closed with the others below
        super().close(timeout)


class AsyncLastUsedConnectionPool(AsyncConnectionPool[psycopg.AsyncConnection[Any]]):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._aside: _Aside[psycopg.AsyncConnection[Any]] = _Aside()
        super().__init__(*args, **kwargs)

    async def getconn(self, timeout: float | None = None) -> psycopg.AsyncConnection[Any]:
        conn = self._aside.take()
        return conn if conn is not None else await super().getconn(timeout)

    async def putconn(self, conn: psycopg.AsyncConnection[Any]) -> None:
        if not self._aside.keep(conn, self.closed):
            await super().putconn(conn)

    async def close(self, timeout: float = 5.0) -> None:
        if (conn := self._aside.take()) is not None:
            await super().putconn(conn)
        await super().close(timeout)
