"""The sync facade's pool: the connection handed back last is the next one handed out.

psycopg_pool hands out its idle connections first in, first out. A producer that
enqueues one job at a time (a Django view, a script) then commits on each of the
pool's connections in turn, and a commit on a different connection than the last
one costs more: measured with `benchmarks/enqueue_cost.py` on this project's 2-core
machine, 25-35 µs more client CPU and 50-75 µs more wall time per one-by-one
enqueue (a 325 µs floor), where `SELECT 1` shows no difference. So one idle
connection waits here, outside the pool's queue, for the next call from any
thread; the others wait in the pool as before, and concurrent callers still share
them all.

What the pool does to a connection coming back (discarding a broken one, closing
one past its `max_lifetime`) still happens: a connection goes back into the pool
when another one already waits here, when it is broken or inside a transaction,
and once every ROTATE_SECONDS whatever it is.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus
from psycopg_pool import ConnectionPool

Conn = psycopg.Connection[Any]
ROTATE_SECONDS = 60.0


class HotConnectionPool(ConnectionPool[Conn]):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._hot: Conn | None = None
        self._hot_lock = threading.Lock()
        self._rotate_at = time.monotonic() + ROTATE_SECONDS
        super().__init__(*args, **kwargs)

    def getconn(self, timeout: float | None = None) -> Conn:
        with self._hot_lock:
            conn, self._hot = self._hot, None
        return conn if conn is not None else super().getconn(timeout)

    def putconn(self, conn: Conn) -> None:
        if (not self.closed and not conn.closed and not conn.broken
                and conn.info.transaction_status == TransactionStatus.IDLE):
            with self._hot_lock:
                if self._hot is None and time.monotonic() < self._rotate_at:
                    self._hot = conn
                    return
                if self._hot is None:
                    self._rotate_at = time.monotonic() + ROTATE_SECONDS
        super().putconn(conn)

    def close(self, timeout: float = 5.0) -> None:
        with self._hot_lock:
            conn, self._hot = self._hot, None
        if conn is not None:
            super().putconn(conn)  # closed with the others below
        super().close(timeout)
