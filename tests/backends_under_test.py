"""Every backend the conformance suite runs against, by name.

Each entry makes a URL for one isolated test: a temp SQLite file, a fresh
PostgreSQL schema, a random Redis key prefix, a memory store of its own. A
backend joins the suite by adding one entry here; the suite itself never changes
per backend. A backend whose isolation leaves something behind (Redis keys, a
memory store) also adds a cleanup, run after each test with the same URL.

`SHARED_BACKENDS` are those several processes can share: the suites that start
real worker processes (acceptance, faults, the CLI's worker modes) run on those.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import uuid
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

IsolatedUrl = Callable[[Path], Coroutine[Any, Any, str]]  # asyncio.run takes a coroutine
Cleanup = Callable[[str], Coroutine[Any, Any, None]]

REDIS_URL = os.environ.get("CONVEYOR_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
POSTGRES_URL = os.environ.get(
    "CONVEYOR_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
)


async def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'jobs.db'}"


def service_missing(reason: str) -> None:
    """`service_missing` of tests/conftest.py. Every conftest is a module named
    `conftest`, so a plain import may find tests/conformance/conftest.py instead."""
    root_conftest = Path(__file__).with_name("conftest.py")
    for module in list(sys.modules.values()):
        if getattr(module, "__file__", None) == str(root_conftest):
            module.service_missing(reason)
            return
    spec = importlib.util.spec_from_file_location("conveyor_tests_conftest", root_conftest)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.service_missing(reason)


async def postgres_url(tmp_path: Path) -> str:
    """A fresh schema on the test PostgreSQL; skips (fails in CI) when it is down."""
    import psycopg

    try:
        conn = await psycopg.AsyncConnection.connect(POSTGRES_URL, connect_timeout=3)
        await conn.close()
    except psycopg.OperationalError as exc:
        service_missing(f"PostgreSQL not reachable at {POSTGRES_URL} ({exc})")
    schema = f"conveyor_test_{uuid.uuid4().hex[:12]}"
    return f"{POSTGRES_URL}{'&' if '?' in POSTGRES_URL else '?'}schema={schema}"


async def drop_postgres_schema(url: str) -> None:
    """Drop the test's schema (and everything in it)."""
    import psycopg

    from conveyor.backends.postgres.config import parse_postgres_url

    schema = parse_postgres_url(url).schema  # validated: lower-case letters, digits, _
    async with await psycopg.AsyncConnection.connect(POSTGRES_URL, autocommit=True) as conn:
        await conn.execute("SET lock_timeout = '10s'")  # a leftover session must not hang us
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


async def redis_url(tmp_path: Path) -> str:
    """A random key prefix on the test Redis; skips (fails in CI) when it is down."""
    try:
        import redis.asyncio as aioredis
        from redis.exceptions import RedisError
    except ModuleNotFoundError:
        service_missing("redis-py is not installed: pip install -e '.[dev]'")
        raise
    client = aioredis.Redis.from_url(REDIS_URL, socket_connect_timeout=1.0)
    try:
        await client.ping()
    except (RedisError, OSError) as exc:
        service_missing(f"Redis not reachable at {REDIS_URL} ({exc})")
    finally:
        await client.aclose()
    return f"{REDIS_URL}?prefix=test-{uuid.uuid4().hex[:12]}"


async def drop_redis_prefix(url: str) -> None:
    """Delete the test's keys (SCAN on its prefix + UNLINK; never FLUSHDB)."""
    from conveyor.backends.redis.backend import RedisBackend

    backend = RedisBackend(url)
    await backend.open()
    try:
        await backend.delete_all_keys()
    finally:
        await backend.close()


async def memory_url(tmp_path: Path) -> str:
    """A store of its own, in this process only."""
    return f"memory://test-{uuid.uuid4().hex[:12]}"


async def drop_memory_store(url: str) -> None:
    from conveyor.backends.memory.registry import drop_store

    drop_store(url)


SHARED_BACKENDS: dict[str, IsolatedUrl] = {
    "sqlite": sqlite_url,
    "postgres": postgres_url,
    "redis": redis_url,
}

BACKENDS: dict[str, IsolatedUrl] = {**SHARED_BACKENDS, "memory": memory_url}

CLEANUPS: dict[str, Cleanup] = {
    "postgres": drop_postgres_schema,
    "redis": drop_redis_prefix,
    "memory": drop_memory_store,
}
