"""One SQLite connection, confined to the thread that uses it: opening the file
(WAL mode, durability), write transactions, migrations; and `Q`, the backend's
statements (queries.sql) loaded by name. The roles' verbs (lifecycle.py,
inspector.py, flow.py, records.py) take this connection."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from conveyor.backends.sqlfiles import load_migrations, load_queries
from conveyor.model.errors import BackendUnavailable, ConfigurationError

Q = load_queries(__package__ or "conveyor.backends.sqlite")
_SYNCHRONOUS = {"full": "FULL", "normal": "NORMAL", "extra": "EXTRA", "off": "OFF"}


class SqliteConnection:
    """One connection to one database file, used from one thread."""

    def __init__(
        self,
        path: str,
        clock: Callable[[], float],
        synchronous: str = "full",
        cache_mb: int | None = None,
    ) -> None:
        """`cache_mb`: how many megabytes of the file's pages the connection may keep
        (None: SQLite's default, 2 MB)."""
        if synchronous.lower() not in _SYNCHRONOUS:
            raise ConfigurationError(
                f"synchronous={synchronous!r}: expected one of {sorted(_SYNCHRONOUS)}"
            )
        self.path = path
        self.clock = clock
        try:
            self.conn = sqlite3.connect(path, isolation_level=None, timeout=30.0)
            self.conn.text_factory = _text_or_stand_ins
            self.conn.execute("PRAGMA busy_timeout=30000")
            if cache_mb is not None:
                self.conn.execute(f"PRAGMA cache_size={-1024 * cache_mb}")
            _use_wal(self.conn)
            self.conn.execute(f"PRAGMA synchronous={_SYNCHRONOUS[synchronous.lower()]}")
        except sqlite3.Error as exc:
            raise BackendUnavailable(f"cannot open SQLite database {path!r}: {exc}") from exc

    def close(self) -> None:
        self.conn.close()

    @contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            yield self.conn
        except BaseException:
            # Some errors (SQLITE_FULL, an I/O error) end the transaction themselves; a
            # ROLLBACK then would hide the error that tells the user what happened.
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")

    # --- schema -----------------------------------------------------------------
    def migrate(self) -> list[int]:
        """Apply the migrations this file lacks. Looking costs one read: the write
        lock is taken only when one is due, so opening a migrated file (every
        process's first call, admin reads included) never waits behind a writer."""
        done = self._applied_versions()
        pending = [
            m
            for m in load_migrations(__package__ or "conveyor.backends.sqlite")
            if m.version not in done
        ]
        if not pending:
            return []
        applied = []
        with self.write() as db:
            db.execute(
                "CREATE TABLE IF NOT EXISTS conveyor_migrations "
                "(version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at REAL NOT NULL)"
            )
        for migration in pending:
            # Each migration in its own transaction; executescript would commit early.
            with self.write() as db:
                if db.execute(
                    "SELECT 1 FROM conveyor_migrations WHERE version = ?", (migration.version,)
                ).fetchone():
                    continue  # another process got there first
                for statement in _split_statements(migration.sql):
                    db.execute(statement)
                db.execute(
                    "INSERT INTO conveyor_migrations VALUES (?, ?, ?)",
                    (migration.version, migration.name, self.clock()),
                )
            applied.append(migration.version)
        return applied

    def _applied_versions(self) -> set[int]:
        try:
            rows = self.conn.execute("SELECT version FROM conveyor_migrations").fetchall()
        except sqlite3.OperationalError as exc:
            if "no such table" not in str(exc):
                raise
            return set()  # a new file
        return {row[0] for row in rows}


def _text_or_stand_ins(raw: bytes) -> str:
    """TEXT values as str; bytes that are not UTF-8 (a file written by something else)
    become lone surrogates instead of failing the whole query, and the job codec
    reports the field as not valid UTF-8."""
    return raw.decode("utf-8", "surrogateescape")


def _use_wal(conn: sqlite3.Connection, patience: float = 30.0) -> None:
    """Put the file in WAL mode (a persistent setting of the file).

    Switching a new file to WAL takes a lock that SQLite does not wait for with its
    busy handler: processes opening a fresh database at the same moment get "database
    is locked" at once (seen with two producers racing on a new file). Once the file
    is in WAL mode nothing needs switching, so retry briefly until one of them has."""
    deadline = time.monotonic() + patience
    delay = 0.001
    while True:
        try:
            if str(conn.execute("PRAGMA journal_mode").fetchone()[0]).lower() != "wal":
                conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(delay)  # back off while the other opener finishes the switch
            delay = min(delay * 2, 0.05)


def _split_statements(script: str) -> list[str]:
    """Split a migration into statements, keeping trigger bodies whole."""
    statements, current = [], []
    for line in script.splitlines():
        current.append(line)
        candidate = "\n".join(current).strip()
        if candidate and sqlite3.complete_statement(candidate):
            statements.append(candidate)
            current = []
    rest = "\n".join(current).strip()
    if rest and not all(
        line.strip().startswith("--") or not line.strip() for line in rest.splitlines()
    ):
        raise ConfigurationError(f"incomplete SQL statement at the end of a migration: {rest[:80]}")
    return statements
