"""What a pool supervisor writes for the running jobs of a child that died, on every
backend: found by the child's worker id, fenced by each job's lease token."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from helpers import claim_one, complete, new_job

from conveyor import Conveyor
from conveyor.backends.claiming import strict_claim
from conveyor.backends.contract import Backend
from conveyor.backends.params import JobFilter
from conveyor.model.job import JobState
from conveyor.worker import WorkerConfig
from conveyor.worker.pool.config import PoolConfig
from conveyor.worker.pool.supervisor import Supervisor, _Child
from conveyor.worker.rescue import rescue_expired


def dead_child(worker_id: str) -> Any:
    process = SimpleNamespace(pid=4242)
    return _Child(
        slot=0,
        worker_id=worker_id,
        process=process,  # type: ignore[arg-type]  # a stand-in for the process
        conn=None,  # type: ignore[arg-type]
        started_at=0.0,
    )


async def test_a_crashed_childs_jobs_come_back_using_the_attempt(
    app: Conveyor, backend: Backend
) -> None:
    await backend.enqueue_jobs(
        [new_job(id="a"), new_job(id="b", max_attempts=1), new_job(id="c"), new_job(id="d")]
    )
    a = await claim_one(backend, worker="child-1")
    b = await claim_one(backend, worker="child-1")
    c = await claim_one(backend, worker="child-1")
    other = await claim_one(backend, worker="child-2")  # a live sibling's job
    assert (a.id, b.id, c.id, other.id) == ("a", "b", "c", "d")
    await backend.settle_jobs([complete(c)])  # settled just before the crash
    supervisor = Supervisor(app, "unused:app", WorkerConfig(), PoolConfig(processes=1))
    released = await supervisor._release_once(
        dead_child("child-1"), charge=True, how="killed by SIGKILL"
    )
    assert sorted(released) == ["a", "b"]
    job_a, job_b = await backend.get_job("a"), await backend.get_job("b")
    assert job_a is not None and job_b is not None
    assert job_a.state is JobState.AVAILABLE and job_a.run_at == a.run_at  # its old place in line
    assert [(e.attempt, e.type) for e in job_a.errors] == [(1, "WorkerLost")]
    assert "killed by SIGKILL" in job_a.errors[0].message
    assert job_b.state is JobState.DEAD  # out of attempts: a job that kills its process ends
    assert (await backend.get_job("c")).state is JobState.COMPLETED  # type: ignore[union-attr]
    assert (await backend.get_job("d")).state is JobState.RUNNING  # type: ignore[union-attr]
    # Due at once: the next claim gets it back, as attempt 2.
    again = await claim_one(backend, worker="child-3")
    assert again.id == "a" and again.attempt == 2


async def test_jobs_of_a_child_the_supervisor_killed_come_back_without_using_the_attempt(
    app: Conveyor, backend: Backend
) -> None:
    await backend.enqueue_jobs([new_job(id="a")])
    await claim_one(backend, worker="child-1")
    supervisor = Supervisor(app, "unused:app", WorkerConfig(), PoolConfig(processes=1))
    assert await supervisor._release_once(dead_child("child-1"), charge=False, how="x") == ["a"]
    job = await backend.get_job("a")
    assert (
        job is not None and job.state is JobState.AVAILABLE and job.attempt == 0 and not job.errors
    )


async def test_a_job_claimed_again_meanwhile_is_left_alone(app: Conveyor, backend: Backend) -> None:
    await backend.enqueue_jobs([new_job(id="a")])
    first = await claim_one(backend, worker="child-1", lease=0.001)
    app.clock.advance(1)  # type: ignore[attr-defined]
    assert await rescue_expired(backend, backend.clock()) == ["a"]
    second = await claim_one(backend, worker="child-2")
    assert second.lease_token != first.lease_token
    supervisor = Supervisor(app, "unused:app", WorkerConfig(), PoolConfig(processes=1))
    assert await supervisor._release_once(dead_child("child-1"), charge=True, how="x") == []
    job = await backend.get_job("a")
    assert job is not None and job.state is JobState.RUNNING and job.worker_id == "child-2"


async def test_every_job_of_a_dead_child_comes_back_while_its_siblings_settle(
    app: Conveyor, backend: Backend
) -> None:
    """Found by worker id, not paged by offset: siblings settling their own jobs at the
    same time (which shifts every offset) cannot hide an orphan from the release."""
    await backend.enqueue_jobs([new_job(id=f"j{i:04d}") for i in range(1500)])
    orphans = await backend.fetch_jobs(strict_claim(["default"], 1000, "child-1", 60))
    siblings = await backend.fetch_jobs(strict_claim(["default"], 500, "child-2", 60))
    assert len(orphans) == 1000 and len(siblings) == 500
    supervisor = Supervisor(app, "unused:app", WorkerConfig(), PoolConfig(processes=1))

    async def sibling_settles() -> None:
        for start in range(0, 500, 50):
            await backend.settle_jobs([complete(j) for j in siblings[start : start + 50]])

    released, _ = await asyncio.gather(
        supervisor._release_once(dead_child("child-1"), charge=True, how="killed by SIGKILL"),
        sibling_settles(),
    )
    assert sorted(released) == sorted(j.id for j in orphans)
    assert await backend.count_jobs(JobFilter(states=(JobState.AVAILABLE,))) == 1000
    assert await backend.count_jobs(JobFilter(states=(JobState.COMPLETED,))) == 500
    assert await backend.count_jobs(JobFilter(states=(JobState.RUNNING,))) == 0
