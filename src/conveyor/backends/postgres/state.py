"""What the PostgreSQL backend's roles share: the async pool every verb runs on (with
its retry on a dead connection), the sync pool for blocking enqueue and sync
transactions, the connections held for enqueues and claims, the LISTEN connections,
the loaded queries and the clock. One object, built by PostgresBackend and passed to
each role (lifecycle.py, inspector.py, flow.py, records.py, liveness.py, blobs.py)."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import psycopg
from psycopg_pool import AsyncConnectionPool, ConnectionPool, PoolTimeout

from conveyor.backends.postgres.config import parse_postgres_url
from conveyor.backends.postgres.connect import first_connection
from conveyor.backends.postgres.held_connection import HeldConnection
from conveyor.backends.postgres.last_used_pool import (
    AsyncLastUsedConnectionPool,
    LastUsedConnectionPool,
)
from conveyor.backends.postgres.listener import Listener
from conveyor.backends.postgres.rows import load_schema_queries, positional
from conveyor.model.clock import Clock, system_clock
from conveyor.model.errors import BackendUnavailable

log = logging.getLogger("conveyor.postgres")
T = TypeVar("T")
AsyncConn = psycopg.AsyncConnection[Any]


class PostgresState:
    """The pools and connections of one backend (autocommit connections: a
    statement is its own transaction unless a verb opens one), its queries, its clock."""

    def __init__(self, url: str, clock: Clock = system_clock) -> None:
        self.config = parse_postgres_url(url)
        self.clock = clock
        self.schema = self.config.schema
        self.queries = load_schema_queries(
            self.schema, self.config.channel, self.config.done_channel
        )
        # Run through a raw cursor (rows.Positional): longer than psycopg's parse cache.
        self.claims = {
            name: positional(self.queries[name]) for name in ("claim_jobs", "claim_rated_jobs")
        }
        self._pool: AsyncConnectionPool[AsyncConn] | None = None
        self._sync_pool: ConnectionPool[psycopg.Connection[Any]] | None = None
        self._sync_pool_lock = threading.Lock()
        # Made on first wait: new jobs (wait_for_jobs), job ends (job.result()).
        self.wakeup_listener: Listener | None = None
        self.done_listener: Listener | None = None
        self.enqueue_connection = HeldConnection(self.config.conninfo, self.config.timeout)
        self.claim_connection = HeldConnection(
            self.config.conninfo, self.config.timeout, setup=self.queries["claim_session"]
        )
        self._open_lock = asyncio.Lock()

    async def open(self) -> None:
        """Connect once directly, then open the pool: a permanent mistake (unknown
        role or database, wrong password) is ConfigurationError at once, in the
        server's words, and an unreachable server BackendUnavailable saying why;
        the pool itself would only time out. See connect.py."""
        async with self._open_lock:
            if self._pool is not None:
                return
            self.enqueue_connection.adopt(await first_connection(self.config))
            pool: AsyncConnectionPool[AsyncConn] = AsyncLastUsedConnectionPool(
                self.config.conninfo,
                kwargs={"autocommit": True},
                min_size=1,
                max_size=self.config.pool_size,
                timeout=self.config.timeout,
                open=False,
                name=f"conveyor-{self.schema}",
            )
            await pool.open()
            self._pool = pool

    async def close(self) -> None:
        await self.enqueue_connection.close()
        await self.claim_connection.close()
        for listener in (self.wakeup_listener, self.done_listener):
            if listener is not None:
                await listener.close()
        self.wakeup_listener = self.done_listener = None
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()
        with self._sync_pool_lock:
            sync_pool, self._sync_pool = self._sync_pool, None
        if sync_pool is not None:
            try:
                await asyncio.to_thread(sync_pool.close)
            except RuntimeError:  # at interpreter exit no thread can be had: close here
                sync_pool.close()

    def unavailable(self, exc: Exception) -> BackendUnavailable:
        return BackendUnavailable(
            f"PostgreSQL at {self.config.redacted} is unavailable ({type(exc).__name__}: "
            f"{str(exc).strip() or 'no detail'}); nothing was acknowledged, retry later"
        )

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[AsyncConn]:
        """A pooled connection; driver connection errors become BackendUnavailable."""
        if self._pool is None:
            await self.open()
        assert self._pool is not None
        try:
            async with self._pool.connection() as conn:
                yield conn
        except PoolTimeout as exc:
            raise self.unavailable(exc) from exc
        except psycopg.OperationalError as exc:
            raise self.unavailable(exc) from exc

    async def run(self, op: Callable[[AsyncConn], Awaitable[T]]) -> T:
        """Run `op` on a pooled connection, again on another if that one was dead
        (killed by pg_terminate_backend, a restart, a proxy): the pool only finds out
        by using it, and after a restart every idle connection is dead, so up to
        pool_size + 1 tries (a dead connection fails at once, no network wait).
        Every verb of this backend is safe to repeat after a failure: enqueue dedups by id,
        writes are fenced by lease tokens, claims of a lost reply come back through
        lease expiry. getconn/putconn rather than two context managers: this wraps
        every call, and enqueue one by one is measured against a bare INSERT."""
        if self._pool is None:
            await self.open()
        pool = self._pool
        assert pool is not None
        tries = self.config.pool_size + 1
        for attempt in range(1, tries + 1):
            try:
                conn = await pool.getconn()
            except PoolTimeout as exc:
                raise self.unavailable(exc) from exc
            try:
                return await op(conn)
            except psycopg.OperationalError as exc:
                if attempt == tries or not (conn.broken or conn.closed):
                    raise self.unavailable(exc) from exc
                log.info(
                    "a pooled connection to %s was dead; retrying on another", self.config.redacted
                )
            finally:
                await pool.putconn(conn)  # a broken one is discarded, not reused
        raise AssertionError("unreachable")

    def sync_pool(self) -> ConnectionPool[psycopg.Connection[Any]]:
        """The pool of the blocking calls (sync facade, sync transactions), made on first use."""
        with self._sync_pool_lock:
            if self._sync_pool is None:
                self._sync_pool = LastUsedConnectionPool(
                    self.config.conninfo,
                    kwargs={"autocommit": True},
                    min_size=1,
                    max_size=self.config.pool_size,
                    timeout=self.config.timeout,
                    name=f"conveyor-{self.schema}-sync",
                    open=True,
                )
            return self._sync_pool

    async def notify(self, conn: AsyncConn, queues: Sequence[str] = ("*",)) -> None:
        # The payload names queues, but a wake-up is a hint: "*" (some queue) will do.
        await conn.execute(
            self.queries["notify_queues"], {"channel": self.config.channel, "queues": list(queues)}
        )

    async def fetch(self, query: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        """The rows of one named query, run as `run` runs it."""

        async def op(conn: AsyncConn) -> list[tuple[Any, ...]]:
            return await (await conn.execute(self.queries[query], params)).fetchall()

        return await self.run(op)
