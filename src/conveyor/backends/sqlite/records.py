"""The shared-record verbs on SQLite, on the store's own thread.

Each verb that decides on the current value (if absent, compare and set, incr)
reads and writes inside one `BEGIN IMMEDIATE` transaction: SQLite serialises
writers, so the read and the write are one atomic step across processes.
"""

from __future__ import annotations

import sqlite3

from conveyor.backends.records import expiry, incremented
from conveyor.backends.sqlite.connection import Q, SqliteConnection


def get(store: SqliteConnection, namespace: str, key: str) -> str | None:
    row = store.conn.execute(Q["get_record"], _where(store, namespace, key)).fetchone()
    return None if row is None else str(row[0])


def list_all(store: SqliteConnection, namespace: str) -> dict[str, str]:
    rows = store.conn.execute(Q["list_records"], {"namespace": namespace, "now": store.clock()})
    return {str(key): str(value) for key, value in rows}


def put(store: SqliteConnection, namespace: str, key: str, value: str, ttl: float | None) -> None:
    with store.write() as db:
        _put(store, db, namespace, key, value, ttl)


def put_if_absent(
    store: SqliteConnection, namespace: str, key: str, value: str, ttl: float | None
) -> bool:
    return compare_and_set(store, namespace, key, None, value, ttl)


def compare_and_set(
    store: SqliteConnection,
    namespace: str,
    key: str,
    expected: str | None,
    value: str,
    ttl: float | None,
) -> bool:
    with store.write() as db:
        current = db.execute(Q["get_record"], _where(store, namespace, key)).fetchone()
        if (None if current is None else current[0]) != expected:
            return False
        _put(store, db, namespace, key, value, ttl)
        return True


def incr(store: SqliteConnection, namespace: str, key: str, amount: int, ttl: float | None) -> int:
    with store.write() as db:
        row = db.execute(Q["get_record_and_expiry"], _where(store, namespace, key)).fetchone()
        now = store.clock()
        value = incremented(namespace, key, None if row is None else row[0], amount)
        expires_at = expiry(now, ttl) if row is None else row[1]
        db.execute(
            Q["put_record"],
            {"namespace": namespace, "key": key, "value": str(value), "expires_at": expires_at},
        )
        return value


def delete(store: SqliteConnection, namespace: str, key: str) -> bool:
    # Read, then delete: SQLite 3.40's DELETE ... RETURNING computed `expires_at IS
    # NULL` wrongly on this table (the primary-key index answers the delete).
    with store.write() as db:
        live = db.execute(Q["get_record"], _where(store, namespace, key)).fetchone()
        db.execute(Q["delete_record"], {"namespace": namespace, "key": key})
        return live is not None


def _where(store: SqliteConnection, namespace: str, key: str) -> dict[str, object]:
    return {"namespace": namespace, "key": key, "now": store.clock()}


def _put(
    store: SqliteConnection,
    db: sqlite3.Connection,
    namespace: str,
    key: str,
    value: str,
    ttl: float | None,
) -> None:
    now = store.clock()
    db.execute(Q["delete_expired_records"], {"now": now})  # keep the table small
    db.execute(
        Q["put_record"],
        {"namespace": namespace, "key": key, "value": value, "expires_at": expiry(now, ttl)},
    )


def hold_bucket(store: SqliteConnection, key: str, tokens: float, until: float) -> None:
    """SqliteBackend.hold_rate_bucket: a write the claims serialise with."""
    with store.write() as db:
        db.execute(Q["hold_rate_bucket"], {"name": key, "tokens": tokens, "until": until})
