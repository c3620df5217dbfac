"""Fixtures of the Redis backend's own tests: a random key prefix on the shared
test server (deleted afterwards), a backend opened on it with the test clock, and
private redis-server processes for the tests that kill and restart one."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from backends_under_test import drop_redis_prefix
from backends_under_test import redis_url as isolated_redis_url
from redis_helpers import RedisServer, redis_server_binary

from conveyor.backends.redis.backend import RedisBackend
from conveyor.model.clock import ManualClock


@pytest.fixture
async def redis_url(tmp_path: Path) -> AsyncIterator[str]:
    url = await isolated_redis_url(tmp_path)
    yield url
    await drop_redis_prefix(url)


@pytest.fixture
async def backend(redis_url: str, clock: ManualClock) -> AsyncIterator[RedisBackend]:
    b = RedisBackend(redis_url, clock=clock)
    await b.open()
    await b.migrate()
    yield b
    await b.close()


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A redis-server of our own (AOF, fsync always) in a temp dir, on a free port."""
    if redis_server_binary() is None:
        from backends_under_test import service_missing

        service_missing("redis-server is not on PATH")
    server = RedisServer(tmp_path / "redis", appendfsync="always")
    server.start()
    yield server
    server.stop()


@pytest.fixture
async def flushable_backend(
    private_redis: RedisServer, clock: ManualClock
) -> AsyncIterator[RedisBackend]:
    """A backend on a private server, for tests that SCRIPT FLUSH: on the shared
    server a flush made the other tests' scripts vanish between a load and a call."""
    b = RedisBackend(private_redis.url + "?prefix=flush", clock=clock)
    await b.open()
    await b.migrate()
    yield b
    await b.close()
