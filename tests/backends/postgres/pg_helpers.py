"""Polling with deadlines (never sleep as synchronisation) and an in-process worker."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg

from conveyor import Conveyor
from conveyor.model.errors import BackendUnavailable
from conveyor.model.job import Job
from conveyor.worker import ExitStatus, Worker, WorkerConfig


async def eventually(
    check: Callable[[], Awaitable[bool]],
    timeout: float = 20.0,
    interval: float = 0.02,
    what: str = "condition",
) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not met within {timeout}s")
        await asyncio.sleep(interval)


async def wait_finished(app: Conveyor, ids: list[str], timeout: float = 20.0) -> dict[str, Job]:
    found: dict[str, Job] = {}

    async def done() -> bool:
        for job_id in ids:
            if job_id in found:
                continue
            try:
                job = await app.admin.get(job_id)
            except BackendUnavailable:
                # Right after a server restart the pool may still be in its reconnect
                # backoff while enqueues (held connection) already work: not yet.
                return False
            if job is None or not job.is_finished:
                return False
            found[job_id] = job
        return True

    await eventually(done, timeout, what=f"{len(ids)} jobs finished")
    return found


class RunningWorker:
    """`async with RunningWorker(app, config) as worker:` - a worker in this event loop."""

    def __init__(self, app: Conveyor, config: WorkerConfig) -> None:
        self.worker = Worker(app, config)
        self.task: asyncio.Task[ExitStatus] | None = None

    async def __aenter__(self) -> Worker:
        self.task = asyncio.create_task(self.worker.run())
        return self.worker

    async def __aexit__(self, *exc: Any) -> None:
        assert self.task is not None
        if not self.task.done():
            self.worker.stop()
        await asyncio.wait_for(self.task, 30)


def terminate(admin_conn: psycopg.Connection[tuple[object, ...]], application_name: str) -> int:
    """Kill every server connection of the app under test; return how many."""
    rows = admin_conn.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        "WHERE application_name = %s AND pid <> pg_backend_pid()",
        (application_name,),
    ).fetchall()
    return sum(1 for (killed,) in rows if killed)
