"""Write into one stored field of a job behind Conveyor's back, as another program, a
manual edit or a damaged store could: raw SQL on SQLite and PostgreSQL, a raw HSET
on Redis, a direct write into the row on memory. The tests of corrupt jobs
(test_corrupt_jobs.py, test_corrupt_fuzz.py) use it to show that one bad job never touches another.

Each store takes what its schema lets through: SQLite takes anything in any column
(the writer also sets its CHECK constraints and the state trigger aside, as a tool
editing the file would); PostgreSQL refuses what does not fit a column's type or
constraint (`write` then returns False and nothing changed); Redis takes any bytes
in any field, memory any value in any of its fields (it has no `seq` field: its
order is its own). `None` removes the field (SQL NULL, HDEL, None).
"""

from __future__ import annotations

import sqlite3
from typing import Any, Protocol
from urllib.parse import urlsplit

RawValue = bytes | str | int | float | bool | None


class RawStore(Protocol):
    async def write(self, job_id: str, field: str, value: RawValue) -> bool:
        """Store `value` as the job's `field`; False if the store refused it."""
        ...

    async def read(self, job_id: str, field: str) -> Any: ...

    async def close(self) -> None: ...


def _sql_name(field: str) -> str:
    if not field.replace("_", "").isalpha():
        raise ValueError(f"not a column name: {field!r}")
    return field


class SqliteRawStore:
    def __init__(self, url: str) -> None:
        self.conn = sqlite3.connect(
            url.removeprefix("sqlite:///"), isolation_level=None, timeout=30.0
        )
        self.conn.text_factory = bytes
        self.conn.execute("PRAGMA ignore_check_constraints = ON")

    async def write(self, job_id: str, field: str, value: RawValue) -> bool:
        column = _sql_name(field)
        # Bytes go in as TEXT with exactly those bytes (what a damaged file holds).
        placeholder = "CAST(? AS TEXT)" if isinstance(value, bytes) else "?"
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            trigger = None
            if column == "state":  # the guard of legal transitions, set aside meanwhile
                row = self.conn.execute(
                    "SELECT sql FROM sqlite_master WHERE type = 'trigger' "
                    "AND name = 'conveyor_jobs_state_guard'"
                ).fetchone()
                trigger = row[0].decode() if row else None
                self.conn.execute("DROP TRIGGER IF EXISTS conveyor_jobs_state_guard")
            changed = self.conn.execute(
                f"UPDATE conveyor_jobs SET {column} = {placeholder} WHERE id = ?", (value, job_id)
            ).rowcount
            if trigger is not None:
                self.conn.execute(trigger)
        except sqlite3.IntegrityError:  # NOT NULL, UNIQUE: refused, nothing written
            self.conn.execute("ROLLBACK")
            return False
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")
        return changed == 1

    async def read(self, job_id: str, field: str) -> Any:
        row = self.conn.execute(
            f"SELECT {_sql_name(field)} FROM conveyor_jobs WHERE id = ?", (job_id,)
        ).fetchone()
        return None if row is None else row[0]

    async def close(self) -> None:
        self.conn.close()


class PostgresRawStore:
    JSONB = {"errors", "meta"}

    def __init__(self, url: str) -> None:
        from conveyor.backends.postgres.config import parse_postgres_url

        config = parse_postgres_url(url)
        self.conninfo = config.conninfo
        self.table = f'"{config.schema}".jobs'

    async def write(self, job_id: str, field: str, value: RawValue) -> bool:
        import psycopg

        column = _sql_name(field)
        if isinstance(value, bytes):  # text columns hold UTF-8 without NUL, nothing else
            try:
                value = value.decode("utf-8")
            except UnicodeDecodeError:
                return False
        if isinstance(value, str) and "\x00" in value:
            return False
        cast = "::jsonb" if column in self.JSONB else ""
        try:
            async with await psycopg.AsyncConnection.connect(
                self.conninfo, autocommit=True
            ) as conn:
                cur = await conn.execute(
                    f"UPDATE {self.table} SET {column} = %s{cast} WHERE id = %s", (value, job_id)
                )
                return cur.rowcount == 1
        except (
            psycopg.DataError,
            psycopg.IntegrityError,
            psycopg.ProgrammingError,
            psycopg.errors.ProgramLimitExceeded,
            psycopg.errors.StatementTooComplex,
        ):
            return False  # the schema refused it: nothing was written

    async def read(self, job_id: str, field: str) -> Any:
        import psycopg

        async with await psycopg.AsyncConnection.connect(self.conninfo) as conn:
            cur = await conn.execute(
                f"SELECT {_sql_name(field)} FROM {self.table} WHERE id = %s", (job_id,)
            )
            row = await cur.fetchone()
            return None if row is None else row[0]

    async def close(self) -> None:
        pass


class RedisRawStore:
    def __init__(self, url: str) -> None:
        import redis.asyncio as aioredis

        from conveyor.backends.redis.config import parse_redis_url
        from conveyor.backends.redis.keys import Keys

        driver_url, options = parse_redis_url(url)
        self.keys = Keys(options.get("prefix", "conveyor"))
        self.client = aioredis.Redis.from_url(driver_url)  # bytes in, bytes out

    async def write(self, job_id: str, field: str, value: RawValue) -> bool:
        key = self.keys.job(job_id)
        if not await self.client.exists(key):
            return False
        if value is None:
            await self.client.hdel(key, field)
        else:
            await self.client.hset(
                key, field, value if isinstance(value, (bytes, str)) else str(value)
            )
        return True

    async def read(self, job_id: str, field: str) -> Any:
        return await self.client.hget(self.keys.job(job_id), field)

    async def close(self) -> None:
        await self.client.aclose()


class MemoryRawStore:
    def __init__(self, url: str) -> None:
        from conveyor.backends.memory.registry import store_for

        self.store = store_for(url)

    async def write(self, job_id: str, field: str, value: RawValue) -> bool:
        from conveyor.backends.codec import COLUMNS

        row = self.store.rows.get(job_id)
        if row is None or field not in COLUMNS:
            return False
        with self.store.lock:
            row[field] = value
        return self.store.rewritten(job_id)  # filed again by what its fields now say

    async def read(self, job_id: str, field: str) -> Any:
        row = self.store.rows.get(job_id)
        return None if row is None else row.get(field)

    async def close(self) -> None:
        pass


def raw_store(backend_name: str, url: str) -> RawStore:
    scheme = urlsplit(url).scheme
    if backend_name == "sqlite" or scheme == "sqlite":
        return SqliteRawStore(url)
    if backend_name == "postgres" or scheme.startswith("postgres"):
        return PostgresRawStore(url)
    if backend_name == "redis" or scheme.startswith("redis"):
        return RedisRawStore(url)
    if backend_name == "memory" or scheme == "memory":
        return MemoryRawStore(url)
    raise LookupError(f"no raw writer for the {backend_name} backend")
