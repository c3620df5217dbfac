"""Dedup under concurrent enqueues from separate connections (as from separate
processes): one job per id and per live unique_key, whoever wins."""

from __future__ import annotations

import asyncio

import psycopg

from conveyor.backends.postgres.backend import PostgresBackend
from conveyor.model.job import NewJob

PAYLOAD = '{"args":[],"kwargs":{}}'


async def _backends(pg_url: str, n: int) -> list[PostgresBackend]:
    backends = [PostgresBackend(pg_url) for _ in range(n)]
    await backends[0].migrate()
    return backends


async def test_concurrent_enqueues_of_one_unique_key_make_one_job(
    pg_url: str, schema: str, admin_conn: psycopg.Connection
) -> None:
    backends = await _backends(pg_url, 8)
    try:
        for round_ in range(10):
            jobs = [
                NewJob(
                    id=f"r{round_}-{i}",
                    task="t",
                    queue="q",
                    payload=PAYLOAD,
                    unique_key=f"key-{round_}",
                )
                for i in range(8)
            ]
            results = await asyncio.gather(
                *(b.enqueue_jobs([j]) for b, j in zip(backends, jobs, strict=True))
            )
            winners = {r[0].id for r in results}
            assert len(winners) == 1, winners
            assert admin_conn.execute(
                f'SELECT count(*) FROM "{schema}".jobs WHERE unique_key = %s', (f"key-{round_}",)
            ).fetchone() == (1,)
    finally:
        await asyncio.gather(*(b.close() for b in backends))


async def test_concurrent_enqueues_of_one_id_make_one_job(pg_url: str) -> None:
    backends = await _backends(pg_url, 8)
    try:
        for round_ in range(10):
            job = NewJob(id=f"same-{round_}", task="t", queue="q", payload=PAYLOAD)
            results = await asyncio.gather(*(b.enqueue_jobs([job]) for b in backends))
            assert {r[0].id for r in results} == {job.id}
            assert len({r[0].created_at for r in results}) == 1  # all saw the one row
    finally:
        await asyncio.gather(*(b.close() for b in backends))
