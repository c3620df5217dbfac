"""LISTEN/NOTIFY wakes a waiting worker long before its poll interval, also after
its listening connection was killed."""

from __future__ import annotations

import time

import psycopg
from pg_helpers import eventually, terminate

from conveyor.backends.params import JobWait
from conveyor.backends.postgres.backend import PostgresBackend
from conveyor.model.job import NewJob

POLL = 30.0  # what a worker would wait without a wake-up


async def test_enqueue_wakes_a_waiting_worker_before_and_after_listener_loss(
    pg_url: str, schema: str, admin_conn: psycopg.Connection
) -> None:
    worker, producer = PostgresBackend(pg_url), PostgresBackend(pg_url)
    try:
        await worker.migrate()

        async def listening(connects: int) -> bool:
            listener = worker._state.wakeup_listener
            return (
                listener is not None
                and listener.connects == connects
                and listener.connected.is_set()
            )

        async def woken_by_enqueue(job_id: str) -> float:
            await worker.wait_for_jobs(
                JobWait(queues=["q"], timeout=0)
            )  # consume any pending hint (e.g. reconnect)
            started = time.monotonic()
            await producer.enqueue_jobs([NewJob(id=job_id, task="t", queue="q", payload="{}")])
            await worker.wait_for_jobs(JobWait(queues=["q"], timeout=POLL))
            return time.monotonic() - started

        await worker.wait_for_jobs(JobWait(queues=["q"], timeout=0))  # starts the listener
        await eventually(lambda: listening(1), what="LISTEN in place")
        assert await woken_by_enqueue("a") < 5

        assert terminate(admin_conn, schema) >= 1  # the listening connection among them
        await eventually(lambda: listening(2), what="LISTEN back after the kill")
        assert await woken_by_enqueue("b") < 5
    finally:
        await worker.close()
        await producer.close()


async def test_a_dependant_its_dead_parent_cancels_wakes_its_waiter(
    pg_url: str, schema: str
) -> None:
    """Cancelled inside release_dependants, not by the settle's own rows: its waiter
    gets a NOTIFY too, instead of waiting out its poll (migration 9)."""
    import asyncio

    from conformance.helpers import error

    from conveyor.backends.claiming import strict_claim
    from conveyor.backends.params import FinishWait, RecordKey, Settlement
    from conveyor.model.job import JobState

    backend = PostgresBackend(pg_url)
    try:
        await backend.migrate()
        await backend.enqueue_jobs(
            [
                NewJob(id="a", task="t", queue="q", payload="{}", max_attempts=1),
                NewJob(id="b", task="t", queue="q", payload="{}", depends_on=("a",)),
            ]
        )
        [a] = await backend.fetch_jobs(strict_claim(["q"], 5, "w", 30.0))
        waiter = asyncio.create_task(backend.wait_for_finish(FinishWait(job_id="b", timeout=POLL)))

        async def counted_in() -> bool:
            listener = backend._state.done_listener
            return (
                listener is not None
                and listener.connected.is_set()
                and await backend.get_record(RecordKey(namespace="finish_waiters", key="b"))
                is not None
            )

        await eventually(counted_in, what="the waiter listening and counted in")
        started = time.monotonic()
        await backend.settle_jobs([Settlement(a.id, a.lease_token, JobState.DEAD, error=error(1))])
        await asyncio.wait_for(waiter, POLL)
        assert time.monotonic() - started < 5  # woken, not its 30 s poll
        b = await backend.get_job("b")
        assert b is not None and b.state is JobState.CANCELLED
    finally:
        await backend.close()
