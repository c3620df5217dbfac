"""Bounded queues at enqueue (docs/flow-control.md): at most max_waiting waiting jobs,
whatever the number of producers; reject (QueueFull with the depth, per job of a
batch), block (wait for room), shed_oldest (the oldest waiting job cancelled, why
recorded)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from helpers import claim_one, new_job

from conveyor import Conveyor
from conveyor.backends.contract import Backend
from conveyor.backends.params import JobFilter, JobPage, Settlement
from conveyor.model.clock import ManualClock
from conveyor.model.errors import QueueFull
from conveyor.model.job import JobState, NewJob, QueueBound
from conveyor.rules.backpressure import SHED_ERROR_TYPE

WAITING = (JobState.SCHEDULED, JobState.AVAILABLE, JobState.RETRYABLE)


def bounded(job_id: str, most: int, shed: bool = False, **fields: Any) -> NewJob:
    return new_job(id=job_id, bound=QueueBound(most, shed_oldest=shed), **fields)


async def waiting(backend: Backend, queue: str = "default") -> int:
    return await backend.count_jobs(JobFilter(states=WAITING, queues=(queue,)))


async def test_several_producers_never_overfill_a_bounded_queue(backend: Backend) -> None:
    async def producer(n: int) -> tuple[list[str], list[str]]:
        stored, refused = [], []
        for batch in range(6):
            jobs = [bounded(f"p{n}-{batch}-{i}", 50) for i in range(5)]
            try:
                stored += [job.id for job in await backend.enqueue_jobs(jobs)]
            except QueueFull as full:
                stored += [job.id for job in full.jobs if job is not None]
                refused += [r.id for r in full.refused]
                assert all(r.max_waiting == 50 and r.depth >= 50 for r in full.refused)
        return stored, refused

    results = await asyncio.gather(*(producer(n) for n in range(4)))
    stored = [i for s, _ in results for i in s]
    refused = [i for _, r in results for i in r]
    assert (len(stored), len(refused), await waiting(backend)) == (50, 70, 50)
    assert [await backend.get_job(i) for i in refused] == [None] * 70  # none of them stored


async def test_a_batch_says_which_jobs_were_refused(backend: Backend) -> None:
    await backend.enqueue_jobs([bounded("first", 3)])
    with pytest.raises(QueueFull) as caught:
        await backend.enqueue_jobs([bounded(f"b{i}", 3) for i in range(4)])
    full = caught.value
    assert [None if j is None else j.id for j in full.jobs] == ["b0", "b1", None, None]
    assert [(r.id, r.queue, r.depth, r.max_waiting) for r in full.refused] == [
        ("b2", "default", 3, 3),
        ("b3", "default", 3, 3),
    ]
    assert (full.queue, full.depth, full.max_waiting) == ("default", 3, 3)
    assert "queue 'default' is full: 3 jobs waiting (max_waiting 3); 2 of 4 jobs refused" in str(
        full
    )
    assert await waiting(backend) == 3


async def test_a_duplicate_takes_no_room(backend: Backend) -> None:
    await backend.enqueue_jobs([bounded("a", 2), bounded("b", 2, unique_key="k")])
    again = await backend.enqueue_jobs([bounded("a", 2), bounded("c", 2, unique_key="k")])
    assert [job.id for job in again] == ["a", "b"]  # the existing jobs, not a refusal
    with pytest.raises(QueueFull):
        await backend.enqueue_jobs([bounded("d", 2)])


async def test_other_queues_and_unbounded_jobs_are_not_counted(backend: Backend) -> None:
    await backend.enqueue_jobs([new_job(id=f"other-{i}", queue="other") for i in range(5)])
    await backend.enqueue_jobs([bounded("x", 1)])
    with pytest.raises(QueueFull):
        await backend.enqueue_jobs([bounded("y", 1)])
    # A job sent without the bound (another app that declares none) is not refused.
    await backend.enqueue_jobs([new_job(id="unbounded")])
    assert await waiting(backend) == 2


async def test_shed_oldest_cancels_the_oldest_waiting_jobs(
    backend: Backend, clock: ManualClock
) -> None:
    for i in range(3):
        await backend.enqueue_jobs([bounded(f"s{i}", 3, shed=True)])
        clock.advance(1)
    stored = await backend.enqueue_jobs([bounded(f"s{i}", 3, shed=True) for i in range(3, 5)])
    assert [job.id for job in stored] == ["s3", "s4"]
    assert await waiting(backend) == 3
    for job_id in ("s0", "s1"):
        job = await backend.get_job(job_id)
        assert job is not None and job.state is JobState.CANCELLED
        assert job.finished_at == clock.now
        [record] = job.errors
        assert record.type == SHED_ERROR_TYPE and "max_waiting" in record.message
    assert [(await backend.get_job(f"s{i}")).state for i in (2, 3, 4)] == [  # type: ignore[union-attr]
        JobState.AVAILABLE
    ] * 3


async def test_a_retry_is_never_refused_and_the_next_enqueue_sees_it(
    backend: Backend, clock: ManualClock
) -> None:
    await backend.enqueue_jobs([bounded("r1", 2), bounded("r2", 2)])
    job = await claim_one(backend)
    await backend.enqueue_jobs([bounded("r3", 2)])  # room: one of the two is running
    await backend.settle_jobs(
        [Settlement(job.id, job.lease_token, JobState.RETRYABLE, run_at=clock.now + 5)]
    )
    assert await waiting(backend) == 3  # past the bound, by the one job that was running
    with pytest.raises(QueueFull) as caught:
        await backend.enqueue_jobs([bounded("r4", 2)])
    assert caught.value.depth == 3


async def test_the_app_rejects_with_the_depth_on_both_facades(app: Conveyor) -> None:
    app.queue("mail", max_waiting=2)

    @app.task(queue="mail")
    def send(n: int) -> None: ...

    first = await send.enqueue_async(1)
    second = await asyncio.to_thread(send.enqueue, 2)  # the sync facade
    with pytest.raises(QueueFull) as caught:
        await send.enqueue_async(3)
    assert (caught.value.queue, caught.value.depth, caught.value.max_waiting) == ("mail", 2, 2)
    with pytest.raises(QueueFull) as caught:
        await asyncio.to_thread(app.enqueue_many, [send.message(4), send.message(5)])
    assert caught.value.jobs == [None, None]
    assert {first.id, second.id} == {
        j.id
        for j in await (await app.backend()).list_jobs(JobPage(where=JobFilter(queues=("mail",))))
    }


async def test_block_waits_for_room(app: Conveyor, backend: Backend) -> None:
    app.queue("mail", max_waiting=1, on_full="block", block_timeout=30)

    @app.task(queue="mail")
    def send(n: int) -> None: ...

    await send.enqueue_async(1)
    offers = 0
    enqueue = backend.enqueue_jobs

    async def counted(jobs: list[NewJob]) -> object:
        nonlocal offers
        offers += 1
        return await enqueue(jobs)

    # Ignored for mypy: a counting wrapper in place of the verb
    backend.enqueue_jobs = counted  # type: ignore[assignment, method-assign]
    blocked = asyncio.create_task(send.enqueue_async(2))
    while offers < 2:  # refused once, offered again: it waits
        await asyncio.sleep(0.005)
    assert not blocked.done()
    await claim_one(backend, queue="mail")  # room
    handle = await asyncio.wait_for(blocked, 10)
    assert (await backend.get_job(handle.id)).state is JobState.AVAILABLE  # type: ignore[union-attr]


async def test_block_gives_up_after_its_timeout(app: Conveyor) -> None:
    app.queue("mail", max_waiting=1, on_full="block", block_timeout=0.3)

    @app.task(queue="mail")
    def send(n: int) -> None: ...

    await send.enqueue_async(1)
    started = time.monotonic()
    with pytest.raises(QueueFull):
        await send.enqueue_async(2)
    assert 0.3 <= time.monotonic() - started < 5
