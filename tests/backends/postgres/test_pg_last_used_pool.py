"""The pools hand out the connection they got back last (backends/postgres/last_used_pool.py),
and never keep a broken one or one inside a transaction aside."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import psycopg
import pytest
from backends_under_test import POSTGRES_URL
from pg_helpers import terminate

from conveyor import Conveyor
from conveyor.backends.params import JobFilter
from conveyor.backends.postgres import last_used_pool
from conveyor.backends.postgres.last_used_pool import (
    AsyncLastUsedConnectionPool,
    LastUsedConnectionPool,
)


@pytest.fixture
def pool(
    admin_conn: psycopg.Connection,  # skips without a server
) -> Iterator[LastUsedConnectionPool]:
    pool = LastUsedConnectionPool(
        POSTGRES_URL, kwargs={"autocommit": True}, min_size=2, max_size=3, timeout=5, open=True
    )
    pool.wait()
    yield pool
    pool.close()


def server_pid(conn: psycopg.Connection) -> int:
    return conn.info.backend_pid


def test_one_caller_gets_the_same_connection_every_time(pool: LastUsedConnectionPool) -> None:
    pids = []
    for _ in range(5):
        conn = pool.getconn()
        pids.append(server_pid(conn))
        conn.execute("SELECT 1")
        pool.putconn(conn)
    assert len(set(pids)) == 1  # psycopg_pool alone alternates between its 2 connections


def test_concurrent_callers_get_different_connections(pool: LastUsedConnectionPool) -> None:
    first = pool.getconn()
    second = pool.getconn()  # while the first is out: from the pool
    assert server_pid(first) != server_pid(second)
    pool.putconn(first)
    pool.putconn(second)  # one waits aside already: this one goes back into the pool
    assert pool.get_stats()["pool_available"] == 1
    assert server_pid(pool.getconn()) == server_pid(first)


def test_a_connection_in_a_transaction_or_broken_goes_back_to_the_pool(
    pool: LastUsedConnectionPool, admin_conn: psycopg.Connection
) -> None:
    conn = pool.getconn()
    conn.execute("BEGIN")
    pool.putconn(conn)  # the pool rolls it back
    again = pool.getconn()
    assert again.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    admin_conn.execute("SELECT pg_terminate_backend(%s)", (server_pid(again),))
    with pytest.raises(psycopg.OperationalError):
        again.execute("SELECT 1")
    assert again.broken
    pool.putconn(again)  # discarded, not kept aside
    fresh = pool.getconn()
    assert not fresh.broken and fresh is not again
    assert fresh.execute("SELECT 1").fetchone() == (1,)
    pool.putconn(fresh)


def test_the_connection_aside_rejoins_the_pool_every_rotate_seconds(
    pool: LastUsedConnectionPool, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = [1000.0]
    monkeypatch.setattr(last_used_pool.time, "monotonic", lambda: now[0])
    pool._aside._rotate_at = now[0] + last_used_pool.ROTATE_SECONDS
    conn = pool.getconn()
    pool.putconn(conn)
    assert pool.get_stats()["pool_available"] == 1  # aside, not in the pool's queue
    now[0] += last_used_pool.ROTATE_SECONDS
    assert pool.getconn() is conn
    pool.putconn(conn)  # time to rotate: into the pool, where its lifetime is checked
    assert pool.get_stats()["pool_available"] == 2
    pool.putconn(pool.getconn())  # then the next one waits aside for a minute again
    assert pool.get_stats()["pool_available"] == 1


def test_close_closes_the_connection_aside(pool: LastUsedConnectionPool) -> None:
    conn = pool.getconn()
    pool.putconn(conn)
    pool.close()
    assert conn.closed


def test_threads_enqueueing_at_once_each_store_every_job_once(pg_url: str, admin_conn) -> None:
    app = Conveyor(pg_url)

    @app.task(name="ship")
    def ship(n: int) -> None: ...

    try:
        ship.enqueue(-1)
        killed = terminate(admin_conn, pg_url.rsplit("application_name=", 1)[1])
        assert killed >= 1  # the connection waiting aside is dead: the next call retries
        ids: list[str] = []
        errors: list[BaseException] = []

        def produce(start: int) -> None:
            try:
                ids.extend(ship.enqueue(n).id for n in range(start, start + 50))
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=produce, args=(k * 50,)) for k in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert errors == []
        assert len(ids) == len(set(ids)) == 200
        assert app.jobs.count(JobFilter()) == 201
    finally:
        app.close()


async def test_the_async_pool_hands_out_its_last_connection_and_drops_a_broken_one(
    admin_conn: psycopg.Connection,
) -> None:
    pool = AsyncLastUsedConnectionPool(
        POSTGRES_URL, kwargs={"autocommit": True}, min_size=2, max_size=3, timeout=5, open=False
    )
    await pool.open(wait=True)
    try:
        pids = []
        for _ in range(4):
            async with pool.connection() as conn:
                pids.append(conn.info.backend_pid)
                await conn.execute("SELECT 1")
        assert len(set(pids)) == 1
        conn = await pool.getconn()
        admin_conn.execute("SELECT pg_terminate_backend(%s)", (conn.info.backend_pid,))
        with pytest.raises(psycopg.OperationalError):
            await conn.execute("SELECT 1")
        await pool.putconn(conn)  # broken: discarded, not kept aside
        fresh = await pool.getconn()
        assert fresh is not conn and not fresh.broken
        assert await (await fresh.execute("SELECT 1")).fetchone() == (1,)
        await pool.putconn(fresh)
    finally:
        await pool.close()
    assert fresh.closed  # the one kept aside is closed with the pool
