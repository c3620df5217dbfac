"""The PostgreSQL liveness signal under faults: a live worker whose liveness session
is killed, and a server restart, rescue nobody's jobs."""

from __future__ import annotations

import asyncio

import psycopg
import pytest
from pg_helpers import RunningWorker, eventually
from pg_server import PrivateServer

from conveyor import Conveyor
from conveyor.backends.postgres.liveness import LockToken
from conveyor.model.job import JobState
from conveyor.model.workers import WORKERS_NAMESPACE
from conveyor.worker import Worker, WorkerConfig
from conveyor.worker.liveness import announced_token

HOLDER = WorkerConfig(queues=("work",), poll_interval=0.05, lease=30)
RESCUER = WorkerConfig(queues=("other",), poll_interval=0.05, lease=30)


def lock_pid(admin: psycopg.Connection[tuple[object, ...]], token: str) -> int | None:
    parsed = LockToken.parse(token)
    assert parsed is not None
    row = admin.execute(
        "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 2 "
        "AND classid = %s::oid AND objid = %s::oid AND granted",
        (parsed.key1, parsed.key2),
    ).fetchone()
    return None if row is None else int(row[0])  # type: ignore[call-overload]


async def token_of(app: Conveyor, worker: Worker) -> str | None:
    record = (await (await app.backend()).list_records(WORKERS_NAMESPACE)).get(worker.id)
    return None if record is None else announced_token(record)


async def test_a_live_worker_whose_liveness_session_is_killed_keeps_its_job(
    pg_app: Conveyor, admin_conn: psycopg.Connection[tuple[object, ...]]
) -> None:
    finish = asyncio.Event()

    @pg_app.task(name="hold", queue="work")
    async def hold() -> str:
        await finish.wait()
        return "done"

    handle = await hold.enqueue_async()
    backend = await pg_app.backend()
    async with RunningWorker(pg_app, HOLDER) as holder, RunningWorker(pg_app, RESCUER) as rescuer:

        async def running() -> bool:
            job = await backend.get_job(handle.id)
            return job is not None and job.state is JobState.RUNNING

        await eventually(running, timeout=10)
        await eventually(lambda: _has_token(pg_app, rescuer), timeout=10)
        before = await token_of(pg_app, holder)
        assert before is not None
        pid = lock_pid(admin_conn, before)
        assert pid is not None
        admin_conn.execute(
            "SELECT pg_terminate_backend(%s)", (pid,)
        )  # a blip, as the server sees it

        async def announced_again() -> bool:
            token = await token_of(pg_app, holder)
            return token is not None and lock_pid(admin_conn, token) not in (None, pid)

        await eventually(announced_again, timeout=5)
        # Several looks of the rescuer (every 0.25 s, grace 0.25 s) find it alive.
        await asyncio.sleep(4 * (RESCUER.liveness_interval + RESCUER.liveness_grace))
        job = await backend.get_job(handle.id)
        assert job is not None and job.state is JobState.RUNNING and job.errors == ()
        finish.set()
        await eventually(lambda: _completed(pg_app, handle.id), timeout=10)
    job = await backend.get_job(handle.id)
    assert job is not None and job.attempt == 1 and job.errors == () and job.result_value == "done"
    assert holder.counts["completed"] == 1 and holder.counts["stale"] == 0


@pytest.mark.slow
async def test_after_a_server_restart_nobody_is_taken_for_dead(
    private_server: PrivateServer,
) -> None:
    """Every session ends with a restart, live workers' too: nobody's jobs are rescued
    for it (a lock taken before the restart is not judged after it, and a worker that
    lost its lock says so as soon as it can write)."""
    app = Conveyor(f"{private_server.url}?schema=conveyor&timeout=1&connect_timeout=2")
    finish = asyncio.Event()

    @app.task(name="hold", queue="work")
    async def hold() -> str:
        await finish.wait()
        return "done"

    try:
        handle = await hold.enqueue_async()
        backend = await app.backend()
        async with RunningWorker(app, HOLDER) as holder, RunningWorker(app, RESCUER) as rescuer:
            await eventually(lambda: _running(app, handle.id), timeout=10)
            await eventually(lambda: _has_token(app, rescuer), timeout=10)
            before = await token_of(app, holder)
            assert before is not None
            private_server.stop(mode="immediate")
            private_server.start()

            async def new_epoch() -> bool:
                try:
                    token = await token_of(app, holder)
                except Exception:
                    return False
                parsed, old = LockToken.parse(token or ""), LockToken.parse(before)
                return parsed is not None and old is not None and parsed.epoch != old.epoch

            await eventually(new_epoch, timeout=60, interval=0.1)
            await asyncio.sleep(4 * (RESCUER.liveness_interval + RESCUER.liveness_grace))
            job = await backend.get_job(handle.id)
            assert job is not None and job.state is JobState.RUNNING and job.errors == ()
            finish.set()
            await eventually(lambda: _completed(app, handle.id), timeout=30)
        job = await backend.get_job(handle.id)
        assert job is not None and job.attempt == 1 and job.errors == ()
    finally:
        await app.aclose()


async def _has_token(app: Conveyor, worker: Worker) -> bool:
    return await token_of(app, worker) is not None


async def _running(app: Conveyor, job_id: str) -> bool:
    job = await (await app.backend()).get_job(job_id)
    return job is not None and job.state is JobState.RUNNING


async def _completed(app: Conveyor, job_id: str) -> bool:
    job = await (await app.backend()).get_job(job_id)
    return job is not None and job.state is JobState.COMPLETED
