"""The migrations produce the schema, the state machine is the lifecycle table,
and migrating is safe to repeat and to race."""

from __future__ import annotations

import asyncio
import os
import re
from pathlib import Path

import psycopg
import pytest

from conveyor.backends.postgres.backend import PostgresBackend
from conveyor.backends.postgres.config import parse_postgres_url
from conveyor.model.errors import BackendUnavailable, ConfigurationError
from conveyor.model.job import JobState
from conveyor.model.lifecycle import ALLOWED

EXPECTED = Path(__file__).with_name("schema.expected")
MIGRATIONS = Path(__file__).resolve().parents[3] / "src/conveyor/backends/postgres/migrations"
# The guard in force is the one the newest migration that (re)defines it wrote.
MIGRATION = [
    path
    for path in sorted(MIGRATIONS.glob("*.sql"))
    if "FUNCTION check_job_transition()" in path.read_text()
][-1]

# The catalog, as text that does not depend on the schema name or on OIDs.
CATALOG_QUERIES = {
    "table": """SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                WHERE n.nspname = %(s)s AND c.relkind = 'r' ORDER BY 1""",
    "column": """SELECT c.table_name || '.' || c.column_name || ' ' || c.data_type
                 || CASE WHEN c.is_nullable = 'NO' THEN ' NOT NULL' ELSE '' END
                 || coalesce(' DEFAULT ' || c.column_default, '')
                 || CASE WHEN c.is_identity = 'YES' THEN ' IDENTITY ' || c.identity_generation
                         ELSE '' END
                 FROM information_schema.columns c WHERE c.table_schema = %(s)s
                 ORDER BY c.table_name, c.ordinal_position""",
    "constraint": """SELECT cl.relname || '.' || co.conname || ' ' || pg_get_constraintdef(co.oid)
                     FROM pg_constraint co JOIN pg_class cl ON cl.oid = co.conrelid
                     JOIN pg_namespace n ON n.oid = cl.relnamespace
                     WHERE n.nspname = %(s)s ORDER BY 1""",
    "index": """SELECT indexname || ' ' || indexdef FROM pg_indexes
                WHERE schemaname = %(s)s ORDER BY 1""",
    "trigger": """SELECT pg_get_triggerdef(t.oid) FROM pg_trigger t
                  JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace
                  WHERE n.nspname = %(s)s AND NOT t.tgisinternal ORDER BY 1""",
    "function": """SELECT p.proname || '(' || pg_get_function_arguments(p.oid) || ') '
                   || pg_get_function_result(p.oid) FROM pg_proc p
                   JOIN pg_namespace n ON n.oid = p.pronamespace
                   WHERE n.nspname = %(s)s ORDER BY 1""",
}


def dump_schema(conn: psycopg.Connection[tuple[object, ...]], schema: str) -> str:
    lines = []
    for kind, query in CATALOG_QUERIES.items():
        for (text,) in conn.execute(query, {"s": schema}).fetchall():
            lines.append(f"{kind} {str(text).replace(schema + '.', 'SCHEMA.')}")
    return "\n".join(lines) + "\n"


async def test_migrations_produce_the_committed_schema(
    pg_url: str, schema: str, admin_conn
) -> None:
    backend = PostgresBackend(pg_url)
    try:
        assert await backend.migrate() == [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]
        assert await backend.migrate() == []  # idempotent
    finally:
        await backend.close()
    dumped = dump_schema(admin_conn, schema)
    if os.environ.get("CONVEYOR_UPDATE_SCHEMA_DUMP") == "1":
        EXPECTED.write_text(dumped)
    assert dumped == EXPECTED.read_text(), (
        "the migrations no longer produce tests/backends/postgres/schema.expected; if the change "
        "is intended, add a migration and rerun with CONVEYOR_UPDATE_SCHEMA_DUMP=1"
    )
    versions = admin_conn.execute(f'SELECT version, name FROM "{schema}".migrations').fetchall()
    assert versions == [
        (1, "0001_initial.sql"),
        (2, "0002_meta.sql"),
        (3, "0003_blobs.sql"),
        (4, "0004_priority_aging.sql"),
        (5, "0005_tenant_fairness.sql"),
        (6, "0006_workflows.sql"),
        (7, "0007_concurrency_keys.sql"),
        (8, "0008_rate_limits.sql"),
        (9, "0009_cascade_wakeups.sql"),
        (10, "0010_result_ttl.sql"),
        (11, "0011_shed_counts.sql"),
        (12, "0012_key_limits.sql"),
    ]


async def test_concurrent_migrators_apply_each_migration_once(
    pg_url: str, schema: str, admin_conn
) -> None:
    backends = [PostgresBackend(pg_url) for _ in range(6)]
    try:
        results = await asyncio.gather(*(b.migrate() for b in backends))
    finally:
        await asyncio.gather(*(b.close() for b in backends))
    # Each migration applied by exactly one of them (not necessarily the same one).
    assert sorted(v for applied in results for v in applied) == [
        1,
        2,
        3,
        4,
        5,
        6,
        7,
        8,
        9,
        10,
        11,
        12,
    ]
    assert admin_conn.execute(f'SELECT count(*) FROM "{schema}".migrations').fetchone() == (12,)


def test_trigger_lists_exactly_the_lifecycle_table() -> None:
    pairs = set(re.findall(r"'(\w+)>(\w+)'", MIGRATION.read_text()))
    assert pairs == {(a.value, b.value) for a, b in ALLOWED}


async def test_trigger_accepts_exactly_the_lifecycle_table(
    pg_url: str, schema: str, admin_conn
) -> None:
    """Every (old, new) pair written raw: the database's answer is the table's."""
    backend = PostgresBackend(pg_url)
    await backend.migrate()
    await backend.close()
    accepted = set()
    for old in JobState:
        for new in JobState:
            if old is new:
                continue
            lease = lambda s: 1.0 if s is JobState.RUNNING else None  # noqa: E731
            try:
                with admin_conn.transaction():
                    admin_conn.execute(
                        f'INSERT INTO "{schema}".jobs (id, queue, task, payload, state,'
                        " max_attempts, run_at, created_at, lease_expires_at)"
                        " VALUES ('x', 'q', 't', '{}', %s, 1, 0, 0, %s)",
                        (old.value, lease(old)),
                    )
                    admin_conn.execute(
                        f'UPDATE "{schema}".jobs SET state = %s, lease_expires_at = %s',
                        (new.value, lease(new)),
                    )
                    accepted.add((old, new))
                    raise _Undo
            except _Undo:
                pass
            except psycopg.errors.CheckViolation as exc:
                assert "illegal job state transition" in str(exc)
    assert accepted == set(ALLOWED)


class _Undo(Exception):
    pass


def test_url_options() -> None:
    config = parse_postgres_url(
        "postgresql://u:secret@h:5433/db?schema=jobs&pool_size=4&sslmode=disable"
    )
    assert (config.schema, config.pool_size, config.timeout) == ("jobs", 4, 5.0)
    assert "schema" not in config.conninfo and "sslmode=disable" in config.conninfo
    assert "secret" not in config.redacted and "***" in config.redacted
    assert parse_postgres_url("postgres://h/db").schema == "conveyor"
    with pytest.raises(ConfigurationError, match="unknown PostgreSQL URL option.*'shema'") as info:
        parse_postgres_url("postgresql://u:secret@h/db?shema=x")
    assert "secret" not in str(info.value)
    with pytest.raises(ConfigurationError, match="schema="):
        parse_postgres_url("postgresql://h/db?schema=Bad-Name")
    with pytest.raises(ConfigurationError, match="pool_size"):
        parse_postgres_url("postgresql://h/db?pool_size=1")


async def test_unreachable_server_is_backend_unavailable_without_password() -> None:
    from pg_server import free_port

    url = f"postgresql://u:hunter2@127.0.0.1:{free_port()}/db?timeout=0.5&connect_timeout=1"
    backend = PostgresBackend(url)
    try:
        with pytest.raises(BackendUnavailable, match="unavailable") as info:
            await backend.migrate()
        assert "hunter2" not in str(info.value)
    finally:
        await backend.close()
