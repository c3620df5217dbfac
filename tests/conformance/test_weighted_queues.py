"""Weighted queues (docs/flow-control.md): claims and slots shared by weight, an empty
queue's share to the others, and a slow backlog that never holds up another queue."""

from __future__ import annotations

import asyncio
from collections import Counter

from helpers import RunningWorker, eventually, new_job, wait_finished

from conveyor import Conveyor
from conveyor.backends.claiming import parse_queues
from conveyor.backends.contract import Backend
from conveyor.backends.params import ClaimRequest, QueueQuota
from conveyor.worker import WorkerConfig

WEIGHTS = "critical=6,default=3,bulk=1"


async def fill(backend: Backend, queue: str, n: int) -> None:
    for start in range(0, n, 500):
        await backend.enqueue_jobs(
            [new_job(id=f"{queue}-{i}", queue=queue) for i in range(start, min(n, start + 500))]
        )


async def claim_concurrently(
    backend: Backend, claimers: int, claims_each: int, limit: int
) -> list[list[str]]:
    """`claimers` workers at once, each with its own plan, each making `claims_each`
    claims of `limit`; returns the queues of each claim's jobs."""

    async def claimer(n: int) -> list[list[str]]:
        plan = parse_queues(WEIGHTS)
        out = []
        for _ in range(claims_each):
            jobs = await backend.fetch_jobs(plan.request(limit, f"w{n}", 30))
            out.append([job.id for job in jobs])
        return out

    results = await asyncio.gather(*(claimer(n) for n in range(claimers)))
    return [claim for result in results for claim in result]


async def test_several_claimers_share_1000_claims_by_weight(backend: Backend) -> None:
    for queue, n in (("critical", 700), ("default", 400), ("bulk", 200)):
        await fill(backend, queue, n)
    claims = await claim_concurrently(backend, claimers=4, claims_each=25, limit=10)
    ids = [job_id for claim in claims for job_id in claim]
    assert len(ids) == len(set(ids)) == 1000  # each job to one claimer
    # Exactly the weights (the ±5 % the rule allows is not needed): each plan carries
    # its fractions, and every queue had more than its share.
    assert Counter(job_id.split("-")[0] for job_id in ids) == {
        "critical": 600,
        "default": 300,
        "bulk": 100,
    }


async def test_an_empty_queues_share_goes_to_the_others(backend: Backend) -> None:
    await fill(backend, "default", 1000)
    await fill(backend, "bulk", 200)
    claims = await claim_concurrently(backend, claimers=4, claims_each=25, limit=10)
    assert all(len(claim) == 10 for claim in claims)  # no slot left idle
    # critical's six of every ten go to the heaviest queue that still has work.
    assert Counter(job_id.split("-")[0] for claim in claims for job_id in claim) == {
        "default": 900,
        "bulk": 100,
    }


async def test_a_ceiling_bounds_both_passes(backend: Backend) -> None:
    await fill(backend, "bulk", 10)
    await fill(backend, "default", 10)
    request = ClaimRequest(
        (
            QueueQuota("critical", 6, ceiling=8),
            QueueQuota("default", 1, ceiling=2),
            QueueQuota("bulk", 0, ceiling=3),
        ),
        10,
        "w1",
        30,
    )
    jobs = await backend.fetch_jobs(request)
    assert Counter(job.queue for job in jobs) == {"default": 2, "bulk": 3}
    none_left = ClaimRequest((QueueQuota("bulk", 5, ceiling=0),), 5, "w1", 30)
    assert await backend.fetch_jobs(none_left) == []


async def test_a_slow_backlog_never_holds_up_another_queue(live_app: Conveyor) -> None:
    release = asyncio.Event()
    bulk_running = 0
    most_bulk_running = 0

    @live_app.task(name="bulk_export", queue="bulk")
    async def bulk_export(n: int) -> None:
        nonlocal bulk_running, most_bulk_running
        bulk_running += 1
        most_bulk_running = max(most_bulk_running, bulk_running)
        await release.wait()  # slow: runs until the test is done with critical
        bulk_running -= 1

    @live_app.task(name="alert", queue="critical")
    async def alert(n: int) -> int:
        return n

    await live_app.enqueue_many_async([bulk_export.message(i) for i in range(20)])
    config = WorkerConfig(
        queues=("critical", "bulk"),
        queue_weights=(3, 1),
        concurrency=4,
        poll_interval=0.05,
        lease=5,
    )
    async with RunningWorker(live_app, config):

        async def bulk_holds_its_slots() -> bool:
            return bulk_running == 3

        # Bulk borrows critical's idle slots but one: 3 of the 4.
        await eventually(bulk_holds_its_slots)
        handles = await live_app.enqueue_many_async([alert.message(i) for i in range(10)])
        jobs = await wait_finished(live_app, [h.id for h in handles])
        assert [jobs[h.id].result_value for h in handles] == list(range(10))
        assert bulk_running == 3  # every alert ran while bulk's slow jobs held their slots
        release.set()
    assert most_bulk_running == 3
