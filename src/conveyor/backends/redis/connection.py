"""What every role of one RedisBackend shares: the server and prefix it talks to.

Built from the URL (config.py): the key layout of the prefix (keys.py), the retention
bounds the settle and cancel scripts apply, and the clock whose times are passed to
the scripts (never Redis TIME, so an injected clock drives all). `open` makes the
redis-py asyncio client, registers the Lua scripts on it (script_calls.py) and
prepares the enqueue connections (enqueue_connections.py); `close` ends them all.
Each role object (lifecycle.py, inspector.py, flow.py, records.py, ...) is given this
one object and reads what it needs from it, at each call: the client exists only
between `open` and `close`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import redis
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.connection import AbstractConnection as SyncConnection

from conveyor.backends.redis.config import connection_settings, parse_redis_url
from conveyor.backends.redis.enqueue_connections import (
    EnqueueConnection,
    EnqueueConnectionsPerThread,
)
from conveyor.backends.redis.keys import Keys
from conveyor.backends.redis.script_calls import Scripts
from conveyor.model.clock import Clock

_NOT_OPEN = "RedisBackend used before open() or after close()"


class RedisConnection:
    def __init__(self, url: str, clock: Clock) -> None:
        self.url = url  # as given: errors name it redacted (errors.py)
        self.clock = clock
        self._driver_url, options = parse_redis_url(url)
        self.keys = Keys(options.get("prefix", "conveyor"))
        self.max_completed = int(options.get("max_completed", 100_000))
        self.max_dead = int(options.get("max_dead", 100_000))
        self._client: aioredis.Redis | None = None
        self._scripts: Scripts | None = None
        # Set while open; None means "use the pool" to the lifecycle's enqueue.
        self.enqueue_connection: EnqueueConnection | None = None
        self._per_thread: EnqueueConnectionsPerThread | None = None

    @property
    def client(self) -> Any:
        """The redis-py asyncio client (typed Any: redis-py annotates every command as
        returning "Awaitable[T] | T", which strict mypy cannot await)."""
        if self._client is None:
            raise RuntimeError(_NOT_OPEN)
        return self._client

    @property
    def scripts(self) -> Scripts:
        """The Lua scripts, called by name (script_calls.py)."""
        if self._scripts is None:
            raise RuntimeError(_NOT_OPEN)
        return self._scripts

    @property
    def enqueue_connections_per_thread(self) -> EnqueueConnectionsPerThread:
        """The sync facade's enqueue connections, one per calling thread."""
        if self._per_thread is None:
            raise RuntimeError(_NOT_OPEN)
        return self._per_thread

    async def open(self) -> None:
        if self._client is not None:
            return
        # One quick retry takes a fresh connection when a pooled one died with a server
        # restart; longer outages surface as BackendUnavailable, then the worker's backoff.
        options = connection_settings()
        self._client = aioredis.Redis.from_url(
            self._driver_url, retry=Retry(NoBackoff(), 1), **options
        )
        self._scripts = Scripts(self._client, self.keys.base)
        self.enqueue_connection = EnqueueConnection(self._client.connection_pool.make_connection)
        sync_pool = redis.ConnectionPool.from_url(self._driver_url, **options)
        self._per_thread = EnqueueConnectionsPerThread(
            cast(Callable[[], SyncConnection], sync_pool.make_connection)
        )

    async def close(self) -> None:
        client, self._client = self._client, None
        self._scripts = None
        enqueue_connection, self.enqueue_connection = self.enqueue_connection, None
        if enqueue_connection is not None:
            await enqueue_connection.close()
        if self._per_thread is not None:
            self._per_thread.close()
        if client is not None:
            await client.aclose()
