"""Every backend the conformance suite runs against, by name.

Each entry makes a URL for one isolated test: a temp SQLite file, a fresh
PostgreSQL schema, a random Redis key prefix. A backend joins the suite by
adding one entry here; the suite itself never changes per backend.
"""

from __future__ import annotations

import atexit
import os
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path


def service_missing(reason: str) -> None:
    """tests/conftest.py's helper (skip locally, fail in CI). Loaded by path: inside
    the conformance suite the bare name `conftest` is that folder's own conftest."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "conveyor_tests_conftest", Path(__file__).with_name("conftest.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.service_missing(reason)

IsolatedUrl = Callable[[Path], Awaitable[str]]

POSTGRES_URL = os.environ.get("CONVEYOR_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")


async def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'jobs.db'}"


_pg_schemas: list[str] = []


def _drop_pg_schemas() -> None:
    import psycopg

    if not _pg_schemas:
        return
    try:
        with psycopg.connect(POSTGRES_URL, autocommit=True, connect_timeout=3) as conn:
            for schema in _pg_schemas:
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    except psycopg.Error:
        pass  # the server went away; the schemas are disposable anyway


async def postgres_url(tmp_path: Path) -> str:
    """A fresh schema per test; all of them are dropped when the test process exits
    (the conformance fixtures own the app's life, this registry only names URLs)."""
    import psycopg

    try:
        conn = await psycopg.AsyncConnection.connect(POSTGRES_URL, connect_timeout=3)
        await conn.close()
    except psycopg.OperationalError as exc:
        service_missing(f"PostgreSQL not reachable at {POSTGRES_URL}: {exc}")
    schema = f"conveyor_test_{uuid.uuid4().hex[:12]}"
    if not _pg_schemas:
        atexit.register(_drop_pg_schemas)
    _pg_schemas.append(schema)
    separator = "&" if "?" in POSTGRES_URL else "?"
    return f"{POSTGRES_URL}{separator}schema={schema}"


BACKENDS: dict[str, IsolatedUrl] = {
    "sqlite": sqlite_url,
    "postgres": postgres_url,
}
