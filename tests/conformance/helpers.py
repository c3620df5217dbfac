"""Small builders shared by the conformance tests."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Awaitable, Callable
from typing import Any

from conveyor.backends.claiming import strict_claim
from conveyor.backends.contract import Backend
from conveyor.backends.params import Settlement
from conveyor.model.job import AttemptError, Job, JobState, NewJob

_ids = itertools.count(1)


def new_job(task: str = "tests.noop", queue: str = "default", **fields: Any) -> NewJob:
    fields.setdefault("id", f"job-{next(_ids):06d}-{time.monotonic_ns()}")
    fields.setdefault("payload", '{"args":[],"kwargs":{}}')
    return NewJob(task=task, queue=queue, **fields)


def error(attempt: int, type_: str = "ConnectionError", message: str = "boom") -> AttemptError:
    return AttemptError(
        attempt=attempt,
        at=0.0,
        type=type_,
        message=message,
        traceback="Traceback ...",
        worker_id="w1",
        host="h1",
        version="0.1.0",
    )


async def claim_one(
    backend: Backend, queue: str = "default", lease: float = 30.0, worker: str = "w1"
) -> Job:
    jobs = await backend.fetch_jobs(strict_claim([queue], 1, worker, lease))
    assert len(jobs) == 1, f"expected one claimable job in {queue}, got {len(jobs)}"
    return jobs[0]


def complete(job: Job, result: str = "null") -> Settlement:
    return Settlement(job.id, job.lease_token, JobState.COMPLETED, result=result)


async def state_of(backend: Backend, job_id: str) -> JobState:
    job = await backend.get_job(job_id)
    assert job is not None, f"job {job_id} is gone"
    return job.state


async def eventually(
    check: Callable[[], Awaitable[bool]], timeout: float = 10.0, interval: float = 0.01
) -> None:
    """Poll `check` until it is true or fail after `timeout` seconds (real time)."""
    deadline = time.monotonic() + timeout
    while True:
        if await check():
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        await asyncio.sleep(interval)


class RunningWorker:
    """`async with RunningWorker(app, config) as worker:` runs a worker in the background."""

    def __init__(self, app: Any, config: Any) -> None:
        from conveyor.worker import Worker

        self.worker = Worker(app, config)
        self.task: asyncio.Task[Any] | None = None
        self.status: Any = None

    async def __aenter__(self) -> Any:
        self.task = asyncio.create_task(self.worker.run())
        return self.worker

    async def stop(self, cold: bool = False) -> Any:
        assert self.task is not None
        if not self.task.done():
            self.worker.stop()
            if cold:
                self.worker.stop()
        self.status = await asyncio.wait_for(self.task, 30)
        return self.status

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


async def wait_finished(app: Any, ids: list[str], timeout: float = 10.0) -> dict[str, Job]:
    """Poll until every job is in a terminal state; return them."""
    found: dict[str, Job] = {}

    async def all_done() -> bool:
        for job_id in ids:
            job = await app.admin.get(job_id)
            if job is None or not job.is_finished:
                return False
            found[job_id] = job
        return True

    await eventually(all_done, timeout)
    return found


async def finish_waiter_parked(backend: Any, job_id: str) -> bool:
    """Whether a `wait_for_finish(job_id)` of this backend has counted itself in, looked,
    and now waits for the wake-up: each backend's own sign of it (private state, read
    only by this test helper), so that a test settles the job only then and proves the
    wake-up, not the look, ended the wait."""
    kind = type(backend).__name__
    if kind == "MemoryBackend":
        from conveyor.backends.memory.registry import store_for

        return bool(store_for(backend.url).finished._waiters)
    if kind == "SqliteBackend":
        listener = backend._lifecycle._finish_listener
        return listener is not None and bool(listener.event._waiters)
    if kind == "PostgresBackend":
        listener = backend._state.done_listener
        return listener is not None and bool(listener.event._waiters)
    if kind == "RedisBackend":  # counted in, then blocked in BLPOP (a round trip after)
        if not await backend.client.zscore(f"{backend.keys.base}watching", job_id):
            return False
        return any(
            c.get("cmd") == "blpop" and "b" in c.get("flags", "")
            for c in await backend.client.client_list()
        )
    raise AssertionError(f"finish_waiter_parked does not know {kind}")
