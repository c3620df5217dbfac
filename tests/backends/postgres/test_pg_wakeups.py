"""LISTEN/NOTIFY wakes a waiting worker long before its poll interval, also after
its listening connection was killed."""

from __future__ import annotations

import time

import psycopg

from conveyor.backends.postgres.backend import PostgresBackend
from conveyor.job import NewJob
from pg_helpers import eventually, terminate

POLL = 30.0  # what a worker would wait without a wake-up


async def test_enqueue_wakes_a_waiting_worker_before_and_after_listener_loss(
    pg_url: str, schema: str, admin_conn: psycopg.Connection
) -> None:
    worker, producer = PostgresBackend(pg_url), PostgresBackend(pg_url)
    try:
        await worker.migrate()

        async def listening(connects: int) -> bool:
            listener = worker._listener
            return listener is not None and listener.connects == connects \
                and listener.connected.is_set()

        async def woken_by_enqueue(job_id: str) -> float:
            await worker.wait_for_jobs(["q"], 0)  # consume any pending hint (e.g. reconnect)
            started = time.monotonic()
            await producer.enqueue_jobs([NewJob(id=job_id, task="t", queue="q", payload="{}")])
            await worker.wait_for_jobs(["q"], POLL)
            return time.monotonic() - started

        await worker.wait_for_jobs(["q"], 0)  # starts the listener
        await eventually(lambda: listening(1), what="LISTEN in place")
        assert await woken_by_enqueue("a") < 5

        assert terminate(admin_conn, schema) >= 1  # the listening connection among them
        await eventually(lambda: listening(2), what="LISTEN back after the kill")
        assert await woken_by_enqueue("b") < 5
    finally:
        await worker.close()
        await producer.close()
