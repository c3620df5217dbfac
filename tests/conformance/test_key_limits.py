"""A concurrency key's set limit (FlowState, what an adaptive task's controller writes,
conveyor.rules.adaptive): it replaces the limit the key's jobs were enqueued with, for every
claimer; raising it unparks the key's next jobs at once, lowering it lets the running
jobs finish and gives no slot until fewer than the new limit hold one."""

from __future__ import annotations

import asyncio
from collections import Counter

from helpers import complete, new_job

from conveyor import Conveyor
from conveyor.backends.claiming import strict_claim
from conveyor.backends.contract import Backend, FlowState
from conveyor.backends.params import JobFilter, JobPage, KeyLimit
from conveyor.model.job import Job, JobState

S = JobState
KEY = "task:calls"


async def claim(backend: Backend, n: int = 50, worker: str = "w1") -> list[Job]:
    return await backend.fetch_jobs(strict_claim(["default"], n, worker, 30.0))


async def running_of_key(backend: Backend) -> int:
    running = await backend.list_jobs(JobPage(where=JobFilter(states=(S.RUNNING,)), limit=10_000))
    return sum(job.concurrency_key == KEY for job in running)


async def fill(backend: Backend, n: int, limit: int = 1) -> None:
    await backend.enqueue_jobs(
        [new_job(id=f"j{i:03}", concurrency_key=KEY, concurrency_limit=limit) for i in range(n)]
    )


async def test_every_backend_can_set_a_keys_limit(backend: Backend) -> None:
    assert isinstance(backend, FlowState)
    assert await backend.key_limit(KEY) is None
    await backend.set_key_limit(KeyLimit(concurrency_key=KEY, limit=4))
    assert await backend.key_limit(KEY) == 4
    await backend.set_key_limit(KeyLimit(concurrency_key=KEY, limit=None))
    assert await backend.key_limit(KEY) is None


async def test_a_set_limit_replaces_the_jobs_own_for_several_claimers(backend: Backend) -> None:
    assert isinstance(backend, FlowState)
    await backend.set_key_limit(
        KeyLimit(concurrency_key=KEY, limit=3)
    )  # before the jobs: they are parked beyond it
    await fill(backend, 40, limit=1)
    ran = 0
    for round_ in range(30):
        claimed = await asyncio.gather(*(claim(backend, 5, f"w{n}") for n in range(4)))
        batch = [job for jobs in claimed for job in jobs]
        assert len({job.id for job in batch}) == len(batch)
        assert await running_of_key(backend) <= 3
        if round_ < 13:  # every round has work: exactly the set limit runs
            assert len(batch) == 3, (round_, batch)
        if not batch:
            break
        assert await backend.settle_jobs([complete(job) for job in batch]) == []
        ran += len(batch)
    assert ran == 40


async def test_raising_the_limit_unparks_at_once(backend: Backend) -> None:
    assert isinstance(backend, FlowState)
    await fill(backend, 20, limit=2)
    first = await claim(backend)
    assert [job.id for job in first] == ["j000", "j001"]
    await backend.set_key_limit(
        KeyLimit(concurrency_key=KEY, limit=7)
    )  # no job moved: the write itself unparks
    more = await claim(backend)
    assert [job.id for job in more] == [f"j{i:03}" for i in range(2, 7)]
    assert await claim(backend) == []
    assert await running_of_key(backend) == 7


async def test_lowering_the_limit_takes_no_slot_back_and_refills_below_it(backend: Backend) -> None:
    assert isinstance(backend, FlowState)
    await backend.set_key_limit(KeyLimit(concurrency_key=KEY, limit=6))
    await fill(backend, 20)
    running = await claim(backend)
    assert len(running) == 6
    await backend.set_key_limit(KeyLimit(concurrency_key=KEY, limit=2))
    assert await running_of_key(backend) == 6  # the running jobs go on
    # Four of the six end: still 2 hold slots, so nothing new starts.
    assert await backend.settle_jobs([complete(job) for job in running[:4]]) == []
    assert await claim(backend) == []
    # One more ends: one running, under the limit of 2: exactly one starts.
    assert await backend.settle_jobs([complete(running[4])]) == []
    again = await claim(backend)
    assert [job.id for job in again] == ["j006"]
    assert await claim(backend) == []


async def test_dropping_the_limit_goes_back_to_the_jobs_own(backend: Backend) -> None:
    assert isinstance(backend, FlowState)
    await backend.set_key_limit(KeyLimit(concurrency_key=KEY, limit=1))
    await fill(backend, 10, limit=3)
    assert len(await claim(backend)) == 1
    await backend.set_key_limit(KeyLimit(concurrency_key=KEY, limit=None))
    assert len(await claim(backend)) == 2
    assert Counter(
        job.state for job in await backend.list_jobs(JobPage(where=JobFilter(), limit=100))
    ) == Counter({S.RUNNING: 3, S.AVAILABLE: 7})


async def test_other_keys_keep_their_own_limit(backend: Backend) -> None:
    assert isinstance(backend, FlowState)
    await backend.set_key_limit(KeyLimit(concurrency_key=KEY, limit=5))
    await backend.enqueue_jobs(
        [new_job(id=f"o{i}", concurrency_key="other", concurrency_limit=1) for i in range(5)]
    )
    assert [job.id for job in await claim(backend)] == ["o0"]


async def test_a_held_back_job_names_the_keys_set_limit(app: Conveyor, backend: Backend) -> None:
    assert isinstance(backend, FlowState)
    await fill(backend, 5, limit=1)
    await backend.set_key_limit(KeyLimit(concurrency_key=KEY, limit=2))
    assert len(await claim(backend)) == 2
    waiting = await backend.get_job("j004")
    assert waiting is not None
    assert await app.admin.held_back(waiting) == f"waiting for a slot of key {KEY}: 2 of 2 running"
