"""Connection faults: terminated connections, a server restart, enqueue during an
outage. Real servers only; the worker must recover by itself and lose nothing."""

from __future__ import annotations

import asyncio
import time
from collections import Counter

import psycopg
import pytest
from pg_helpers import RunningWorker, eventually, terminate, wait_finished
from pg_server import PrivateServer

from conveyor import Conveyor
from conveyor.backends.params import JobFilter
from conveyor.model.errors import BackendUnavailable
from conveyor.model.job import JobState
from conveyor.worker import WorkerConfig

CONFIG = WorkerConfig(concurrency=10, poll_interval=0.1, rescue_interval=0.5, lease=10)


async def test_worker_survives_pg_terminate_backend(
    pg_app: Conveyor, schema: str, admin_conn: psycopg.Connection
) -> None:
    runs: Counter[int] = Counter()

    @pg_app.task(name="work")
    async def work(n: int) -> int:
        runs[n] += 1
        await asyncio.sleep(0.005)
        return n

    handles = await pg_app.enqueue_many_async([work.message(n) for n in range(300)])
    backend = await pg_app.backend()

    async def completed_at_least(n: int) -> bool:
        return await backend.count_jobs(JobFilter(states=(JobState.COMPLETED,))) >= n

    async with RunningWorker(pg_app, CONFIG) as worker:
        await eventually(lambda: completed_at_least(50), what="50 jobs completed")
        assert terminate(admin_conn, schema) >= 1  # the pool's connections (and the listener's)
        # The producer's pool lost its connections too: enqueue still works (fresh one).
        late = await work.enqueue_async(1000)
        await eventually(lambda: completed_at_least(150), what="150 jobs completed")
        assert terminate(admin_conn, schema) >= 1
        jobs = await wait_finished(pg_app, [h.id for h in handles] + [late.id], timeout=60)
    assert all(job.state is JobState.COMPLETED for job in jobs.values())
    assert runs == Counter({n: 1 for n in [*range(300), 1000]})
    assert worker.counts["completed"] == 301


@pytest.mark.slow
async def test_restart_outage_enqueue_fails_clearly_and_worker_recovers(
    private_server: PrivateServer,
) -> None:
    url = f"{private_server.url}?schema=conveyor&timeout=1&connect_timeout=2"
    app = Conveyor(url)
    runs: Counter[int] = Counter()

    @app.task(name="work")
    async def work(n: int) -> int:
        runs[n] += 1
        await asyncio.sleep(0.01)
        return n

    try:
        first = await app.enqueue_many_async([work.message(n) for n in range(100)])
        async with RunningWorker(app, CONFIG) as worker:
            await wait_finished(app, [h.id for h in first[:20]])
            private_server.stop(mode="immediate")  # a crash: no goodbye to clients

            started = time.monotonic()
            with pytest.raises(BackendUnavailable, match="unavailable.*retry") as info:
                await work.enqueue_async(999)
            assert time.monotonic() - started < 10
            assert "postgres@127.0.0.1" in str(info.value)

            private_server.start()
            second: list = []

            async def enqueue_again() -> bool:
                try:
                    second.extend(
                        await app.enqueue_many_async([work.message(n) for n in range(100, 200)])
                    )
                    return True
                except BackendUnavailable:
                    return False

            await eventually(enqueue_again, timeout=60, interval=0.5, what="enqueue after restart")
            jobs = await wait_finished(app, [h.id for h in first + second], timeout=90)
        assert all(job.state is JobState.COMPLETED for job in jobs.values())
        # At least once: a job running at the crash may have run again after it.
        assert set(runs) == set(range(200))
        assert sum(runs.values()) - 200 <= CONFIG.concurrency
        assert worker.counts["completed"] >= 200 - CONFIG.concurrency
    finally:
        await app.aclose()
        app.close()
