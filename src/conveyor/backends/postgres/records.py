"""The shared-record verbs (the SharedRecords role) on PostgreSQL: each one statement
(queries.sql), so atomic under any number of concurrent writers."""

from __future__ import annotations

from typing import Any

import psycopg

from conveyor.backends.params import (
    RecordIncrement,
    RecordKey,
    RecordSwap,
    RecordSwapIn,
    RecordWrite,
)
from conveyor.backends.postgres.state import AsyncConn, PostgresState
from conveyor.backends.records import expiry


class PostgresRecords:
    """SharedRecords, and RecordsInTransaction on the caller's connection."""

    def __init__(self, state: PostgresState) -> None:
        self._state = state
        self._queries = state.queries
        self._clock = state.clock

    async def _one(self, query: str, params: dict[str, Any]) -> tuple[Any, ...] | None:
        async def op(conn: AsyncConn) -> tuple[Any, ...] | None:
            return await (await conn.execute(self._queries[query], params)).fetchone()

        return await self._state.run(op)

    def _params(self, namespace: str, key: str, **more: Any) -> dict[str, Any]:
        return {"namespace": namespace, "key": key, "now": self._clock(), **more}

    async def get_record(self, record_key: RecordKey) -> str | None:
        namespace, key = record_key.namespace, record_key.key
        row = await self._one("get_record", self._params(namespace, key))
        return None if row is None else str(row[0])

    async def list_records(self, namespace: str) -> dict[str, str]:
        rows = await self._state.fetch(
            "list_records", {"namespace": namespace, "now": self._clock()}
        )
        return {str(key): str(value) for key, value in rows}

    async def put_record(self, record_write: RecordWrite) -> None:
        namespace, key, value, ttl = (
            record_write.namespace,
            record_write.key,
            record_write.value,
            record_write.ttl,
        )
        now = self._clock()
        params = self._params(namespace, key, value=value, now=now, expires_at=expiry(now, ttl))

        async def op(conn: AsyncConn) -> None:
            await conn.execute(self._queries["put_record"], params)

        await self._state.run(op)

    async def put_record_if_absent(self, record_write: RecordWrite) -> bool:
        namespace, key, value, ttl = (
            record_write.namespace,
            record_write.key,
            record_write.value,
            record_write.ttl,
        )
        now = self._clock()
        row = await self._one(
            "put_record_if_absent",
            self._params(namespace, key, value=value, now=now, expires_at=expiry(now, ttl)),
        )
        return row is not None

    async def compare_and_set_record(self, record_swap: RecordSwap) -> bool:
        namespace, key, expected, value, ttl = (
            record_swap.namespace,
            record_swap.key,
            record_swap.expected,
            record_swap.value,
            record_swap.ttl,
        )
        if expected is None:
            return await self.put_record_if_absent(
                RecordWrite(namespace=namespace, key=key, value=value, ttl=ttl)
            )
        now = self._clock()
        row = await self._one(
            "compare_and_set_record",
            self._params(
                namespace, key, value=value, expected=expected, now=now, expires_at=expiry(now, ttl)
            ),
        )
        return row is not None

    async def compare_and_set_record_in(self, record_swap_in: RecordSwapIn) -> bool:
        """On the caller's connection, in its transaction (RecordsInTransaction)."""
        connection, namespace, key, expected, value, ttl = (
            record_swap_in.connection,
            record_swap_in.namespace,
            record_swap_in.key,
            record_swap_in.expected,
            record_swap_in.value,
            record_swap_in.ttl,
        )
        query, params = self._compare_and_set(namespace, key, expected, value, ttl)
        return await (await connection.execute(query, params)).fetchone() is not None

    def compare_and_set_record_in_sync(self, record_swap_in: RecordSwapIn) -> bool:
        connection, namespace, key, expected, value, ttl = (
            record_swap_in.connection,
            record_swap_in.namespace,
            record_swap_in.key,
            record_swap_in.expected,
            record_swap_in.value,
            record_swap_in.ttl,
        )
        query, params = self._compare_and_set(namespace, key, expected, value, ttl)
        return connection.execute(query, params).fetchone() is not None

    def _compare_and_set(
        self, namespace: str, key: str, expected: str | None, value: str, ttl: float | None
    ) -> tuple[str, dict[str, Any]]:
        now = self._clock()
        params = self._params(
            namespace, key, value=value, expected=expected, now=now, expires_at=expiry(now, ttl)
        )
        # Absent expected: the key is taken only if free, as put_record_if_absent does.
        return self._queries[
            "put_record_if_absent" if expected is None else "compare_and_set_record"
        ], params

    async def incr_record(self, record_increment: RecordIncrement) -> int:
        namespace, key, amount, ttl = (
            record_increment.namespace,
            record_increment.key,
            record_increment.amount,
            record_increment.ttl,
        )
        now = self._clock()
        params = self._params(namespace, key, amount=amount, now=now, expires_at=expiry(now, ttl))
        try:
            row = await self._one("incr_record", params)
        except psycopg.errors.InvalidTextRepresentation:
            current = await self.get_record(RecordKey(namespace=namespace, key=key))
            raise ValueError(
                f"record {namespace}/{key} holds {str(current)[:40]!r}, not an "
                "integer; incr_record counts only what it created"
            ) from None
        assert row is not None
        return int(row[0])

    async def delete_record(self, record_key: RecordKey) -> bool:
        namespace, key = record_key.namespace, record_key.key
        row = await self._one("delete_record", self._params(namespace, key))
        return row is not None and bool(row[0])
