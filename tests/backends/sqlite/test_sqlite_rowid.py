"""SQLite: the rowid behind `seq`, and errors that end a transaction themselves.

Found by the corrupt-field fuzz: with `seq INTEGER PRIMARY KEY AUTOINCREMENT`, one row
whose seq had been set to the largest rowid made every later INSERT fail with
SQLITE_FULL, and the connection's ROLLBACK of the already-ended transaction then replaced
that error with "cannot rollback - no transaction is active"."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from conveyor import Conveyor
from conveyor.backends.sqlfiles import load_migrations
from conveyor.backends.sqlite.connection import SqliteConnection
from conveyor.backends.sqlite.enqueue import enqueue_jobs
from conveyor.model.job import JobState, NewJob

LARGEST_ROWID = 2**63 - 1


def _job(job_id: str, payload: str = '{"args": [], "kwargs": {}}') -> NewJob:
    return NewJob(id=job_id, task="t.noop", queue="default", payload=payload)


def test_a_job_at_the_largest_rowid_does_not_stop_enqueues(tmp_path: Path) -> None:
    path = str(tmp_path / "jobs.db")
    connection = SqliteConnection(path, lambda: 1000.0)
    connection.migrate()
    enqueue_jobs(connection, [_job("first"), _job("second")])
    with connection.write() as db:
        db.execute("UPDATE conveyor_jobs SET seq = ? WHERE id = 'second'", (LARGEST_ROWID,))
    enqueued = enqueue_jobs(connection, [_job(f"after-{n}") for n in range(20)])
    assert [job.state for job in enqueued] == [JobState.AVAILABLE] * 20
    rows = {row[0] for row in connection.conn.execute("SELECT id FROM conveyor_jobs")}
    assert rows == {"first", "second", *(f"after-{n}" for n in range(20))}
    connection.close()


def test_an_error_that_ends_the_transaction_is_the_error_raised(tmp_path: Path) -> None:
    path = str(tmp_path / "jobs.db")
    connection = SqliteConnection(path, lambda: 1000.0)
    connection.migrate()
    pages = connection.conn.execute("PRAGMA page_count").fetchone()[0]
    connection.conn.execute(f"PRAGMA max_page_count = {pages + 2}")
    big = '{"args": ["' + "x" * 200_000 + '"], "kwargs": {}}'
    with pytest.raises(sqlite3.OperationalError, match="database or disk is full"):
        enqueue_jobs(connection, [_job("too-big", big)])
    # Nothing half-written, and the connection is usable afterwards.
    assert not connection.conn.in_transaction
    enqueue_jobs(connection, [_job("small")])
    assert [row[0] for row in connection.conn.execute("SELECT id FROM conveyor_jobs")] == ["small"]
    connection.close()


def test_a_version_2_file_keeps_its_jobs_and_order_through_the_rowid_migration(
    tmp_path: Path,
) -> None:
    path = str(tmp_path / "old.db")
    old = [m for m in load_migrations("conveyor.backends.sqlite") if m.version <= 2]
    assert [m.version for m in old] == [1, 2]
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute(
        "CREATE TABLE conveyor_migrations "
        "(version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at REAL NOT NULL)"
    )
    for migration in old:
        conn.executescript(migration.sql)
        conn.execute(
            "INSERT INTO conveyor_migrations VALUES (?, ?, 0)", (migration.version, migration.name)
        )
    for n in range(5):
        conn.execute(
            "INSERT INTO conveyor_jobs (id, queue, task, payload, state, max_attempts, "
            "run_at, created_at) VALUES (?, 'default', 't.noop', "
            "'{\"args\": [], \"kwargs\": {}}', 'available', 3, 1000, 1000)",
            (f"old-{n}",),
        )
    conn.close()

    app = Conveyor(f"sqlite:///{path}")
    try:
        app.enqueue_many([])  # opens and migrates
        jobs = app.jobs.list(limit=100)
        assert sorted(j.id for j in jobs) == [f"old-{n}" for n in range(5)]
        with sqlite3.connect(path) as check:
            ddl = check.execute(
                "SELECT sql FROM sqlite_master WHERE name = 'conveyor_jobs'"
            ).fetchone()[0]
            assert "AUTOINCREMENT" not in ddl
            order = [r[0] for r in check.execute("SELECT id FROM conveyor_jobs ORDER BY seq")]
            assert order == [f"old-{n}" for n in range(5)]
            # The state guard came back with the rebuilt table.
            with pytest.raises(sqlite3.IntegrityError, match="illegal job state transition"):
                check.execute("UPDATE conveyor_jobs SET state = 'completed' WHERE id = 'old-0'")
    finally:
        app.close()
