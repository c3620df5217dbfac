"""Real worker processes sharing one Redis: every job runs exactly once, and a
SIGKILLed worker loses nothing (its leased jobs are rescued and run elsewhere)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from redis_helpers import WorkerProcess, eventually
from worker_runner import build_app, scratch_key

from conveyor import Conveyor
from conveyor.backends.params import JobFilter
from conveyor.model.job import ACTIVE_STATES, JobState

pytestmark = pytest.mark.slow
JOBS = 5000


async def enqueue_records(app: Conveyor, n: int) -> None:
    record = app.get_task("record")
    handles = await app.enqueue_many_async(
        record.options(job_id=f"rec-{i}").message(i) for i in range(n)
    )
    assert len({h.id for h in handles}) == n


async def count(app: Conveyor, *states: JobState) -> int:
    return await app.admin.count(JobFilter(states=states))


async def run_counts(url: str) -> dict[str, int]:
    client = aioredis.Redis.from_url(url.split("?")[0], decode_responses=True)
    try:
        # Ignored for mypy: decode_responses=True: str keys
        return {k: int(v) for k, v in (await client.hgetall(scratch_key(url, "runs"))).items()}  # type: ignore[misc]
    finally:
        await client.aclose()


async def test_four_workers_run_each_job_exactly_once(redis_url: str, tmp_path: Path) -> None:
    app = build_app(redis_url)
    try:
        await enqueue_records(app, JOBS)
        workers = [
            WorkerProcess(redis_url, tmp_path / f"worker{i}.log", "--concurrency", "20")
            for i in range(4)
        ]
        try:
            await eventually(
                lambda: _equals(count(app, JobState.COMPLETED), JOBS),
                timeout=90,
                what=f"{JOBS} completed jobs",
            )
        finally:
            for w in workers:
                w.terminate()
            codes = [w.wait() for w in workers]
        assert codes == [0, 0, 0, 0], [w.output() for w in workers]
        runs = await run_counts(redis_url)
        assert len(runs) == JOBS
        assert set(runs.values()) == {1}
        assert await count(app, *ACTIVE_STATES) == 0
        assert await count(app, JobState.COMPLETED) == JOBS
        assert await count(app, JobState.DEAD, JobState.CANCELLED) == 0
    finally:
        await app.aclose()


async def test_sigkill_of_one_worker_loses_nothing(redis_url: str, tmp_path: Path) -> None:
    app = build_app(redis_url)
    victim: WorkerProcess | None = None
    try:
        await enqueue_records(app, JOBS)
        common = ("--concurrency", "20", "--lease", "2", "--rescue", "0.5", "--sleep", "0.005")
        victim = WorkerProcess(redis_url, tmp_path / "victim.log", *common)
        # The victim starts alone so it surely holds leases when it dies.
        await eventually(
            lambda: _at_least(count(app, JobState.COMPLETED), 200),
            timeout=30,
            what="victim running jobs",
        )
        # Frozen, checked, then killed, so it surely holds leases when it dies (a
        # snapshot between its settling a batch and claiming the next can be 0). The
        # others start only after the check: every running job counted is the victim's.
        for _ in range(100):
            victim.freeze()
            if await count(app, JobState.RUNNING) > 0:
                break
            victim.freeze(False)
            await asyncio.sleep(0.01)  # pacing the retries, not synchronisation
        assert await count(app, JobState.RUNNING) > 0
        others = [WorkerProcess(redis_url, tmp_path / f"worker{i}.log", *common) for i in range(3)]
        try:
            victim.kill()
            assert victim.wait() == -9
            await eventually(
                lambda: _equals(count(app, JobState.COMPLETED), JOBS),
                timeout=90,
                what=f"{JOBS} completed jobs after a SIGKILL",
            )
        finally:
            for w in others:
                w.terminate()
            codes = [w.wait() for w in others]
        assert codes == [0, 0, 0], [w.output() for w in others]
        runs = await run_counts(redis_url)
        assert len(runs) == JOBS  # every job ran
        rerun = [n for n, times in runs.items() if times > 1]
        # Only jobs the victim held can have run twice: at most its concurrency.
        assert len(rerun) <= 20
        assert max(runs.values()) <= 2
        assert await count(app, *ACTIVE_STATES) == 0
        assert await count(app, JobState.COMPLETED) == JOBS
        # The victim's leased jobs (at most its concurrency) were rescued, each with
        # the crash counted as an attempt; those that had started are the reruns. By
        # its liveness signal (WorkerLost) while its record lasted, else by its lease.
        rescued = [
            job
            for error_type in ("WorkerLost", "LeaseExpired")
            for job in await app.admin.list(JobFilter(error_type=error_type), limit=100)
        ]
        assert 1 <= len(rescued) <= 20
        assert {f"rec-{n}" for n in rerun} <= {job.id for job in rescued}
        for job in rescued:
            assert job.state is JobState.COMPLETED and job.attempt == 2
    finally:
        if victim is not None:
            victim.kill()  # a no-op once it is dead; never leave it frozen behind
        await app.aclose()


async def _equals(value: object, expected: int) -> bool:
    return await value == expected  # type: ignore[misc]


async def _at_least(value: object, expected: int) -> bool:
    return await value >= expected  # type: ignore[misc]
