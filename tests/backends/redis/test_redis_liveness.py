"""The Redis liveness signal under faults: a live worker whose named connection is
killed, and a server restart, rescue nobody's jobs."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import redis.asyncio as aioredis
from redis_helpers import RedisServer, eventually

from conveyor import Conveyor
from conveyor.backends.redis.liveness import ClientToken
from conveyor.model.job import JobState
from conveyor.model.workers import WORKERS_NAMESPACE
from conveyor.worker import Worker, WorkerConfig
from conveyor.worker.liveness import announced_token

HOLDER = WorkerConfig(queues=("work",), poll_interval=0.05, lease=30)
RESCUER = WorkerConfig(queues=("other",), poll_interval=0.05, lease=30)
LOOKS = 4 * (RESCUER.liveness_interval + RESCUER.liveness_grace)  # seconds of several looks


@asynccontextmanager
async def running(app: Conveyor, config: WorkerConfig) -> AsyncIterator[Worker]:
    worker = Worker(app, config)
    task = asyncio.create_task(worker.run())
    try:
        yield worker
    finally:
        worker.stop()
        await asyncio.wait_for(task, 30)


async def token_of(app: Conveyor, worker: Worker) -> str | None:
    record = (await (await app.backend()).list_records(WORKERS_NAMESPACE)).get(worker.id)
    return None if record is None else announced_token(record)


async def job_state(app: Conveyor, job_id: str) -> tuple[JobState, int, int] | None:
    job = await (await app.backend()).get_job(job_id)
    return None if job is None else (job.state, job.attempt, len(job.errors))


async def test_a_live_worker_whose_named_connection_is_killed_keeps_its_job(redis_url: str) -> None:
    app = Conveyor(redis_url)
    finish = asyncio.Event()

    @app.task(name="hold", queue="work")
    async def hold() -> str:
        await finish.wait()
        return "done"

    raw = aioredis.Redis.from_url(redis_url.split("?")[0])
    try:
        handle = await hold.enqueue_async()
        async with running(app, HOLDER) as holder, running(app, RESCUER) as rescuer:
            await eventually(lambda: _is(app, handle.id, (JobState.RUNNING, 1, 0)), 10)
            await eventually(lambda: _has_token(app, rescuer), 10)
            before = ClientToken.parse(await token_of(app, holder) or "")
            assert before is not None
            assert await raw.execute_command("CLIENT", "KILL", "ID", before.client_id) == 1

            async def announced_again() -> bool:
                now = ClientToken.parse(await token_of(app, holder) or "")
                return now is not None and now.client_id != before.client_id

            await eventually(announced_again, 5)
            await asyncio.sleep(LOOKS)  # the rescuer looks several times meanwhile
            assert await job_state(app, handle.id) == (JobState.RUNNING, 1, 0)
            finish.set()
            await eventually(lambda: _is(app, handle.id, (JobState.COMPLETED, 1, 0)), 10)
        assert holder.counts["completed"] == 1 and holder.counts["stale"] == 0
    finally:
        await raw.aclose()
        await app.aclose()


@pytest.mark.slow
async def test_after_a_server_restart_nobody_is_taken_for_dead(private_redis: RedisServer) -> None:
    """Every connection ends with a restart: nobody's jobs are rescued for it (the
    run_id dates each token, and a worker that lost its connection says so as soon
    as it can write)."""
    app = Conveyor(private_redis.url)
    finish = asyncio.Event()

    @app.task(name="hold", queue="work")
    async def hold() -> str:
        await finish.wait()
        return "done"

    try:
        handle = await hold.enqueue_async()
        async with running(app, HOLDER) as holder, running(app, RESCUER) as rescuer:
            await eventually(lambda: _is(app, handle.id, (JobState.RUNNING, 1, 0)), 10)
            await eventually(lambda: _has_token(app, rescuer), 10)
            before = ClientToken.parse(await token_of(app, holder) or "")
            assert before is not None
            private_redis.stop()
            private_redis.start()

            async def new_run() -> bool:
                try:
                    now = ClientToken.parse(await token_of(app, holder) or "")
                except Exception:
                    return False
                return now is not None and now.run_id != before.run_id

            await eventually(new_run, 60, interval=0.1)
            await asyncio.sleep(LOOKS)
            assert await job_state(app, handle.id) == (JobState.RUNNING, 1, 0)
            finish.set()
            await eventually(lambda: _is(app, handle.id, (JobState.COMPLETED, 1, 0)), 30)
    finally:
        await app.aclose()


async def _is(app: Conveyor, job_id: str, expected: tuple[JobState, int, int]) -> bool:
    return await job_state(app, job_id) == expected


async def _has_token(app: Conveyor, worker: Worker) -> bool:
    return await token_of(app, worker) is not None
