"""A connection held for short script calls, beside redis-py's pool.

Every command through a redis-py client takes a connection from the pool, wraps the
call in its retry and event machinery, and gives the connection back: about 55 µs of
Python per call here, a third of a one-by-one enqueue on loopback. The lane keeps one
connection of the pool's own kind (same URL, TLS, credentials, keepalive) and talks
to it directly: send, read, done.

One call at a time: a caller that finds the lane busy uses the pool instead (see
`RedisBackend._evalsha`), so concurrent callers still overlap their round trips.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from redis.asyncio.connection import AbstractConnection
from redis.exceptions import ConnectionError as RedisConnectionError

_hiredis_pack: Callable[[Any], bytes] | None
try:  # C packing: about 1 µs a command instead of 8 for redis-py's own
    from hiredis import pack_command as _hiredis_pack
except ImportError:  # hiredis is optional (the redis-hiredis extra)
    _hiredis_pack = None


class Lane:
    def __init__(self, make_connection: Callable[[], AbstractConnection]) -> None:
        self._make_connection = make_connection
        self._connection: AbstractConnection | None = None
        self.busy = False

    async def call(self, *args: str | int) -> Any:
        """Send one command and return its reply (a ResponseError is raised).

        A dead connection (the server restarted since the last call) is replaced once,
        as the pool's own Retry(NoBackoff(), 1) does. Only callers whose command is
        idempotent use the lane: the command may have run before the connection died.
        """
        if self._connection is None:
            self._connection = self._make_connection()
        connection = self._connection
        packed = (_hiredis_pack(args) if _hiredis_pack is not None
                  else connection.pack_command(*args))
        self.busy = True
        try:
            try:
                await connection.send_packed_command(packed)
                return await connection.read_response()
            except RedisConnectionError:
                # redis-py disconnected it already; sending connects again.
                await connection.send_packed_command(packed)
                return await connection.read_response()
        finally:
            self.busy = False

    async def close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            await connection.disconnect()
