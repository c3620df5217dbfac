"""A connection held for one kind of call, beside the pool: one for enqueues, one for claims.

Taking a connection from psycopg_pool and giving it back costs a good share of a
one-by-one enqueue: not the pool's own bookkeeping, but that it hands its
connections out in turn, and a commit on another connection than the last costs
more. The pools now keep their last connection (last_used_pool.py), but async enqueues
still come nearer the floor through this held connection than through the pool, so
it stays (figures: docs/performance.md).

A held connection is one autocommit connection, used when it is free; a caller that
finds it busy, or finds it broken, goes through the pool
(`PostgresState.run`, with its retries). Enqueue is safe to repeat there: the job
id deduplicates a statement that ran before its connection died; so is a claim (a
lost reply's jobs come back through lease expiry).

It may be set up once (`setup`: session settings). The claim connection
runs its statements on generic plans without JIT (queries.sql, claim_session); a
server that refuses the setup gets no held connection, and its claims go through the pool.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import psycopg
from psycopg.pq import TransactionStatus

T = TypeVar("T")
AsyncConn = psycopg.AsyncConnection[Any]


class Busy(Exception):
    """The held connection cannot take this call now: use the pool."""


class HeldConnection:
    def __init__(self, conninfo: str, connect_timeout: float, setup: str | None = None) -> None:
        self._conninfo = conninfo
        self._connect_timeout = connect_timeout
        self._setup = setup  # run once on each new connection (session settings)
        self._connection: AsyncConn | None = None
        self._busy = False
        self._refused = False  # the server refused the setup: the pool serves
        self._closing: set[asyncio.Task[None]] = set()

    async def run(self, op: Callable[[AsyncConn], Awaitable[T]]) -> T:
        """`op` on the held connection; Busy when it is in use or cannot be had."""
        if self._busy or self._refused:
            raise Busy
        self._busy = True
        try:
            connection = self._connection
            if connection is None or connection.closed or connection.broken:
                connection = self._connection = await self._connect()
            try:
                return await op(connection)
            except BaseException as exc:
                # Cancelled or failed mid-statement, the connection's state is not
                # known and it goes; a statement error leaves it idle and usable.
                # A dead one sends the caller to the pool.
                if not (
                    isinstance(exc, psycopg.Error)
                    and not connection.broken
                    and connection.info.transaction_status == TransactionStatus.IDLE
                ):
                    self._drop(connection)
                if isinstance(exc, psycopg.OperationalError):
                    raise Busy from exc
                raise
        finally:
            self._busy = False

    def adopt(self, connection: AsyncConn) -> None:
        """Hold `connection` (autocommit), e.g. the one that opening the backend made."""
        if self._connection is not None:
            self._drop(self._connection)
        self._connection = connection

    async def _connect(self) -> AsyncConn:
        try:
            connection = await asyncio.wait_for(
                psycopg.AsyncConnection.connect(self._conninfo, autocommit=True),
                self._connect_timeout,
            )
        except (OSError, psycopg.Error, TimeoutError) as exc:
            raise Busy from exc  # the pool's path reports the outage
        if self._setup is not None:
            try:
                await connection.execute(self._setup.encode(), prepare=False)
            except psycopg.Error as exc:
                # Refused (not a dead connection): asking again each call would cost a
                # connect each time for the same answer.
                self._refused = not isinstance(exc, psycopg.OperationalError)
                await _close_quietly(connection)
                raise Busy from exc
        return connection

    def _drop(self, connection: AsyncConn) -> None:
        self._connection = None
        task = asyncio.ensure_future(_close_quietly(connection))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            await _close_quietly(connection)
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)


async def _close_quietly(connection: AsyncConn) -> None:
    try:
        await connection.close()
    except (OSError, psycopg.Error):
        pass
