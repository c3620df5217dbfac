"""Fixtures for PostgreSQL-specific tests: a fresh schema per test on the shared
server (dropped after), and a private server for tests that stop and restart it."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator

import psycopg
import pytest
from backends_under_test import POSTGRES_URL, service_missing
from pg_server import PrivateServer

from conveyor import Conveyor
from conveyor.model.clock import ManualClock


def schema_url(base: str, schema: str, **options: str) -> str:
    query = "&".join([f"schema={schema}", *(f"{k}={v}" for k, v in options.items())])
    return f"{base}{'&' if '?' in base else '?'}{query}"


@pytest.fixture
def admin_conn() -> Iterator[psycopg.Connection[tuple[object, ...]]]:
    """A plain autocommit connection to the shared server, for setup and checks."""
    try:
        conn = psycopg.connect(POSTGRES_URL, autocommit=True, connect_timeout=3)
    except psycopg.OperationalError as exc:
        service_missing(f"PostgreSQL not reachable at {POSTGRES_URL}: {exc}")
        raise
    with conn:
        yield conn


@pytest.fixture
def schema(admin_conn: psycopg.Connection[tuple[object, ...]]) -> Iterator[str]:
    name = f"conveyor_t_{uuid.uuid4().hex[:12]}"
    yield name
    admin_conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


@pytest.fixture
def pg_url(schema: str) -> str:
    return schema_url(POSTGRES_URL, schema, application_name=schema)


@pytest.fixture
async def pg_app(pg_url: str) -> AsyncIterator[Conveyor]:
    """An app on the real clock (workers run), its backend opened and migrated."""
    app = Conveyor(pg_url)
    await app.backend()
    yield app
    await app.aclose()
    app.close()


@pytest.fixture
async def manual_app(pg_url: str) -> AsyncIterator[tuple[Conveyor, ManualClock]]:
    clock = ManualClock()
    app = Conveyor(pg_url, clock=clock)
    await app.backend()
    yield app, clock
    await app.aclose()
    app.close()


@pytest.fixture
def private_server() -> Iterator[PrivateServer]:
    """A PostgreSQL of this test's own, on a free port, that it may stop and restart."""
    server = PrivateServer.find()
    if server is None:
        service_missing("initdb/pg_ctl not found under /usr/lib/postgresql/*/bin")
        raise AssertionError("unreachable")
    server.init()
    server.start()
    try:
        yield server
    finally:
        server.stop(missing_ok=True)
        server.remove()
