"""Connections held for enqueues, beside redis-py's pool.

Every command through a redis-py client takes a connection from the pool, wraps the
call in its retry and event machinery, and gives the connection back: a large share
of a one-by-one enqueue on loopback (docs/performance.md). An enqueue connection is
one of the pool's own kind (same URL, TLS, credentials, keepalive), held, and talked
to directly: pack (with hiredis when installed), send, read, done.

`EnqueueConnection` serves the event loop, one call at a time: a caller that finds it
busy uses the pool instead (see `RedisLifecycle._send_idempotent`), so concurrent callers
still overlap their round trips. `EnqueueConnectionsPerThread` serves the sync facade
(Django, Flask, scripts): one connection per calling thread, so no loop and no thread
hop is involved.

Only idempotent commands go through them (enqueues: the job id deduplicates). A
connection that died since its last use (a server restart) is replaced and the
commands are sent again once, as the pool's own Retry(NoBackoff(), 1) does; they
may have run before it died.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from redis.asyncio.connection import AbstractConnection as AsyncConnection
from redis.connection import AbstractConnection as SyncConnection
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

Command = Sequence[str | int]

_hiredis_pack: Callable[[Any], bytes] | None
try:  # C packing: a fraction of the cost of redis-py's own
    from hiredis import pack_command as _hiredis_pack
except ImportError:  # hiredis is optional (the redis-hiredis extra)
    _hiredis_pack = None


def _packed(
    connection: AsyncConnection | SyncConnection, commands: Sequence[Command]
) -> list[bytes]:
    if _hiredis_pack is not None:
        return [_hiredis_pack(tuple(command)) for command in commands]
    return [part for command in commands for part in connection.pack_command(*command)]


def first_error(replies: list[Any]) -> list[Any]:
    """The replies, or the first error among them raised."""
    for reply in replies:
        if isinstance(reply, ResponseError):
            raise reply
    return replies


class EnqueueConnection:
    def __init__(self, make_connection: Callable[[], AsyncConnection]) -> None:
        self._make_connection = make_connection
        self._connection: AsyncConnection | None = None
        self.busy = False

    async def call(self, *command: str | int) -> Any:
        """One command's reply (a ResponseError is raised)."""
        return first_error(await self.call_many([command]))[0]

    async def call_many(self, commands: Sequence[Command]) -> list[Any]:
        """Send the commands in one write; their replies in order, errors as values."""
        if self.busy:  # two callers on one connection would read each other's replies
            raise RuntimeError("the enqueue connection is in use: check `busy` before calling")
        if self._connection is None:
            self._connection = self._make_connection()
        connection = self._connection
        packed = _packed(connection, commands)
        self.busy = True
        try:
            try:
                return await self._round_trip(connection, packed, len(commands))
            except RedisConnectionError:
                # redis-py disconnected it already; sending connects again.
                return await self._round_trip(connection, packed, len(commands))
        finally:
            self.busy = False

    @staticmethod
    async def _round_trip(connection: AsyncConnection, packed: list[bytes], n: int) -> list[Any]:
        # A cancellation or error while reading disconnects (redis-py's default), so
        # no reply is ever left behind for the next caller.
        await connection.send_packed_command(packed)
        replies = []
        for _ in range(n):
            try:
                replies.append(await connection.read_response())
            except ResponseError as error:  # a reply like any other: read the rest
                replies.append(error)
        return replies

    async def close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            await connection.disconnect()


class EnqueueConnectionsPerThread:
    def __init__(self, make_connection: Callable[[], SyncConnection]) -> None:
        self._make_connection = make_connection
        self._local = threading.local()
        self._lock = threading.Lock()
        self._connections: list[SyncConnection] = []
        self._generation = 0  # close() starts a new one: threads then open afresh

    def call_many(self, commands: Sequence[Command]) -> list[Any]:
        """As `EnqueueConnection.call_many`, on the calling thread's own connection."""
        local = self._local
        if getattr(local, "generation", -1) != self._generation:
            local.connection = self._make_connection()
            local.generation = self._generation
            with self._lock:
                self._connections.append(local.connection)
        connection: SyncConnection = local.connection
        packed = _packed(connection, commands)
        try:
            return self._round_trip(connection, packed, len(commands))
        except RedisConnectionError:
            return self._round_trip(connection, packed, len(commands))

    @staticmethod
    def _round_trip(connection: Any, packed: list[bytes], n: int) -> list[Any]:
        # Any: redis-py's sync connection is not annotated (strict mypy refuses the calls)
        connection.send_packed_command(packed)
        replies = []
        for _ in range(n):
            try:
                replies.append(connection.read_response())
            except ResponseError as error:
                replies.append(error)
        return replies

    def close(self) -> None:
        with self._lock:
            connections, self._connections = self._connections, []
            self._generation += 1
        for connection in connections:
            connection.disconnect()  # type: ignore[no-untyped-call]
