"""The SharedRecords verbs on SQLite.

`SqliteRecords`'s async verbs hop to the store thread (state.py) with the sync
function of the same name below, which takes the connection. Each verb that decides
on the current value (if absent, compare and set, incr) reads and writes inside one
`BEGIN IMMEDIATE` transaction: SQLite serialises writers, so the read and the write
are one atomic step across processes.
"""

from __future__ import annotations

import sqlite3

from conveyor.backends.params import RecordIncrement, RecordKey, RecordSwap, RecordWrite
from conveyor.backends.records import expiry, incremented
from conveyor.backends.sqlite.connection import Q, SqliteConnection
from conveyor.backends.sqlite.state import SqliteState


class SqliteRecords:
    """Text values under (namespace, key), on one backend's state."""

    def __init__(self, state: SqliteState) -> None:
        self.state = state

    async def get_record(self, record_key: RecordKey) -> str | None:
        return await self.state.run(lambda c: get_record(c, record_key))

    async def list_records(self, namespace: str) -> dict[str, str]:
        return await self.state.run(lambda c: list_records(c, namespace))

    async def put_record(self, record_write: RecordWrite) -> None:
        await self.state.run(lambda c: put_record(c, record_write))

    async def put_record_if_absent(self, record_write: RecordWrite) -> bool:
        return await self.state.run(lambda c: put_record_if_absent(c, record_write))

    async def compare_and_set_record(self, record_swap: RecordSwap) -> bool:
        return await self.state.run(lambda c: compare_and_set_record(c, record_swap))

    async def incr_record(self, record_increment: RecordIncrement) -> int:
        return await self.state.run(lambda c: incr_record(c, record_increment))

    async def delete_record(self, record_key: RecordKey) -> bool:
        return await self.state.run(lambda c: delete_record(c, record_key))


# --- the verbs, sync, on the connection ---------------------------------------------
def get_record(connection: SqliteConnection, record_key: RecordKey) -> str | None:
    where = _where(connection, record_key.namespace, record_key.key)
    row = connection.conn.execute(Q["get_record"], where).fetchone()
    return None if row is None else str(row[0])


def list_records(connection: SqliteConnection, namespace: str) -> dict[str, str]:
    rows = connection.conn.execute(
        Q["list_records"], {"namespace": namespace, "now": connection.clock()}
    )
    return {str(key): str(value) for key, value in rows}


def put_record(connection: SqliteConnection, record_write: RecordWrite) -> None:
    with connection.write() as db:
        _put(connection, db, record_write)


def put_record_if_absent(connection: SqliteConnection, record_write: RecordWrite) -> bool:
    return _swap(connection, record_write, None)


def compare_and_set_record(connection: SqliteConnection, record_swap: RecordSwap) -> bool:
    return _swap(connection, record_swap, record_swap.expected)


def incr_record(connection: SqliteConnection, record_increment: RecordIncrement) -> int:
    namespace, key = record_increment.namespace, record_increment.key
    with connection.write() as db:
        row = db.execute(Q["get_record_and_expiry"], _where(connection, namespace, key)).fetchone()
        now = connection.clock()
        value = incremented(
            namespace, key, None if row is None else row[0], record_increment.amount
        )
        expires_at = expiry(now, record_increment.ttl) if row is None else row[1]
        db.execute(
            Q["put_record"],
            {"namespace": namespace, "key": key, "value": str(value), "expires_at": expires_at},
        )
        return value


def delete_record(connection: SqliteConnection, record_key: RecordKey) -> bool:
    namespace, key = record_key.namespace, record_key.key
    # Read, then delete: SQLite 3.40's DELETE ... RETURNING computed `expires_at IS
    # NULL` wrongly on this table (the primary-key index answers the delete).
    with connection.write() as db:
        live = db.execute(Q["get_record"], _where(connection, namespace, key)).fetchone()
        db.execute(Q["delete_record"], {"namespace": namespace, "key": key})
        return live is not None


def _swap(
    connection: SqliteConnection, write: RecordWrite | RecordSwap, expected: str | None
) -> bool:
    """Store `write` if the live value is now `expected` (None: no live record)."""
    with connection.write() as db:
        current = db.execute(
            Q["get_record"], _where(connection, write.namespace, write.key)
        ).fetchone()
        if (None if current is None else current[0]) != expected:
            return False
        _put(connection, db, write)
        return True


def _where(connection: SqliteConnection, namespace: str, key: str) -> dict[str, object]:
    return {"namespace": namespace, "key": key, "now": connection.clock()}


def _put(
    connection: SqliteConnection, db: sqlite3.Connection, write: RecordWrite | RecordSwap
) -> None:
    now = connection.clock()
    db.execute(Q["delete_expired_records"], {"now": now})  # keep the table small
    db.execute(
        Q["put_record"],
        {
            "namespace": write.namespace,
            "key": write.key,
            "value": write.value,
            "expires_at": expiry(now, write.ttl),
        },
    )
