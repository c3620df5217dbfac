"""The enqueue connection: one held connection beside the pool
(backends/postgres/held_connection.py). A terminated or cancelled held connection never
loses, doubles or misreports a job."""

from __future__ import annotations

import asyncio

import psycopg

from conveyor import Conveyor
from conveyor.backends.params import JobFilter, JobPage
from conveyor.backends.postgres.backend import PostgresBackend


def app_with_task(url: str) -> tuple[Conveyor, object]:
    app = Conveyor(url)

    @app.task(name="noop")
    async def noop(n: int) -> None: ...

    return app, noop


async def test_a_terminated_lane_connection_is_replaced_and_nothing_is_lost(
    pg_url: str, schema: str, admin_conn: psycopg.Connection
) -> None:
    app, noop = app_with_task(pg_url)
    try:
        first = await noop.enqueue_async(0)  # type: ignore[attr-defined]
        killed = admin_conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE application_name = %s AND pid <> pg_backend_pid()",
            (schema,),
        ).fetchall()
        assert len(killed) >= 2  # the lane's connection and the pool's
        handles = [await noop.enqueue_async(n) for n in range(1, 21)]  # type: ignore[attr-defined]
        backend = await app.backend()
        stored = await backend.list_jobs(JobPage(where=JobFilter(), limit=100))
        assert sorted(j.id for j in stored) == sorted([first.id, *(h.id for h in handles)])
    finally:
        await app.aclose()


async def test_cancelled_enqueues_leave_the_lane_usable(pg_url: str) -> None:
    app, noop = app_with_task(pg_url)
    try:
        backend = await app.backend()
        assert isinstance(backend, PostgresBackend)
        await noop.enqueue_async(0)  # type: ignore[attr-defined]
        cancelled = 0
        for n in range(1, 31):
            task = asyncio.ensure_future(noop.enqueue_async(n))  # type: ignore[attr-defined]
            for _ in range(n % 5):
                await asyncio.sleep(0)  # cancel at different points of the statement
            cancelled += task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            handle = await noop.enqueue_async(100 + n)  # type: ignore[attr-defined]
            job = await backend.get_job(handle.id)
            assert job is not None and job.payload == f'{{"args":[{100 + n}],"kwargs":{{}}}}'
        assert cancelled > 0
        total = await backend.count_jobs(JobFilter())
        assert 31 <= total <= 61  # 1 + 30 checked, plus the cancelled ones that got through
    finally:
        await app.aclose()


async def test_concurrent_enqueues_share_the_lane_and_the_pool(pg_url: str) -> None:
    app, noop = app_with_task(pg_url)
    try:
        handles = await asyncio.gather(*(noop.enqueue_async(n) for n in range(100)))  # type: ignore[attr-defined]
        assert len({h.id for h in handles}) == 100
        backend = await app.backend()
        assert await backend.count_jobs(JobFilter()) == 100
    finally:
        await app.aclose()
