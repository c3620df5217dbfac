"""Redis killed (SIGKILL) and restarted on the same AOF directory while a producer
enqueues and a worker runs: no acknowledged job is lost, the worker reconnects
by itself, and an enqueue during the outage raises BackendUnavailable."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from redis_helpers import RedisServer, WorkerProcess, eventually, redis_server_binary
from worker_runner import build_app

from conveyor.backends.params import JobFilter
from conveyor.model.errors import BackendUnavailable
from conveyor.model.job import ACTIVE_STATES, JobState

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def _needs_redis_server() -> None:
    if redis_server_binary() is None:
        from backends_under_test import service_missing

        service_missing("redis-server is not on PATH")


@pytest.mark.parametrize("appendfsync", ["always", "everysec"])
async def test_restart_loses_no_acknowledged_job(appendfsync: str, tmp_path: Path) -> None:
    server = RedisServer(tmp_path / "redis", appendfsync=appendfsync)
    server.start()
    url = f"{server.url}?prefix=restart"
    app = build_app(url)
    record = app.get_task("record")
    acknowledged: list[str] = []
    refused = 0
    stop = asyncio.Event()

    async def produce() -> None:
        nonlocal refused
        n = 0
        while not stop.is_set():
            try:
                handle = await record.options(job_id=f"r-{n}").enqueue_async(n)
                acknowledged.append(handle.id)
            except BackendUnavailable:
                refused += 1
                await asyncio.sleep(0.01)
            n += 1
            await asyncio.sleep(0.001)

    worker = WorkerProcess(
        url,
        tmp_path / "worker.log",
        "--concurrency",
        "10",
        "--lease",
        "3",
        "--rescue",
        "0.5",
        "--poll",
        "0.2",
    )
    producer = asyncio.create_task(produce())
    try:
        await eventually(
            lambda: _has(app, JobState.COMPLETED, 100),
            timeout=30,
            what="jobs completed before the crash",
        )
        before_crash = len(acknowledged)
        server.kill()
        with pytest.raises(BackendUnavailable, match="unreachable"):
            await record.options(job_id="during-outage").enqueue_async(-1)
        await eventually(_later(lambda: refused > 0), timeout=10, what="producer refused")
        server.start()
        await eventually(
            _later(lambda: len(acknowledged) > before_crash + 100),
            timeout=30,
            what="enqueues acknowledged after the restart",
        )
        stop.set()
        await producer

        async def all_completed() -> bool:
            # Counted among the acknowledged ids: an enqueue refused to the producer may
            # still have been stored (its reply lost with the server), and that job's
            # completion must not stand in for an acknowledged one still running.
            done = JobFilter(ids=tuple(acknowledged), states=(JobState.COMPLETED,))
            return await app.admin.count(done) == len(acknowledged)

        await eventually(all_completed, timeout=60, what="every acknowledged job completed")
        worker.terminate()
        assert worker.wait() == 0, worker.output()
        jobs = await app.admin.list(JobFilter(ids=tuple(acknowledged)), limit=len(acknowledged))
        assert {job.id for job in jobs} == set(acknowledged)
        assert all(job.state is JobState.COMPLETED for job in jobs)
        assert await app.admin.count(JobFilter(states=tuple(ACTIVE_STATES))) == 0
        assert refused > 0
    finally:
        stop.set()
        with contextlib.suppress(Exception):
            await producer
        worker.kill()
        await app.aclose()
        server.stop()


async def _has(app: object, state: JobState, n: int) -> bool:
    return await app.admin.count(JobFilter(states=(state,))) >= n  # type: ignore[attr-defined]


def _later(check: Callable[[], object]) -> Callable[[], Awaitable[bool]]:
    async def run() -> bool:
        return bool(check())

    return run
